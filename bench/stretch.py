"""Does the host's state slow small and large networks unequally? (§4, docs/method.md D37)

Re-corrects each recorded profiling session's paired timings twice, with β = 0 (D27 alone) and with the stretch β
estimated from its retest pairs (D37, beside the reference's own noise γ where that resolves), fits each as `aows fit-lut` does and reports, side by side, β and its
standard error, whether it resolves, σ_n, and the held-out test networks' NRMSE, share within ±10 % and Kendall τ.
The test networks decide nothing: β comes from the retest pairs, λ from lambda_val. No timing is done, so it can
run beside other work.

    PYTHONPATH=. python bench/stretch.py --device cpu RUN_DIR [RUN_DIR ...]

RUN_DIR is a run's root: its config.yaml and results/latency/<device>.parquet (profiled with pairing: paired).
"""

from __future__ import annotations

import argparse

import numpy as np

from aows_core import artifacts
from aows_core.config import load, space_from_config
from aows_core.latency import fit, lut
from aows_core.latency.calm import fit_sets
from aows_core.latency.metrics import latency_metrics
from aows_core.latency.protocol import retest_noise
from aows_core.latency.stretch import apply_stretch, estimate_stretch

def session(root: str, device: str) -> list[str]:
    """One line per correction (β = 0, β estimated) of one recorded session."""
    cfg = load(f"{root}/config.yaml")
    space = space_from_config(cfg)
    table, meta = artifacts.read_latency(f"{root}/results/latency/{device}.parquet", space, device)
    if meta.get("pairing") != "paired":
        return [f"{root}: {meta.get('pairing')} timing; D37 needs paired timing"]
    rows = table.to_pylist()
    for r in rows:  # D27 alone: drift_factor is the host's state, the reference level ÷ baseline
        r["latency_ms"] = r["latency_ms_raw"] / r["drift_factor"]
    baseline = float(meta["reference_baseline"])
    s = estimate_stretch(rows, baseline)
    out = []
    for name, stretch in (("β = 0", None), ("β est.", {**s, "applied": True})):
        fixed = apply_stretch([dict(r) for r in rows], stretch, baseline)
        sets, _ = fit_sets(space, {k: [r[k] for r in fixed] for k in ("role", "set", "channels", "latency_ms",
                                                                     "config_id", "ratio_spread")}, cfg["lut"])
        best, res, *_ = fit.fit_table(space, sets, cfg["lut"])
        idx_te, l_te, _ = sets["test"]
        m = latency_metrics(lut.predict(space, res[best].x, idx_te, res[best].link), l_te)
        sigma = retest_noise(fixed)["sigma_n"]
        out.append(f"| {root} | {name} | {s['beta']:+.3f} ± {s['beta_se']:.3f} | {s['gamma']:+.2f} ± {s['gamma_se']:.2f} | "
                   f"{'yes' if s['applied'] else 'no'} | "
                   f"{np.ptp(np.log([r['drift_factor'] for r in rows])):.3f} | {100 * sigma:.2f} % | "
                   f"{100 * m['nrmse']:.2f} % | {100 * m['within_10pct']:.1f} % | {m['kendall_tau']:.3f} | "
                   f"{m['nrmse'] / sigma:.2f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    print("| run | correction | β ± SE | γ ± SE | resolves | range of h | σ_n | test NRMSE | within ±10 % | Kendall τ | NRMSE ÷ σ_n |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in args.runs:
        for line in session(r, args.device):
            print(line)


if __name__ == "__main__":
    main()
