#!/usr/bin/python3
"""bench_decode_gpu --json -> PNG: decode tokens/s against context, the packed
runtime (generate's defaults, and with a float32 KV cache, a float32 head or no
graph) and the dense fp16 runtime, one panel per
model shape and batch size (B = 1 and the largest measured). Drawn with
matplotlib, or with Pillow alone where matplotlib is missing.

usage: plot_decode_generate.py DECODE.json OUT.png"""
import json, math, sys

run = json.load(open(sys.argv[1]))
rows = run["rows"]
shapes = sorted({r["shape"] for r in rows})
batches = sorted({r["batch"] for r in rows})
panels = [(s, b) for s in shapes for b in (batches[0], batches[-1])]
series = [("packed", "f16", "f16", True, "packed (generate's defaults)", "#1f77b4", "-"),
          ("packed", "f32", "f16", True, "packed, float32 cache", "#9467bd", "--"),
          ("packed", "f16", "f32", True, "packed, float32 head", "#ff7f0e", "-."),
          ("packed", "f16", "f16", False, "packed, no graph", "#2ca02c", ":"),
          ("fp16", "f16", "f16", True, "dense fp16, fp16 cache", "#d62728", "-")]
title = f"cortiq generate --device gpu (model::generate_batch), {run.get('device', 'one H100')}"


def points(shape, b, runtime, kv, head, graphs):
    return sorted((r["ctx"], r["tokens_per_s"]) for r in rows
                  if r["shape"] == shape and r["batch"] == b and r["runtime"] == runtime
                  and r["kv"] == kv and r.get("head", "f32") == head and r["graphs"] == graphs)


def with_matplotlib():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (shape, b) in zip(axes[0], panels):
        for runtime, kv, head, graphs, label, color, style in series:
            pts = points(shape, b, runtime, kv, head, graphs)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                        color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (cached positions)")
        ax.set_ylabel("decode tokens/s")
        ax.set_title(f"{shape}, {run['bpw']} bpw, B = {b}")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


def with_pillow():  # the same panels, solid lines, the legend under them
    from PIL import Image, ImageDraw
    pw, ph, top, left, bottom = 420, 300, 40, 60, 40
    legend = 16 * len(series) + 10
    img = Image.new("RGB", (pw * len(panels), top + ph + legend), "white")
    d = ImageDraw.Draw(img)
    d.text((10, 8), title, fill="black")
    ctxs = sorted({r["ctx"] for r in rows})
    for k, (shape, b) in enumerate(panels):
        x0, y0, w, h = pw * k + left, top + 20, pw - left - 20, ph - 20 - bottom
        ymax = max(r["tokens_per_s"] for r in rows if r["shape"] == shape and r["batch"] == b)
        ymax = 10 ** math.ceil(math.log10(ymax)) / (2 if ymax < 10 ** math.ceil(math.log10(ymax)) / 2 else 1)
        lo, hi = math.log2(ctxs[0]), math.log2(ctxs[-1])
        X = lambda c: x0 + (w * (math.log2(c) - lo) / (hi - lo) if hi > lo else w / 2)
        Y = lambda v: y0 + h - h * v / ymax
        d.rectangle([x0, y0, x0 + w, y0 + h], outline="black")
        for t in range(5):
            v = ymax * t / 4
            d.line([x0, Y(v), x0 + w, Y(v)], fill="#dddddd")
            d.text((x0 - 45, Y(v) - 6), f"{v:.0f}", fill="black")
        for c in ctxs:
            d.text((X(c) - 12, y0 + h + 4), str(c), fill="black")
        d.text((x0, y0 - 18), f"{shape}, {run['bpw']} bpw, B = {b} (tokens/s against context)",
               fill="black")
        for runtime, kv, head, graphs, label, color, style in series:
            pts = [(X(c), Y(v)) for c, v in points(shape, b, runtime, kv, head, graphs)]
            if len(pts) > 1:
                d.line(pts, fill=color, width=2)
            for x, y in pts:
                d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
    for i, (_, _, _, _, label, color, _) in enumerate(series):
        y = top + ph + 4 + 16 * i
        d.line([left, y + 6, left + 30, y + 6], fill=color, width=2)
        d.text((left + 36, y), label, fill="black")
    img.save(sys.argv[2])


try:
    import matplotlib  # noqa: F401
    with_matplotlib()
except ImportError:
    with_pillow()
