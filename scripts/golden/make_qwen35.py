#!/usr/bin/env python3
"""Writes the tiny random Qwen3.5 test model and its golden logits (run where
PyTorch and transformers 5.17 exist, e.g. the H200 machine; CPU is enough).

  make_qwen35.py OUT_DIR

OUT_DIR/tiny-qwen35/: config.json and model.safetensors of a
Qwen3_5ForConditionalGeneration (the published layout: the text model under
model.language_model., a tiny vision tower under model.visual., plus two mtp.*
tensors that transformers ignores on load, as the published checkpoints carry),
BF16 weights; golden.json (token ids, the rows kept, shapes) and
golden.logits.f32 (float32 logits of those rows, computed by transformers in
float32 from the BF16 weights, eager attention, on the CPU). OUT_DIR/log.txt
says what was checked (the causal-LM layout's names, float64 and cached-decode
agreement); OUT_DIR/ref/ holds transformers' own qwen3_5 sources.

Text part, scaled down from Qwen3.5-0.8B with its ratios: hidden 64, 4 layers
(3 Gated DeltaNet + 1 gated full attention), 4 query / 1 KV heads of 32
(q_proj makes query and gate: [256, 64]), partial rotary 0.25, θ 1e7;
DeltaNet with 4 key heads and 8 value heads of 16 (value heads > key heads, as
in the larger Qwen3.5 models), conv width 4; vocab 4096 (the tokenizer of
tiny-qwen3-6m), tied embeddings.
"""
import json, math, os, shutil, sys, traceback
import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

out = sys.argv[1]
mdir = os.path.join(out, "tiny-qwen35")
os.makedirs(mdir, exist_ok=True)
os.makedirs(os.path.join(out, "ref"), exist_ok=True)
logf = open(os.path.join(out, "log.txt"), "w")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    logf.write(s + "\n")
    logf.flush()


log("transformers", transformers.__version__, "torch", torch.__version__)
src = os.path.join(os.path.dirname(transformers.__file__), "models", "qwen3_5")
for f in ["modeling_qwen3_5.py", "configuration_qwen3_5.py"]:
    shutil.copy(os.path.join(src, f), os.path.join(out, "ref", f))
try:
    cm = os.path.join(os.path.dirname(transformers.__file__), "conversion_mapping.py")
    lines = open(cm).read().splitlines()
    hits = [i for i, l in enumerate(lines) if "qwen3_5" in l or "language_model" in l]
    log("conversion_mapping lines:", len(hits))
    for i in hits[:40]:
        log("  ", "\n   ".join(lines[max(0, i - 2): i + 4]))
except Exception:
    log(traceback.format_exc())

from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

text = dict(
    vocab_size=4096, hidden_size=64, intermediate_size=160, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=1, head_dim=32, hidden_act="silu",
    max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_num_key_heads=4, linear_num_value_heads=8,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    bos_token_id=0, eos_token_id=0, pad_token_id=0)
vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3,
              patch_size=4, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
              num_position_embeddings=16)
cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
torch.manual_seed(1234)
model = Qwen3_5ForConditionalGeneration(cfg).eval()

# Random weights at unit activation scale, so that every part of the block
# shows in the logits: linear weights N(0, 1/fan_in); embeddings N(0, 1);
# (1 + w) norms w ~ N(0, 0.1); the gated norm's w ~ 1 + N(0, 0.1); decays
# A ∈ [0.05, 1], dt_bias ~ N(0, 0.5) (state kept over tens of tokens).
g = torch.Generator().manual_seed(42)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            p.copy_(torch.empty(p.shape).uniform_(0.05, 1.0, generator=g).log())
        elif name.endswith("dt_bias"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        elif name.endswith("linear_attn.norm.weight"):
            p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
        elif "norm" in name and p.dim() == 1:
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        elif "embed_tokens" in name:
            p.copy_(torch.randn(p.shape, generator=g))
        elif "conv1d" in name:
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        elif p.dim() >= 2:
            fan_in = p[0].numel()
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
        else:
            p.copy_(0.1 * torch.randn(p.shape, generator=g))

model.to(torch.bfloat16).save_pretrained(mdir)
st = os.path.join(mdir, "model.safetensors")
sd = load_file(st)
sd["mtp.fc.weight"] = (torch.randn(64, 128, generator=g) / 8).to(torch.bfloat16)
sd["mtp.norm.weight"] = torch.zeros(64, dtype=torch.bfloat16)
save_file(sd, st, metadata={"format": "pt"})
names = sorted(sd.keys())
log("published layout:", len(names), "tensors")
for n in names:
    log("  ", n, list(sd[n].shape), str(sd[n].dtype))
log("config.json:", open(os.path.join(mdir, "config.json")).read())

ref = Qwen3_5ForConditionalGeneration.from_pretrained(mdir, dtype=torch.float32,
                                                      attn_implementation="eager").eval()
gen = torch.Generator().manual_seed(7)
seqs = [torch.randint(0, 4096, (80,), generator=gen).tolist(),
        torch.randint(0, 4096, (11,), generator=gen).tolist()]
rows = [[0, 1, 2, 3, 4, 5, 6, 7, 31, 32, 63, 64, 65, 79], list(range(11))]
kept = []
with torch.no_grad():
    for s, r in zip(seqs, rows):
        lg = ref(input_ids=torch.tensor([s])).logits[0].float()
        kept.append(lg[r].numpy())
        log("seq", len(s), "logit std", float(lg.std()), "max", float(lg.abs().max()))
np.concatenate(kept).astype("<f4").tofile(os.path.join(mdir, "golden.logits.f32"))
json.dump({"model": "tiny-qwen35", "transformers": transformers.__version__, "seqs": seqs,
           "rows": rows, "vocab": 4096}, open(os.path.join(mdir, "golden.json"), "w"))

# float64 of the same weights: the float32 rounding scale of the reference.
try:
    r64 = Qwen3_5ForConditionalGeneration.from_pretrained(mdir, dtype=torch.float64,
                                                          attn_implementation="eager").eval()
    with torch.no_grad():
        for s in seqs:
            a = ref(input_ids=torch.tensor([s])).logits[0].double()
            b = r64(input_ids=torch.tensor([s])).logits[0]
            log("fp32 vs fp64 max abs", float((a - b).abs().max()), "rel", float((a - b).abs().max() / b.abs().max()))
except Exception:
    log(traceback.format_exc())

# transformers' own cached decoding (recurrent form) against its full pass.
try:
    with torch.no_grad():
        s = seqs[0]
        full = ref(input_ids=torch.tensor([s])).logits[0]
        o = ref(input_ids=torch.tensor([s[:40]]), use_cache=True)
        pkv, worst = o.past_key_values, float((o.logits[0] - full[:40]).abs().max())
        for t in range(40, 60):
            o = ref(input_ids=torch.tensor([[s[t]]]), past_key_values=pkv, use_cache=True)
            pkv = o.past_key_values
            worst = max(worst, float((o.logits[0, -1] - full[t]).abs().max()))
        log("hf cached decode vs full, max abs", worst)
except Exception:
    log(traceback.format_exc())

# The causal-LM layout: names and logits of Qwen3_5ForCausalLM on the same text weights.
try:
    tdir = "/tmp/tiny-qwen35-causal"
    try:
        clm = Qwen3_5ForCausalLM.from_pretrained(mdir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    except Exception:
        log("Qwen3_5ForCausalLM.from_pretrained(published folder) failed:", traceback.format_exc())
        clm = Qwen3_5ForCausalLM(ref.config.text_config).eval()
        tsd = {k.replace("model.language_model.", "model."): v
               for k, v in ref.state_dict().items() if not k.startswith("model.visual.")}
        log("load_state_dict:", clm.load_state_dict(tsd, strict=False))
    clm.save_pretrained(tdir)
    csd = load_file(os.path.join(tdir, "model.safetensors"))
    log("causal-LM layout:", sorted(csd.keys()))
    log("causal-LM config.json:", open(os.path.join(tdir, "config.json")).read())
    with torch.no_grad():
        a = clm(input_ids=torch.tensor([seqs[0]])).logits[0]
        b = ref(input_ids=torch.tensor([seqs[0]])).logits[0]
        log("causal-LM vs conditional-generation logits max abs", float((a - b).abs().max()))
except Exception:
    log(traceback.format_exc())
log("done")
