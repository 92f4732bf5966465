#!/usr/bin/python3
"""results.txt of scripts/results/gptq_multi_thirds.sh -> a markdown table:
for each model and bpw, the baseline (the first value of the flag) and every
other value, mean perplexity over the thirds on tinystories-valid / austen,
the per-third change against the baseline, and the mean of the log ratios.
    python3 scripts/results/thirds_table.py WORK/results.txt"""
import math
import sys
from collections import defaultdict

rows = defaultdict(dict)  # (model, bpw) -> {value: {third: (bits, p1, p2)}}
order = []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 7:
        continue
    model, bpw, third, value, bits, p1, p2 = f
    key = (model, bpw)
    if value not in order:
        order.append(value)
    rows[key].setdefault(value, {})[third] = (float(bits), float(p1), float(p2))

base = order[0]
print(f"| model, bpw | {base}: true bpw, valid / austen (mean) | value | valid / austen (mean) "
      f"| change per third (valid; austen) | mean of the log ratios |")
print("|---|---|---|---|---|---|")
for (model, bpw), by_value in rows.items():
    b = by_value.get(base, {})
    for value in order[1:]:
        v = by_value.get(value, {})
        thirds = sorted(set(b) & set(v))
        if not thirds:
            continue
        mean = lambda d, i: sum(d[t][i] for t in thirds) / len(thirds)
        per = "; ".join(f"{100 * (v[t][1] / b[t][1] - 1):+.1f} % / {100 * (v[t][2] / b[t][2] - 1):+.1f} %"
                        for t in thirds)
        lr = [100 * (math.exp(sum(math.log(v[t][i] / b[t][i]) for t in thirds) / len(thirds)) - 1)
              for i in (1, 2)]
        print(f"| {model} {bpw} ({len(thirds)} thirds) | {mean(b, 0):.4f}: {mean(b, 1):.2f} / "
              f"{mean(b, 2):.1f} | {value} | {mean(v, 1):.2f} / {mean(v, 2):.1f} | {per} | "
              f"{lr[0]:+.1f} % / {lr[1]:+.1f} % |")
