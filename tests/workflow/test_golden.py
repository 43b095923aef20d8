"""Golden test: the MobileNet-v1 default's results are unchanged by refactors (docs/method.md D44, D45).

The tiny run (tests/tiny_workflow.py: the default's mobilenet_v1_fmnist family on the synthetic and flops devices)
is deterministic but for its wall-clock columns. It is made the hard way (SIGKILLed mid-training and resumed), so
this test also shows that a killed and resumed workflow ends where an uninterrupted one does.
tests/snapshots/golden_tiny*.json hold, one per platform (torch build, CPU capability and CPU model), per artifact
of that run as the code before the one network path (D45) made it (golden_tiny.json, the Intel Xeon machine) or as
code that matched it there made it on another CPU (the AMD EPYC machine, 2026-11-29), one sha256 over every parquet
column (wall-clock columns left out) or over every tensor of a torch file (weights, optimiser and BN state: bitwise;
a state dict's parameters by position, so that renaming them changes nothing).

On a platform with a snapshot every artifact must match it bitwise. Rounding differs between CPU models (the LUT
fit's solver, training), and a rounding difference flips some decisions of the tiny run, so on a platform without
one the test can only compare what no rounding touches — the sampled configurations, bitwise — and the artifact set
(every stage's files, a decided network's folder standing for any); it says so in a warning, naming the platforms,
so that the weaker comparison is never silent.

Regenerate only when a change of results is intended (on every platform that has a snapshot), or to add this
platform's after checking on a platform with one that the code matches it: `python tests/workflow/test_golden.py
RUN_DIR`.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import warnings
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"
WALL_CLOCK = {"t_start_s", "solve_s", "images_per_s", "seconds", "train_seconds", "estimation_seconds"}
SAMPLED = "results/latency/configs.parquet"  # seeded sampling: the same on every platform
PARAM = re.compile(r"^(features|layers)\.\d+\.|^classifier\.")
DECIDED = re.compile(r"/\d+(-\d+)+/")  # a decided network's folder (its widths)

pytestmark = pytest.mark.slow


def _h(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:24]


def _tensors(obj, prefix=""):
    """(path, tensor) of every tensor; a state dict's parameter names replaced by their position."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        keys = list(obj)
        named = bool(keys) and all(isinstance(k, str) and PARAM.match(k) for k in keys)
        for i, k in enumerate(keys):
            yield from _tensors(obj[k], f"{prefix}.{'#' + str(i) if named else k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}[{i}]")


def platform() -> dict[str, str]:
    import platform as pf

    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "") if Path("/proc/cpuinfo").exists() else pf.processor()
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu": cpu}


def snapshots() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(SNAPSHOTS.glob("golden_tiny*.json"))]


def digest(run: Path) -> dict[str, str]:
    """{artifact: sha256} of a run's parquet and torch files."""
    import pyarrow.parquet as pq
    import torch

    hashes = {}
    res = run / "results"
    for p in sorted(res.rglob("*.parquet")):
        t = pq.read_table(p)
        cols = {c: t.column(c).to_pylist() for c in t.column_names if c not in WALL_CLOCK}
        hashes[str(p.relative_to(run))] = _h(json.dumps({c: _h(json.dumps(v, default=str).encode())
                                                         for c, v in cols.items()}, sort_keys=True).encode())
    for p in sorted(res.rglob("*.pt")):
        ts = dict(_tensors(torch.load(p, map_location="cpu", weights_only=False)))
        hashes[str(p.relative_to(run))] = _h(json.dumps({k: _h(v.detach().contiguous().cpu().numpy().tobytes())
                                                         for k, v in ts.items()}, sort_keys=True).encode())
    return hashes


def test_the_mobilenet_v1_default_is_unchanged(tiny_run):
    now = digest(tiny_run)
    golds = snapshots()
    gold = next((g for g in golds if g["platform"] == platform()), None)
    if gold is not None:
        paths = list(gold["files"])
        assert len(paths) > 80
        missing = [p for p in paths if p not in now]
        assert not missing, f"artifacts the golden run had and this one lacks: {missing}"
        changed = [p for p in paths if now[p] != gold["files"][p]]
        assert not changed, f"{len(changed)} of {len(paths)} artifacts differ bitwise from the golden run: {changed[:10]}"
        return
    assert all(g["files"][SAMPLED] == now[SAMPLED] for g in golds), "the sampled configurations differ"
    want = {DECIDED.sub("/*/", p) for p in golds[0]["files"]}
    got = {DECIDED.sub("/*/", p) for p in now}
    assert got == want, f"artifacts missing: {sorted(want - got)[:10]}; unexpected: {sorted(got - want)[:10]}"
    warnings.warn(f"golden: no snapshot for this platform {platform()} (snapshots: {[g['platform'] for g in golds]}): "
                  f"compared the sampled configurations bitwise and the artifact set only", stacklevel=1)


if __name__ == "__main__":
    run = Path(sys.argv[1])
    slug = re.sub(r"[^a-z0-9]+", "_", platform()["cpu"].lower()).strip("_")
    old = next((p for p in sorted(SNAPSHOTS.glob("golden_tiny*.json"))
                if json.loads(p.read_text())["platform"] == platform()), None)
    path = old or SNAPSHOTS / f"golden_tiny_{slug}.json"
    path.write_text(json.dumps({"platform": platform(), "files": digest(run)}, sort_keys=True) + "\n")
    print(f"wrote {path}")
