#!/usr/bin/env python3
"""A random-initialised model with the real Qwen3.5-0.8B text configuration and
transformers' float32 reference logits for it (run on the GPU machine, where
PyTorch and transformers 5.17 exist; no network needed). Not committed: made
on the GPU machine by scripts/device/qwen35_08b_check.sh for the parity and
speed checks of the Qwen3.5 runtime.

  qwen35_08b_ref.py OUT_DIR [TOKENS]

OUT_DIR: config.json (qwen3_5_text, the causal-LM layout: the text model under
model.), model.safetensors (BF16 weights, tied embeddings: no lm_head.weight),
golden.json (token ids, the rows kept, vocab) and golden.logits.f32 (float32
logits of those rows from the BF16 weights, eager attention, on the GPU), in
the format of tests/golden/tiny-qwen35 (tests/test_qwen35_gpu.cpp reads it).

Text configuration of Qwen3.5-0.8B: 24 layers, (3 × Gated DeltaNet,
1 × gated full attention) × 6, hidden 1024, SwiGLU 3584, vocab 248320, tied
embeddings; 8 query / 2 KV heads of 256, partial rotary 0.25, θ 1e7; DeltaNet
16 key and 16 value heads of 128, conv width 4.
"""
import json, math, os, sys, time
import torch
import transformers
from transformers import Qwen3_5ForCausalLM
try:
    from transformers import Qwen3_5TextConfig
except ImportError:
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

out = sys.argv[1]
tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 300
os.makedirs(out, exist_ok=True)
t0 = time.time()
print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
dev = "cuda" if torch.cuda.is_available() else "cpu"

cfg = Qwen3_5TextConfig(
    vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
    num_attention_heads=8, num_key_value_heads=2, head_dim=256, hidden_act="silu",
    max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                     "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_num_key_heads=16, linear_num_value_heads=16,
    layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 6,
    bos_token_id=248044, eos_token_id=248044, pad_token_id=248044)
torch.manual_seed(1234)
with torch.device(dev):
    model = Qwen3_5ForCausalLM(cfg).eval()

# Random weights at unit activation scale (as scripts/golden/make_qwen35.py),
# so that every part of every block shows in the logits: linear weights
# N(0, 1/fan_in); embeddings N(0, 1); (1 + w) norms w ~ N(0, 0.1); the gated
# norm's w ~ 1 + N(0, 0.1); A ∈ [0.05, 1], dt_bias ~ N(0, 0.5).
g = torch.Generator(device=dev).manual_seed(42)
with torch.no_grad():
    for name, p in model.named_parameters():
        r = lambda: torch.randn(p.shape, generator=g, device=dev)
        if name.endswith("A_log"):
            p.copy_(torch.empty(p.shape, device=dev).uniform_(0.05, 1.0, generator=g).log())
        elif name.endswith("dt_bias"):
            p.copy_(r() * 0.5)
        elif name.endswith("linear_attn.norm.weight"):
            p.copy_(1 + 0.1 * r())
        elif "norm" in name and p.dim() == 1:
            p.copy_(0.1 * r())
        elif "embed_tokens" in name:
            p.copy_(r())
        elif "conv1d" in name:
            p.copy_(r() * 0.5)
        elif p.dim() >= 2:
            p.copy_(r() / math.sqrt(p[0].numel()))
        else:
            p.copy_(0.1 * r())
model.to(torch.bfloat16).save_pretrained(out)
del model
torch.cuda.empty_cache()
print("saved", out, "in %.1fs" % (time.time() - t0), flush=True)
print(open(os.path.join(out, "config.json")).read(), flush=True)

ref = Qwen3_5ForCausalLM.from_pretrained(out, dtype=torch.float32,
                                         attn_implementation="eager").to(dev).eval()
gen = torch.Generator().manual_seed(7)
seqs = [torch.randint(0, 248320, (tokens,), generator=gen).tolist(),
        torch.randint(0, 248320, (11,), generator=gen).tolist()]
rows = [sorted({0, 1, 2, 3, 7, 31, 32, 63, 64, 65, 127, 128, 200, tokens - 2, tokens - 1}
               & set(range(tokens))), list(range(11))]
kept = []
with torch.no_grad():
    for s, rr in zip(seqs, rows):
        t1 = time.time()
        lg = ref(input_ids=torch.tensor([s], device=dev)).logits[0].float()
        kept.append(lg[rr].cpu())
        print("seq", len(s), "logit std %.4g max %.4g" % (float(lg.std()), float(lg.abs().max())),
              "%.2fs" % (time.time() - t1), flush=True)
torch.cat(kept).numpy().astype("<f4").tofile(os.path.join(out, "golden.logits.f32"))
json.dump({"model": "qwen35-0.8b-random", "transformers": transformers.__version__,
           "seqs": seqs, "rows": rows, "vocab": 248320},
          open(os.path.join(out, "golden.json"), "w"))

# transformers' own cached decoding against its full pass (the reference's
# recurrent form against its chunked one), for scale.
try:
    with torch.no_grad():
        s = seqs[0]
        full = ref(input_ids=torch.tensor([s], device=dev)).logits[0]
        o = ref(input_ids=torch.tensor([s[:100]], device=dev), use_cache=True)
        pkv = o.past_key_values
        worst = 0.0
        for t in range(100, 116):
            o = ref(input_ids=torch.tensor([[s[t]]], device=dev), past_key_values=pkv,
                    use_cache=True)
            pkv = o.past_key_values
            worst = max(worst, float((o.logits[0, -1] - full[t]).abs().max()))
        print("hf cached decode vs full: max abs %.3g (max |logit| %.3g)"
              % (worst, float(full.abs().max())), flush=True)
except Exception as e:  # informative only
    print("hf cached decode check failed:", repr(e), flush=True)
print("done in %.1fs" % (time.time() - t0), flush=True)
