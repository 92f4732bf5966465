#!/usr/bin/python3
"""docs/decode_gpu.json -> docs/decode_gpu.png: one-token decode on the H200
(bench_blr_gpu). Left: speed-up over fp16 cuBLAS of each layer shape, bpw and
path count, the plane kernels (default) against the row and span kernels. Right: the linear
layers of a 32-layer 4096/11008 model at 1.0 bpw, ms per token."""
import json, os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
d = json.load(open(os.path.join(docs, "decode_gpu.json")))
layers = d["layers"]
fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [2.2, 1]})

labels = [f'{r["shape"]}\n{r["bpw"]:g} bpw P{r["paths"]}' for r in layers]
x = range(len(layers))
w = 0.28
ax.bar([i - w for i in x], [r["fp16_us"] / r["spans_us"] for r in layers], w,
       label="span kernels (one launch per product)")
ax.bar(list(x), [r["fp16_us"] / r["rows_us"] for r in layers], w,
       label="row kernels (tables of signed sums; spans for lone P1 rows > 8192)")
ax.bar([i + w for i in x], [r["fp16_us"] / r["planes_us"] for r in layers], w,
       label="plane kernels (binary tensor cores, default)")
for i, r in enumerate(layers):
    ax.annotate(f'{r["planes_us"]:.1f} µs', (i + w, r["fp16_us"] / r["planes_us"]),
                fontsize=6, ha="center", textcoords="offset points", xytext=(0, 2))
ax.axhline(1.0, color="gray", lw=0.8)
ax.axhline(8.0, color="red", lw=0.8, ls="--", label="target at 4096×11008 1 bpw (8×)")
ax.set_xticks(list(x))
ax.set_xticklabels(labels, fontsize=6, rotation=90)
ax.set_ylabel("speed-up over fp16 cuBLAS GEMV")
ax.set_title("one layer, one token (H200)")
ax.legend(fontsize=7, loc="upper left")

wm = d["whole_model"]["ms_per_token"]
names = list(wm["P1"].keys())
for k, (p, off) in enumerate([("P1", -0.2), ("P2", 0.2)]):
    bars = bx.bar([i + off for i in range(len(names))], [wm[p][n] for n in names], 0.4,
                  label=f"{p[1]} path{'s' if p == 'P2' else ''}")
    for i, n in enumerate(names):
        bx.annotate(f"{wm[p][n]:.2f}", (i + off, wm[p][n]), fontsize=7, ha="center",
                    textcoords="offset points", xytext=(0, 2))
target = wm["P1"]["fp16 cuBLAS"] / 5
bx.axhline(target, color="red", lw=0.8, ls="--", label="target (5× fp16)")
bx.set_xticks(range(len(names)))
bx.set_xticklabels(names, fontsize=7, rotation=20, ha="right")
bx.set_ylabel("ms per token (linear layers only)")
bx.set_title("32 layers × 7 linears, 4096/11008, 1.0 bpw")
bx.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(docs, "decode_gpu.png"), dpi=110)
