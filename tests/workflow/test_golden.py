"""Golden test: the MobileNet-v1 default's results are unchanged by refactors (docs/method.md D44, D45).

The tiny run (tests/tiny_workflow.py: the default's mobilenet_v1_fmnist family on the synthetic and flops devices)
is deterministic but for its wall-clock columns. It is made the hard way (SIGKILLed mid-training and resumed), so
this test also shows that a killed and resumed workflow ends where an uninterrupted one does.
tests/snapshots/golden_tiny.json holds, per artifact of that run as the code before the one network path (D45) made
it in one uninterrupted run, one sha256 over every parquet column (wall-clock columns left
out) or over every tensor of a torch file (weights, optimiser and BN state: bitwise; a state dict's parameters by
position, so that renaming them changes nothing), and a summary of its values (each numeric column's size, sum, sum
of squares, minimum and maximum; the sum and sum of squares of each torch file entry's tensors).

On the machine type and torch build that wrote it, every artifact must match bitwise. On another (other CPU kernels
round differently, and training amplifies rounding), the artifacts no torch computation touches — sampled
configurations, synthetic timings, the LUT fit, targets, uniform decisions — must still match bitwise, and the
others' numeric values within TOLERANCE; the test says so in a warning, naming the platforms, so that a weaker
comparison is never silent.

Regenerate only when a change of results is intended: `python tests/workflow/test_golden.py RUN_DIR`.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "golden_tiny.json"
WALL_CLOCK = {"t_start_s", "solve_s", "images_per_s", "seconds", "train_seconds", "estimation_seconds"}
TORCH_FREE = ("results/latency/", "results/lut/", "results/targets/", "results/decisions/synth/uniform/",
              "results/decisions/flops/uniform/")
PARAM = re.compile(r"^(features|layers)\.\d+\.|^classifier\.")
# Another CPU or torch build: relative difference allowed in a torch-touched artifact's values (a few training steps
# amplify a rounding difference of 1e-7 to ~1e-4; a broken computation moves them by far more).
TOLERANCE = 0.02

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
    import torch

    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _numeric(values: list) -> list[float] | None:
    """A numeric column's size, sum, sum of squares, minimum and maximum over its finite values (None otherwise)."""
    try:
        a = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return None
    a = a[np.isfinite(a)]
    return [float(len(a)), float(a.sum()), float((a * a).sum()), float(a.min(initial=0)), float(a.max(initial=0))]


def digest(run: Path) -> tuple[dict[str, str], dict[str, dict[str, list[float]]]]:
    """({artifact: sha256}, {artifact: {column or tensor: values}}) of a run's parquet and torch files."""
    import pyarrow.parquet as pq
    import torch

    hashes, values = {}, {}
    res = run / "results"
    for p in sorted(res.rglob("*.parquet")):
        t = pq.read_table(p)
        cols = {c: t.column(c).to_pylist() for c in t.column_names if c not in WALL_CLOCK}
        key = str(p.relative_to(run))
        hashes[key] = _h(json.dumps({c: _h(json.dumps(v, default=str).encode()) for c, v in cols.items()},
                                    sort_keys=True).encode())
        values[key] = {c: n for c, v in cols.items() if (n := _numeric(v)) is not None}
    for p in sorted(res.rglob("*.pt")):
        obj = torch.load(p, map_location="cpu", weights_only=False)
        ts = dict(_tensors(obj))
        key = str(p.relative_to(run))
        hashes[key] = _h(json.dumps({k: _h(v.detach().contiguous().cpu().numpy().tobytes()) for k, v in ts.items()},
                                    sort_keys=True).encode())
        sums: dict[str, list[float]] = {}
        for k, v in ts.items():  # per top-level entry (model, optimizer, ...): its tensors' sum and sum of squares
            if v.is_floating_point() and v.numel():
                acc = sums.setdefault(k.split(".")[0].split("[")[0], [0.0, 0.0])
                acc[0] += float(v.double().sum())
                acc[1] += float((v.double() ** 2).sum())
        values[key] = sums
    return hashes, values


def _close(a: list[float], b: list[float]) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=TOLERANCE, atol=1e-6, equal_nan=True))


def test_the_mobilenet_v1_default_is_unchanged(tiny_run):
    gold = json.loads(SNAPSHOT.read_text())
    now, values = digest(tiny_run)
    same_platform = gold["platform"] == platform()
    paths = list(gold["files"])
    assert len(paths) > 80
    missing = [p for p in paths if p not in now]
    assert not missing, f"artifacts the golden run had and this one lacks: {missing}"
    exact = [p for p in paths if same_platform or p.startswith(TORCH_FREE)]
    changed = [p for p in exact if now[p] != gold["files"][p]]
    assert not changed, (f"{len(changed)} of {len(exact)} artifacts differ bitwise from the golden run "
                         f"({'all compared' if same_platform else 'torch-free ones'}): {changed[:10]}")
    if same_platform:
        return
    loose = [p for p in paths if p not in exact]
    off = [f"{p}: {k}" for p in loose for k, v in gold["values"][p].items()
           if k not in values[p] or not _close(values[p][k], v)]
    warnings.warn(f"golden: this platform {platform()} is not the snapshot's {gold['platform']}: {len(exact)} "
                  f"torch-free artifacts compared bitwise, {len(loose)} others' values within {TOLERANCE:.0%}",
                  stacklevel=1)
    assert not off, f"{len(off)} values differ by more than {TOLERANCE:.0%} from the golden run: {off[:10]}"


if __name__ == "__main__":
    run = Path(sys.argv[1])
    files, vals = digest(run)
    vals = {p: v for p, v in vals.items() if not p.startswith(TORCH_FREE)}  # those are compared bitwise everywhere
    SNAPSHOT.write_text(json.dumps({"platform": platform(), "files": files, "values": vals}, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
