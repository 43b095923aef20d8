"""Does the large reference help the table? (docs/method.md D41), on the same timings.

Re-corrects recorded sessions timed with a large reference (`profiling.large_reference_share` > 0, e.g. the files
`bench_interference.py --pairings paired-large --keep DIR` leaves) twice — paired timing alone (D27, the large
reference's column ignored) and with the large reference's correction (D41) — fits each as `aows fit-lut` does and
scores it on the session's held-out test networks, which decide nothing. Same timings both ways, so the difference
is the correction's, not the host's. The stretch (D37) is estimated and applied as `profile` would. No timing is done.

    PYTHONPATH=. python bench/large_reference.py /tmp/keep/paired-large_memory.parquet [...]
"""

from __future__ import annotations

import argparse
import copy
import math

import pandas as pd

from aows_core import artifacts
from aows_core.config import space_from_config, validate
from aows_core.latency import fit, lut
from aows_core.latency.calm import fit_sets
from aows_core.latency.metrics import latency_metrics
from aows_core.latency.protocol import correct_profile, retest_noise


def score(rows: list[dict], space, cfg: dict) -> dict:
    """σ_n (overall and per third) and the held-out metrics of `rows` corrected as `profile` corrects them."""
    rows, _, stretch = correct_profile(rows, "paired", cfg["profiling"]["stretch"])
    sets, _ = fit_sets(space, lut.columns_of(pd.DataFrame(rows)), cfg["lut"])
    best, res, *_ = fit.fit_table(space, sets, cfg["lut"])
    idx, measured, _ = sets["test"]
    m = latency_metrics(lut.predict(space, res[best].x, idx, res[best].link), measured)
    return {**retest_noise(rows), **m, "stretch": bool(stretch and stretch["applied"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sessions", nargs="+", help="latency files timed with a large reference")
    args = ap.parse_args()
    cfg = validate({})
    space = space_from_config(cfg)
    print("| session | correction | σ_n | σ_n fast / mid / slow third | held-out NRMSE | ÷ σ_n | within ±10 % | "
          "Kendall τ | stretch applied |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.sessions:
        table, _ = artifacts.read_table(path, "latency")
        raw = table.to_pylist()
        if not any(math.isfinite(r["large_ref_ms_raw"]) for r in raw):
            raise SystemExit(f"{path}: no large reference was timed (profiling.large_reference_share was 0)")
        plain = [{**r, "large_ref_ms_raw": math.nan} for r in copy.deepcopy(raw)]
        for name, rows in (("paired (D27)", plain), ("+ large reference (D41)", copy.deepcopy(raw))):
            s = score(rows, space, cfg)
            thirds = " / ".join(f"{100 * x:.2f}" for x in s["sigma_n_by_speed"]) + " %"
            print(f"| {path.split('/')[-1]} | {name} | {100 * s['sigma_n']:.2f} % | {thirds} | {100 * s['nrmse']:.2f} % | "
                  f"{s['nrmse'] / s['sigma_n']:.2f} | {100 * s['within_10pct']:.1f} % | {s['kendall_tau']:.3f} | "
                  f"{'yes' if s['stretch'] else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
