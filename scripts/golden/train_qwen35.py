#!/usr/bin/env python3
"""Trains the small Qwen3.5-architecture test model (tests/golden), so that its
perplexities mean something, and writes its golden logits and reference
perplexities (run where PyTorch and transformers 5.17 exist: the H200 machine).

  train_qwen35.py OUT_DIR TOKENIZER_DIR SECONDS TRAIN_TXT... -- HELD_OUT_TXT...

Training text: the public-domain calibration sources of the 6M models'
training mix (scripts/calib/fetch_calib_sources.sh: five Austen novels
without Emma, the KJV from Genesis to Acts 3, the Jargon File) and
tinystories-calib — never the held-out tails. Cut into ~4 kB documents,
shuffled (seed 1234), each followed by <|endoftext|> (id 0); 1/64 of them a
dev set. Random 512-token windows, batch 32, AdamW (0.9, 0.95), wd 0.1 on
matrices, lr 2e-3 with 100 warm-up steps and a cosine decay to 10 % over the
step count that fits SECONDS (measured on the first steps); bf16 autocast,
gradient clip 1.0; the best dev loss (every 100 steps) is kept and saved as
BF16. This is the recipe of the 6M models (../shared/data/README.md), scaled
down.

The model: Qwen3_5ForCausalLM, hidden 128, 4 layers (3 Gated DeltaNet + 1
gated attention, the 0.8B's pattern), 4 query / 1 KV heads of 32 with partial
rotary 0.25 and θ 1e7, DeltaNet with 2 key heads and 4 value heads of 32
(value heads > key heads, as in the larger Qwen3.5 models), conv width 4,
SwiGLU 384, vocabulary 4096 (the tokenizer of tiny-qwen3-6m), tied
embeddings: about 1.3 M parameters.

OUT_DIR/tiny-qwen35-trained/: config.json, model.safetensors (BF16), the
tokenizer, golden.json + golden.logits.f32 (float32 logits of rows of two
held-out token sequences, transformers in float32 from the BF16 weights, eager
attention — the format of tests/golden/tiny-qwen35), ref_ppl.json (the plain
protocol: 512-token windows, float32 from the BF16 weights, all windows and
the first 4 and 60) and train_log.json.
"""
import json, math, os, random, shutil, sys, time

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer

out, tok_dir, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
rest = sys.argv[4:]
cut = rest.index("--")
train_files, held_files = rest[:cut], rest[cut + 1:]
mdir = os.path.join(out, "tiny-qwen35-trained")
os.makedirs(mdir, exist_ok=True)
logf = open(os.path.join(out, "train_log.txt"), "w")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    logf.write(s + "\n")
    logf.flush()


log("transformers", transformers.__version__, "torch", torch.__version__)
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
EOT = 0


def encode(text):
    return tok.encode(text, add_special_tokens=False).ids


# documents of ~4 kB, cut at line ends
docs = []
for f in train_files:
    text = open(f, encoding="utf-8").read()
    cur = []
    size = 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        size += len(line)
        if size >= 4096:
            docs.append("".join(cur))
            cur, size = [], 0
    if cur:
        docs.append("".join(cur))
random.Random(1234).shuffle(docs)
n_dev = max(1, len(docs) // 64)
dev_docs, train_docs = docs[:n_dev], docs[n_dev:]


def stream(ds):
    ids = []
    for d in ds:
        ids.extend(encode(d))
        ids.append(EOT)
    return torch.tensor(ids, dtype=torch.long)


train_ids, dev_ids = stream(train_docs), stream(dev_docs)
log("documents", len(docs), "train tokens", len(train_ids), "dev tokens", len(dev_ids))

text = dict(
    vocab_size=4096, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=1, head_dim=32, hidden_act="silu",
    max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
    linear_num_key_heads=2, linear_num_value_heads=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    bos_token_id=0, eos_token_id=0, pad_token_id=0)
torch.manual_seed(1234)
model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text)).cuda().train()
log("parameters", sum(p.numel() for p in model.parameters()))

W, B = 512, 32
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": no_decay, "weight_decay": 0.0}], lr=2e-3, betas=(0.9, 0.95))
gen = torch.Generator().manual_seed(7)


def batch(ids):
    starts = torch.randint(0, len(ids) - W - 1, (B,), generator=gen)
    return torch.stack([ids[s:s + W] for s in starts]).cuda()


def dev_loss():
    model.eval()
    n = len(dev_ids) // W
    x = dev_ids[:n * W].view(n, W).cuda()
    tot = 0.0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for i in range(0, n, B):
            lg = model(input_ids=x[i:i + B]).logits.float()
            tot += F.cross_entropy(lg[:, :-1].reshape(-1, lg.size(-1)), x[i:i + B, 1:].reshape(-1),
                                   reduction="sum").item()
    model.train()
    return tot / (n * (W - 1))


def lr_at(step, total):
    if step < 100:
        return 2e-3 * (step + 1) / 100
    q = min(1.0, (step - 100) / max(1, total - 100))
    return 2e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))


t0 = time.time()
total = 10**9
best, best_state, best_step, curve = float("inf"), None, 0, []
ema = None
step = 0
while step < total:
    for g in opt.param_groups:
        g["lr"] = lr_at(step, total)
    x = batch(train_ids)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lg = model(input_ids=x).logits.float()
    loss = F.cross_entropy(lg[:, :-1].reshape(-1, lg.size(-1)), x[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
    step += 1
    if step == 20:  # the step count that fits the time budget
        torch.cuda.synchronize()
        per = (time.time() - t0) / 20
        total = max(200, int(0.85 * seconds / per))
        log(f"{per * 1000:.1f} ms/step: {total} steps")
    if step % 100 == 0 or step == total:
        d = dev_loss()
        curve.append({"step": step, "train_ema": round(ema, 4), "dev": round(d, 4),
                      "s": round(time.time() - t0, 1)})
        log(curve[-1])
        if d < best:
            best, best_step = d, step
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
model.load_state_dict(best_state)
log("best dev", round(best, 4), "at step", best_step, "of", step, f"{time.time() - t0:.0f} s")
model.eval().to(torch.bfloat16).save_pretrained(mdir)
for f in ["tokenizer.json", "tokenizer_config.json"]:
    shutil.copy(os.path.join(tok_dir, f), os.path.join(mdir, f))
json.dump({"steps": step, "best_step": best_step, "best_dev": best, "curve": curve,
           "train_tokens": len(train_ids), "dev_tokens": len(dev_ids)},
          open(os.path.join(mdir, "train_log.json"), "w"), indent=1)

# golden logits of the saved weights, float32, eager attention, on the CPU
ref = Qwen3_5ForCausalLM.from_pretrained(mdir, dtype=torch.float32,
                                         attn_implementation="eager").eval()
held = [encode(open(f, encoding="utf-8").read()) for f in held_files]
seqs = [held[0][:80], held[-1][1000:1011]]
rows = [[0, 1, 2, 3, 4, 5, 6, 7, 31, 32, 63, 64, 65, 79], list(range(11))]
kept = []
with torch.no_grad():
    for s, r in zip(seqs, rows):
        lg = ref(input_ids=torch.tensor([s])).logits[0].float()
        kept.append(lg[r].numpy())
        log("seq", len(s), "logit std", float(lg.std()), "max", float(lg.abs().max()))
np.concatenate(kept).astype("<f4").tofile(os.path.join(mdir, "golden.logits.f32"))
json.dump({"model": "tiny-qwen35-trained", "transformers": transformers.__version__,
           "seqs": seqs, "rows": rows, "vocab": 4096},
          open(os.path.join(mdir, "golden.json"), "w"))

# reference perplexities, the plain protocol, float32 from the BF16 weights
ref = ref.cuda()
ppl = {}
for f, ids in zip(held_files, held):
    n = len(ids) // W
    x = torch.tensor(ids[:n * W], device="cuda").view(n, W)
    nll, per_window = 0.0, []
    with torch.no_grad():
        for i in range(0, n, B):
            lg = ref(input_ids=x[i:i + B]).logits.float()
            ce = F.cross_entropy(lg[:, :-1].reshape(-1, lg.size(-1)), x[i:i + B, 1:].reshape(-1),
                                 reduction="none").view(-1, W - 1).sum(1)
            per_window.extend(ce.tolist())
    name = os.path.splitext(os.path.basename(f))[0]
    ppl[name] = {"windows": n, "tokens": len(ids)}
    for k in [4, 60, n]:
        k = min(k, n)
        ppl[name][f"ppl_{k if k < n else 'all'}"] = math.exp(sum(per_window[:k]) / (k * (W - 1)))
    log(name, ppl[name])
json.dump(ppl, open(os.path.join(mdir, "ref_ppl.json"), "w"), indent=1)
log("done")
