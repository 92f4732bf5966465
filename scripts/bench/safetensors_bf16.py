"""Writes a BF16 safetensors file with numpy alone, for the random models of
make_llama_7b_shape.py and make_qwen35_08b.py: `write(path, tensors, values)`,
tensors a list of (name, shape, kind), values(shape, kind) their float32
values (in the order listed). Written to path + ".tmp", then renamed."""
import json, os, struct

import numpy as np


def linear_or_embed(rng, shape, kind):
    """Linear weights N(0, 1/fan_in), embeddings N(0, 1); None for other kinds."""
    n = int(np.prod(shape))
    if kind == "linear":
        return rng.standard_normal(n, dtype=np.float32) / np.sqrt(shape[1])
    if kind == "embed":
        return rng.standard_normal(n, dtype=np.float32)
    return None


def bf16_bytes(x):  # round to nearest even, the top 16 bits of float32
    u = x.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def write(path, tensors, values):
    """Returns the bytes of tensor data written."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, kind in tensors:
            f.write(bf16_bytes(values(shape, kind)))
    os.replace(path + ".tmp", path)
    return offset
