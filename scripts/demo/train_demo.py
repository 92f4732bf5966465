#!/usr/bin/env python3
"""Trains cortiq's bundled demo model: a small Llama on the Jargon File 4.4.7
(public domain; Debian package `jargon-text`, /usr/share/doc/jargon-text/jargon.txt.gz).
Run where PyTorch, transformers and tokenizers exist (the H200 GPU machine):

  zcat /usr/share/doc/jargon-text/jargon.txt.gz > jargon.txt
  python3 scripts/demo/train_demo.py jargon.txt models/demo [--minutes 3]

Writes OUT/{config.json, model.safetensors (BF16), tokenizer.json,
tokenizer_config.json, calib.txt, heldout.txt, training_log.json}.
The text is cut in three: the last 8 % is held out (heldout.txt), the 8 % before
it is the calibration text (calib.txt), the rest trains the model.
"""
import argparse, inspect, json, math, os, time
import torch, torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

p = argparse.ArgumentParser()
p.add_argument("text"); p.add_argument("out")
p.add_argument("--minutes", type=float, default=3.0); p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()
torch.manual_seed(a.seed)
os.makedirs(a.out, exist_ok=True)
text = open(a.text, encoding="utf-8").read()
# cut at paragraph boundaries
n = len(text)
cut_sel = text.rfind("\n\n", 0, int(n * 0.92)); cut_cal = text.rfind("\n\n", 0, int(n * 0.84))
train_text, calib_text, held_text = text[:cut_cal], text[cut_cal:cut_sel], text[cut_sel:]
open(os.path.join(a.out, "calib.txt"), "w", encoding="utf-8").write(calib_text.strip() + "\n")
open(os.path.join(a.out, "heldout.txt"), "w", encoding="utf-8").write(held_text.strip() + "\n")

# byte-level BPE, GPT-2 style, vocab 2048
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tr = trainers.BpeTrainer(vocab_size=2048, min_frequency=2, special_tokens=["<|endoftext|>"],
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
paras = [x for x in train_text.split("\n\n") if x.strip()]
tok.train_from_iterator(paras, tr)
tok.save(os.path.join(a.out, "tokenizer.json"))
PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                        pad_token="<|endoftext|>").save_pretrained(a.out)
eot = tok.token_to_id("<|endoftext|>")
ids = []
for para in paras:
    ids += tok.encode(para + "\n\n").ids
dev = "cuda"
data = torch.tensor(ids, dtype=torch.long, device=dev)
ndev = len(data) // 32
train, dval = data[:-ndev], data[-ndev:]
T = 256
cfg = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=T,
                  tie_word_embeddings=True, rms_norm_eps=1e-5,
                  bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
                  **({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
                     if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters
                     else {"rope_theta": 10000.0}))
model = LlamaForCausalLM(cfg).to(dev)
decay = [q for q in model.parameters() if q.dim() == 2]; nodecay = [q for q in model.parameters() if q.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                        lr=a.lr, betas=(0.9, 0.95), fused=True)
bs = 64; budget = a.minutes * 60; warm = 100
def batch(src):
    ix = torch.randint(0, len(src) - T - 1, (bs,), device=dev)
    return torch.stack([src[i:i + T + 1] for i in ix.tolist()])
def loss_of(x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lg = model(input_ids=x[:, :-1]).logits
    return F.cross_entropy(lg.float().reshape(-1, lg.size(-1)), x[:, 1:].reshape(-1))
@torch.no_grad()
def dev_loss():
    model.eval(); k = (len(dval) - 1) // T; x = dval[:k * T + 1]
    xs = torch.stack([x[i * T:(i + 1) * T + 1] for i in range(k)])
    l = sum(loss_of(xs[i:i + 32]).item() * len(xs[i:i + 32]) for i in range(0, k, 32)) / k
    model.train(); return l
t0 = time.time(); step = 0; log = []; best = (1e9, None)
est_steps = None
while True:
    el = time.time() - t0
    if el > budget: break
    if step == 50: est_steps = int(budget / (el / 50))
    total = est_steps or 10**9
    lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / total))))
    for g in opt.param_groups: g["lr"] = lr
    loss = loss_of(batch(train)); opt.zero_grad(set_to_none=True); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); step += 1
    if step % 200 == 0:
        d = dev_loss(); log.append({"step": step, "seconds": round(time.time() - t0, 1), "train": round(loss.item(), 4), "dev": round(d, 4)})
        print(log[-1], flush=True)
        if d < best[0]: best = (d, {k: v.detach().clone() for k, v in model.state_dict().items()})
if best[1] is not None: model.load_state_dict(best[1])
model = model.to(torch.bfloat16)
model.save_pretrained(a.out, safe_serialization=True)
# top-level rope_theta / torch_dtype for readers of the transformers-4 layout
cp = os.path.join(a.out, "config.json"); c = json.load(open(cp))
c.setdefault("rope_theta", 10000.0); c.setdefault("torch_dtype", "bfloat16")
json.dump(c, open(cp, "w"), indent=2)
model = model.float()
# plain-protocol perplexity of the held-out text, ctx 256
hid = tok.encode(open(os.path.join(a.out, "heldout.txt"), encoding="utf-8").read()).ids
k = len(hid) // T; x = torch.tensor(hid[:k * T], device=dev).view(k, T); nll = 0.0
with torch.no_grad():
    for i in range(0, k, 32):
        lg = model(input_ids=x[i:i + 32]).logits.float()
        nll += F.cross_entropy(lg[:, :-1].reshape(-1, lg.size(-1)), x[i:i + 32, 1:].reshape(-1), reduction="sum").item()
ppl = math.exp(nll / (k * (T - 1)))
json.dump({"steps": step, "log": log, "best_dev_loss": best[0], "heldout_ppl_ctx256": ppl,
           "params": sum(q.numel() for q in model.parameters()), "source": "Jargon File 4.4.7 (Debian jargon-text), public domain"},
          open(os.path.join(a.out, "training_log.json"), "w"), indent=1)
print("heldout ppl (ctx 256):", ppl, "params", sum(q.numel() for q in model.parameters()))
