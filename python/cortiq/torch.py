"""Compressed layers inside PyTorch models (needs PyTorch).

BLRLinear is an nn.Module holding one BLR (or sign) payload. On the CPU its
forward runs the packed kernel the cortiq runtime uses; on any other device
torch has (CUDA) it runs the factored product with torch's own operations,
its signs kept packed, 1 bit each, on that device and unpacked per call:
y = Σ_paths h ∘ (S_U (ℓ ∘ (S_Vᵀ (g ∘ x)))) (SPEC §1). patch(model, file) puts
one in place of every nn.Linear whose weight the cortiq file compresses.

What is not here: gradients for the payload (the input's gradient is given,
through the dense weight on the CPU, through the factored product elsewhere).
"""

import os

import numpy as np
import torch

from . import _core

__all__ = ["BLRLinear", "patch"]


def _payload_array(payload):
    if isinstance(payload, torch.Tensor):
        payload = payload.detach().cpu().numpy()
    if isinstance(payload, (bytes, bytearray, memoryview)):
        payload = np.frombuffer(payload, dtype=np.uint8)
    return np.ascontiguousarray(payload, dtype=np.uint8).reshape(-1)


class _PackedProduct(torch.autograd.Function):
    """y = x Ŵᵀ by the packed kernel; dx = dy Ŵ through the dense weight."""

    @staticmethod
    def forward(ctx, x, module):
        ctx.module = module
        y = module._packed.apply(x.detach().numpy())
        return torch.from_numpy(y)

    @staticmethod
    def backward(ctx, dy):
        return dy @ ctx.module.dense_weight(), None


def _unpack_signs(bits, r, dtype):
    """[k, ceil(r/8)] uint8 (bit j of byte c: column 8c + j, set for +1) to a
    [k, r] matrix of ±1 in `dtype`, on the bits' device."""
    shifts = torch.arange(8, device=bits.device, dtype=torch.uint8)
    ones = (bits.unsqueeze(-1) >> shifts) & 1  # [k, bytes, 8]
    ones = ones.reshape(bits.shape[0], -1)[:, :r]
    return ones.to(dtype) * 2 - 1


def factored_product(x, paths, r):
    """y = x Ŵᵀ as Σ_paths h ∘ (S_U (ℓ ∘ (S_Vᵀ (g ∘ x)))) with torch operations
    in float32, for x [rows, n] on any device; `paths`: (h, l, g, su_bits,
    sv_bits) per path on that device (cortiq.sign_bits gives the bits)."""
    x = x.to(torch.float32)
    y = None
    for h, l, g, su, sv in paths:
        t = (x * g) @ _unpack_signs(sv, r, torch.float32)  # [rows, r]
        part = ((t * l) @ _unpack_signs(su, r, torch.float32).T) * h
        y = part if y is None else y + part
    return y


class BLRLinear(torch.nn.Module):
    """y = x Ŵᵀ + b with Ŵ held as a BLR or sign payload and run packed.

    payload: the payload's bytes (bytes, a uint8 numpy array or tensor, as
    cortiq.read_tensors gives them); bias: an optional [out_features] tensor;
    name: used in error messages. The payload is a buffer (it goes to the
    state_dict); inputs of any float dtype are computed in float32 and the
    result is returned in the input's dtype.
    """

    def __init__(self, payload, bias=None, name="payload"):
        super().__init__()
        data = _payload_array(payload)
        self._name = name
        self._packed = _core.PackedLinear(data, name)
        self._dense = None
        self._factors = None  # (device, paths) for factored_product
        self.in_features = self._packed.in_features
        self.out_features = self._packed.out_features
        self.register_buffer("payload", torch.from_numpy(data.copy()))
        if bias is None:
            self.register_parameter("bias", None)
        else:
            bias = torch.as_tensor(bias).detach().clone()
            if tuple(bias.shape) != (self.out_features,):
                raise _core.Error(f"{name}: bias has shape {tuple(bias.shape)}, expected "
                                  f"({self.out_features},)")
            self.bias = torch.nn.Parameter(bias, requires_grad=False)

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._packed = _core.PackedLinear(self.payload.cpu().numpy(), self._name)
        self._dense = None
        self._factors = None

    def dense_weight(self):
        """Ŵ [out_features, in_features] in float32 (made once, on request)."""
        if self._dense is None:
            self._dense = torch.from_numpy(self._packed.dense())
        return self._dense

    def device_factors(self, device):
        """Scales and packed signs of every path on `device` (made once per
        device): what factored_product reads. A sign payload has none: it runs
        as its dense weight there."""
        device = torch.device(device)
        if self._factors is None or self._factors[0] != device:
            if self._packed.kind != "blr":
                paths = None
            else:
                bits = _core.sign_bits(self.payload.cpu().numpy(), self._name)
                paths = [tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device)
                               for a in (h, l, g, su, sv))
                         for (h, l, g), (su, sv) in zip(self._packed.scales(), bits)]
            self._factors = (device, paths)
        return self._factors[1]

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise _core.Error(f"{self._name}: input has {x.shape[-1]} features, expected "
                              f"{self.in_features}")
        rows = x.reshape(-1, self.in_features).to(torch.float32).contiguous()
        if x.device.type == "cpu":
            y = _PackedProduct.apply(rows, self)
        else:
            paths = self.device_factors(x.device)
            y = (factored_product(rows, paths, self._packed.rank) if paths is not None
                 else rows @ self.dense_weight().to(x.device).T)
        y = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(x.dtype)
        return y

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"kind={self._packed.kind}, rank={self._packed.rank}, "
                f"paths={self._packed.paths}")


def patch(model, file, *, strict=True, floats=True):
    """Replaces model's nn.Linear modules by the cortiq file's compressed ones.

    Each payload "<module path>.weight" of the file (e.g.
    model.layers.0.self_attn.q_proj.weight) replaces the nn.Linear at that
    module path by a BLRLinear (keeping its bias). A compressed embedding
    (model.embed_tokens.weight) becomes the nn.Embedding's weight, dequantised
    (a head tied to it follows). strict: a payload without such a module, or
    with another shape, raises cortiq.Error (else it is skipped). floats: also copy the file's float tensors into the model's
    parameters and buffers of the same name and shape (tuning can change them).
    Returns the names of the modules replaced.
    """
    file = os.fspath(file)
    named = dict(model.named_parameters())
    named.update(model.named_buffers())
    tensors = _core.read_tensors(file)
    # every check first, so a refused file leaves the model as it was
    plan, tables = [], []
    for name, value in tensors.items():
        if value.dtype != np.uint8:
            continue
        path = name[: -len(".weight")] if name.endswith(".weight") else None
        try:
            old = model.get_submodule(path) if path else None
        except AttributeError:
            old = None
        if isinstance(old, torch.nn.Embedding):
            table = _core.dequant(value, name)
            if table.shape != tuple(old.weight.shape):
                if strict:
                    raise _core.Error(f"{file}: payload '{name}' is {table.shape[0]}x"
                                      f"{table.shape[1]}, the model's embedding "
                                      f"{old.weight.shape[0]}x{old.weight.shape[1]}")
                continue
            tables.append((path, old, table))
            continue
        if not isinstance(old, torch.nn.Linear):
            if strict:
                raise _core.Error(f"{file}: payload '{name}' has no nn.Linear at "
                                  f"'{path}' in the model")
            continue
        new = BLRLinear(value, bias=old.bias, name=name)
        if (new.out_features, new.in_features) != (old.out_features, old.in_features):
            if strict:
                raise _core.Error(
                    f"{file}: payload '{name}' is {new.out_features}x{new.in_features}, the "
                    f"model's layer {old.out_features}x{old.in_features}")
            continue
        plan.append((path, new))
    for path, new in plan:
        parent, _, child = path.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
    with torch.no_grad():
        for _, emb, table in tables:
            emb.weight.copy_(torch.from_numpy(table).to(emb.weight.dtype))
    if floats:
        with torch.no_grad():
            for name, value in tensors.items():
                if value.dtype != np.uint8 and name in named and \
                        tuple(named[name].shape) == value.shape:
                    named[name].copy_(torch.from_numpy(value))
    return [path for path, _ in plan] + [path for path, _, _ in tables]
