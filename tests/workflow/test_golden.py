"""Golden test: the MobileNet-v1 default is unchanged by the space-as-data refactor (docs/method.md D44).

The tiny run (tests/tiny_workflow.py: the default's mobilenet_v1_fmnist family on the synthetic and flops devices)
is deterministic but for its wall-clock columns. tests/snapshots/golden_tiny.json holds, per artifact of that run
made before residual spaces existed, one sha256 over every parquet column (wall-clock columns left out) or every
tensor of a torch file (weights, optimiser and BN state: bitwise). On the machine type and torch build that wrote
it, every artifact must match; elsewhere (other CPU kernels round differently) the artifacts that no torch
computation touches — sampled configurations, synthetic timings, the LUT fit, targets, uniform decisions — must.

Regenerate only when a change of results is intended: `python tests/workflow/test_golden.py RUN_DIR`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "golden_tiny.json"
WALL_CLOCK = {"t_start_s", "solve_s", "images_per_s", "seconds", "train_seconds", "estimation_seconds"}
TORCH_FREE = ("results/latency/", "results/lut/", "results/targets/", "results/decisions/synth/uniform/",
              "results/decisions/flops/uniform/")

pytestmark = pytest.mark.slow


def _h(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:24]


def _tensors(obj, prefix=""):
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}[{i}]")


def platform() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def digest(run: Path) -> dict[str, str]:
    """{artifact path: sha256 over its non-wall-clock parquet columns, or over every tensor of a torch file}."""
    import pyarrow.parquet as pq
    import torch

    out = {}
    res = run / "results"
    for p in sorted(res.rglob("*.parquet")):
        t = pq.read_table(p)
        cols = {c: _h(json.dumps(t.column(c).to_pylist(), default=str).encode())
                for c in t.column_names if c not in WALL_CLOCK}
        out[str(p.relative_to(run))] = _h(json.dumps(cols, sort_keys=True).encode())
    for p in sorted(res.rglob("*.pt")):
        obj = torch.load(p, map_location="cpu", weights_only=False)
        ts = {k: _h(v.detach().contiguous().cpu().numpy().tobytes()) for k, v in _tensors(obj)}
        out[str(p.relative_to(run))] = _h(json.dumps(ts, sort_keys=True).encode())
    return out


def test_the_mobilenet_v1_default_is_unchanged(tiny_run):
    gold = json.loads(SNAPSHOT.read_text())
    now = digest(tiny_run)
    same_platform = gold["platform"] == platform()
    paths = [p for p in gold["files"] if same_platform or p.startswith(TORCH_FREE)]
    assert len(paths) > 40 if same_platform else len(paths) > 5
    missing = [p for p in paths if p not in now]
    changed = [p for p in paths if p in now and now[p] != gold["files"][p]]
    assert not missing, f"artifacts the golden run had and this one lacks: {missing}"
    assert not changed, (f"{len(changed)} of {len(paths)} artifacts differ from the golden run "
                         f"({'all compared' if same_platform else 'torch-free ones only'}): {changed[:10]}")


if __name__ == "__main__":
    run = Path(sys.argv[1])
    SNAPSHOT.write_text(json.dumps({"platform": platform(), "files": digest(run)}, indent=0, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
