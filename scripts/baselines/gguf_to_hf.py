#!/usr/bin/env python3
"""Dequantises a GGUF's decoder linear layers into a copy of the float model folder.

Usage: gguf_to_hf.py GGUF_PY_DIR MODEL.gguf FLOAT_MODEL_DIR OUT_DIR

OUT_DIR gets every file of FLOAT_MODEL_DIR; its model.safetensors keeps every
tensor byte for byte except the decoder blocks' q, k, v, o, gate, up and down
projections, which become float32 dequantisations of the GGUF's tensors (q and
k rows put back in the Hugging Face order for Llama). Embedding, head and norms
stay those of the float model, so a perplexity of OUT_DIR measures the linear
layers' quantisation alone. OUT_DIR/gguf_types.json records each GGUF tensor's
type and bytes and the linear layers' bits per weight.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_to_gguf  # noqa: E402
import st_io  # noqa: E402


def main():
    gguf_py, gguf_path, model_dir, out_dir = sys.argv[1:5]
    sys.path.insert(0, gguf_py)
    import gguf
    from gguf import quants

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    reader = gguf.GGUFReader(gguf_path)
    by_name = {t.name: t for t in reader.tensors}

    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(model_dir):
        if f != "model.safetensors" and os.path.isfile(os.path.join(model_dir, f)):
            shutil.copy2(os.path.join(model_dir, f), os.path.join(out_dir, f))

    tensors = st_io.read(os.path.join(model_dir, "model.safetensors"))
    linear_bytes = linear_weights = 0
    linear_types = {}
    for hf_name, entry in tensors.items():
        name = hf_to_gguf.gguf_name(hf_name)
        if not any(hf_name.endswith(f".{k}.weight") for k in hf_to_gguf.LINEAR):
            continue
        t = by_name[name]
        w = quants.dequantize(t.data, t.tensor_type).reshape(entry[1])
        if cfg["model_type"] == "llama" and hf_name.endswith("q_proj.weight"):
            w = hf_to_gguf.rope_to_halves(w, n_head)
        elif cfg["model_type"] == "llama" and hf_name.endswith("k_proj.weight"):
            w = hf_to_gguf.rope_to_halves(w, n_kv)
        tensors[hf_name] = st_io.f32_entry(w)
        linear_bytes += int(t.n_bytes)
        linear_weights += int(t.n_elements)
        tname = t.tensor_type.name
        linear_types[tname] = linear_types.get(tname, 0) + 1
    st_io.write(os.path.join(out_dir, "model.safetensors"), tensors)

    report = {
        "gguf": os.path.basename(gguf_path),
        "linear_bpw": 8.0 * linear_bytes / linear_weights,
        "linear_bytes": linear_bytes,
        "linear_weights": linear_weights,
        "linear_types": linear_types,
        "tensors": {t.name: {"type": t.tensor_type.name, "elements": int(t.n_elements), "bytes": int(t.n_bytes)}
                    for t in reader.tensors},
    }
    with open(os.path.join(out_dir, "gguf_types.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"{gguf_path}: linear {report['linear_bpw']:.4f} bpw {linear_types}; "
          f"token_embd {report['tensors']['token_embd.weight']['type']}, "
          f"output {report['tensors']['output.weight']['type']}")


if __name__ == "__main__":
    main()
