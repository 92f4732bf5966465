#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) and the small
tokenizers fuzz_tokenizer_encode loads (fuzz/tokenizers/), from the shared
test data (../shared/data), the demo model and the tokenizer variants of
tests/golden. Deterministic; the output is committed (keep it under 1 MB).

    python3 fuzz/make_seeds.py [--data ../shared/data]
"""
import argparse
import copy
import json
import random
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "fuzz"


def put(target, name, data):
    d = FUZZ / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def dumps(j):
    return json.dumps(j, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------- safetensors

DT = {"F32": ("f", 4), "F16": ("e", 2), "F64": ("d", 8), "U8": ("B", 1), "I8": ("b", 1),
      "I32": ("i", 4), "I64": ("q", 8), "BF16": (None, 2)}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, raw bytes)] → file bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = dumps(header).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(vals):
    return struct.pack(f"<{len(vals)}f", *vals)


def shrink_header(path, limit=6):
    """The header of a real checkpoint with every tensor shrunk to a few values."""
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    meta = h.pop("__metadata__", None)
    out = []
    for name in sorted(h, key=lambda k: h[k]["data_offsets"][0])[:40]:
        e = h[name]
        shape = [min(d, 3) for d in e["shape"]]
        count = 1
        for d in shape:
            count *= d
        out.append((name, e["dtype"], shape, bytes(DT[e["dtype"]][1] * count)))
    return safetensors(out, meta), raw[:min(len(raw), 8 + n + 64)]


def seeds_safetensors(data):
    t = "safetensors"
    put(t, "f32", safetensors([("w", "F32", [2, 2], f32([1, -2, 3.5, 0]))]))
    put(t, "dtypes", safetensors([
        ("a", "F16", [3], struct.pack("<3e", 1, -0.5, 65504)),
        ("b", "BF16", [2], bytes.fromhex("803f00c0")),
        ("c", "F64", [1, 2], struct.pack("<2d", 1e300, -1e-300)),
        ("d", "I64", [1], struct.pack("<q", -1)),
        ("e", "U8", [5], b"\x00\x01\x02\x03\x04"),
        ("f", "I8", [1], b"\xff"),
        ("g", "I32", [], struct.pack("<i", 7)),
    ], {"format": "pt", "k": "v"}))
    put(t, "empty_tensor", safetensors([("z", "F32", [0, 4], b""), ("w", "F32", [1], f32([2]))]))
    put(t, "nan", safetensors([("w", "F32", [3], f32([1, float("nan"), float("inf")]))]))
    put(t, "meta_only", safetensors([], {"a": "b"}))
    put(t, "dup", b"\x38\x00\x00\x00\x00\x00\x00\x00" +
        b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'[:56] + b"\x01")
    for m in ("stories260K", "tiny-qwen3-6m"):
        p = data / "models" / m / "model.safetensors"
        if p.exists():
            small, truncated = shrink_header(p)
            put(t, f"{m}_small", small)
            put(t, f"{m}_truncated", truncated)


def seeds_shard_index():
    t = "shard_index"
    a, b = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    put(t, "good", dumps({"metadata": {"total_size": 60}, "weight_map": {
        "model.embed_tokens.weight": a, "model.norm.weight": a, "lm_head.weight": b}}))
    put(t, "other_norm", dumps({"weight_map": {"model.norm.weight": b, "lm_head.weight": b}}))
    put(t, "missing_shard", dumps({"weight_map": {"x": "model-00003-of-00003.safetensors"}}))
    put(t, "traversal", dumps({"weight_map": {"x": "../x.safetensors", "y": ".."}}))
    put(t, "lacks", dumps({"weight_map": {"nope": a}}))


# ---------------------------------------------------------------- tokenizers

def shrink_bpe(tok, keep):
    """A byte-level BPE tokenizer cut to the ids below `keep` and the merges among them."""
    tok = copy.deepcopy(tok)
    vocab = {k: v for k, v in tok["model"]["vocab"].items() if v < keep}
    merges = []
    for mg in tok["model"]["merges"]:
        a, b = mg if isinstance(mg, list) else mg.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append([a, b])
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    tok["added_tokens"] = [x for x in tok.get("added_tokens", []) if x["id"] < keep]
    return tok


def apply_patches(tok, patches):
    tok = copy.deepcopy(tok)
    for op, ptr, *val in patches:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in ptr.split("/")[1:]]
        node = tok
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        last = parts[-1]
        if op == "merges_to_strings":
            node[last] = [" ".join(m) if isinstance(m, list) else m for m in node[last]]
        elif isinstance(node, list):
            if last == "-":
                node.append(val[0])
            else:
                node[int(last)] = val[0]
        else:
            node[last] = val[0]
    return tok


def seeds_tokenizers(data):
    demo = json.loads((ROOT / "models/demo/tokenizer.json").read_text())
    small = shrink_bpe(demo, 400)
    variants = json.loads((ROOT / "tests/golden/tokenizer_variants.json").read_text())["variants"]
    spm_path = data / "models/stories260K/tokenizer.json"
    spm = json.loads(spm_path.read_text()) if spm_path.exists() else None
    bases = {"tiny-llama-6m": small, "stories260K": spm}

    out = FUZZ / "tokenizers"
    out.mkdir(exist_ok=True)
    if spm is not None:
        (out / "spm-byte-fallback.json").write_text(dumps(spm))
    for name in ("qwen2", "llama3"):
        v = variants[name]
        (out / f"{name}-split.json").write_text(dumps(apply_patches(bases[v["base"]], v["patches"])))

    t = "tokenizer_load"
    tiny = shrink_bpe(demo, 300)
    put(t, "bytelevel", dumps(tiny))
    for name, v in variants.items():
        base = bases.get(v["base"])
        if base is None:
            continue
        if v["base"] == "tiny-llama-6m":
            base = tiny
        put(t, name, dumps(apply_patches(base, v["patches"])))
    if spm is not None:
        cfg = (data / "models/stories260K/tokenizer_config.json").read_text()
        put(t, "spm_with_config", dumps(spm) + "\0" + cfg)
        put(t, "spm_config_object", dumps(spm) + "\0" + dumps(
            {"bos_token": {"content": "<s>"}, "eos_token": None}))

    t = "tokenizer_encode"
    rnd = random.Random(17)
    texts = []
    for f in sorted((data / "text").glob("*.txt"))[:6]:
        raw = f.read_bytes()
        start = rnd.randrange(0, max(1, len(raw) - 400))
        texts.append(raw[start:start + 300])
    texts += ["Hello, world! It's 3.14 — naïve café 日本語 🙂\n\t  end".encode(),
              b"<|endoftext|><s></s>  <unk>", b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x82\xf0\x28\x8c\xbc",
              b"\xe2\x96\x81\xe2\x96\x81 x", b"   \r\n\r\n  \t"]
    for i, txt in enumerate(texts):
        for sel in (0, 1, 2, 3, 4, 6, 9, 11):
            if (sel // 4) % 4 == 1:  # the id-decoding mode: a few ids, some out of range
                ids = [rnd.randrange(-5, 2100) for _ in range(12)]
                put(t, f"ids_{i}_{sel}", bytes([sel]) + struct.pack(f"<{len(ids)}i", *ids))
            else:
                put(t, f"text_{i}_{sel}", bytes([sel]) + txt)


# ---------------------------------------------------------------- config

def seeds_config(data):
    t = "config"
    for m in ("stories260K", "tiny-llama-6m", "tiny-qwen3-6m"):
        p = data / "models" / m / "config.json"
        if p.exists():
            put(t, m, p.read_text())
    base = json.loads((ROOT / "models/demo/config.json").read_text())
    put(t, "demo", dumps(base))
    put(t, "mistral", dumps(dict(base, model_type="mistral", sliding_window=4096)))
    put(t, "qwen2", dumps(dict(base, model_type="qwen2", use_sliding_window=False)))
    put(t, "llama3_rope", dumps(dict(base, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}, eos_token_id=[0, 1, 2])))
    put(t, "linear_rope", dumps(dict(base, rope_scaling={"type": "linear", "factor": 2.0},
                                     bos_token_id=None, pad_token_id=None)))


# ---------------------------------------------------------------- BLR payloads

def f16s(vals):
    return struct.pack(f"<{len(vals)}e", *vals)


def pad8(b):
    return b + bytes((8 - len(b) % 8) % 8)


def words(bits):
    return (bits + 63) // 64


def sign_rows(rnd, rows, cols):
    out = b""
    for _ in range(rows):
        for w in range(words(cols)):
            used = min(64, cols - 64 * w)
            out += struct.pack("<Q", rnd.getrandbits(used))
    return out


def blr_payload(rnd, m, n, r, paths):
    hd = struct.pack("<IHHIIIIII", 0x42515443, 1, paths, m, n, r, words(r), words(n), 0)
    body = b""
    for _ in range(paths):
        scales = [rnd.uniform(0.1, 2) for _ in range(m + r + n)]
        body += pad8(f16s(scales)) + sign_rows(rnd, m, r) + sign_rows(rnd, r, n)
    return hd + body


def blr_payload_v2(rnd, m, n, r, paths):
    """Version 2: all paths' scales, then one bit stream (S_Vᵀ, S_Uᵀ per path)."""
    hd = struct.pack("<IHHIIIIII", 0x42515443, 2, paths, m, n, r, 0, 0, 0)
    scales = pad8(f16s([rnd.uniform(0.1, 2) for _ in range(paths * (m + n + r))]))
    nbits = paths * r * (m + n)
    stream = rnd.getrandbits(nbits) if nbits else 0
    return hd + scales + stream.to_bytes(8 * words(nbits), "little")


def sign_payload(rnd, m, n):
    hd = struct.pack("<IHHIII3I", 0x53515443, 1, 0, m, n, words(n), 0, 0, 0)
    return hd + pad8(f16s([rnd.uniform(0.1, 2) for _ in range(m + n)])) + sign_rows(rnd, m, n)


def seeds_blr():
    rnd = random.Random(5)
    for m, n, r, p in ((1, 1, 1, 1), (3, 5, 2, 1), (8, 70, 4, 2), (65, 9, 9, 2), (16, 16, 16, 1)):
        put("blr", f"blr_{m}x{n}_r{r}_p{p}", blr_payload(rnd, m, n, r, p))
    for m, n, r, p in ((1, 1, 1, 1), (3, 5, 2, 2), (9, 70, 4, 1), (65, 9, 9, 2)):
        put("blr", f"blr2_{m}x{n}_r{r}_p{p}", blr_payload_v2(rnd, m, n, r, p))
    for m, n in ((1, 1), (4, 65), (7, 3)):
        put("blr", f"sign_{m}x{n}", sign_payload(rnd, m, n))
    return rnd


# ---------------------------------------------------------------- journal

def journal_entry(rnd, names, key, extra=None):
    tensors, reports = [], {}
    for name in names:
        pl = blr_payload(rnd, 4, 8, 2, 1)
        tensors.append((name, "U8", [len(pl)], pl))
        reports[name] = {"method": "nvg", "shape": [4, 8], "bpw_target": 1.0, "bits": 200,
                         "bpw": 6.25, "rank": 2, "paths": 1, "err_fit": 0.5, "err_sel": 0.6,
                         "line": "x", "seconds": 0.1}
    meta = {"reports": dumps(reports), "journal_key": str(key), "cortiq_version": "0.1.0",
            "tensors": dumps(names)}
    if extra:
        meta.update(extra)
    return safetensors(tensors, meta)


def seeds_journal(rnd):
    t = "journal"
    names = [f"model.layers.0.{x}.weight" for x in ("self_attn.q_proj", "mlp.down_proj")]
    # mode byte 0: the input is layer 0's entry; 1: the input is settings.json
    put(t, "entry", b"\0" + journal_entry(rnd, names, 0))
    put(t, "entry_wrong_layer", b"\0" + journal_entry(rnd, [n.replace(".0.", ".1.") for n in names], 0))
    put(t, "entry_incomplete", b"\0" + journal_entry(rnd, names[:1], 0))
    put(t, "entry_old_version", b"\0" + journal_entry(rnd, names, 0, {"cortiq_version": "0.0.9"}))
    put(t, "settings", b"\1" + dumps({"format_version": 1, "method": "nvg", "cortiq_version": "0.1.0"}).encode())
    put(t, "settings_bad", b"\1{\"format_version\": [")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    data = Path(ap.parse_args().data)
    seeds_safetensors(data)
    seeds_shard_index()
    seeds_tokenizers(data)
    seeds_config(data)
    rnd = seeds_blr()
    seeds_journal(rnd)
    total = sum(f.stat().st_size for f in FUZZ.rglob("*") if f.is_file())
    print(f"fuzz/: {total} bytes")


if __name__ == "__main__":
    main()
