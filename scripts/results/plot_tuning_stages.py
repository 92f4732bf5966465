#!/usr/bin/python3
"""docs/tuning.json (gpu.stages) -> docs/tuning_stages.png: perplexity relative
to float against true bits per weight after each stage of quantize --device gpu
(NVG, + block tuning, + distillation: the defaults), one panel per model and
text, calibrated on tinystories-calib."""
import json, os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
d = json.load(open(os.path.join(docs, "tuning.json")))
st = d["gpu"]["stages"]
texts = st["texts"]
models = list(st["float"].keys())
stages = ["NVG", "+block", "+block+kd"]
fig, axes = plt.subplots(len(models), len(texts), figsize=(15, 8.5), squeeze=False)
for a, model in enumerate(models):
    for k, text in enumerate(texts):
        ax = axes[a][k]
        fl = st["float"][model][k]
        for s, style in zip(stages, ["o--", "s-.", "D-"]):
            runs = sorted((r for r in st["runs"] if r["model"] == model and r["stage"] == s),
                          key=lambda r: r["bpw"])
            line, = ax.plot([r["bpw"] for r in runs], [r["ppl"][k] / fl for r in runs], style,
                            label=s)
            for r in runs:
                cpu = r.get("where") == "cpu"
                if cpu:  # a point the H200 call did not finish, measured on the CPU
                    ax.plot([r["bpw"]], [r["ppl"][k] / fl], "o", mfc="none", ms=11,
                            color=line.get_color())
                ax.annotate(f'{r["ppl"][k]:.1f}' + (" (CPU)" if cpu else ""),
                            (r["bpw"], r["ppl"][k] / fl), fontsize=7,
                            textcoords="offset points", xytext=(4, 3))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks([0.42, 0.9, 2.0])
        ax.set_xticklabels(["0.42", "0.9", "2.0"])
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_title(f"{model}: {text} (float {fl:.2f})", fontsize=9)
        ax.set_xlabel("true bits per weight (8 × bytes / weights)")
        ax.set_ylabel("perplexity / float")
        ax.legend(fontsize=8)
fig.suptitle("quantize --device gpu on the H200, calibrated on tinystories-calib "
             "(192 windows + 96 sampled from the model)", fontsize=10)
fig.tight_layout()
out = os.path.join(docs, "tuning_stages.png")
fig.savefig(out, dpi=100)
print(out)
