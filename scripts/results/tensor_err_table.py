#!/usr/bin/python3
"""Per-tensor held-out error of a search variant against the reference, from
the --json reports of the thirds protocol (gptq_multi_thirds.sh).

The perplexity of a 1-bit 6M model is chaotic: one calibration third against
another moves it by several percent, so a 0.5 % effect cannot be read from a
few perplexities. Each tensor's held-out error (err_sel, SPEC §3.8) is not:
it is the encoder's own objective on held-out activations. This table gives,
per setting and per input width n, the geometric mean over tensors of
err_sel(variant) / err_sel(reference) and its standard error.

  tensor_err_table.py REF_DIR REF_TAG VAR_DIR VAR_TAG [GROUP]
e.g. tensor_err_table.py /tmp/grp gptq-group1 /tmp/g64 gptq-group64 64
(files q_{model}_{bpw}_{third}_{TAG}.safetensors.json; GROUP, when given,
adds the column G/n)."""
import json
import math
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)["tensors"]


def summary(logs):
    mean = 100 * (math.exp(statistics.mean(logs)) - 1)
    se = 100 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("nan")
    return mean, se


def main():
    ref_dir, ref_tag, var_dir, var_tag = sys.argv[1:5]
    group = int(sys.argv[5]) if len(sys.argv) > 5 else None
    by_setting, by_width, every = {}, {}, []
    for model in ["tiny-llama-6m", "tiny-qwen3-6m"]:
        for bpw in ["0.55", "1.0", "2.0"]:
            for third in range(3):
                name = "q_{}_{}_{}_{}.safetensors.json"
                ref_path = os.path.join(ref_dir, name.format(model, bpw, third, ref_tag))
                var_path = os.path.join(var_dir, name.format(model, bpw, third, var_tag))
                if not (os.path.exists(ref_path) and os.path.exists(var_path)):
                    continue
                ref, var = load(ref_path), load(var_path)
                for tensor, t in ref.items():
                    if tensor not in var or "err_sel" not in t or "err_sel" not in var[tensor]:
                        continue
                    lr = math.log(var[tensor]["err_sel"] / t["err_sel"])
                    by_setting.setdefault((model, bpw), []).append(lr)
                    by_width.setdefault(t["shape"][1], []).append(lr)
                    every.append(lr)
    if not every:
        sys.exit("no pairs of reports found")
    print(f"| setting | tensors | err_sel {var_tag} / {ref_tag} | standard error |")
    print("|---|---|---|---|")
    for (model, bpw), logs in by_setting.items():
        mean, se = summary(logs)
        print(f"| {model} {bpw} | {len(logs)} | {mean:+.2f} % | {se:.2f} % |")
    mean, se = summary(every)
    print(f"| **all** | {len(every)} | **{mean:+.2f} %** | {se:.2f} % |")
    print()
    head = "| input width n | " + ("G/n | " if group else "") + "tensors | change | standard error |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for n, logs in sorted(by_width.items()):
        mean, se = summary(logs)
        gn = f"{group / n:.3f} | " if group else ""
        print(f"| {n} | {gn}{len(logs)} | {mean:+.2f} % | {se:.2f} % |")


if __name__ == "__main__":
    main()
