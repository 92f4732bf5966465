#!/usr/bin/python3
"""docs/encoder_speed.json ("quantize_7b_shape") -> docs/quantize_7b.png: the
whole quantize of a 7B-shaped model by phase, before and after the grouped
column search. Left: the measured runs (seconds, each naming its card);
right: the projection for 32 layers (minutes), the distillation's upper
figure hatched. Drawn with matplotlib, or with Pillow alone where
matplotlib is missing."""
import json, os

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
out = os.path.join(docs, "quantize_7b.png")
q = json.load(open(os.path.join(docs, "encoder_speed.json")))["quantize_7b_shape"]
phases = ["calibration", "encoding", "block_tuning", "distillation"]
colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
runs = [(f'{r["name"]} ({r.get("card", "H200")})', [r[p] for p in phases], r["total"], 0.0)
        for r in q["runs"]  # a run without its phases, or marked "plot": false: text only
        if any(r[p] for p in phases) and r.get("plot", True)]
proj = q["projection_32_layers_min"]
projected = [(k, [v[p] for p in phases], sum(v[p] for p in phases),
              v.get("distillation_upper", v["distillation"]) - v["distillation"])
             for k, v in proj.items()]
panels = [("measured: quantize --device gpu, 1.0 bpw, defaults", "seconds", runs, "s"),
          ("projected: 32 layers (4096 wide, 11008 MLP)", "minutes", projected, "min")]
title = "The whole quantize of a 7B-shaped Llama on one GPU, by phase"


def label_of(total, extra, unit):
    return f"{total:.0f}" + (f"-{total + extra:.0f}" if extra > 0 else "") + f" {unit}"


def with_matplotlib():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(15, 6))
    for ax, (name, ylabel, bars, unit) in zip(axes, panels):
        xs = list(range(len(bars)))
        bottom = [0.0] * len(bars)
        for k, (ph, c) in enumerate(zip(phases, colors)):
            vals = [b[1][k] for b in bars]
            ax.bar(xs, vals, 0.55, bottom=bottom, label=ph.replace("_", " "), color=c)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for i, (_, _, total, extra) in enumerate(bars):
            if extra > 0:
                ax.bar([i], [extra], 0.55, bottom=[bottom[i]], color="white", edgecolor=colors[3],
                       hatch="//")
            ax.annotate(label_of(total, extra, unit), (i, bottom[i] + extra), ha="center",
                        va="bottom")
        ax.set_xticks(xs, [b[0] for b in bars], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(name)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def with_pillow():  # the same two panels of stacked bars, labels under them
    from PIL import Image, ImageDraw
    pw, ph, top, left, foot = 560, 360, 40, 60, 150
    img = Image.new("RGB", (pw * 2, top + ph + foot), "white")
    d = ImageDraw.Draw(img)
    d.text((10, 8), title, fill="black")
    for p, (name, ylabel, bars, unit) in enumerate(panels):
        x0, y0, w, h = pw * p + left, top + 20, pw - left - 20, ph - 20
        ymax = max(b[2] + b[3] for b in bars) * 1.15
        Y = lambda v: y0 + h - h * v / ymax
        d.rectangle([x0, y0, x0 + w, y0 + h], outline="black")
        d.text((x0, y0 - 18), f"{name} ({ylabel})", fill="black")
        for t in range(5):
            v = ymax * t / 4
            d.line([x0, Y(v), x0 + w, Y(v)], fill="#dddddd")
            d.text((x0 - 45, Y(v) - 6), f"{v:.0f}", fill="black")
        slot = w / len(bars)
        for i, (label, vals, total, extra) in enumerate(bars):
            bx0, bx1 = x0 + slot * (i + 0.2), x0 + slot * (i + 0.8)
            acc = 0.0
            for v, c in zip(vals, colors):
                if v > 0:
                    d.rectangle([bx0, Y(acc + v), bx1, Y(acc)], fill=c)
                acc += v
            if extra > 0:
                d.rectangle([bx0, Y(acc + extra), bx1, Y(acc)], outline=colors[3])
                for k in range(0, int(bx1 - bx0), 6):
                    d.line([bx0 + k, Y(acc), bx0 + k + 6, Y(acc + extra)], fill=colors[3])
            d.text((bx0, Y(acc + extra) - 14), label_of(total, extra, unit), fill="black")
            for n, part in enumerate([label[j:j + 22] for j in range(0, len(label), 22)]):
                d.text((bx0 - 10, y0 + h + 6 + 12 * n + 40 * (i % 2)), part, fill="black")
    for k, (ph_, c) in enumerate(zip(phases, colors)):
        x = left + 150 * k
        d.rectangle([x, top + ph + foot - 24, x + 20, top + ph + foot - 12], fill=c)
        d.text((x + 26, top + ph + foot - 25), ph_.replace("_", " "), fill="black")
    img.save(out)


try:
    import matplotlib  # noqa: F401
    with_matplotlib()
except ImportError:
    with_pillow()
