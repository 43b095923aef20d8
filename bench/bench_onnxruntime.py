"""ONNX Runtime's latency table against its settings: where the non-additivity of small networks comes from.

For each `graph_optimization` level it runs the real stages on the default space — `profile` (onnxruntime, the
default protocol), `fit-lut`, `validate-lut` — and reports σ_n, held-out NRMSE, the share within ±10 %, Kendall τ,
and the held-out error split by size (the faster and the slower half of the test networks, relative error and
its mean: a mean far from 0 in the fast half is a per-network cost that the additive table cannot carry).

    python bench/bench_onnxruntime.py                       # levels all and basic, quiet machine
    python bench/bench_onnxruntime.py --levels all basic disable extended
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from latency_session import bench_config, latency_session

from aows_core import artifacts as io
from aows_core.stages import sample


def session(cfg: dict, level: str, d: Path) -> dict:
    """One profile → fit → validate session with `graph_optimization: level`."""
    cfg = {**cfg, "devices": {"ort": {**cfg["devices"]["onnxruntime"], "graph_optimization": level}}}
    res, v, wall = latency_session(cfg, "ort", level, d)
    pred = io.read_table(d / f"{level}_pred.parquet", "lut_predictions")[0]
    meas, p = pred.column("measured_ms").to_numpy(), pred.column("predicted_ms").to_numpy()
    rel = p / meas - 1
    fast = meas <= np.median(meas)
    return {"level": level, "sigma_n": res["sigma_n"], "nrmse": v["lut"]["nrmse"], "within_10pct": v["lut"]["within_10pct"],
            "kendall_tau": v["lut"]["kendall_tau"], "fast_rms": float(np.sqrt(np.mean(rel[fast] ** 2))),
            "fast_mean": float(np.mean(rel[fast])), "slow_rms": float(np.sqrt(np.mean(rel[~fast] ** 2))),
            "slow_mean": float(np.mean(rel[~fast])), "range_ms": (float(meas.min()), float(meas.max())), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", nargs="+", default=["all", "basic"], choices=["disable", "basic", "extended", "all"])
    ap.add_argument("--quick", action="store_true", help="a small space and few networks: checks that it runs")
    args = ap.parse_args()
    cfg = bench_config(args.quick)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        sample.run(cfg, {}, {"out": d / "configs.parquet"})
        for level in args.levels:
            rows.append(session(cfg, level, d))
            print(f"  {level}: NRMSE {100 * rows[-1]['nrmse']:.2f} % ({rows[-1]['wall_s']:.0f} s)", flush=True)
    print("| graph_optimization | σ_n | held-out NRMSE | within ±10 % | Kendall τ | fast half: RMS / mean rel. error | "
          "slow half: RMS / mean | test range | wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['level']} | {100 * r['sigma_n']:.2f} % | {100 * r['nrmse']:.2f} % | {100 * r['within_10pct']:.1f} % | "
              f"{r['kendall_tau']:.3f} | {100 * r['fast_rms']:.1f} / {100 * r['fast_mean']:+.1f} % | "
              f"{100 * r['slow_rms']:.1f} / {100 * r['slow_mean']:+.1f} % | {r['range_ms'][0]:.3f}–{r['range_ms'][1]:.3f} ms | "
              f"{r['wall_s']:.0f} s |")


if __name__ == "__main__":
    main()
