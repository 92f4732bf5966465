#!/usr/bin/env python3
"""Writes golden token ids and logits for cortiq's tests (run where PyTorch,
transformers and tokenizers exist, e.g. the H200 GPU machine).

  make_golden.py MODELS_DIR TEXT_DIR OUT_DIR

For every model folder: OUT/<model>.json with
  - "ids": {text_name: ids of the first 16 KiB of each text, add_special_tokens=False}
  - "extra": ids of a few tricky strings (unicode, digits, spaces, special tokens)
  - "seqs": three 48-token id sequences cut from tinystories-valid, austen and kjv
and OUT/<model>.logits.f32: the FP32 logits of those sequences, [3, 48, vocab]
little-endian float32, computed by transformers with float32 weights.
"""
import json, os, sys
import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

models_dir, text_dir, out_dir = sys.argv[1:4]
os.makedirs(out_dir, exist_ok=True)
EXTRA = [
    "Hello, world!  It's 2026: 3.14159 and 1,000,000 apples.",
    "  leading spaces\n\n\ttabs and\r\nwindows lines   ",
    "naïve café — “quotes” … 日本語 テキスト 🙂 emoji",
    "<|endoftext|>Once upon a time<|endoftext|> the end",
    "I'm you're we'll they've she'd DON'T",
    "",
]
texts = {}
for name in sorted(os.listdir(text_dir)):
    if name.endswith(".txt"):
        with open(os.path.join(text_dir, name), "rb") as f:
            raw = f.read(16384)
        texts[name] = raw.decode("utf-8", errors="ignore")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
for model in sorted(os.listdir(models_dir)):
    mdir = os.path.join(models_dir, model)
    tok = Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
    out = {"model": model, "ids": {}, "extra": [], "seqs": []}
    for name, t in texts.items():
        out["ids"][name] = tok.encode(t, add_special_tokens=False).ids
    for s in EXTRA:
        enc = tok.encode(s, add_special_tokens=False)
        out["extra"].append({"text": s, "ids": enc.ids, "decoded": tok.decode(enc.ids, skip_special_tokens=False)})
    for name in ["tinystories-valid.txt", "austen-heldout.txt", "kjv-heldout.txt"]:
        ids = out["ids"][name]
        out["seqs"].append(ids[100:148])
    lm = AutoModelForCausalLM.from_pretrained(mdir, torch_dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        x = torch.tensor(out["seqs"], dtype=torch.long).cuda()
        logits = lm(x).logits.float().cpu().numpy()
    out["logits_shape"] = list(logits.shape)
    logits.astype("<f4").tofile(os.path.join(out_dir, model + ".logits.f32"))
    with open(os.path.join(out_dir, model + ".json"), "w") as f:
        json.dump(out, f)
    print(model, logits.shape, {k: len(v) for k, v in out["ids"].items()})

# Reference timing of the plain-protocol evaluation through transformers (for
# the speed comparison in the notes): tiny-llama-6m over tinystories-valid.
import math, time
import torch.nn.functional as F
from transformers import AutoTokenizer
for model in ["tiny-llama-6m", "tiny-qwen3-6m", "stories260K"]:
    mdir = os.path.join(models_dir, model)
    tk = AutoTokenizer.from_pretrained(mdir)
    lm = AutoModelForCausalLM.from_pretrained(mdir, dtype=torch.float32).cuda().eval()
    text = open(os.path.join(text_dir, "tinystories-valid.txt"), encoding="utf-8").read()
    ids = tk(text, add_special_tokens=False)["input_ids"]
    W = 512; n = len(ids) // W
    x = torch.tensor(ids[: n * W], device="cuda").view(n, W)
    for rep in range(2):
        torch.cuda.synchronize(); t0 = time.time(); nll = 0.0
        with torch.no_grad():
            for i in range(0, n, 32):
                lg = lm(input_ids=x[i:i + 32]).logits.float()
                nll += F.cross_entropy(lg[:, :-1].reshape(-1, lg.size(-1)), x[i:i + 32, 1:].reshape(-1), reduction="sum").item()
        torch.cuda.synchronize(); dt = time.time() - t0
    cnt = n * (W - 1)
    print(json.dumps({"model": model, "ppl": round(math.exp(nll / cnt), 4), "tokens": n * W, "seconds": round(dt, 3), "tok_per_s": round(n * W / dt)}))
