"""Minimal safetensors reading and writing with numpy (no torch, no safetensors package).

Tensors are kept as raw little-endian bytes plus dtype and shape so that a
tensor copied from one file to another stays byte-identical.
"""
import json
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read(path):
    """Returns {name: (dtype, shape, bytes)} in file order."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = (meta["dtype"], list(meta["shape"]), data[a:b])
    return out


def to_f32(entry):
    """Float32 numpy array of one tensor (BF16 widened exactly)."""
    dtype, shape, raw = entry
    if dtype == "BF16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dtype not in _NP:
        raise ValueError(f"unsupported dtype {dtype}")
    return np.frombuffer(raw, dtype=np.dtype(_NP[dtype]).newbyteorder("<")).astype(np.float32).reshape(shape)


def f32_entry(array):
    a = np.ascontiguousarray(array, dtype="<f4")
    return ("F32", list(a.shape), a.tobytes())


def write(path, tensors):
    """tensors: {name: (dtype, shape, bytes)}; written in the given order."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, raw in tensors.values():
            f.write(raw)
