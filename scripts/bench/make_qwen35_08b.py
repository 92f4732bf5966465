#!/usr/bin/env python3
"""Writes a random model of the Qwen3.5-0.8B text shape with numpy alone (no
PyTorch), for speed measurements where the published model cannot be fetched:

  make_qwen35_08b.py OUT_DIR [--layers 24]

OUT_DIR/config.json (qwen3_5_text) and model.safetensors (BF16, the causal-LM
layout under model., tied embeddings): 24 layers as (3 Gated DeltaNet + 1
gated attention) × 6, hidden 1024, SwiGLU 3584, vocabulary 248,320; attention
8 query / 2 KV heads of 256, partial rotary 0.25, θ 1e7; DeltaNet 16 key and
16 value heads of 128, conv width 4 (the configuration of
scripts/golden/qwen35_08b_ref.py, which makes the same shape with transformers
and its reference logits on the GPU machine). Values at unit activation scale:
linear weights N(0, 1/fan_in), embeddings N(0, 1), norms near their identity,
decays A in [0.05, 1]. Perplexities of such a model mean nothing; its speed
is the real model's.
"""
import json, os, sys

import numpy as np

import safetensors_bf16

out = sys.argv[1]
layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 24
os.makedirs(out, exist_ok=True)
H, F, V = 1024, 3584, 248320
AH, KVH, HD = 8, 2, 256
KH, VH, DK, DV, CK = 16, 16, 128, 128, 4
conv_dim = 2 * KH * DK + VH * DV
types = (["linear_attention"] * 3 + ["full_attention"]) * (layers // 4) + \
    ["linear_attention"] * (layers % 4)
cfg = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "dtype": "bfloat16",
    "vocab_size": V, "hidden_size": H, "intermediate_size": F, "num_hidden_layers": layers,
    "num_attention_heads": AH, "num_key_value_heads": KVH, "head_dim": HD, "hidden_act": "silu",
    "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
    "partial_rotary_factor": 0.25,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    "linear_conv_kernel_dim": CK, "linear_key_head_dim": DK, "linear_value_head_dim": DV,
    "linear_num_key_heads": KH, "linear_num_value_heads": VH, "layer_types": types,
    "attention_bias": False, "bos_token_id": 248044, "eos_token_id": 248044,
    "pad_token_id": 248044}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)

rng = np.random.default_rng(42)
tensors = []  # (name, shape, kind)
tensors.append(("model.embed_tokens.weight", (V, H), "embed"))
for l, t in enumerate(types):
    p = f"model.layers.{l}."
    tensors.append((p + "input_layernorm.weight", (H,), "norm"))
    tensors.append((p + "post_attention_layernorm.weight", (H,), "norm"))
    if t == "linear_attention":
        a = p + "linear_attn."
        tensors += [(a + "in_proj_qkv.weight", (conv_dim, H), "linear"),
                    (a + "in_proj_z.weight", (VH * DV, H), "linear"),
                    (a + "in_proj_b.weight", (VH, H), "linear"),
                    (a + "in_proj_a.weight", (VH, H), "linear"),
                    (a + "conv1d.weight", (conv_dim, 1, CK), "conv"),
                    (a + "A_log", (VH,), "a_log"), (a + "dt_bias", (VH,), "dt"),
                    (a + "norm.weight", (DV,), "gated_norm"),
                    (a + "out_proj.weight", (H, VH * DV), "linear")]
    else:
        a = p + "self_attn."
        tensors += [(a + "q_proj.weight", (2 * AH * HD, H), "linear"),
                    (a + "k_proj.weight", (KVH * HD, H), "linear"),
                    (a + "v_proj.weight", (KVH * HD, H), "linear"),
                    (a + "o_proj.weight", (H, AH * HD), "linear"),
                    (a + "q_norm.weight", (HD,), "norm"), (a + "k_norm.weight", (HD,), "norm")]
    m = p + "mlp."
    tensors += [(m + "gate_proj.weight", (F, H), "linear"), (m + "up_proj.weight", (F, H), "linear"),
                (m + "down_proj.weight", (H, F), "linear")]
tensors.append(("model.norm.weight", (H,), "norm"))


def values(shape, kind):
    v = safetensors_bf16.linear_or_embed(rng, shape, kind)
    if v is not None:
        return v
    n = int(np.prod(shape))
    if kind == "conv":
        return 0.5 * rng.standard_normal(n, dtype=np.float32)
    if kind == "a_log":
        return np.log(rng.uniform(0.05, 1.0, n)).astype(np.float32)
    if kind == "dt":
        return 0.5 * rng.standard_normal(n, dtype=np.float32)
    if kind == "gated_norm":  # the gated norm scales by w
        return 1 + 0.1 * rng.standard_normal(n, dtype=np.float32)
    return 0.1 * rng.standard_normal(n, dtype=np.float32)  # (1 + w) norms


path = os.path.join(out, "model.safetensors")
offset = safetensors_bf16.write(path, tensors, values)
print(f"{out}: {len(tensors)} tensors, {offset / 2 / 1e6:.1f} M params, {offset / 1e9:.2f} GB")
