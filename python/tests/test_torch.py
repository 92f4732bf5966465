"""cortiq.torch: BLRLinear against the dense weight, patch against the runtime."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch): "
                            "cortiq.torch is not tested")

import cortiq  # noqa: E402
import cortiq.torch as ctorch  # noqa: E402
from conftest import STORIES, TINY_LLAMA, require  # noqa: E402
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


def test_patch_refuses_a_model_without_the_layer(stories_file):
    require(STORIES)
    model = load_llama(STORIES)
    del model.model.layers[4]
    with pytest.raises(cortiq.Error, match="model.layers.4"):
        ctorch.patch(model, stories_file[0])
    assert not any(isinstance(m, ctorch.BLRLinear) for m in model.modules())  # left as it was
    replaced = ctorch.patch(model, stories_file[0], strict=False)
    assert len(replaced) == 4 * 7 + 1 and not any(p.startswith("model.layers.4.") for p in replaced)
