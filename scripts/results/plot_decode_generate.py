#!/usr/bin/python3
"""bench_decode_gpu --json -> PNG: decode tokens/s against context, the packed
runtime (generate's defaults, and with a float32 KV cache, a float32 head or no
graph) and the dense fp16 runtime, one panel per
model shape and batch size (B = 1 and the largest measured).

usage: plot_decode_generate.py DECODE.json OUT.png"""
import json, sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

run = json.load(open(sys.argv[1]))
rows = run["rows"]
shapes = sorted({r["shape"] for r in rows})
batches = sorted({r["batch"] for r in rows})
panels = [(s, b) for s in shapes for b in (batches[0], batches[-1])]
fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
series = [("packed", "f16", "f16", True, "packed (generate's defaults)", "C0", "-"),
          ("packed", "f32", "f16", True, "packed, float32 cache", "C0", "--"),
          ("packed", "f16", "f32", True, "packed, float32 head", "C1", "-."),
          ("packed", "f16", "f16", False, "packed, no graph", "C2", ":"),
          ("fp16", "f16", "f16", True, "dense fp16, fp16 cache", "C3", "-")]
for ax, (shape, b) in zip(axes[0], panels):
    for runtime, kv, head, graphs, label, color, style in series:
        pts = sorted((r["ctx"], r["tokens_per_s"]) for r in rows
                     if r["shape"] == shape and r["batch"] == b and r["runtime"] == runtime
                     and r["kv"] == kv and r.get("head", "f32") == head
                     and r["graphs"] == graphs)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", color=color,
                    label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (cached positions)")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(f"{shape}, {run['bpw']} bpw, B = {b}")
    ax.grid(alpha=0.3)
axes[0][0].legend(fontsize=8)
fig.suptitle(f"cortiq generate --device gpu (model::generate_batch), {run.get('device', 'one H100')}")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
