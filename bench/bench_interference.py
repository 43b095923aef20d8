"""Timing under interference (docs/method.md D27, D42): the protocol profiled quiet and under a background load.

For every (load, statistic) session it runs the real stages on the default space — `profile` (torch-cpu or
onnxruntime, the default protocol with `statistic` overridden), `fit-lut`, `validate-lut` — and reports the
test–retest noise σ_n, the held-out NRMSE, the share of held-out networks within ±10 %, Kendall τ, the noise gate,
the re-timed jobs and the session's wall time; the ratios of each statistic to the default (`min`) per load.

The load is a process the benchmark starts itself, pinned to one core: it alternates bursts of busy work
(1–5 s) with idle gaps (1–5 s) for the whole loaded session — interference lasting seconds, like a shared host —
and is stopped when the session ends (or the benchmark is interrupted). `loaded`: numpy matrix products that fit
in the core's cache (compute); `memory`: copies of a 64 MB array (a neighbour contending for the shared cache and
memory bandwidth, which slows large networks more than the reference).

    python bench/bench_interference.py                                    # torch-cpu, min, quiet and loaded
    python bench/bench_interference.py --device onnxruntime --statistics min median --loads quiet memory
    python bench/bench_interference.py --quick                            # a small check that everything runs
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from latency_session import bench_config, latency_session

from aows_core.stages import sample


def _load(core: int, seed: int, stop, kind: str = "loaded") -> None:
    """Busy bursts and idle gaps of 1–5 s each on `core` until `stop` is set: matrix products (`loaded`) or copies
    of a 64 MB array (`memory`)."""
    try:
        os.sched_setaffinity(0, {core})
    except (AttributeError, OSError):
        pass
    os.environ["OMP_NUM_THREADS"] = "1"
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((256, 256))
    src, dst = np.ones(16_000_000, np.float32), np.empty(16_000_000, np.float32)
    while not stop.is_set():
        end = time.perf_counter() + rng.uniform(1, 5)
        while time.perf_counter() < end and not stop.is_set():
            if kind == "memory":
                np.copyto(dst, src)
                src, dst = dst, src
            else:
                a = np.tanh(a @ a.T / 256)
        stop.wait(rng.uniform(1, 5))


@contextmanager
def background_load(core: int, seed: int = 7, kind: str = "loaded"):
    """`_load` in a daemon process for the duration of the block, stopped (or terminated) at its end."""
    stop = mp.Event()
    proc = mp.Process(target=_load, args=(core, seed, stop, kind), daemon=True)
    proc.start()
    try:
        yield
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()


def session(cfg: dict, device: str, statistic: str, load: str, d: Path, core: int) -> dict:
    """One profile → fit → validate session with `statistic` under `load` (quiet, loaded, memory); its figures."""
    cfg = {**cfg, "profiling": {**cfg["profiling"], "statistic": statistic}}
    name = f"{statistic}_{load}"
    res, v, wall = latency_session(cfg, device, name, d, None if load == "quiet" else background_load(core, kind=load))
    return {"statistic": statistic, "load": load, "sigma_n": res["sigma_n"],
            "retest_within_10pct": res["retest_within_10pct"], "nrmse": v["lut"]["nrmse"],
            "within_10pct": v["lut"]["within_10pct"], "kendall_tau": v["lut"]["kendall_tau"],
            "too_noisy": res["too_noisy"], "retimed": res["retimed"], "jobs": res["total"], "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="a device of the default config (cpu = torch-cpu, onnxruntime)")
    ap.add_argument("--statistics", nargs="+", default=["min"], choices=["min", "median", "mean", "p10"])
    ap.add_argument("--loads", nargs="+", default=["quiet", "loaded"], choices=["quiet", "loaded", "memory"])
    ap.add_argument("--core", type=int, default=0, help="the core the background load is pinned to")
    ap.add_argument("--quick", action="store_true", help="a small space and few networks: checks that it runs")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep every session's files (latency, LUT, validation) in this directory")
    args = ap.parse_args()
    cfg = bench_config(args.quick)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        sample.run(cfg, {}, {"out": d / "configs.parquet"})
        for load in args.loads:
            for statistic in args.statistics:
                rows.append(session(cfg, args.device, statistic, load, d, args.core))
                r = rows[-1]
                print(f"  {r['load']:6s} {r['statistic']:6s} σ_n {100 * r['sigma_n']:5.2f} %  NRMSE "
                      f"{100 * r['nrmse']:5.2f} %  ±10 % {100 * r['within_10pct']:5.1f} %  ({r['wall_s']:.0f} s)", flush=True)
    keys = ("repeats", "chunks", "reference_share", "retest", "min_time_ms")
    print(f"\ndevice {args.device}, protocol {json.dumps({k: cfg['profiling'][k] for k in keys})}")
    print("| load | statistic | σ_n | retest ±10 % | held-out NRMSE | within ±10 % | Kendall τ | gate | re-timed | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['load']} | {r['statistic']} | {100 * r['sigma_n']:.2f} % | {100 * r['retest_within_10pct']:.0f} % | "
              f"{100 * r['nrmse']:.2f} % | {100 * r['within_10pct']:.1f} % | {r['kendall_tau']:.3f} | "
              f"{'too noisy' if r['too_noisy'] else 'pass'} | {r['retimed']}/{r['jobs']} | {r['wall_s']:.0f} s |")
    by = {(r["load"], r["statistic"]): r for r in rows}
    for load in args.loads:
        for other in args.statistics:
            a, b = by.get((load, other)), by.get((load, "min"))
            if a and b and other != "min":
                print(f"{load}: {other} / min — σ_n ×{a['sigma_n'] / b['sigma_n']:.2f}, "
                      f"NRMSE ×{a['nrmse'] / b['nrmse']:.2f}, wall ×{a['wall_s'] / b['wall_s']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
