"""Shared fixtures: the test data, the command-line tool, a compressed model."""

import json
import os
import pathlib
import subprocess

import pytest

import cortiq

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(os.environ.get("CORTIQ_SHARED_DATA", ROOT.parent / "shared" / "data"))
CLI = pathlib.Path(os.environ.get("CORTIQ_CLI", ROOT / "build" / "tools" / "cortiq" / "cortiq"))
STORIES = DATA / "models" / "stories260K"
TINY_LLAMA = DATA / "models" / "tiny-llama-6m"
CALIB = DATA / "text" / "tinystories-calib.txt"
VALID = DATA / "text" / "tinystories-valid.txt"


def require(*paths):
    """Skips (naming the file) when test data is missing."""
    for p in paths:
        if not pathlib.Path(p).exists():
            pytest.skip(f"no {p}")


def run_cli(*args):
    """Runs the command-line tool with --json and returns its JSON line."""
    if not CLI.exists():
        pytest.skip(f"no command-line tool at {CLI} (set CORTIQ_CLI)")
    out = subprocess.run([str(CLI), *map(str, args), "--json"], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# Small settings (a few seconds on one core) for a compressed stories260K.
QUANTIZE_SMALL = dict(bpw=1.0, samples=6, seqlen=96, itq_iters=20, include_head=True,
                      quiet=True, threads=1)


@pytest.fixture(scope="session")
def stories_file(tmp_path_factory):
    """stories260K compressed at 1 bpw, head included: (path, report, progress events)."""
    require(STORIES, CALIB)
    out = tmp_path_factory.mktemp("quantized") / "stories.safetensors"
    events = []
    report = cortiq.quantize(STORIES, out, calib=[CALIB],
                             progress=lambda *e: events.append(e), **QUANTIZE_SMALL)
    return out, report, events


@pytest.fixture(scope="session")
def valid_text(tmp_path_factory):
    """The first 20 kB of tinystories-valid, as a file and as a string."""
    require(VALID)
    text = VALID.read_bytes()[:20000].decode("utf-8", errors="ignore")
    path = tmp_path_factory.mktemp("text") / "valid.txt"
    path.write_text(text, encoding="utf-8")
    return path, text
