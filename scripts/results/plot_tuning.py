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
floats = [d["float"][t] for t in texts]
groups = [("CPU: tiny-llama-6m, 1.0 bpw, 64 windows", floats, [r for r in d["runs"] if r["samples"] == 64]),
          ("CPU: tiny-llama-6m, 32 windows", floats, [r for r in d["runs"] if r["samples"] == 32]),
          ("CPU: tiny-qwen3-6m, 32 windows", d["qwen3"]["float"], d["qwen3"]["runs"]),
          ("H200: tiny-llama-6m", floats, d["gpu"]["runs"]),
          ("H200: tiny-qwen3-6m, 128 windows", d["qwen3"]["float"], d["gpu"]["qwen3"]),
          ("H200, --calib-generated 0.5 (the defaults): tiny-llama-6m", floats, d["gpu"]["generated"]["runs"]),
          ("H200, --calib-generated 0.5 (the defaults): tiny-qwen3-6m", d["qwen3"]["float"],
           d["gpu"]["generated"]["qwen3"])]
fig = plt.figure(figsize=(22, 19))
gs = fig.add_gridspec(3, 3, width_ratios=[10, 6, 4])
axes = [fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[0, 2]),
        fig.add_subplot(gs[1, 0:2]), fig.add_subplot(gs[1, 2]),
        fig.add_subplot(gs[2, 0:2]), fig.add_subplot(gs[2, 2])]
for ax, (title, fl, runs) in zip(axes, groups):
    w = 0.8 / len(texts)
    for k, t in enumerate(texts):
        ratios = [r["ppl"][k] / fl[k] for r in runs]
        ax.bar([i + k * w for i in range(len(runs))], ratios, w, label=t)
    ax.set_xticks([i + w for i in range(len(runs))])
    ax.set_xticklabels([f'{r["name"]}, {r["samples"]} w\n{r["bpw"]:.3f} bpw' for r in runs], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("perplexity / float perplexity")
    ax.set_title(f"{title}\n(calibrated on tinystories-calib)", fontsize=9)
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.5)
    ax.legend(fontsize=8)
fig.tight_layout()
out = os.path.join(docs, "tuning.png")
fig.savefig(out, dpi=100)
print(out)
