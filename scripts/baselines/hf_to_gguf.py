#!/usr/bin/env python3
"""Writes a float32 GGUF of a small Llama or Qwen3 Hugging Face model folder.

Usage: hf_to_gguf.py GGUF_PY_DIR MODEL_DIR OUT.gguf

GGUF_PY_DIR is the gguf-py folder of a llama.cpp source tree (imported at run
time). Only what these models use is handled: dense decoder blocks, RMSNorm,
RoPE, SwiGLU, a byte-level BPE tokenizer.json (written as the "gpt2"
tokenizer model). Llama's q/k rows are reordered the way llama.cpp's own
converter does, because llama.cpp applies RoPE to adjacent pairs while the
Hugging Face layout rotates the two halves of each head.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

LINEAR = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
OTHER = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}


def rope_to_pairs(w, n_head):
    """HF half-split rows of each head -> llama.cpp interleaved pairs."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def rope_to_halves(w, n_head):
    """Inverse of rope_to_pairs."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def gguf_name(hf_name):
    """GGUF tensor name of a Hugging Face tensor name, or None."""
    if hf_name in TOP:
        return TOP[hf_name]
    parts = hf_name.split(".")
    if parts[:2] != ["model", "layers"] or parts[-1] != "weight":
        return None
    key = ".".join(parts[3:-1])
    table = {**LINEAR, **OTHER}
    return f"blk.{parts[2]}.{table[key]}.weight" if key in table else None


def main():
    gguf_py, model_dir, out = sys.argv[1:4]
    sys.path.insert(0, gguf_py)
    import gguf

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    arch = {"llama": "llama", "qwen3": "qwen3"}[cfg["model_type"]]
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // n_head)
    w = gguf.GGUFWriter(out, arch)
    w.add_name(os.path.basename(os.path.normpath(model_dir)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta"))))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    tok = json.load(open(os.path.join(model_dir, "tokenizer.json")))
    model = tok["model"]
    if model["type"] != "BPE":
        raise SystemExit(f"{model_dir}: tokenizer model {model['type']} is not BPE")
    tokens = [None] * cfg["vocab_size"]
    for t, i in model["vocab"].items():
        tokens[i] = t
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for added in tok.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"[PAD{i}]", gguf.TokenType.UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")  # llama.cpp's name for the GPT-2 split regex
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_add_bos_token(False)

    tensors = st_io.read(os.path.join(model_dir, "model.safetensors"))
    for hf_name, entry in tensors.items():
        name = gguf_name(hf_name)
        if name is None:
            raise SystemExit(f"{model_dir}: no GGUF name for tensor {hf_name}")
        a = st_io.to_f32(entry)
        if arch == "llama" and hf_name.endswith("self_attn.q_proj.weight"):
            a = rope_to_pairs(a, n_head)
        elif arch == "llama" and hf_name.endswith("self_attn.k_proj.weight"):
            a = rope_to_pairs(a, n_kv)
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
