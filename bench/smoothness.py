"""Does a smoothness prior along widths help the table? (§4 eq. 7, docs/method.md D38)

Fits each recorded session's timings as `aows fit-lut` does, once with the paper's prior alone (lut.smoothness
[0.0]) and once with the configured μ grid chosen with λ on lambda_val, and reports side by side the chosen μ,
the held-out test networks' NRMSE (also ÷ σ_n), share within ±10 % and Kendall τ, and the fit's time. The test
networks decide nothing. No timing is done, so it can run beside other work.

    PYTHONPATH=. python bench/smoothness.py --device cpu RUN_DIR [RUN_DIR ...]

RUN_DIR is a run's root: its config.yaml and results/latency/<device>.parquet.
"""

from __future__ import annotations

import argparse

from latency_session import recorded_refit


def session(root: str, device: str, grid: list[float]) -> list[str]:
    """One line per fit (μ = 0, μ chosen from `grid`) of one recorded session."""
    out = []
    for name, g in (("μ = 0 (paper)", [0.0]), (f"μ ∈ {grid}", grid)):
        f, m, sigma, wall, _ = recorded_refit(root, device, {"smoothness": g, "link_knots": []})
        out.append(f"| {root} | {100 * sigma:.2f} % | {name} | {f.mu:g} | {100 * m['nrmse']:.2f} % | "
                   f"{m['nrmse'] / sigma:.2f} | {100 * m['within_10pct']:.1f} % | {m['kendall_tau']:.3f} | {wall:.1f} s |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("--grid", type=float, nargs="+", default=[0.0, 1.0, 10.0, 100.0])
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    print("| run | σ_n | fit | chosen μ | test NRMSE | ÷ σ_n | within ±10 % | Kendall τ | fit time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in args.runs:
        for line in session(r, args.device, args.grid):
            print(line, flush=True)


if __name__ == "__main__":
    main()
