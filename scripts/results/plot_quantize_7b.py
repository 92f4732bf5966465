#!/usr/bin/python3
"""docs/encoder_speed.json ("quantize_7b_shape") -> docs/quantize_7b.png: the
whole quantize of a 7B-shaped model on one H200 by phase. Left: the measured
runs (seconds); right: the projection for 32 layers (minutes), the
distillation's upper figure hatched."""
import json, os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
q = json.load(open(os.path.join(docs, "encoder_speed.json")))["quantize_7b_shape"]
phases = ["calibration", "encoding", "block_tuning", "distillation"]
colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.5))

names = [r["name"] for r in q["runs"]]
bottom = [0.0] * len(names)
for ph, c in zip(phases, colors):
    vals = [r[ph] for r in q["runs"]]
    ax.bar(names, vals, 0.55, bottom=bottom, label=ph.replace("_", " "), color=c)
    bottom = [b + v for b, v in zip(bottom, vals)]
for i, r in enumerate(q["runs"]):
    ax.annotate(f'whole run {r["total"]:.1f} s', (i, bottom[i]), ha="center", va="bottom")
ax.set_ylabel("seconds")
ax.set_title("measured: quantize --device gpu, 1.0 bpw, defaults")
ax.legend()

proj = q["projection_32_layers_min"]
keys = list(proj)
bottom = [0.0] * len(keys)
for ph, c in zip(phases, colors):
    vals = [proj[k][ph] for k in keys]
    bx.bar(keys, vals, 0.55, bottom=bottom, color=c)
    bottom = [b + v for b, v in zip(bottom, vals)]
for i, k in enumerate(keys):
    extra = proj[k].get("distillation_upper", proj[k]["distillation"]) - proj[k]["distillation"]
    if extra > 0:
        bx.bar([k], [extra], 0.55, bottom=[bottom[i]], color="white", edgecolor="tab:red",
               hatch="//")
    top = bottom[i] + extra
    label = f"{bottom[i]:.0f}" + (f"–{top:.0f}" if extra > 0 else "") + " min"
    bx.annotate(label, (i, top), ha="center", va="bottom")
bx.set_ylabel("minutes")
bx.set_title("projected: 32 layers (4096 wide, 11008 MLP)")
fig.suptitle("The whole quantize of a 7B-shaped Llama on one H200, by phase")
fig.tight_layout()
fig.savefig(os.path.join(docs, "quantize_7b.png"), dpi=110)
