#!/usr/bin/python3
"""docs/encoder_speed.json -> docs/encoder_speed.png: the GPU encoder on the
H200 (bench_encode_gpu). Left: seconds per stage of one 4096×11008 tensor at
1.0 bpw, summed over the two candidate streams, the exact column search
against rounds of 8 flips (--gptq-multi 8) and column groups of 16 and 64
(--gptq-group), with the tensor's wall time and
the 3 s goal. Right: a 4096/11008 decoder layer, against the 10 s
goal."""
import json, os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
d = json.load(open(os.path.join(docs, "encoder_speed.json")))
prof = d["profile_4096x11008"]
fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [1.3, 1]})

runs = [r for r in ["exact", "Q8", "G16", "G64", "G64_padded"] if r in prof]
stages = sorted(prof["exact"]["stages"], key=lambda s: -prof["exact"]["stages"][s])
bottom = [0.0] * len(runs)
for st in stages:
    vals = [prof[r]["stages"].get(st, 0.0) for r in runs]
    ax.bar(runs, vals, 0.5, bottom=bottom, label=st)
    bottom = [b + v for b, v in zip(bottom, vals)]
for i, r in enumerate(runs):
    ax.annotate(f'wall {prof[r]["tensor_unprofiled_s"]:.1f} s', (i, bottom[i]), ha="center",
                textcoords="offset points", xytext=(0, 3), fontsize=8)
ax.axhline(d["targets"]["tensor_4096x11008_s"], color="red", lw=0.8, ls="--",
           label="target: 3 s per tensor (wall)")
ax.set_xticks(range(len(runs)))
labels = {"exact": "exact scan (default)", "Q8": "--gptq-multi 8", "G16": "--gptq-group 16",
          "G64": "--gptq-group 64", "G64_padded": "G 64, padded TF32\nand 3xTF32 products"}
ax.set_xticklabels([labels[r] for r in runs], fontsize=7, rotation=15)
ax.set_ylabel("seconds per stage, both candidate streams")
ax.set_title("one 4096×11008 tensor, 1.0 bpw (H200)")
ax.legend(fontsize=7, ncol=2)

layer = d["layer_4096_11008"]
names = [f'{x["search"]}\n{x["run"].split(",")[0]}' for x in layer]
bx.barh(range(len(layer)), [x["s"] for x in layer], color="tab:gray")
for i, x in enumerate(layer):
    bx.annotate(f'{x["s"]:.1f} s', (x["s"], i), va="center", textcoords="offset points",
                xytext=(3, 0), fontsize=8)
bx.axvline(d["targets"]["layer_4096_11008_s"], color="red", lw=0.8, ls="--",
           label="target: 10 s per layer")
bx.set_yticks(range(len(layer)))
bx.set_yticklabels(names, fontsize=7)
bx.invert_yaxis()
bx.set_xlabel("seconds (encode_many, 4 tensors in flight)")
bx.set_title("one 4096/11008 decoder layer (7 tensors)")
bx.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(docs, "encoder_speed.png"), dpi=110)
print("wrote docs/encoder_speed.png")
