"""Timing under interference (docs/method.md D27, D41): each protocol profiled quiet and under a background load, side by side.

For every (load, pairing) session it runs the real stages on the default space — `profile` (torch-cpu or
onnxruntime, the default protocol with `pairing` overridden), `fit-lut`, `validate-lut` — and reports the
test–retest noise σ_n, the reference's instability, the held-out NRMSE, the share of held-out networks within
±10 %, Kendall τ, the noise gate, the re-timed jobs and the session's wall time. The paired/interpolated ratios
are printed per load condition.

The load is a process the benchmark starts itself, pinned to one core: it alternates bursts of busy work
(1–5 s) with idle gaps (1–5 s) for the whole loaded session — interference lasting seconds, like a shared host —
and is stopped when the session ends (or the benchmark is interrupted). `loaded`: numpy matrix products that fit
in the core's cache (compute); `memory`: copies of a 64 MB array (a neighbour contending for the shared cache and
memory bandwidth, which slows large networks more than the reference).

Pairings: `old` (the protocol before paired timing: interpolated references, the median of the passes, 160 ms per
job), `interpolated` (D3, the config's statistic and timing), `paired` (the config's protocol, D27), `paired-large`
(D27 with the large reference of D41: `large_reference_share` 0.25), `paired-warm` (5 warm-up passes per chunk),
`paired-min` (the `min` statistic of network and reference; the default since D42).

    python bench/bench_interference.py                      # default space, torch-cpu, 4 sessions
    python bench/bench_interference.py --pairings old paired --loads quiet loaded   # before and after issue 13
    python bench/bench_interference.py --device onnxruntime --pairings paired paired-large --loads quiet loaded memory
    python bench/bench_interference.py --quick              # a small check that everything runs
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

from aows_core.stages import sample
from latency_session import bench_config, latency_session


# large_reference_share of the `paired-large` sessions (D41); warm-up passes per chunk of the `paired-warm` ones.
LARGE_SHARE = 0.25
WARM = 5
# The protocol before paired timing (docs/method.md D3 as first built): interpolated references, median, 160 ms.
OLD = {"pairing": "interpolated", "statistic": "median", "min_time_ms": 160.0}


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


def session(cfg: dict, device: str, pairing: str, load: str, d: Path, core: int,
            paired_min_time_ms: float | None = None) -> dict:
    """One profile → fit → validate session under `load` (quiet, loaded, memory); returns its figures."""
    cfg = {**cfg, "profiling": {**cfg["profiling"], "pairing": "interpolated" if pairing == "interpolated" else "paired"}}
    if pairing == "paired-large":
        cfg["profiling"]["large_reference_share"] = LARGE_SHARE
    if pairing == "paired-warm":
        cfg["profiling"]["warmup"] = WARM
    if pairing == "paired-min":
        cfg["profiling"]["statistic"] = "min"
    if pairing == "old":
        cfg["profiling"].update(OLD)
    if pairing not in ("interpolated", "old") and paired_min_time_ms is not None:
        cfg["profiling"]["min_time_ms"] = paired_min_time_ms
    name = f"{pairing}_{load}"
    res, v, wall = latency_session(cfg, device, name, d, None if load == "quiet" else background_load(core, kind=load))
    return {"pairing": pairing, "load": load, "sigma_n": res["sigma_n"], "sigma_n_by_speed": res["sigma_n_by_speed"],
            "retest_within_10pct": res["retest_within_10pct"], "reference_instability": res["reference_instability"],
            "nrmse": v["lut"]["nrmse"], "within_10pct": v["lut"]["within_10pct"], "kendall_tau": v["lut"]["kendall_tau"],
            "too_noisy": res["too_noisy"], "retimed": res["retimed"], "jobs": res["total"], "wall_s": wall,
            "stretch": res.get("stretch")}


def _stretch(s: dict | None) -> str:
    """β ± SE of the stretch (D37), and whether the session applied it; — without paired timing."""
    if not s:
        return "—"
    return f"{s['beta']:+.2f} ± {s['beta_se']:.2f} ({'applied' if s['applied'] else 'not resolved'})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="a device of the default config (cpu = torch-cpu, onnxruntime)")
    ap.add_argument("--pairings", nargs="+", default=["interpolated", "paired"],
                    choices=["old", "interpolated", "paired", "paired-large", "paired-warm", "paired-min"])
    ap.add_argument("--loads", nargs="+", default=["quiet", "loaded"], choices=["quiet", "loaded", "memory"])
    ap.add_argument("--core", type=int, default=0, help="the core the background load is pinned to")
    ap.add_argument("--quick", action="store_true", help="a small space and few networks: checks that it runs")
    ap.add_argument("--max-rounds", type=int, default=1,
                    help="profiling rounds (D28); 1 compares the protocols on the same networks")
    ap.add_argument("--reference-share", type=float, default=None,
                    help="profiling.reference_share of the paired sessions (default: the config's)")
    ap.add_argument("--paired-min-time-ms", type=float, default=None,
                    help="profiling.min_time_ms of the paired sessions (default: the config's, as the interpolated ones)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep every session's files (latency, LUT, validation) in this directory")
    args = ap.parse_args()
    cfg = bench_config(args.quick, args.max_rounds)
    if args.reference_share is not None:
        cfg["profiling"]["reference_share"] = args.reference_share
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        sample.run(cfg, {}, {"out": d / "configs.parquet"})
        for load in args.loads:
            for pairing in args.pairings:
                rows.append(session(cfg, args.device, pairing, load, d, args.core, args.paired_min_time_ms))
                r = rows[-1]
                print(f"  {r['load']:6s} {r['pairing']:12s} σ_n {100 * r['sigma_n']:5.2f} %  NRMSE "
                      f"{100 * r['nrmse']:5.2f} %  ±10 % {100 * r['within_10pct']:5.1f} %  ({r['wall_s']:.0f} s)", flush=True)
    keys = ("repeats", "chunks", "reference_share", "large_reference_share", "reference_every", "retest", "min_time_ms")
    print(f"\ndevice {args.device}, protocol {json.dumps({k: cfg['profiling'][k] for k in keys})}"
          + (f"; paired sessions min_time_ms {args.paired_min_time_ms}" if args.paired_min_time_ms is not None else ""))
    print("| load | pairing | σ_n | σ_n fast / mid / slow third | retest ±10 % | ref. jumps | held-out NRMSE | within ±10 % | "
          "Kendall τ | gate | re-timed | stretch β (D37) | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        thirds = " / ".join(f"{100 * x:.2f}" for x in r["sigma_n_by_speed"] or []) + " %"
        print(f"| {r['load']} | {r['pairing']} | {100 * r['sigma_n']:.2f} % | {thirds} | "
              f"{100 * r['retest_within_10pct']:.0f} % | "
              f"{100 * r['reference_instability']:.1f} % | {100 * r['nrmse']:.2f} % | {100 * r['within_10pct']:.1f} % | "
              f"{r['kendall_tau']:.3f} | {'too noisy' if r['too_noisy'] else 'pass'} | {r['retimed']}/{r['jobs']} | "
              f"{_stretch(r['stretch'])} | {r['wall_s']:.0f} s |")
    by = {(r["load"], r["pairing"]): r for r in rows}
    for load in args.loads:
        for new, base in (("paired", "old"), ("paired", "interpolated"), ("paired-large", "paired"),
                          ("paired-warm", "paired"), ("paired-min", "paired")):
            a, b = by.get((load, new)), by.get((load, base))
            if a and b:
                print(f"{load}: {new} / {base} — σ_n ×{a['sigma_n'] / b['sigma_n']:.2f}, "
                      f"NRMSE ×{a['nrmse'] / b['nrmse']:.2f}, wall ×{a['wall_s'] / b['wall_s']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
