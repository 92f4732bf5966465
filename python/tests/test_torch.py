"""cortiq.torch: BLRLinear against the dense weight, patch against the runtime."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch): "
                            "cortiq.torch is not tested")

import cortiq  # noqa: E402
import cortiq.torch as ctorch  # noqa: E402
from conftest import CALIB, QUANTIZE_SMALL, STORIES, TINY_LLAMA, require  # noqa: E402
from llama_ref import load_llama  # noqa: E402

U32 = 2.0**-24  # float32's unit roundoff


def rounding_bound(packed, x):
    """A first-order bound on |packed(x) − x Ŵᵀ| per output: the kernel's sums
    run over n inputs then r latents, each term rounded once more for the
    scales, so the error is at most (n + r + 8)·u times the same products
    taken in absolute value, Σ_p |h| ∘ (|l|ᵀ Σ_j |g_j x_j|) (every sign +1)."""
    ax = np.abs(x.astype(np.float64))
    total = np.zeros((x.shape[0], packed.out_features))
    for h, l, g in packed.scales():
        gx = ax @ np.abs(g.astype(np.float64))  # [rows]
        lsum = np.abs(l.astype(np.float64)).sum() if l.size else 1.0
        total += gx[:, None] * lsum * np.abs(h.astype(np.float64))[None, :]
    return (packed.in_features + packed.rank + 8) * U32 * total


@pytest.mark.parametrize("rows", [1, 3, 17])  # one-vector kernel below 4 rows, tiles from 4
def test_blr_linear_equals_dequant_then_dense(rows, stories_file):
    rng = np.random.default_rng(rows)
    payloads = cortiq.read_tensors(stories_file[0], only_payloads=True)
    assert payloads
    for name, p in payloads.items():
        layer = ctorch.BLRLinear(p, name=name)
        w = cortiq.dequant(p, name).astype(np.float64)
        x = rng.standard_normal((rows, layer.in_features)).astype(np.float32)
        with torch.no_grad():
            y = layer(torch.from_numpy(x)).numpy().astype(np.float64)
        ref = x.astype(np.float64) @ w.T
        bound = rounding_bound(layer._packed, x)
        assert np.all(np.abs(y - ref) <= bound), name
        # the bound is well below the outputs: a wrong sign or scale, which
        # moves an output by a sizeable part of it, would break it
        assert bound.max() < 1e-2 * np.abs(ref).max(), name


def test_blr_linear_shapes_dtypes_bias_and_gradient(stories_file):
    name = "model.layers.0.mlp.down_proj.weight"
    p = cortiq.read_tensors(stories_file[0], only_payloads=True)[name]
    w = torch.from_numpy(cortiq.dequant(p))
    bias = torch.linspace(-1, 1, w.shape[0])
    layer = ctorch.BLRLinear(torch.from_numpy(p), bias=bias, name=name)
    x = torch.randn(2, 5, w.shape[1], generator=torch.Generator().manual_seed(3))
    y = layer(x)
    assert y.shape == (2, 5, w.shape[0])
    ref = x @ w.T + bias
    assert torch.allclose(y, ref, rtol=0, atol=1e-4 * ref.abs().max().item())
    assert layer(x.to(torch.bfloat16)).dtype == torch.bfloat16
    # the input's gradient is dy Ŵ
    xg = x.clone().requires_grad_(True)
    layer(xg).square().sum().backward()
    xr = x.clone().requires_grad_(True)
    (xr @ w.T + bias).square().sum().backward()
    assert torch.allclose(xg.grad, xr.grad, rtol=0, atol=1e-3 * xr.grad.abs().max().item())
    # the payload travels in the state_dict
    again = ctorch.BLRLinear(p, bias=torch.zeros_like(bias), name=name)
    again.load_state_dict(layer.state_dict())
    assert torch.equal(again(x), y)
    with pytest.raises(cortiq.Error, match=name):
        layer(torch.randn(3, w.shape[1] + 1))


def max_rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


# The reference and the runtime round differently (sums in another order,
# RoPE angles, softmax) but both in float32 through a few layers: their
# logits agree to ~1e-6 of their size; 1e-4 leaves room and still catches any
# wrong weight (the compressed model's logits differ from the original's by
# ~1e-1 of their size, checked below).
TOL = 1e-4


def test_reference_llama_matches_runtime():
    require(TINY_LLAMA)
    m = cortiq.load(TINY_LLAMA, threads=1)
    ids = m.tokenizer.encode("Once upon a time there was a little girl named Lily.", True)
    with torch.no_grad():
        ref = load_llama(TINY_LLAMA)(ids).numpy()
    assert max_rel(ref, m.logits(ids)) < TOL


def test_patch_gives_the_runtime_logits(stories_file):
    require(STORIES)
    path = stories_file[0]
    m = cortiq.load(path, threads=1)
    ids = m.tokenizer.encode("Lily and Ben went to the park. They saw a big tree.", True)
    model = load_llama(STORIES)
    with torch.no_grad():
        original = model(ids).numpy()
    replaced = ctorch.patch(model, path)
    payloads = cortiq.read_tensors(path, only_payloads=True)
    assert sorted(replaced) == sorted(n[: -len(".weight")] for n in payloads)
    assert isinstance(model.lm_head, ctorch.BLRLinear)  # the head, compressed apart
    assert isinstance(model.model.embed_tokens, torch.nn.Embedding)  # ... from the embedding
    with torch.no_grad():
        patched = model(ids).numpy()
    runtime = m.logits(ids)
    assert max_rel(patched, runtime) < TOL
    assert max_rel(original, runtime) > 100 * TOL


def test_patch_takes_a_compressed_embedding_and_an_auto_plan(tmp_path):
    """A file whose plan was measured (plan="auto") and whose tied embedding is
    compressed (a plan rule naming it): patch dequantises the table into the
    nn.Embedding, the tied head follows, and the logits are the runtime's."""
    require(STORIES, CALIB)
    auto = tmp_path / "auto.safetensors"
    report = cortiq.quantize(STORIES, auto, calib=[CALIB], plan="auto", sensitivity_windows=2,
                             **{k: v for k, v in QUANTIZE_SMALL.items() if k != "include_head"})
    assert (tmp_path / "auto.safetensors.plan.json").exists()
    plan = json.loads((tmp_path / "auto.safetensors.plan.json").read_text())
    plan["model.embed_tokens.weight"] = 2.0
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    path = tmp_path / "embed.safetensors"
    cortiq.quantize(STORIES, path, calib=[CALIB], plan=str(tmp_path / "plan.json"),
                    **{k: v for k, v in QUANTIZE_SMALL.items() if k != "include_head"})
    m = cortiq.load(path, threads=1)
    ids = m.tokenizer.encode("Lily and Ben went to the park. They saw a big tree.", True)
    model = load_llama(STORIES)
    replaced = ctorch.patch(model, path)
    assert "model.embed_tokens" in replaced
    assert isinstance(model.model.embed_tokens, torch.nn.Embedding)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    with torch.no_grad():
        patched = model(ids).numpy()
    assert max_rel(patched, m.logits(ids)) < TOL
    assert report is not None


def test_patch_refuses_a_model_without_the_layer(stories_file):
    require(STORIES)
    model = load_llama(STORIES)
    del model.model.layers[4]
    with pytest.raises(cortiq.Error, match="model.layers.4"):
        ctorch.patch(model, stories_file[0])
    assert not any(isinstance(m, ctorch.BLRLinear) for m in model.modules())  # left as it was
    replaced = ctorch.patch(model, stories_file[0], strict=False)
    assert len(replaced) == 4 * 7 + 1 and not any(p.startswith("model.layers.4.") for p in replaced)


def _factored_output(layer, x, device):
    with torch.no_grad():
        paths = layer.device_factors(device)
        xs = torch.from_numpy(x).to(device)
        return ctorch.factored_product(xs, paths, layer._packed.rank).cpu().numpy()


@pytest.mark.parametrize("rows", [1, 5])
def test_factored_product_equals_dequant_then_dense(rows, stories_file):
    """The torch path BLRLinear takes off the CPU (packed signs unpacked per
    call, the factored product in float32), run here on the CPU: the same
    float32 rounding bound as the packed kernel against x Ŵᵀ."""
    rng = np.random.default_rng(10 + rows)
    payloads = cortiq.read_tensors(stories_file[0], only_payloads=True)
    checked = 0
    for name, p in payloads.items():
        layer = ctorch.BLRLinear(p, name=name)
        if layer._packed.kind != "blr":
            continue
        x = rng.standard_normal((rows, layer.in_features)).astype(np.float32)
        y = _factored_output(layer, x, "cpu").astype(np.float64)
        ref = x.astype(np.float64) @ cortiq.dequant(p, name).astype(np.float64).T
        bound = rounding_bound(layer._packed, x)
        assert np.all(np.abs(y - ref) <= bound), name
        assert bound.max() < 1e-2 * np.abs(ref).max(), name
        checked += 1
    assert checked > 0


def test_sign_bits_hold_the_payload_signs(stories_file):
    """Σ_p diag(h) S_U diag(ℓ) S_Vᵀ diag(g) rebuilt from sign_bits and the
    scales equals the dequantised weight; one flipped bit changes it."""
    name = "model.layers.1.self_attn.q_proj.weight"
    p = cortiq.read_tensors(stories_file[0], only_payloads=True)[name]
    layer = ctorch.BLRLinear(p, name=name)
    r = layer._packed.rank
    w = np.zeros((layer.out_features, layer.in_features))
    for (h, l, g), (su, sv) in zip(layer._packed.scales(), cortiq.sign_bits(p, name)):
        u = ctorch._unpack_signs(torch.from_numpy(su), r, torch.float64).numpy()
        v = ctorch._unpack_signs(torch.from_numpy(sv), r, torch.float64).numpy()
        assert set(np.unique(u)) <= {-1.0, 1.0} and u.shape == (layer.out_features, r)
        w += (h[:, None] * u * l[None, :]) @ (v * g[:, None]).T
    ref = cortiq.dequant(p, name).astype(np.float64)
    assert np.abs(w - ref).max() <= 1e-5 * np.abs(ref).max()
    # bit 0 of S_U's first byte is entry (0, 0): flipping it moves row 0 alone,
    # by −2 h₀ s ℓ₀ (g ∘ S_V[:, 0]) where s was the entry's sign
    su, sv = cortiq.sign_bits(p, name)[0]
    h, l, g = (a.astype(np.float64) for a in layer._packed.scales()[0])
    before = ctorch._unpack_signs(torch.from_numpy(su), r, torch.float64).numpy()
    su[0, 0] ^= 1
    after = ctorch._unpack_signs(torch.from_numpy(su), r, torch.float64).numpy()
    changed = np.argwhere(after != before)
    assert changed.tolist() == [[0, 0]]
    v0 = ctorch._unpack_signs(torch.from_numpy(sv), r, torch.float64).numpy()[:, 0]
    delta = (after - before)[0, 0] * h[0] * l[0] * (v0 * g)
    assert np.abs(delta).max() > 0 and (after - before)[0, 0] == -2 * before[0, 0]
    with pytest.raises(cortiq.Error):
        cortiq.sign_bits(np.zeros(8, dtype=np.uint8), "junk")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch")
def test_blr_linear_on_cuda_equals_the_cpu_kernel(stories_file):
    rng = np.random.default_rng(4)
    for name, p in cortiq.read_tensors(stories_file[0], only_payloads=True).items():
        layer = ctorch.BLRLinear(p, name=name)
        x = rng.standard_normal((3, layer.in_features)).astype(np.float32)
        with torch.no_grad():
            cpu = layer(torch.from_numpy(x)).numpy().astype(np.float64)
            gpu = layer.to("cuda")(torch.from_numpy(x).cuda()).cpu().numpy().astype(np.float64)
            layer.to("cpu")
        assert np.all(np.abs(gpu - cpu) <= 2 * rounding_bound(layer._packed, x)), name
