"""malloc keeps what a pass frees (docs/method.md D51): without it glibc hands a freed block of activations back to
the OS and the next forward faults it in again, which made the MobileNet-v2 preset's torch-cpu timings 2–5× noisier
and its training and scoring 1.3–1.6× slower. Checked on the process's resident memory, in fresh interpreters
(malloc's settings are per process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from aows_core.memory import keep_freed_memory

PROBE = textwrap.dedent("""
    import ctypes, json, os, sys
    sys.path.insert(0, {root!r})
    from aows_core.memory import keep_freed_memory
    if sys.argv[1] == "kept":
        assert keep_freed_memory()
    elif sys.argv[1] == "stage":  # a stage's command line, stopped at its first missing input
        from aows_core.cli import main
        assert main(json.loads(sys.argv[2])) == 2
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    page = os.sysconf("SC_PAGE_SIZE")
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page
    n = 16 << 20  # a batch of MobileNet-v2 activations is a few MiB
    p = libc.malloc(n)
    ctypes.memset(p, 1, n)
    before = rss()
    libc.free(ctypes.c_void_p(p))
    print((before - rss()) / n)
""")


def _returned(mode: str, *argv: str) -> float:
    """The share of a freed 16 MiB block that left the process's resident memory."""
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    r = subprocess.run([sys.executable, "-c", PROBE.format(root=root), mode, *argv], capture_output=True, text=True,
                       check=True)
    return float(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc: Linux only")
def test_a_freed_block_stays_in_the_process():
    """glibc as it comes returns a freed 16 MiB block to the OS at once; once told to keep it, none of it leaves."""
    if not keep_freed_memory():
        pytest.skip("this C library has no mallopt (not glibc)")
    assert _returned("default") > 0.9
    assert _returned("kept") < 0.01


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc: Linux only")
def test_the_stages_that_train_or_score_keep_freed_memory(tmp_path):
    """D51 in the torch stages: `aows proxy` (a flagged stage) keeps a freed block once its command has started, `aows
    fit-lut` (no torch passes) leaves malloc as it comes; the flagged stages are exactly those that train or score."""
    import json

    from aows_core import stages

    if not keep_freed_memory():
        pytest.skip("this C library has no mallopt (not glibc)")
    gone = str(tmp_path / "missing")
    proxy = ["proxy", "--device", "cpu", "--decisions", f"{gone}/d.parquet", "--unaries", f"{gone}/u.parquet",
             "--model", f"{gone}/m.pt", "--out", str(tmp_path / "proxy.parquet")]
    fit = ["fit-lut", "--device", "cpu", "--latency", f"{gone}/l.parquet", "--out", str(tmp_path / "lut.parquet"),
           "--report", str(tmp_path / "report.json")]
    assert _returned("stage", json.dumps(proxy)) < 0.01
    assert _returned("stage", json.dumps(fit)) > 0.9
    flagged = {m.COMMAND for m in stages.modules() if getattr(m, "KEEPS_FREED_MEMORY", False)}
    assert flagged == {"train-supernet", "greedy", "proxy", "retrain", "plan"}


def test_the_torch_cpu_fingerprint_says_malloc_keeps_memory():
    """A latency file records it, so tables timed before D51 are not mixed with tables timed after."""
    from aows_core.config import resolve, validate
    from aows_core.devices import get_device

    cfg = resolve(validate({"space": {"preset": "mobilenet_v1_fmnist", "n_choices": 2, "width_mult": 0.25},
                            "devices": {"cpu": {"backend": "torch-cpu"}}}))
    dev = get_device(cfg.device("cpu"), cfg.space, 0)
    fp = dev.fingerprint()
    assert fp["kept_malloc"] is keep_freed_memory() and fp["form"].endswith("/kept-malloc")
