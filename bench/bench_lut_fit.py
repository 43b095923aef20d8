"""Benchmark: the LUT fit of §4 at paper scale, OSQP residual form vs the same objective through cvxpy + SCS.

Setting (paper, Fig. latency_correlation): the `mobilenet_v1_imagenet` space (1612 latency variables),
9500 training networks (uniform random, plus a few configurations added so every variable is
observed), 200 lambda_val and 500 test networks. Latencies come from a synthetic ground-truth table
(MAC-proportional + a constant per layer kind + a small monotone per-variable perturbation) with
multiplicative Gaussian noise. Every timed step runs `--reps` times, interleaved, in one process:

  (a) one fit at a λ > 0, end to end: design matrix, monotonicity matrix, coverage check, OSQP solve;
  (b) the whole λ scan (fit.DEFAULT_LAMBDAS), end to end, choosing λ on lambda_val;
  (c) the same objective at the same λ through cvxpy + SCS (fit.fit_cvxpy), end to end.

It prints medians with min–max and IQR, the ratio (c)/(a), and test errors of both fits against the
measured (noisy) and the noise-free latencies.

    PYTHONPATH=. python bench/bench_lut_fit.py            # ~3-4 minutes on 2 cores
    PYTHONPATH=. python bench/bench_lut_fit.py --reps 3 --scan-reps 1
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from aows_core.latency import fit, lut, metrics
from aows_core.space import get_space

KIND_CONST_MS = {"conv": 0.05, "dwsep": 0.08, "linear": 0.03}


def macs(key) -> float:
    t, ci, co = key
    if t.kind == "linear":
        return ci * co + ci * t.in_h * t.in_w
    oh, ow = t.out_hw()
    if t.kind == "conv":
        return ci * co * oh * ow * t.kernel**2
    return ci * oh * ow * t.kernel**2 + ci * co * oh * ow


def ground_truth(space, rng, ms_per_mmac: float = 0.02, perturb: float = 0.05) -> np.ndarray:
    """MAC-proportional + per-kind constant, times (1 + U(0, perturb)), then made monotone along the prior's pairs."""
    base = np.array([ms_per_mmac * macs(k) * 1e-6 + KIND_CONST_MS[k[0].kind] for k in space.variables])
    x = base * (1 + perturb * rng.random(len(base)))
    pairs = lut.monotonicity_pairs(space)
    for _ in range(10 * space.n_nodes):  # isotonic fix-up: x[larger] >= x[smaller] (chains are short)
        lo, hi = x[pairs[:, 0]], x[pairs[:, 1]]
        if np.all(hi >= lo):
            break
        np.maximum.at(x, pairs[:, 1], lo)
    assert np.all(lut.monotonicity_matrix(space) @ x <= 0)
    return x


def sample_idx(space, n: int, rng) -> np.ndarray:
    return np.stack([rng.integers(0, len(c), n) for c in space.choices], axis=1)


def cover(space, idx: np.ndarray, rng) -> tuple[np.ndarray, int]:
    """Add one configuration for each variable the sample left unobserved (eq. lat_variables)."""
    seen = np.zeros(space.n_variables, bool)
    seen[space.variable_ids(idx).ravel()] = True
    extra = []
    for i, tab in enumerate(space.edge_tables):
        for a, b in zip(*np.nonzero(~seen[tab])):
            if seen[tab[a, b]]:
                continue
            row = sample_idx(space, 1, rng)[0]
            row[i], row[i + 1] = a, b
            seen[space.variable_ids(row)] = True
            extra.append(row)
    return (np.vstack([idx, *extra]) if extra else idx), len(extra)


def stats(ts: list[float]) -> str:
    a = np.asarray(ts)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return f"{med:8.3f} s   min–max {a.min():.3f}–{a.max():.3f}   IQR {q1:.3f}–{q3:.3f}   (n={len(a)})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", default="mobilenet_v1_imagenet")
    ap.add_argument("--n-train", type=int, default=9500)
    ap.add_argument("--n-val", type=int, default=200)
    ap.add_argument("--n-test", type=int, default=500)
    ap.add_argument("--noise", type=float, default=0.02, help="multiplicative Gaussian noise (std)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of (a) and (c)")
    ap.add_argument("--scan-reps", type=int, default=5, help="repetitions of (b)")
    ap.add_argument("--lam", type=float, default=None, help="λ (relative) for (a) and (c); default: best λ > 0 of the first scan")
    ap.add_argument("--clarabel", action="store_true", help="also time cvxpy + CLARABEL on the same objective")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    space = get_space(args.space)
    x_true = ground_truth(space, rng)
    idx_tr, n_added = cover(space, sample_idx(space, args.n_train, rng), rng)
    idx_val, idx_te = sample_idx(space, args.n_val, rng), sample_idx(space, args.n_test, rng)
    clean = {k: lut.predict(space, x_true, i) for k, i in (("train", idx_tr), ("val", idx_val), ("test", idx_te))}
    meas = {k: v * (1 + args.noise * rng.standard_normal(len(v))) for k, v in clean.items()}

    print(f"# bench_lut_fit: {space.name}, {space.n_variables} variables, {space.n_edges} edges")
    print(f"# python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')} OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}")
    import cvxpy
    import osqp
    import scs

    print(f"# osqp {osqp.__version__}, cvxpy {cvxpy.__version__}, scs {scs.__version__}; OSQP settings {fit.OSQP_SETTINGS}")
    print(f"# train {len(idx_tr)} networks ({n_added} added for coverage), lambda_val {len(idx_val)}, test {len(idx_te)}; "
          f"noise {100 * args.noise:.1f} %, median train latency {np.median(meas['train']):.3f} ms")

    def scan_end_to_end():
        A_tr = lut.design_matrix(space, idx_tr)
        A_val = lut.design_matrix(space, idx_val)
        V = lut.monotonicity_matrix(space)
        lut.check_coverage(space, lut.observation_counts(A_tr))
        return fit.lambda_scan((A_tr, meas["train"]), (A_val, meas["val"]), V, fit.DEFAULT_LAMBDAS, space=space)

    def ours_end_to_end(lam):
        A_tr = lut.design_matrix(space, idx_tr)
        V = lut.monotonicity_matrix(space)
        lut.check_coverage(space, lut.observation_counts(A_tr))
        return fit.fit_osqp(A_tr, meas["train"], V, [lam], space=space)[0]

    def cvxpy_end_to_end(lam, solver):
        A_tr = lut.design_matrix(space, idx_tr)
        V = lut.monotonicity_matrix(space)
        lut.check_coverage(space, lut.observation_counts(A_tr))
        return fit.fit_cvxpy(A_tr, meas["train"], V, lam, solver=solver)

    t_scan: list[float] = []
    t0 = time.perf_counter()
    best, results, rows = scan_end_to_end()
    t_scan.append(time.perf_counter() - t0)
    print("\n## λ scan (first run)")
    print(f"{'λ_rel':>8} {'λ [ms]':>9} {'train NRMSE':>11} {'val NRMSE':>9} {'violated':>8} {'iters':>6} {'solve s':>7}  chosen")
    for f, r in zip(results, rows):
        print(f"{f.lam_rel:8.0e} {r['lam']:9.2e} {100 * r['train_nrmse']:10.3f}% {100 * r['val_nrmse']:8.3f}% "
              f"{r['n_violated']:8d} {r['iterations']:6d} {r['solve_s']:7.2f}  {'*' if r['chosen'] else ''}")
    positive = [i for i, f in enumerate(results) if f.lam_rel > 0]
    lam = args.lam if args.lam is not None else results[min(positive, key=lambda i: rows[i]["val_rmse_ms"])].lam_rel
    print(f"# (a) and (c) use λ_rel = {lam:g}")

    t_ours: list[float] = []
    t_scs: list[float] = []
    t_cla: list[float] = []
    fit_ours = fit_scs = fit_cla = None
    for _ in range(args.reps):  # interleaved, so drift on a shared machine hits both alike
        t0 = time.perf_counter()
        fit_ours = ours_end_to_end(lam)
        t_ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fit_scs = cvxpy_end_to_end(lam, "SCS")
        t_scs.append(time.perf_counter() - t0)
        if args.clarabel:
            t0 = time.perf_counter()
            fit_cla = cvxpy_end_to_end(lam, "CLARABEL")
            t_cla.append(time.perf_counter() - t0)
    for _ in range(args.scan_reps - 1):
        t0 = time.perf_counter()
        scan_end_to_end()
        t_scan.append(time.perf_counter() - t0)

    print("\n## timings (end to end, incl. design and monotonicity matrices)")
    print(f"(a) OSQP, one λ:          {stats(t_ours)}   iterations {fit_ours.iterations}")
    print(f"(b) OSQP, λ scan ({len(fit.DEFAULT_LAMBDAS)} λ):  {stats(t_scan)}")
    print(f"(c) cvxpy + SCS, one λ:   {stats(t_scs)}   iterations {fit_scs.iterations}")
    if args.clarabel:
        print(f"    cvxpy + CLARABEL:     {stats(t_cla)}   iterations {fit_cla.iterations}")
    print(f"ratio (c)/(a) of medians: {np.median(t_scs) / np.median(t_ours):.2f}x  (>1: OSQP faster)")

    print("\n## test errors (500 held-out networks)")
    print(f"{'fit':<22} {'objective':>12} {'NRMSE meas':>10} {'NRMSE truth':>11} {'MAPE meas':>9} {'τ':>6} {'violated':>8}")
    fits = [("OSQP (ours)", fit_ours), ("cvxpy + SCS", fit_scs)] + ([("cvxpy + CLARABEL", fit_cla)] if args.clarabel else [])
    fits.append((f"OSQP scan (λ={results[best].lam_rel:g})", results[best]))
    for name, f in fits:
        pred = lut.predict(space, f.x, idx_te)
        m = metrics.latency_metrics(pred, meas["test"])
        mt = metrics.latency_metrics(pred, clean["test"])
        print(f"{name:<22} {f.objective:12.6f} {100 * m['nrmse']:9.3f}% {100 * mt['nrmse']:10.3f}% {100 * m['mape']:8.3f}% "
              f"{m['kendall_tau']:6.3f} {f.n_violated:8d}")
    d = lut.predict(space, fit_ours.x, idx_te) / lut.predict(space, fit_scs.x, idx_te) - 1
    print(f"max |pred_OSQP / pred_SCS - 1| on test: {np.max(np.abs(d)):.2e}")
    print(f"noise floor: NRMSE of the noise-free truth against measurements "
          f"{100 * metrics.latency_metrics(clean['test'], meas['test'])['nrmse']:.3f}%")


if __name__ == "__main__":
    sys.exit(main())
