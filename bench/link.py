"""Does the link g help the table? (§4 eq. lat, docs/method.md D39)

Fits each recorded session's timings as `aows fit-lut` does, once with eq. lat's additive sum (`lut.link_knots: []`)
and once with the default knots, and scores both on the session's held-out test networks, which decide nothing.
For the linked fit: the knot s₀ (additive ms), the slope κ, and how many test networks lie above the knot.
No timing is done.

    PYTHONPATH=. python bench/link.py --device onnxruntime RUN_DIR [RUN_DIR ...]

RUN_DIR is a run's root: its config.yaml and results/latency/<device>.parquet.
"""

from __future__ import annotations

import argparse

import numpy as np

from aows_core.config import load
from aows_core.latency import lut
from latency_session import recorded_refit


def session(root: str, device: str) -> list[str]:
    """One line per fit (additive, linked) of one recorded session."""
    knots = load(f"{root}/config.yaml")["lut"]["link_knots"]
    out = []
    for name, k in (("additive (eq. lat)", []), (f"link, knots {knots}", knots)):
        f, m, sigma, wall, (space, idx_te) = recorded_refit(root, device, {"link_knots": k})
        above = int(np.sum(lut.predict(space, f.x, idx_te) > f.link.knot_ms))
        link = "—" if f.link.identity else f"s₀ {f.link.knot_ms:.3f}, κ {f.link.slope:.2f}, {above} above"
        out.append(f"| {root} | {100 * sigma:.2f} % | {name} | {link} | {100 * m['nrmse']:.2f} % | "
                   f"{m['nrmse'] / sigma:.2f} | {100 * m['within_10pct']:.1f} % | {m['kendall_tau']:.3f} | {wall:.1f} s |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    print("| run | σ_n | fit | chosen link | test NRMSE | ÷ σ_n | within ±10 % | Kendall τ | fit time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in args.runs:
        for line in session(r, args.device):
            print(line, flush=True)


if __name__ == "__main__":
    main()
