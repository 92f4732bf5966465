#!/usr/bin/python3
"""docs/tuning.json -> docs/tuning.png: perplexity relative to float after each
tuning stage, per text (bars), for the runs of one budget and sample count."""
import json, os, sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
d = json.load(open(os.path.join(docs, "tuning.json")))
texts = list(d["float"].keys())
groups = [("1.0 bpw, 64 windows", [r for r in d["runs"] if r["samples"] == 64]),
          ("0.9 / 0.42 bpw, 32 windows", [r for r in d["runs"] if r["samples"] == 32])]
fig, axes = plt.subplots(1, 2, figsize=(15, 6))
for ax, (title, runs) in zip(axes, groups):
    w = 0.8 / len(texts)
    for k, t in enumerate(texts):
        ratios = [r["ppl"][k] / d["float"][t] for r in runs]
        ax.bar([i + k * w for i in range(len(runs))], ratios, w, label=t)
    ax.set_xticks([i + w for i in range(len(runs))])
    ax.set_xticklabels([f'{r["name"]}\n{r["bpw"]:.3f} bpw' for r in runs], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("perplexity / float perplexity")
    ax.set_title(f"tiny-llama-6m, calibrated on tinystories-calib: {title}")
    ax.axhline(1.0, color="k", lw=0.5)
    ax.legend(fontsize=8)
fig.tight_layout()
out = os.path.join(docs, "tuning.png")
fig.savefig(out, dpi=100)
print(out)
