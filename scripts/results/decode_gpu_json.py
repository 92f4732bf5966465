#!/usr/bin/python3
"""bench_blr_gpu's log -> docs/decode_gpu.json (then plot_decode_gpu.py draws it).
   scripts/results/decode_gpu_json.py LOG [--run NAME]
Reads the decode table (fp16 cuBLAS, the plane kernels (default), the row and
span kernels, side by side in one run) and the whole-model tables (P = 1, 2)."""
import json, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "..", "docs")
log = open(sys.argv[1], encoding="utf-8").read().splitlines()
run = sys.argv[sys.argv.index("--run") + 1] if "--run" in sys.argv else os.path.basename(sys.argv[1])
num = lambda s: float(re.sub(r"[^0-9.]", "", s.split("(")[0]))

layers, whole, paths = [], {}, None
for line in log:
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if re.match(r"^\d+×\d+$", c[0]) and len(c) == 16:
        layers.append({"shape": c[0], "bpw": num(c[1]), "paths": int(c[2]), "rank": int(c[3]),
                       "true_bpw": num(c[4]), "fp16_us": num(c[5]), "planes_us": num(c[6]),
                       "rows_us": num(c[8]), "spans_us": num(c[9]), "fp16_gbs": num(c[11]),
                       "packed_gbs": num(c[12])})
    m = re.match(r"Whole-model decode.*P = (\d)", line)
    if m:
        paths = "P" + m.group(1)
        whole[paths] = {}
    elif paths and len(c) == 5 and c[1].endswith("GB") and c[0] != "weights":
        name = c[0].replace("packed, ", "").replace(" (the runtime)", "").replace(
            " (binary tensor cores)", "")
        whole[paths][name] = num(c[2])
d = {"what": "bench_blr_gpu on one H200: decode of one token (µs per call, CUDA graph, weights "
             "past the L2), fp16 cuBLAS against the packed layer with the plane kernels (binary "
             "tensor cores, the default), the row kernels and the span kernels, side by side in "
             "one run; and the linear layers of a 32-layer 4096/11008 model at 1.0 bpw",
     "run": run, "layers": layers, "whole_model": {"ms_per_token": whole}}
json.dump(d, open(os.path.join(docs, "decode_gpu.json"), "w"), indent=1, ensure_ascii=False)
print(f"{len(layers)} layer rows, whole model {list(whole)}")
