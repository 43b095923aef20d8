"""Latency tables of the deployment runtimes, here and through the timing worker, side by side in one run (§4).

For each device variant — torch-cpu, ONNX Runtime and OpenVINO in this process, and ONNX Runtime and OpenVINO
through the timing worker started by a command prefix (`remote: env …`: a plain subprocess, the channel a device
reached by `ssh` uses) — it runs the real stages on the default space: `profile` (the default protocol),
`fit-lut`, `validate-lut`, and reports σ_n, held-out NRMSE, the share within ±10 %, Kendall τ and the profiling wall
time. Sessions go round-robin over the variants (`--sessions` rounds), each round starting one variant later, so the
machine's drift and a session's place in its round hit every variant alike; the summary gives each variant's median
and [min, max] over its sessions.

    PYTHONPATH=. python bench/bench_runtimes.py --sessions 2
    PYTHONPATH=. python bench/bench_runtimes.py --ssh "ssh -p 2222 127.0.0.1" --variants onnxruntime onnxruntime-ssh
    PYTHONPATH=. python bench/bench_runtimes.py --variants onnxruntime onnxruntime-remote --quick
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from latency_session import bench_config, latency_session

from aows_core.stages import sample

ROOT = Path(__file__).resolve().parents[1]
HERE = {"remote": f"env PYTHONPATH={ROOT}", "worker": f"{sys.executable} -m aows_worker"}
VARIANTS = {
    "torch-cpu": {"backend": "torch-cpu"},
    "onnxruntime": {"backend": "onnxruntime"},
    "openvino": {"backend": "openvino"},
    "onnxruntime-remote": {"backend": "onnxruntime", **HERE},
    "openvino-remote": {"backend": "openvino", **HERE},
}


def session(cfg: dict, variant: str, d: Path, k: int) -> dict:
    """One profile → fit → validate session of `variant`."""
    cfg = {**cfg, "devices": {variant: VARIANTS[variant]}}
    res, v, wall = latency_session(cfg, variant, f"{variant}_{k}", d)
    return {"variant": variant, "session": k, "sigma_n": res["sigma_n"], "nrmse": v["lut"]["nrmse"],
            "within_10pct": v["lut"]["within_10pct"], "kendall_tau": v["lut"]["kendall_tau"], "wall_s": wall}


def spread(values: list[float], scale: float = 1.0, fmt: str = ".2f") -> str:
    """Median [min, max] of `values` × scale."""
    a = np.asarray(values) * scale
    return f"{np.median(a):{fmt}} [{a.min():{fmt}}, {a.max():{fmt}}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS),
                    choices=[*VARIANTS, "onnxruntime-ssh", "openvino-ssh"])
    ap.add_argument("--ssh", help="an ssh command prefix to a machine that sees this folder (localhost): adds the "
                                  "variants onnxruntime-ssh and openvino-ssh")
    ap.add_argument("--sessions", type=int, default=2, help="rounds over the variants")
    ap.add_argument("--quick", action="store_true", help="a small space and few networks: checks that it runs")
    ap.add_argument("--json", help="write every session's figures here")
    args = ap.parse_args()
    if args.ssh:
        for runtime in ("onnxruntime", "openvino"):
            VARIANTS[f"{runtime}-ssh"] = {"backend": runtime, "remote": args.ssh,
                                          "worker": f"env PYTHONPATH={ROOT} {sys.executable} -m aows_worker"}
    missing = [v for v in args.variants if v not in VARIANTS]
    if missing:
        ap.error(f"{missing} need --ssh")
    cfg = bench_config(args.quick)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        sample.run(cfg, {}, {"out": d / "configs.parquet"})
        for k in range(args.sessions):
            n = len(args.variants)
            for variant in args.variants[k % n:] + args.variants[:k % n]:  # each round starts one variant later
                rows.append(session(cfg, variant, d, k))
                r = rows[-1]
                print(f"  session {k} {variant}: σ_n {100 * r['sigma_n']:.2f} %, NRMSE {100 * r['nrmse']:.2f} %, "
                      f"τ {r['kendall_tau']:.3f} ({r['wall_s']:.0f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"| device | σ_n % | held-out NRMSE % | within ±10 % | Kendall τ | profile s |  ({args.sessions} sessions: "
          "median [min, max])")
    print("|---|---|---|---|---|---|")
    for variant in args.variants:
        rs = [r for r in rows if r["variant"] == variant]
        print(f"| {variant} | {spread([r['sigma_n'] for r in rs], 100)} | {spread([r['nrmse'] for r in rs], 100)} | "
              f"{spread([r['within_10pct'] for r in rs], 100, '.1f')} | {spread([r['kendall_tau'] for r in rs], 1, '.3f')} | "
              f"{spread([r['wall_s'] for r in rs], 1, '.0f')} |")


if __name__ == "__main__":
    main()
