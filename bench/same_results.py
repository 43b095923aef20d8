"""Same results through two checkouts of aows: the workflow on the synthetic device, run by each, artifacts compared.

For each preset, the whole workflow (sampling, profiling, the LUT, OWS/AOWS supernets, greedy, decisions, retraining,
export, measure, Pareto) runs once with the baseline checkout's code and once with this checkout's, at a small
budget (the test suite's tiny run's settings on the preset's own space), in separate folders. Then every artifact
both runs wrote is compared: parquet files column by column (wall-clock columns left out) — equal, or the largest
absolute difference of a numeric column; torch files tensor by tensor — a state dict's tensors matched in order (the
parameter names changed with the one network path, docs/method.md D45, their order did not), the largest absolute
difference reported.

    git worktree add /tmp/aows-base <commit>      # the baseline: e.g. the commit before a change
    python3 bench/same_results.py --baseline /tmp/aows-base --out /tmp/same   # ~10 min per preset on 2 cores

Prints a table per preset and writes `--out`/same_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
WALL_CLOCK = {"t_start_s", "solve_s", "images_per_s", "seconds", "train_seconds", "estimation_seconds"}
PARAM = re.compile(r"^(features|layers)\.\d+\.|^classifier\.")

# tests/tiny_workflow.py's TINY budget on the synthetic device only.
BUDGET = {
    "seed": 0,
    "devices": {"synth": {"backend": "synthetic", "noise": 0.01, "drift": 0.1}},
    "sampling": {"coverage": 2, "lambda_val": 20, "test": 40},
    "profiling": {"repeats": 5, "retest": 10},
    "lut": {"lambdas": [0.0, 1e-3, 1e-1]},
    "decode": {"targets": ["range:0.3", "range:0.8"]},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 2, "batch_size": 64},
    "aows": {"warmup_epochs": 1, "targets": ["range:0.5"]},
    "greedy": {"n_eval": 64, "n_cal": 64, "batch_size": 64},
    "retrain": {"epochs": 1, "batch_size": 64, "eval_batch_size": 2000, "seeds": [0]},
}


def run(code: Path, wd: Path, preset: str, cores: int) -> None:
    """The workflow of `code` (its Snakefile, its aows_core first on the path) in `wd`."""
    wd.mkdir(parents=True, exist_ok=True)
    (wd / "config.yaml").write_text(yaml.safe_dump({**BUDGET, "space": {"preset": preset}}))
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = ["snakemake", "-s", str(code / "workflow" / "Snakefile"), "--directory", str(wd), "--cores", str(cores),
           "all", "decisions"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    (wd / "run.log").write_text(r.stdout + r.stderr)
    if r.returncode:
        raise SystemExit(f"{code}: the workflow failed in {wd} (see run.log)")


def tensors(obj, path: str = ""):
    """(path, tensor) of every tensor in a torch file; a state dict's parameter names replaced by their position."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        keys = list(obj)
        named = keys and all(isinstance(k, str) and PARAM.match(k) for k in keys)
        for i, k in enumerate(keys):
            yield from tensors(obj[k], f"{path}.{'#' + str(i) if named else k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors(v, f"{path}[{i}]")


def compare_parquet(a: Path, b: Path) -> tuple[bool, float]:
    """(every non-wall-clock column equal, largest absolute difference of the numeric ones)."""
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    cols = [c for c in ta.column_names if c not in WALL_CLOCK]
    if cols != [c for c in tb.column_names if c not in WALL_CLOCK] or ta.num_rows != tb.num_rows:
        return False, float("inf")
    equal, worst = True, 0.0
    for c in cols:
        x, y = ta.column(c).to_pylist(), tb.column(c).to_pylist()
        if json.dumps(x, default=str) == json.dumps(y, default=str):  # NaN equals NaN here
            continue
        equal = False
        try:
            d = np.abs(np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64))
            d = float(np.max(d[np.isfinite(d)], initial=0.0))
        except (TypeError, ValueError):
            d = float("inf")
        worst = max(worst, d)
    return equal, worst


def compare_torch(a: Path, b: Path) -> tuple[bool, float]:
    """(every tensor bitwise equal, largest absolute difference) of two torch files, tensors matched by path."""
    import torch

    ta = dict(tensors(torch.load(a, map_location="cpu", weights_only=False)))
    tb = dict(tensors(torch.load(b, map_location="cpu", weights_only=False)))
    if set(ta) != set(tb) or any(ta[k].shape != tb[k].shape for k in ta):
        return False, float("inf")
    equal = all(torch.equal(ta[k], tb[k]) for k in ta)
    worst = max((float((ta[k].double() - tb[k].double()).abs().max()) for k in ta
                 if ta[k].numel() and ta[k].is_floating_point()), default=0.0)
    return equal, worst


def compare(base: Path, cur: Path) -> list[dict]:
    rows = []
    for p in sorted((base / "results").rglob("*")):
        rel = p.relative_to(base)
        q = cur / rel
        if p.suffix not in (".parquet", ".pt") or not q.exists():
            continue
        equal, worst = (compare_parquet if p.suffix == ".parquet" else compare_torch)(p, q)
        rows.append({"artifact": str(rel), "equal": equal, "max_abs_diff": worst})
    return rows


def kind(artifact: str) -> str:
    parts = artifact.split("/")
    return parts[1] if len(parts) > 2 else parts[-1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, type=Path, help="a checkout of the baseline commit")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--presets", nargs="+", default=["mobilenet_v1_fmnist", "mobilenet_v2_fmnist", "resnet_fmnist"])
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args(argv)
    report = {}
    for preset in args.presets:
        for name, code in (("baseline", args.baseline.resolve()), ("current", ROOT)):
            wd = args.out / preset / name
            if not (wd / "results" / "pareto_synth.pdf").exists():
                run(code, wd, preset, args.cores)
        rows = compare(args.out / preset / "baseline", args.out / preset / "current")
        report[preset] = rows
        print(f"\n{preset}: {sum(r['equal'] for r in rows)} of {len(rows)} artifacts equal")
        by = {}
        for r in rows:
            k = by.setdefault(kind(r["artifact"]), [0, 0, 0.0])
            k[0] += 1
            k[1] += r["equal"]
            k[2] = max(k[2], r["max_abs_diff"])
        print("| artifacts | files | equal | largest difference |\n|---|---|---|---|")
        for k, (n, e, w) in sorted(by.items()):
            print(f"| {k} | {n} | {e} | {w:.3g} |")
    (args.out / "same_results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
