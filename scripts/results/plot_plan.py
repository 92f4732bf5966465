#!/usr/bin/python3
"""quantize --json of a --plan auto / --file-bpw run -> PNG: the bits each
tensor got, by layer and kind (top), and what the sensitivity pass measured
for each at the reference budget (bottom: KL growth, nats per token).

usage: plot_plan.py RUN.json OUT.png [TITLE]"""
import json, re, sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

run = json.load(open(sys.argv[1]))
plan = run["plan"]
title = sys.argv[3] if len(sys.argv) > 3 else sys.argv[1]
kinds, layers, rows = [], set(), []
for name, t in plan["tensors"].items():
    m = re.search(r"layers\.(\d+)\.(\w+)\.(\w+)\.weight", name)
    if m:
        layer, kind = int(m.group(1)), m.group(3)
    else:  # the embedding (left) and the head (right)
        layer, kind = (-1, "embed_tokens") if "embed" in name else (10**6, "lm_head")
    b = t["bpw"] if isinstance(t["bpw"], (int, float)) else float("nan")
    i = t["measured_bpw"].index(min(t["measured_bpw"], key=lambda x: abs(x - plan["b0"])))
    rows.append((layer, kind, b, t["measured_kl"][i]))
    layers.add(layer)
    if kind not in kinds:
        kinds.append(kind)
order = sorted(layers)
fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.3 * len(order)), 8), sharex=True)
w = 0.8 / len(kinds)
for k, kind in enumerate(kinds):
    xs = [order.index(l) + (k - len(kinds) / 2 + 0.5) * w for l, kd, _, _ in rows if kd == kind]
    axes[0].bar(xs, [b for _, kd, b, _ in rows if kd == kind], w, label=kind)
    axes[1].bar(xs, [v for _, kd, _, v in rows if kd == kind], w, label=kind)
axes[0].axhline(plan["b0"], color="gray", lw=0.8, ls="--")
axes[0].set_ylabel("bits per weight (plan)")
axes[0].set_title(f"{title}\npredicted KL {plan['predicted_kl']:.3f} "
                  f"vs {plan['predicted_kl_at_b0_everywhere']:.3f} at {plan['b0']:.2f} bpw everywhere",
                  fontsize=10)
axes[0].legend(ncol=min(len(kinds), 7), fontsize=8)
axes[1].set_ylabel(f"KL growth at {plan['b0']:.2f} bpw, alone")
labels = ["embed" if l == -1 else "head" if l == 10**6 else str(l) for l in order]
axes[1].set_xticks(range(len(order)), labels)
axes[1].set_xlabel("layer")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
