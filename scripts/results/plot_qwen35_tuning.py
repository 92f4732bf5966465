#!/usr/bin/python3
"""docs/qwen35_tuning.json -> docs/qwen35_tuning.png: tiny-qwen35-6m at 0.9 bpw,
perplexity relative to float per text (bars) for each recipe of the hybrid
defaults in turn, with the targets (tiny-llama-6m's tuned ratios) as lines.
Drawn with Pillow (no plotting library needed)."""
import json, os, textwrap

from PIL import Image, ImageDraw

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
d = json.load(open(os.path.join(docs, "qwen35_tuning.json")))
runs, texts, fl, targets = d["runs"], d["texts"], d["float"], d["targets"]
colors = [(31, 119, 180), (255, 127, 14), (44, 160, 44)]

W, H = 1100, 520
left, right, top, bottom = 80, 20, 60, 90
y_lo, y_hi = 1.0, 2.7
img = Image.new("RGB", (W, H), "white")
g = ImageDraw.Draw(img)


def y_of(v):
    return top + (y_hi - v) / (y_hi - y_lo) * (H - top - bottom)


g.text((left, 15), f'{d["model"]} at about 0.9 bpw, --device gpu: perplexity / float perplexity '
       "(lines: the targets)", fill="black")
g.text((left, 32), "calibrated on tinystories-calib; 60 windows of 512 tokens", fill="black")
for k in range(0, 18):
    v = y_lo + 0.1 * k
    y = y_of(v)
    g.line([(left, y), (W - right, y)], fill=(225, 225, 225))
    if k % 2 == 0:
        g.text((left - 40, y - 6), f"{v:.1f}x", fill="black")
plot_w = W - left - right
slot = plot_w / len(runs)
bar = slot * 0.8 / len(texts)
for t, (c, target) in enumerate(zip(colors, targets)):
    y = y_of(target)
    for x in range(left, W - right, 12):  # dashed
        g.line([(x, y), (min(x + 6, W - right), y)], fill=c, width=2)
for i, r in enumerate(runs):
    x0 = left + i * slot + slot * 0.1
    for t, c in enumerate(colors):
        ratio = r["ppl"][t] / fl[t]
        xa = x0 + t * bar
        g.rectangle([xa, y_of(ratio), xa + bar - 2, y_of(y_lo)], fill=c)
        g.text((xa, y_of(ratio) - 13), f"{ratio:.2f}", fill="black")
    label = textwrap.wrap(r["name"], 24)
    label.append(f'{r["bpw"]:.3f} bpw, {r["card"]}')
    label.append(f'{r["date"]}, {r["commit"]}')
    for j, line in enumerate(label):
        g.text((x0, H - bottom + 8 + 14 * j), line, fill="black")
for t, (name, c) in enumerate(zip(texts, colors)):
    x = W - right - 170
    y = top + 8 + 16 * t
    g.rectangle([x, y, x + 10, y + 10], fill=c)
    g.text((x + 16, y - 1), name, fill="black")
out = os.path.join(docs, "qwen35_tuning.png")
img.save(out)
print(out)
