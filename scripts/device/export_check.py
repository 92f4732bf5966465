#!/usr/bin/env python3
"""Checks a folder written by `cortiq export` with transformers: it loads as the
original architecture (AutoModelForCausalLM; the architecture named in
config.json if the auto class does not take it, as for Qwen3.5's multimodal
layout) with no weight missing, and its perplexity by cortiq's plain protocol
equals `cortiq ppl FILE --json`'s to a relative tolerance (default 1e-4).
Needs PyTorch and transformers (run where they exist, e.g. the GPU machine).

  export_check.py HF_DIR --text FILE --ref PPL_JSON [--ids IDS_JSON]
                  [--ctx 512] [--max-windows 0] [--bos] [--rtol 1e-4] [--device cuda]

PPL_JSON: the line `cortiq ppl FILE --text FILE --json` printed (same --ctx,
--max-windows and --bos). IDS_JSON: `cortiq tokenize FILE --text FILE --ids`'s
output; the transformers tokenizer's ids must equal it.

The plain protocol (src/eval/ppl.cpp): the whole text tokenised once without
added special tokens; non-overlapping windows of ctx tokens (with --bos: BOS
then ctx - 1 text tokens), the tail dropped, at most --max-windows of them;
each window scored on its own (ctx - 1 next-token predictions);
PPL = exp(sum NLL / predictions). Float32 weights and compute (no TF32),
eager attention; the NLL summed in float64.

Exit status: 0 when the check passes, 1 on a mismatch, 2 when loading fails.
"""
import argparse
import json
import math
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


def load_model(folder, device):
    """The model, its class name and the loading report; tries the auto class
    first, then the architecture config.json names."""
    kw = dict(dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    tried = []
    try:
        model, info = AutoModelForCausalLM.from_pretrained(folder, **kw)
        if not info.get("missing_keys"):
            return model.to(device).eval(), type(model).__name__, info
        tried.append(f"AutoModelForCausalLM: missing {sorted(info['missing_keys'])[:8]}")
    except Exception as e:  # an architecture the auto class does not map
        tried.append(f"AutoModelForCausalLM: {type(e).__name__}: {e}")
    for arch in AutoConfig.from_pretrained(folder).architectures or []:
        cls = getattr(transformers, arch, None)
        if cls is None:
            continue
        model, info = cls.from_pretrained(folder, **kw)
        return model.to(device).eval(), arch, info
    raise RuntimeError("cannot load " + folder + ": " + "; ".join(tried))


def plain_ppl(model, ids, ctx, bos_id, max_windows, device):
    per_window = ctx - 1 if bos_id is not None else ctx
    windows = len(ids) // per_window
    if max_windows > 0:
        windows = min(windows, max_windows)
    if windows == 0:
        raise SystemExit(f"the text has {len(ids)} tokens, fewer than one window of {per_window}")
    nll = 0.0
    with torch.no_grad():
        for w in range(windows):
            chunk = ids[w * per_window:(w + 1) * per_window]
            window = ([bos_id] if bos_id is not None else []) + chunk
            x = torch.tensor([window], device=device)
            logits = model(input_ids=x).logits[0].double()
            logp = torch.log_softmax(logits[:-1], dim=-1)
            target = x[0, 1:]
            nll -= float(logp.gather(1, target[:, None]).sum())
    predictions = windows * (ctx - 1)
    return math.exp(nll / predictions), nll / predictions, windows, predictions


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--text", required=True)
    ap.add_argument("--ref", required=True, help="cortiq ppl --json output (file)")
    ap.add_argument("--ids", help="cortiq tokenize --ids output (file)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--max-windows", type=int, default=0)
    ap.add_argument("--bos", action="store_true")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    try:
        model, cls, info = load_model(a.folder, a.device)
    except Exception as e:
        print(f"{a.folder}: FAILED to load: {e}")
        return 2
    # mtp.* (Qwen3.5's multi-token head) is carried in the files and not read by transformers
    unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith("mtp.")]
    mismatched = info.get("mismatched_keys", [])
    print(f"{a.folder}: {cls}, transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{a.device}; missing {len(info.get('missing_keys', []))}, unexpected {len(unexpected)}, "
          f"mismatched {len(mismatched)}")
    ok = not info.get("missing_keys") and not unexpected and not mismatched
    if not ok:
        print("  loading report:", {k: list(v)[:8] for k, v in info.items()})

    tok = AutoTokenizer.from_pretrained(a.folder)
    text = open(a.text, encoding="utf-8").read()
    ids = tok(text, add_special_tokens=False).input_ids
    if a.ids:
        ref_ids = json.load(open(a.ids))
        if ref_ids != ids:
            first = next((i for i, (x, y) in enumerate(zip(ids, ref_ids)) if x != y),
                         min(len(ids), len(ref_ids)))
            print(f"  token ids differ from cortiq tokenize's: {len(ids)} vs {len(ref_ids)} "
                  f"tokens, first difference at {first}")
            ok = False
        else:
            print(f"  token ids equal cortiq tokenize's ({len(ids)} tokens)")
    bos_id = None
    if a.bos:
        bos_id = tok.bos_token_id
        if bos_id is None:
            print("  --bos given but the tokenizer has no BOS token")
            return 1

    ref = json.loads(open(a.ref).read().strip().splitlines()[-1])
    ppl, nll, windows, predictions = plain_ppl(model, ids, a.ctx, bos_id, a.max_windows, a.device)
    rel = abs(ppl - ref["ppl"]) / ref["ppl"]
    print(f"  transformers ppl {ppl:.6f} (nll {nll:.7f}, {windows} windows, {predictions} "
          f"predictions); cortiq ppl {ref['ppl']:.6f} ({ref['windows']} windows); "
          f"relative difference {rel:.2e} (tolerance {a.rtol:g})")
    if windows != ref["windows"] or predictions != ref["predictions"]:
        print("  the window counts differ: the protocols do not match")
        ok = False
    if not rel <= a.rtol:
        ok = False
    print("  PASS" if ok else "  FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
