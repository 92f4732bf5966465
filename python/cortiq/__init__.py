"""cortiq: binary low-rank (BLR) compression of transformer LMs' linear layers.

    import cortiq
    m = cortiq.load("model.cortiq.safetensors")      # or a Hugging Face folder
    m.logits(m.tokenizer.encode("Once upon a time"))  # numpy [T, vocab]
    m.ppl(open("valid.txt").read(), ctx=512).ppl
    m.generate("Once upon a time", max_tokens=32)
    cortiq.quantize("hf-model/", "out.safetensors", bpw=1.0, calib=["calib.txt"])

cortiq.torch (needs PyTorch) runs the compressed layers inside a PyTorch model.
Errors from the library raise cortiq.Error (a RuntimeError) with its message.
"""

from ._core import (
    Error,
    InvariantError,
    Model,
    PackedLinear,
    PplResult,
    Tokenizer,
    __version__,
    dequant,
    gpu_available,
    gpu_unavailable_reason,
    read_metadata,
    read_tensors,
    sign_bits,
)
from . import _core
import os as _os

__all__ = [
    "Error", "InvariantError", "Model", "PackedLinear", "PplResult", "Tokenizer", "__version__",
    "dequant", "gpu_available", "gpu_unavailable_reason", "load", "quantize", "read_metadata",
    "read_tensors", "sign_bits",
]


def load(path, device="cpu", *, dequant=False, tokenizer=None, threads=0):
    """Loads a Hugging Face folder or a cortiq file, as `cortiq ppl` / `generate` do.

    device: "cpu" or "gpu"; dequant: expand compressed layers to float32 at
    load (default: run them packed); tokenizer: a folder with tokenizer.json
    (default: the model's, or the one a cortiq file carries); threads: host
    threads (0: the free cores). Returns a cortiq.Model.
    """
    return _core.load(_os.fspath(path), device, dequant,
                      "" if tokenizer is None else _os.fspath(tokenizer), threads)


def quantize(model_dir, output, bpw=1.0, calib=(), *, device="cpu", samples="auto",
             seqlen=None, holdout=None, tune="auto", method="nvg", paths="auto", plan=None,
             file_bpw=None, sensitivity_windows=None, include_head=False, match="original", rho=None, gram_shrink=None,
             calib_random=None, calib_generated="auto", kd_random="auto", kd_epochs=None,
             kd_patience=None, kd_min_gain="auto", kd_batch=None, kd_lr=None, kd_lr_signs=None,
             tune_epochs=None,
             tune_batch=None, tune_lr=None, tune_lr_signs=None, tune_latent=None,
             gptq_passes=None, gptq_multi=None, gptq_group=None, itq_iters=None, jobs=None,
             gpus=None, resume=False, force=False, profile=False, threads=0, quiet=False,
             progress=None):
    """Compresses a Hugging Face checkpoint, as `cortiq quantize MODEL -o OUTPUT`.

    Every keyword is the command line's flag of the same name (--kd-epochs is
    kd_epochs); None keeps the command line's default. `calib` is one text
    file or a list of them. `progress`, if given, is called as
    progress(stage, done, total) after each tensor is encoded (stage: the
    tensor's name; done/total: weights) instead of the progress bar; what it
    raises stops the run and propagates. quiet: no per-tensor lines and no bar.
    plan="auto" measures and allocates the bits per tensor (--plan auto),
    plan="uniform" gives every tensor `bpw` (None: auto when tuning a hybrid
    model of at most 100 M parameters, else uniform);
    file_bpw budgets the whole file (--file-bpw).
    Returns the run's summary as a dict (the command line's --json), with its
    one-line "summary". The GIL is released while the library runs.
    """
    if isinstance(calib, (str, _os.PathLike)):
        calib = [calib]
    options = dict(
        bpw=bpw, calib=[_os.fspath(c) for c in calib], device=device, samples=samples, seqlen=seqlen,
        holdout=holdout, tune=tune, method=method, paths=paths, plan=plan, file_bpw=file_bpw,
        sensitivity_windows=sensitivity_windows, include_head=include_head, match=match, rho=rho, gram_shrink=gram_shrink,
        calib_random=calib_random, calib_generated=calib_generated, kd_random=kd_random,
        kd_epochs=kd_epochs, kd_patience=kd_patience, kd_min_gain=kd_min_gain,
        kd_batch=kd_batch, kd_lr=kd_lr,
        kd_lr_signs=kd_lr_signs, tune_epochs=tune_epochs, tune_batch=tune_batch,
        tune_lr=tune_lr, tune_lr_signs=tune_lr_signs, tune_latent=tune_latent,
        gptq_passes=gptq_passes, gptq_multi=gptq_multi, gptq_group=gptq_group,
        itq_iters=itq_iters, jobs=jobs, gpus=gpus, resume=resume, force=force, profile=profile)
    return _core._quantize(_os.fspath(model_dir), _os.fspath(output), options, threads=threads, quiet=quiet,
                           progress=progress)
