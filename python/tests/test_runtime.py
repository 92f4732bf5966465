"""cortiq.load / quantize against the command-line tool and against each other."""

import numpy as np
import pytest

import cortiq
from conftest import CALIB, STORIES, TINY_LLAMA, require, run_cli


def models(stories_file):
    return {"tiny-llama-6m": TINY_LLAMA, "stories260K-1bpw": stories_file[0]}


@pytest.mark.parametrize("name", ["tiny-llama-6m", "stories260K-1bpw"])
def test_ppl_matches_cli(name, stories_file, valid_text):
    path = models(stories_file)[name]
    require(path)
    text_file, text = valid_text
    cli = run_cli("ppl", path, "--text", text_file, "--ctx", 128, "--max-windows", 3, "--quiet",
                  "--threads", 1)
    r = cortiq.load(path, threads=1).ppl(text, ctx=128, max_windows=3)
    # the same library calls on one thread: the same bits
    assert r.ppl == cli["ppl"]
    assert (r.windows, r.predictions, r.tokens) == (cli["windows"], cli["predictions"],
                                                    cli["tokens"])


@pytest.mark.parametrize("name", ["tiny-llama-6m", "stories260K-1bpw"])
@pytest.mark.parametrize("temp,seed", [(0.0, 0), (0.9, 7)])
def test_generate_matches_cli(name, temp, seed, stories_file):
    path = models(stories_file)[name]
    require(path)
    prompt = "Once upon a time, a little dog"
    cli = run_cli("generate", path, "--prompt", prompt, "--max-tokens", 24, "--temp", temp,
                  "--seed", seed, "--threads", 1)
    m = cortiq.load(path, threads=1)
    assert m.generate(prompt, max_tokens=24, temp=temp, seed=seed) == cli["text"]
    ids = m.tokenizer.encode(prompt, add_special=True)
    assert m.generate_ids(ids, max_tokens=24, temp=temp, seed=seed) == cli["ids"]


def test_logits_agree_with_ppl(valid_text):
    require(TINY_LLAMA)
    _, text = valid_text
    m = cortiq.load(TINY_LLAMA, threads=1)
    ids = m.tokenizer.encode(text)[:96]
    logits = m.logits(ids)
    assert logits.shape == (96, m.vocab_size) and logits.dtype == np.float32
    # Σ −log softmax(logits_i)[t_{i+1}] in float64 from the float32 logits
    z = logits[:-1].astype(np.float64)
    zmax = z.max(axis=1, keepdims=True)
    lse = (zmax + np.log(np.exp(z - zmax).sum(axis=1, keepdims=True)))[:, 0]
    nll = float((lse - z[np.arange(95), ids[1:]]).sum())
    r = m.ppl(text, ctx=96, max_windows=1)
    # both sums in float64 over the same float32 logits: they differ by the
    # rounding of a 4096-term sum per row (~1e-13 relative)
    assert r.predictions == 95
    assert abs(r.nll * 95 - nll) <= 1e-9 * nll


def test_tokenizer_round_trip():
    require(STORIES)
    tok = cortiq.load(STORIES).tokenizer
    text = "Lily saw a big red ball. She was happy!"
    ids = tok.encode(text)
    assert ids and all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.encode(text, add_special=True) == [tok.bos_id] + ids


def test_quantize_report_and_progress(stories_file):
    path, report, events = stories_file
    payloads = cortiq.read_tensors(path, only_payloads=True)
    # one event per tensor encoded, named by it; weights counted up to the total
    assert sorted(e[0] for e in events) == sorted(payloads)
    done = [e[1] for e in events]
    assert done == sorted(done) and done[-1] == events[-1][2]
    assert set(report["tensors"]) == set(payloads)
    assert report["linear_bpw"] <= 1.0
    assert "summary" in report
    for name, p in payloads.items():
        w = cortiq.PackedLinear(p, name)
        assert w.kind == "blr" and w.rank >= 1


class Stop(Exception):
    pass


def test_progress_callback_exception_stops_the_run(tmp_path):
    require(STORIES, CALIB)
    out = tmp_path / "stopped.safetensors"
    calls = []

    def stop(stage, done, total):
        calls.append(stage)
        raise Stop(stage)

    with pytest.raises(Stop):
        cortiq.quantize(STORIES, out, calib=CALIB, progress=stop, samples=6, seqlen=96,
                        itq_iters=20, quiet=True, threads=1)
    # the tensors of one input (q, k, v) are encoded side by side and each
    # reports; the run stops there, before the next input and the output
    assert 1 <= len(calls) <= 3 and not out.exists()


def test_errors_carry_the_library_message(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(cortiq.Error, match="no-such-model"):
        cortiq.load(missing)
    assert issubclass(cortiq.Error, RuntimeError)
    with pytest.raises(cortiq.Error, match="gram_shrink"):
        cortiq.quantize(STORIES, tmp_path / "x.safetensors", calib=CALIB, gram_shrink=2.0)
    with pytest.raises(cortiq.Error, match="kd_min_gain"):
        cortiq.quantize(STORIES, tmp_path / "x.safetensors", calib=CALIB, kd_min_gain=1.0)
    with pytest.raises(cortiq.Error, match="unknown option 'nonsense'"):
        cortiq._core._quantize(str(STORIES), str(tmp_path / "x"), {"nonsense": 1})
    with pytest.raises(cortiq.Error, match="my.layer"):
        cortiq.PackedLinear(np.zeros(64, np.uint8), "my.layer")
    with pytest.raises(cortiq.Error, match="device"):
        cortiq.load(STORIES, device="tpu")
    require(STORIES)
    with pytest.raises(cortiq.Error, match="outside the vocabulary"):
        cortiq.load(STORIES).logits([1, 100000])
