#!/usr/bin/env python3
"""Could a candidate be dropped before its last refinement sweep? Reads the
per-tensor lines of quantize logs run with CORTIQ_SWEEP_SEL=1 (each line's
"sel:" notes: init / init1 = P2 / P1 before the knots, PpsK = after sweep K)
and prints, per rule "drop the candidate whose held-out error after sweep K
is more than (1 + tau) times the other's", how many picks it would change
and the worst loss of held-out error it would cause.

  sweep_sel_table.py LOG...
"""
import re, sys

rows = []
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        if "P2s1" not in line or "P1s1" not in line:
            continue
        d = {k: float(v) for k, v in re.findall(r"\b(P\ds\d|init1|init) ([0-9.]+)", line)}
        rows.append((path, d))
print(f"{len(rows)} tensors with both candidates")
for stage, a, b in (("before the knots", "init", "init1"), ("after sweep 1", "P2s1", "P1s1")):
    for tau in (0.0, 0.01, 0.02, 0.05, 0.1):
        changed, dropped, worst = 0, 0, 0.0
        for _, d in rows:
            final2, final1 = d["P2s2"], d["P1s2"]
            pick = 2 if final2 < final1 else 1
            e2, e1 = d[a], d[b]
            if e2 > (1 + tau) * e1:
                early = 1
            elif e1 > (1 + tau) * e2:
                early = 2
            else:
                continue
            dropped += 1
            if early != pick:
                changed += 1
                kept = final1 if early == 1 else final2
                worst = max(worst, kept / min(final1, final2) - 1)
        print(f"{stage:17s} tau {tau:4.2f}: a candidate dropped early in {dropped:3d} of "
              f"{len(rows)}, picks changed {changed:3d}, worst held-out loss {100 * worst:.2f} %")
