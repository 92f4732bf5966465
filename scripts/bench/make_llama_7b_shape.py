#!/usr/bin/env python3
"""Writes a random model of the Llama-7B shape with numpy alone (no PyTorch),
for the time of a whole quantize at that size (the projection of
docs/encoder_speed.md, calibration and tuning included):

  make_llama_7b_shape.py OUT_DIR [--layers 2] [--shape llama2-7b|llama3-8b]

OUT_DIR/config.json (llama) and model.safetensors (BF16, untied head): hidden
4096, SwiGLU 11008, 32 heads of 128 (no grouped KV), vocabulary 32,000, RoPE
θ 1e4, context 4096; `--layers` decoder layers (the real model has 32; a
quantize's time is its per-layer time times the layers, plus the head and
the embedding). Linear weights N(0, 1/fan_in), embeddings N(0, 1), norms
near 1. Its perplexities mean nothing; its shapes, and so its time, are the
real model's. `--shape llama3-8b` writes the Llama-3-8B shape instead: SwiGLU
14336, 8 KV heads of 128 (grouped query attention), vocabulary 128,256, RoPE
θ 5e5 (its head and embedding are four times the 7B's, so the distillation's
head and KL weigh more). A tokenizer with ids below 32,000 (tiny-llama-6m's) is copied
next to it by the device script.
"""
import json, os, sys

import numpy as np

import safetensors_bf16

out = sys.argv[1]
layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 2
shape = sys.argv[sys.argv.index("--shape") + 1] if "--shape" in sys.argv else "llama2-7b"
if shape not in ("llama2-7b", "llama3-8b"):
    sys.exit(f"make_llama_7b_shape.py: unknown --shape {shape} (llama2-7b or llama3-8b)")
os.makedirs(out, exist_ok=True)
H, HEADS, HD = 4096, 32, 128
F, V, KV, THETA = (11008, 32000, 32, 1e4) if shape == "llama2-7b" else (14336, 128256, 8, 5e5)
cfg = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16",
    "torch_dtype": "bfloat16", "vocab_size": V, "hidden_size": H, "intermediate_size": F,
    "num_hidden_layers": layers, "num_attention_heads": HEADS, "num_key_value_heads": KV,
    "head_dim": HD, "hidden_act": "silu", "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "rope_theta": THETA,
    "rope_parameters": {"rope_theta": THETA, "rope_type": "default"},
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)

rng = np.random.default_rng(7)
tensors = [("model.embed_tokens.weight", (V, H), "embed")]
for l in range(layers):
    p = f"model.layers.{l}."
    tensors += [(p + "input_layernorm.weight", (H,), "norm"),
                (p + "post_attention_layernorm.weight", (H,), "norm")]
    a = p + "self_attn."
    tensors += [(a + "q_proj.weight", (H, H), "linear"), (a + "k_proj.weight", (KV * HD, H), "linear"),
                (a + "v_proj.weight", (KV * HD, H), "linear"), (a + "o_proj.weight", (H, H), "linear")]
    m = p + "mlp."
    tensors += [(m + "gate_proj.weight", (F, H), "linear"), (m + "up_proj.weight", (F, H), "linear"),
                (m + "down_proj.weight", (H, F), "linear")]
tensors += [("model.norm.weight", (H,), "norm"), ("lm_head.weight", (V, H), "linear")]


def values(shape, kind):
    v = safetensors_bf16.linear_or_embed(rng, shape, kind)
    if v is not None:
        return v
    return 1 + 0.1 * rng.standard_normal(int(np.prod(shape)), dtype=np.float32)  # norms scale by w


path = os.path.join(out, "model.safetensors")
offset = safetensors_bf16.write(path, tensors, values)
print(f"{out}: {len(tensors)} tensors, {offset / 2 / 1e6:.1f} M params, {offset / 1e9:.2f} GB")
