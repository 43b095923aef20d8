"""Do the timings the host disturbed bend the table? (docs/method.md D43), on the same timings.

Fits recorded paired sessions (a `results/latency/{device}.parquet`, or the files `bench_interference.py --keep DIR`
leaves) twice, as `aows fit-lut` does — with every train and lambda_val timing, and without those still disturbed
after re-timing (`lut.exclude_disturbed`) — and scores both on the session's held-out test networks, which decide
nothing: all of them, those timed calm and those timed disturbed. Same timings both ways, so the difference is the
exclusion's. No timing is done.

    PYTHONPATH=. python bench/disturbed_fit.py results/latency/onnxruntime.parquet /tmp/keep/paired_memory.parquet
"""

from __future__ import annotations

import argparse

import numpy as np

from aows_core import artifacts
from aows_core.config import space_from_config, validate
from aows_core.latency import fit, lut
from aows_core.latency.calm import fit_sets, held_out
from aows_core.latency.metrics import latency_metrics, table_adequacy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sessions", nargs="+", help="latency files of paired sessions (default space)")
    args = ap.parse_args()
    cfg = validate({})
    space = space_from_config(cfg)
    print("| session | fit | excluded (train / λ-val) | σ_n | held-out NRMSE, all | calm (n) | rel. RMS calm ÷ σ_n | "
          "disturbed (n) | within ±10 % all / calm | Kendall τ all |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in args.sessions:
        table, meta = artifacts.read_table(path, "latency")
        cols = lut.columns_of(table)
        hit, _ = held_out(cols)
        sigma = float(meta["sigma_n"])
        for name, exclude in (("every timing", False), ("without disturbed (D43)", True)):
            sets, info = fit_sets(space, cols, {**cfg["lut"], "exclude_disturbed": exclude})
            best, res, *_ = fit.fit_table(space, sets, cfg["lut"])
            idx, measured, _ = sets["test"]
            pred = lut.predict(space, res[best].x, idx, res[best].link)
            every, calm = latency_metrics(pred, measured), latency_metrics(pred[~hit], measured[~hit])
            bad = latency_metrics(pred[hit], measured[hit], tau=False) if hit.any() else {"nrmse": np.nan}
            rms = table_adequacy(pred[~hit], measured[~hit], sigma)["rel_rms"]
            n = info["excluded"]
            print(f"| {path.split('/')[-1]} | {name} | {n['train']} / {n['lambda_val']} | {100 * sigma:.2f} % | "
                  f"{100 * every['nrmse']:.2f} % | {100 * calm['nrmse']:.2f} % ({int((~hit).sum())}) | "
                  f"{rms / sigma:.2f} | {100 * bad['nrmse']:.2f} % ({int(hit.sum())}) | "
                  f"{100 * every['within_10pct']:.1f} / {100 * calm['within_10pct']:.1f} % | "
                  f"{every['kendall_tau']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
