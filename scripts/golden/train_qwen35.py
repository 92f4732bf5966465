#!/usr/bin/env python3
"""Trains the small Qwen3.5-architecture test models, so that their
perplexities mean something, and writes their golden logits and reference
perplexities (run where PyTorch and transformers 5.17 exist: the H200 machine).

  train_qwen35.py [--preset 1m|6m] [--name NAME] [--epochs E]
                  OUT_DIR TOKENIZER_DIR SECONDS TRAIN... -- HELD_OUT_TXT...

TRAIN: text files (cut into ~4 kB documents at line ends) or .jsonl[.gz]
files of documents ({"text": ...} a line, as prepare_qwen35_corpus.py writes).
The documents are shuffled (seed 1234), each followed by <|endoftext|> (id 0);
1/64 of them are the dev set. Random 512-token windows, batch 32, AdamW (0.9,
0.95), wd 0.1 on matrices, bf16 autocast, gradient clip 1.0; the best dev loss
is kept and saved as BF16. The recipe of the 6M models
(../shared/data/README.md).

--preset 1m (the default): tests/golden/tiny-qwen35-trained. Training text:
the public-domain calibration sources of the 6M models' training mix
(scripts/calib/fetch_calib_sources.sh: five Austen novels without Emma, the
KJV from Genesis to Acts 3, the Jargon File) and tinystories-calib. lr 2e-3
with 100 warm-up steps and a cosine decay to 10 % over the step count that
fits SECONDS (measured on the first 20 steps); dev loss every 100 steps.
The model: hidden 128, 4 layers (3 Gated DeltaNet + 1 gated attention, the
0.8B's pattern), 4 query / 1 KV heads of 32 with partial rotary 0.25 and
theta 1e7, DeltaNet with 2 key heads and 4 value heads of 32 (value heads >
key heads, as in the larger Qwen3.5 models), conv width 4, SwiGLU 384,
vocabulary 4096 (the tokenizer of tiny-qwen3-6m), tied embeddings:
1,375,544 parameters.

--preset 6m: tiny-qwen35-6m, the size of tiny-llama-6m / tiny-qwen3-6m, with
their tokenizer, corpus (scripts/device/pack_train_qwen35.sh rebuilds it) and
schedule (../shared/data/scripts/train_lm.py, the selected run): lr 2e-3, 8
epochs, warm-up min(200, steps/20), cosine to 10 %, dev loss 4 times an epoch,
stop after 6 evaluations without a new best. The step count is the epochs'
unless fewer fit SECONDS (measured on steps 10-40 and one dev evaluation);
training stops at SECONDS in any case. The model: hidden 256, 6 layers
(DeltaNet x3, gated attention, DeltaNet x2: a full-attention layer every 4th,
the 0.8B's rule), 4 query / 2 KV heads of 64 with partial rotary 0.25 and
theta 1e7, DeltaNet with 2 key and 2 value heads of 64 (equal, as in the
0.8B), conv width 4, SwiGLU 768, vocabulary 4096, untied embeddings, as the
6M models. Parameters, 6,734,036:
  embeddings + head (untied)    2 x 4096 x 256                  = 2,097,152
  final norm                    256                             =       256
  per layer: 2 norms + SwiGLU   2 x 256 + 3 x 256 x 768         =   590,336  (x6 = 3,542,016)
  gated attention (1 layer)     q+gate 256x512, k 256x128, v 256x128, o 256x256,
                                q_norm 64, k_norm 64            =   262,272
  Gated DeltaNet (5 layers)     in_proj_qkv 256x384, in_proj_z 256x128,
                                in_proj_b 256x2, in_proj_a 256x2, conv1d 384x4,
                                dt_bias 2, A_log 2, norm 64, out_proj 128x256
                                                                =   166,468  (x5 =   832,340)
  (tiny-qwen3-6m: 6,819,840.)

OUT_DIR/NAME/: config.json, generation_config.json, model.safetensors (BF16),
the tokenizer, golden.json + golden.logits.f32 (float32 logits of rows of two
held-out token sequences, transformers in float32 from the BF16 weights, eager
attention, on the CPU — the format of tests/golden/tiny-qwen35), ref_ppl.json
(the plain protocol: 512-token windows, float32 from the BF16 weights, all
windows and the first 4 and 60), train_log.json (the dev-loss curve) and
train_log.txt.
"""
import gzip, json, math, os, random, shutil, sys, time

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer

args = sys.argv[1:]
opts = {"--preset": "1m", "--name": None, "--epochs": None}
while args and args[0] in opts:
    opts[args[0]] = args[1]
    args = args[2:]
preset = opts["--preset"]
if preset not in ("1m", "6m"):
    sys.exit(f"train_qwen35: unknown preset {preset}")
name = opts["--name"] or {"1m": "tiny-qwen35-trained", "6m": "tiny-qwen35-6m"}[preset]
epochs = float(opts["--epochs"] or 8)
out, tok_dir, seconds = args[0], args[1], float(args[2])
rest = args[3:]
cut = rest.index("--")
train_files, held_files = rest[:cut], rest[cut + 1:]
mdir = os.path.join(out, name)
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


# documents: .jsonl[.gz] as they are, text files in ~4 kB pieces cut at line ends
docs = []
for f in train_files:
    if f.endswith((".jsonl", ".jsonl.gz")):
        with (gzip.open(f, "rt", encoding="utf-8") if f.endswith(".gz") else open(f, encoding="utf-8")) as fh:
            docs += [json.loads(line)["text"] for line in fh if line.strip()]
        continue
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
    for e in tok.encode_batch(ds, add_special_tokens=False):
        ids.extend(e.ids)
        ids.append(EOT)
    return torch.tensor(ids, dtype=torch.long)


train_ids, dev_ids = stream(train_docs), stream(dev_docs)
log("documents", len(docs), "train tokens", len(train_ids), "dev tokens", len(dev_ids))

if preset == "1m":
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
    expected = 1375544
else:  # rotary 64 x 0.25 = 16 dims, 8 frequencies: mrope_section sums to 8
    text = dict(
        vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, hidden_act="silu",
        max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [3, 3, 2], "mrope_interleaved": True},
        linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_num_key_heads=2, linear_num_value_heads=2,
        layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 2,
        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    expected = 6734036
torch.manual_seed(1234)
model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text)).cuda().train()
n_params = sum(p.numel() for p in model.parameters())
log("parameters", n_params, "(expected", expected, ")")
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


steps_per_epoch = len(train_ids) // (B * W)
if preset == "1m":  # time-bound: the step count that fits SECONDS, set at step 20
    planned, warm, eval_every, patience = 10**9, 100, 100, None
else:  # train_lm.py: epochs, warm-up min(200, steps/20), 4 dev evaluations an epoch, patience 6
    planned = int(epochs * steps_per_epoch)
    warm, eval_every, patience = min(200, planned // 20), max(1, steps_per_epoch // 4), 6
log("steps/epoch", steps_per_epoch, "planned steps", planned if planned < 10**9 else "(by time)",
    "warm-up", warm, "dev every", eval_every)


def lr_at(step, total):
    if step < warm:
        return 2e-3 * (step + 1) / warm
    q = min(1.0, (step - warm) / max(1, total - warm))
    return 2e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))


best, best_state, best_step, curve = float("inf"), None, 0, []


def evaluate(step, ema, t0):
    global best, best_state, best_step
    d = dev_loss()
    curve.append({"step": step, "epoch": round(step / max(1, steps_per_epoch), 3),
                  "lr": lr_at(step - 1, total), "train_ema": round(ema, 4), "dev": round(d, 4),
                  "s": round(time.time() - t0, 1)})
    log(curve[-1])
    if d < best:
        best, best_step = d, step
        best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return True
    return False


t0 = time.time()
total = planned
ema = None
step = 0
bad = 0
stop = ""
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
    if preset == "1m" and step == 20:  # the step count that fits the time budget
        torch.cuda.synchronize()
        per = (time.time() - t0) / 20
        total = max(200, int(0.85 * seconds / per))
        log(f"{per * 1000:.1f} ms/step: {total} steps")
    if preset == "6m" and step == 10:
        torch.cuda.synchronize()
        t10 = time.time()
    if preset == "6m" and step == 40:  # steady-state step and evaluation times, then the step count
        torch.cuda.synchronize()
        per = (time.time() - t10) / 30
        te = time.time()
        evaluate(step, ema, t0)
        t_eval = time.time() - te
        left = seconds - (time.time() - t0)
        fit = step + int(left / (per + t_eval / eval_every))
        total = min(planned, fit)
        log(f"{per * 1000:.1f} ms/step, dev evaluation {t_eval:.2f} s: {total} steps "
            f"({total / max(1, steps_per_epoch):.2f} epochs; {fit} fit {seconds:.0f} s, "
            f"{planned} planned)")
        continue
    if step % eval_every == 0 or step == total:
        if evaluate(step, ema, t0):
            bad = 0
        else:
            bad += 1
        if patience is not None and bad >= patience:
            stop = f"early stop: no new best dev loss in {bad} evaluations"
            break
    if preset == "6m" and time.time() - t0 > seconds:
        if not curve or curve[-1]["step"] != step:
            evaluate(step, ema, t0)
        stop = f"time budget of {seconds:.0f} s reached"
        break
if stop:
    log(stop)
model.load_state_dict(best_state)
log("best dev", round(best, 4), "at step", best_step, "of", step, f"(epoch {best_step / max(1, steps_per_epoch):.2f})",
    f"{time.time() - t0:.0f} s")
model.eval().to(torch.bfloat16).save_pretrained(mdir)
for f in ["tokenizer.json", "tokenizer_config.json"]:
    shutil.copy(os.path.join(tok_dir, f), os.path.join(mdir, f))
json.dump({"preset": preset, "parameters": n_params, "steps": step, "planned_steps": total,
           "steps_per_epoch": steps_per_epoch, "best_step": best_step, "best_dev": best,
           "stop": stop, "curve": curve, "documents": len(docs),
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
json.dump({"model": name, "transformers": transformers.__version__,
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
    text_name = os.path.splitext(os.path.basename(f))[0]
    ppl[text_name] = {"windows": n, "tokens": len(ids)}
    for k in [4, 60, n]:
        k = min(k, n)
        ppl[text_name][f"ppl_{k if k < n else 'all'}"] = math.exp(sum(per_window[:k]) / (k * (W - 1)))
    log(text_name, ppl[text_name])
json.dump(ppl, open(os.path.join(mdir, "ref_ppl.json"), "w"), indent=1)
log("done")
logf.close()
shutil.copy(os.path.join(out, "train_log.txt"), os.path.join(mdir, "train_log.txt"))
