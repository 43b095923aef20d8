"""Black-box latency model: design matrix, monotonicity prior, QP fit, λ scan, prediction (§4).

The latency of a network is a sum of per-layer terms (§4 eq. lat),

    L(N(c_0, ..., c_n)) = Σ_i L_{Θ_i}(c_i, c_{i+1}),

one *latency variable* per key (Θ, c_in, c_out) of the space (edges with equal Θ share it). Timing P
whole networks gives the linear system A x = l of eq. linear_lat: row p of the sparse design matrix
A counts how many edges of network p use each variable. The paper solves it by least squares and
"slightly improves" it with monotonicity priors V x ≤ 0 (latency does not decrease when c_in, c_out
or the input size grows). We add the prior *softly* with an L1 hinge, keep x ≥ 0, and add a tiny
ridge ρ so that the minimiser is unique although A is rank deficient (only path sums are
identifiable: moving t from every L_i(·, c) to every L_{i+1}(c, ·) changes no prediction):

    min_x ‖A x − l‖² + λ ‖max(V x, 0)‖₁ + ρ ‖x‖²   subject to x ≥ 0.

It is solved by OSQP in a sparse *residual form* (never forming the dense Gram AᵀA): with residuals
r = A x − l and hinge slacks s,

    min_{x,r,s} rᵀr + λ 1ᵀs + ρ xᵀx   s.t.  A x − r = l,  V x − s ≤ 0,  s ≥ 0,  x ≥ 0.

λ enters only the linear term q. Each λ of the grid is one independent cold solve (measured faster
here than reusing one factorisation with ``update(q=...)``, see `fit_lut`). Latencies are divided by their median before the solve (units
of "one typical network"), so the default grid DEFAULT_LAMBDAS = (0, 1e-4, 1e-3, 1e-2, 0.1, 1, 10) and
the ridge (DEFAULT_RIDGE = 1e-6 times the mean diagonal of AᵀA) are dimensionless and transfer across
devices; FitResult.lam reports λ in the units of
the unscaled objective (l in ms): λ_ms = λ_rel · median(l). λ is chosen on held-out networks
(lambda_val) only.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.stats import kendalltau

from .space import SearchSpace, Theta, VarKey

# λ grid in relative units (l divided by its median): 0 (no prior) and a log grid 1e-4 … 1e1.
DEFAULT_LAMBDAS: tuple[float, ...] = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
# Ridge ρ relative to the mean curvature of the data term (mean diagonal of AᵀA).
DEFAULT_RIDGE: float = 1e-6
# A prior inequality counts as violated when (V x)_k exceeds this fraction of median(l) (above solver tolerance).
VIOLATION_TOL: float = 1e-4
# OSQP settings, tuned at paper scale (bench/bench_lut_fit.py; 1612 variables, 9500 networks). The KKT
# factor is dense on the x block (every pair of layers co-occurs, so AᵀA's pattern fills in, ~1.4M
# nonzeros): MKL Pardiso (`osqp_algebra`) factorises it in ~0.2 s and an ADMM iteration costs ~2 ms.
# eps 2e-4 keeps whole-network predictions within ~5e-4 (relative) of the exact optimum — far below
# timing noise; rho = 10 suits the median-scaled problem (50–250 iterations per λ); adaptive rho waits
# 500 iterations because every rho update refactorises; the duality-gap test and polishing are off
# (polishing never succeeded at paper scale and costs a factorisation).
OSQP_SETTINGS: dict[str, Any] = dict(
    eps_abs=2e-4,
    eps_rel=2e-4,
    check_termination=5,
    rho=10.0,
    adaptive_rho=True,
    adaptive_rho_interval=500,
    check_dualgap=False,
    polishing=False,
    max_iter=100_000,
    scaling=10,
    verbose=False,
    warm_starting=False,
)

DIRECTIONS = ("c_in", "c_out", "size")


class LUTFitError(RuntimeError):
    """A latency table that cannot be fitted or used: unobserved variables, failed solve, bad table."""


# ---- design matrix (eq. linear_lat) -------------------------------------------------------------
def design_matrix(space: SearchSpace, idx: np.ndarray) -> sp.csr_matrix:
    """A of eq. linear_lat: A[p, v] = number of edges of network p (node choice indices idx[p]) using variable v."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim == 1:
        idx = idx[None, :]
    if idx.ndim != 2 or idx.shape[1] != space.n_nodes:
        raise ValueError(f"idx must be (P, {space.n_nodes}) node choice indices; got shape {idx.shape}")
    n_rows = idx.shape[0]
    vids = space.variable_ids(idx)  # (P, n_edges)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), space.n_edges)
    A = sp.csr_matrix(
        (np.ones(vids.size, dtype=np.float64), (rows, vids.ravel())), shape=(n_rows, space.n_variables)
    )
    A.sum_duplicates()
    return A


def observation_counts(A: sp.spmatrix) -> np.ndarray:
    """n_obs of the LUT file: how many networks (rows of A, eq. linear_lat) use each variable."""
    A = sp.csc_matrix(A, copy=True)
    A.sum_duplicates()
    A.eliminate_zeros()
    return np.diff(A.indptr).astype(np.int64)


def _missing_message(space: SearchSpace | None, missing: np.ndarray, n_total: int) -> str:
    show = missing[:5]
    if space is not None:
        names = ", ".join(_key_str(space.variables[v]) for v in show)
    else:
        names = ", ".join(f"variable {v}" for v in show)
    more = f" (and {len(missing) - len(show)} more)" if len(missing) > len(show) else ""
    return (
        f"{len(missing)} of {n_total} latency variables were never observed in the fitted networks: {names}{more}. "
        "Every (Θ, c_in, c_out) of the space must appear in at least one profiled network (§4, eq. lat_variables); "
        "sample configurations that cover them (coverage-biased sampling) and profile again."
    )


def _key_str(key: VarKey) -> str:
    t, ci, co = key
    return f"(Θ=({t.in_h}, {t.in_w}, s{t.stride}, k{t.kernel}, {t.kind}), c_in={ci}, c_out={co})"


def check_coverage(space: SearchSpace, n_obs: np.ndarray) -> None:
    """Refuse a fit in which a variable of eq. lat_variables was never observed (LUTFitError naming it)."""
    n_obs = np.asarray(n_obs)
    if n_obs.shape != (space.n_variables,):
        raise LUTFitError(f"n_obs has shape {n_obs.shape}; the space has {space.n_variables} variables")
    missing = np.flatnonzero(n_obs == 0)
    if len(missing):
        raise LUTFitError(_missing_message(space, missing, space.n_variables))


# ---- monotonicity prior (§4, V x ≤ 0) -----------------------------------------------------------
def _adjacent(values_to_var: dict[int, int]) -> list[tuple[int, int]]:
    keys = sorted(values_to_var)
    return [(values_to_var[a], values_to_var[b]) for a, b in zip(keys[:-1], keys[1:])]


def monotonicity_pairs(space: SearchSpace, directions: Sequence[str] = DIRECTIONS) -> np.ndarray:
    """(K, 2) pairs (smaller, larger) of variables with L(smaller) ≤ L(larger) expected (§4 monotonicity prior)."""
    unknown = set(directions) - set(DIRECTIONS)
    if unknown:
        raise ValueError(f"unknown directions {sorted(unknown)}; expected a subset of {DIRECTIONS}")
    by_cout: dict[tuple[Theta, int], dict[int, int]] = defaultdict(dict)
    by_cin: dict[tuple[Theta, int], dict[int, int]] = defaultdict(dict)
    by_shape: dict[tuple[int, int, str, int, int], dict[tuple[int, int], int]] = defaultdict(dict)
    for v, (t, ci, co) in enumerate(space.variables):
        by_cout[(t, co)][ci] = v
        by_cin[(t, ci)][co] = v
        by_shape[(t.stride, t.kernel, t.kind, ci, co)][(t.in_h, t.in_w)] = v
    pairs: list[tuple[int, int]] = []
    if "c_in" in directions:  # same Θ and c_out; adjacent c_in values
        for group in by_cout.values():
            pairs += _adjacent(group)
    if "c_out" in directions:  # same Θ and c_in; adjacent c_out values
        for group in by_cin.values():
            pairs += _adjacent(group)
    if "size" in directions:  # same stride, kernel, kind, c_in, c_out; covering pairs of the size order
        for group in by_shape.values():
            sizes = list(group)
            for a in sizes:
                ups = [b for b in sizes if b != a and b[0] >= a[0] and b[1] >= a[1]]
                for b in ups:  # keep b only if nothing lies strictly between a and b
                    if not any(c != b and b[0] >= c[0] and b[1] >= c[1] for c in ups):
                        pairs.append((group[a], group[b]))
    out = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return out[np.lexsort((out[:, 1], out[:, 0]))] if len(out) else out


def monotonicity_matrix(space: SearchSpace, pairs: np.ndarray | None = None) -> sp.csr_matrix:
    """V of §4: row k has +1 at the smaller and −1 at the larger variable of pair k, so V x ≤ 0 ⇔ L(small) ≤ L(large)."""
    if pairs is None:
        pairs = monotonicity_pairs(space)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    k = len(pairs)
    rows = np.repeat(np.arange(k), 2)
    data = np.tile([1.0, -1.0], k)
    return sp.csr_matrix((data, (rows, pairs.ravel())), shape=(k, space.n_variables))


def pair_direction(small: VarKey, large: VarKey) -> str | None:
    """The one field in which `large` exceeds `small` ("c_in", "c_out" or "size"), or None if the pair is not genuine."""
    (ta, ia, oa), (tb, ib, ob) = small, large
    same_op = (ta.stride, ta.kernel, ta.kind) == (tb.stride, tb.kernel, tb.kind)
    same_size = (ta.in_h, ta.in_w) == (tb.in_h, tb.in_w)
    if not same_op:
        return None
    if same_size and oa == ob and ib > ia:
        return "c_in"
    if same_size and ia == ib and ob > oa:
        return "c_out"
    if ia == ib and oa == ob and tb.in_h >= ta.in_h and tb.in_w >= ta.in_w and not same_size:
        return "size"
    return None


def check_pairs(space: SearchSpace, pairs: np.ndarray) -> dict[str, int]:
    """Check that every (smaller, larger) pair of the §4 prior differs in exactly one field, which increases; counts per direction."""
    counts = dict.fromkeys(DIRECTIONS, 0)
    keys = space.variables
    for a, b in np.asarray(pairs, dtype=np.int64).reshape(-1, 2):
        d = pair_direction(keys[a], keys[b])
        if d is None:
            raise ValueError(f"not a genuine monotonicity pair: {_key_str(keys[a])} ≤ {_key_str(keys[b])}")
        counts[d] += 1
    return counts


# ---- the fit (§4 eq. linear_lat + soft monotonicity prior) --------------------------------------
def osqp_algebra() -> str:
    """OSQP's MKL algebra (Pardiso: supernodal, threaded) when installed, else its builtin QDLDL.

    Every pair of layers co-occurs in some profiled network, so the factor is dense on the
    variables' block; Pardiso factorises and solves it several times faster than QDLDL.
    `osqp-mkl` links `libiomp5.so` and `libmkl_rt.so.2` (pip's `intel-openmp` and `mkl` < 2026),
    which pip puts in the environment's lib/ folder, off the loader's path: they are loaded here.
    """
    import ctypes
    import glob
    import os
    import sys

    import osqp

    if "mkl" not in osqp.algebras_available():
        for prefix in dict.fromkeys([sys.prefix, sys.base_prefix]):
            for name in ("libiomp5.so", "libmkl_rt.so.2"):
                for lib in glob.glob(os.path.join(prefix, "lib", name)):
                    try:
                        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    except OSError:
                        pass
    if "mkl" not in osqp.algebras_available():
        return "builtin"
    # One MKL thread: Pardiso's threaded factorisation differs run to run in the last bits (seen
    # here: 2e-11), and table entries must be reproducible; a second thread gained only ~15 %.
    try:
        ctypes.CDLL("libmkl_rt.so.2").MKL_Set_Num_Threads(1)
    except (OSError, AttributeError):
        pass
    return "mkl"



@dataclass
class FitResult:
    """One solve of min ‖Ax − l‖² + λ‖max(Vx, 0)‖₁ + ρ‖x‖², x ≥ 0 (§4); x and lam in the units of l (ms)."""

    x: np.ndarray
    lam: float  # λ in the units of the unscaled objective (l in ms): lam_rel · scale
    lam_rel: float  # λ as given, in units of the scaled problem (l / median(l))
    status: str
    iterations: int
    solve_s: float  # wall time of this λ's solve; the first λ of a grid also carries OSQP's setup
    n_violated: int  # prior inequalities with (V x)_k > VIOLATION_TOL · median(l)
    objective: float  # unscaled objective ‖Ax − l‖² + lam·‖max(Vx, 0)‖₁ + ρ_abs‖x‖² at x (ms²)
    scale: float  # median(l) used to scale the problem
    polished: bool  # OSQP polishing succeeded (off by default)


def _scale_of(l: np.ndarray) -> float:
    s = float(np.median(np.abs(l)))
    if not np.isfinite(s) or s <= 0:
        s = float(np.mean(np.abs(l)))
    if not np.isfinite(s) or s <= 0:
        raise LUTFitError("all measured latencies are zero or not finite; nothing to fit")
    return s


def _ridge_abs(A: sp.spmatrix, ridge: float) -> float:
    """ρ_abs = `ridge` × mean diagonal of AᵀA (without forming AᵀA); the same coefficient in scaled and ms units."""
    return float(ridge) * float(A.multiply(A).sum()) / A.shape[1]


def objective(A: sp.spmatrix, l: np.ndarray, V: sp.spmatrix, x: np.ndarray, lam: float, ridge_abs: float) -> float:
    """Value of ‖Ax − l‖² + λ‖max(Vx, 0)‖₁ + ρ‖x‖² (§4 fit objective) in whatever units A, l, x, λ, ρ are given."""
    r = A @ x - l
    return float(r @ r + lam * np.maximum(V @ x, 0).sum() + ridge_abs * (x @ x))


def _check_inputs(A: sp.spmatrix, l: np.ndarray, V: sp.spmatrix, space: SearchSpace | None) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix]:
    A = sp.csr_matrix(A, dtype=np.float64)
    V = sp.csr_matrix(V, dtype=np.float64)
    l = np.asarray(l, dtype=np.float64).ravel()
    if A.shape[0] != len(l):
        raise ValueError(f"A has {A.shape[0]} rows but l has {len(l)} latencies")
    if V.shape[1] != A.shape[1]:
        raise ValueError(f"V has {V.shape[1]} columns but A has {A.shape[1]} variables")
    if space is not None and A.shape[1] != space.n_variables:
        raise ValueError(f"A has {A.shape[1]} columns; space {space.name!r} has {space.n_variables} variables")
    if not np.all(np.isfinite(l)):
        raise LUTFitError(f"{int(np.sum(~np.isfinite(l)))} measured latencies are not finite")
    if len(l) == 0:
        raise LUTFitError("no measured networks to fit")
    n_obs = observation_counts(A)
    missing = np.flatnonzero(n_obs == 0)
    if len(missing):
        raise LUTFitError(_missing_message(space, missing, A.shape[1]))
    return A, l, V


def fit_lut(
    A: sp.spmatrix,
    l: np.ndarray,
    V: sp.spmatrix,
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    ridge: float = DEFAULT_RIDGE,
    space: SearchSpace | None = None,
    **osqp_settings: Any,
) -> list[FitResult]:
    """Solve §4's min ‖Ax − l‖² + λ‖max(Vx, 0)‖₁ + ρ‖x‖², x ≥ 0 for each λ (relative units), one cold OSQP solve each."""
    import osqp

    A, l, V = _check_inputs(A, l, V, space)
    lambdas = [float(v) for v in lambdas]
    if not lambdas or any(not np.isfinite(v) or v < 0 for v in lambdas):
        raise ValueError(f"lambdas must be a non-empty list of finite values ≥ 0; got {lambdas}")
    P_rows, n = A.shape
    K = V.shape[0]
    scale = _scale_of(l)
    ls = l / scale
    rho = _ridge_abs(A, ridge)

    # z = (x, r, s); ½ zᵀ H z + qᵀ z with H = diag(2ρ, 2, 0)
    H = sp.diags(np.concatenate([np.full(n, 2.0 * rho), np.full(P_rows, 2.0), np.zeros(K)]), format="csc")
    C = sp.vstack(
        [
            sp.hstack([A, -sp.identity(P_rows), sp.csr_matrix((P_rows, K))]),
            sp.hstack([V, sp.csr_matrix((K, P_rows)), -sp.identity(K)]),
            sp.hstack([sp.identity(n), sp.csr_matrix((n, P_rows + K))]),
            sp.hstack([sp.csr_matrix((K, n + P_rows)), sp.identity(K)]),
        ],
        format="csc",
    )
    inf = np.inf
    lo = np.concatenate([ls, np.full(K, -inf), np.zeros(n), np.zeros(K)])
    hi = np.concatenate([ls, np.zeros(K), np.full(n, inf), np.full(K, inf)])
    settings = {**OSQP_SETTINGS, **osqp_settings}

    def q_of(lam_rel: float) -> np.ndarray:
        return np.concatenate([np.zeros(n + P_rows), np.full(K, lam_rel)])

    algebra = osqp_algebra()
    results: list[FitResult] = []
    for lam_rel in lambdas:
        # One independent, cold solve per λ: OSQP scales the problem with the λ's own cost vector and
        # starts from the initial rho. (Reusing one factorisation through update(q=...) converged
        # 3-10× slower here, which cost more than the repeated setup.)
        t0 = time.perf_counter()
        solver = osqp.OSQP(algebra=algebra)
        solver.setup(H, q_of(lam_rel), C, lo, hi, **settings)
        res = solver.solve(raise_error=False)
        solve_s = time.perf_counter() - t0
        status = str(res.info.status)
        if res.info.status_val != osqp.SolverStatus.OSQP_SOLVED:
            raise LUTFitError(
                f"OSQP did not solve the latency fit for λ = {lam_rel:g} (relative; {lam_rel * scale:g} in ms): "
                f"status {status!r} after {res.info.iter} iterations"
            )
        x = np.maximum(np.asarray(res.x[:n], dtype=np.float64), 0.0) * scale
        n_viol = int(np.sum(V @ x > VIOLATION_TOL * scale))
        results.append(
            FitResult(
                x=x,
                lam=lam_rel * scale,
                lam_rel=lam_rel,
                status=status,
                iterations=int(res.info.iter),
                solve_s=solve_s,
                n_violated=n_viol,
                objective=objective(A, l, V, x, lam_rel * scale, rho),
                scale=scale,
                polished=int(res.info.status_polish) == 1,
            )
        )
    return results


def fit_lut_cvxpy(
    A: sp.spmatrix, l: np.ndarray, V: sp.spmatrix, lam: float, ridge: float = DEFAULT_RIDGE, solver: str = "SCS", **solver_opts: Any
) -> FitResult:
    """Reference: the same §4 objective (same scaling, λ relative) through cvxpy's generic modelling (baseline, cross-check)."""
    import cvxpy as cp

    A, l, V = _check_inputs(A, l, V, None)
    scale = _scale_of(l)
    ls = l / scale
    rho = _ridge_abs(A, ridge)
    x = cp.Variable(A.shape[1], nonneg=True)
    obj = cp.sum_squares(A @ x - ls) + lam * cp.sum(cp.pos(V @ x)) + rho * cp.sum_squares(x)
    prob = cp.Problem(cp.Minimize(obj))
    t0 = time.perf_counter()
    prob.solve(solver=solver, **solver_opts)
    solve_s = time.perf_counter() - t0
    if prob.status != cp.OPTIMAL:
        raise LUTFitError(f"{solver} did not solve the latency fit for λ = {lam:g}: status {prob.status!r}")
    xs = np.maximum(np.asarray(x.value, dtype=np.float64), 0.0) * scale
    stats = prob.solver_stats
    return FitResult(
        x=xs,
        lam=lam * scale,
        lam_rel=lam,
        status=str(prob.status),
        iterations=int(stats.num_iters or 0),
        solve_s=solve_s,
        n_violated=int(np.sum(V @ xs > VIOLATION_TOL * scale)),
        objective=objective(A, l, V, xs, lam * scale, rho),
        scale=scale,
        polished=False,
    )


def lambda_scan(
    A_tr: sp.spmatrix,
    l_tr: np.ndarray,
    A_val: sp.spmatrix,
    l_val: np.ndarray,
    V: sp.spmatrix,
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    ridge: float = DEFAULT_RIDGE,
    space: SearchSpace | None = None,
    **osqp_settings: Any,
) -> tuple[int, list[FitResult], list[dict[str, Any]]]:
    """Fit §4's objective over the λ grid on train; pick the λ of least lambda_val RMSE; rows of the "lut_fit" schema."""
    results = fit_lut(A_tr, l_tr, V, lambdas, ridge=ridge, space=space, **osqp_settings)
    rows = [scan_row(f, A_tr, l_tr, A_val, l_val) for f in results]
    best = int(np.argmin([r["val_rmse_ms"] for r in rows]))  # first minimum: ties go to the earlier grid entry
    rows[best]["chosen"] = True
    return best, results, rows


# Floor of the robust residual spread: residuals within a few 0.1 % are never outliers (solver tolerance,
# exactly additive devices such as flops).
MIN_OUTLIER_SIGMA = 1e-3


def scan_row(
    f: FitResult, A_tr: sp.spmatrix, l_tr: np.ndarray, A_val: sp.spmatrix, l_val: np.ndarray, chosen: bool = False
) -> dict[str, Any]:
    """A row of the "lut_fit" report: train and lambda_val errors of one fit."""
    mt = latency_metrics(A_tr @ f.x, np.asarray(l_tr, dtype=np.float64), tau=False)
    mv = latency_metrics(A_val @ f.x, np.asarray(l_val, dtype=np.float64), tau=False)
    return {
        "lam": f.lam,
        "train_rmse_ms": mt["rmse_ms"],
        "train_nrmse": mt["nrmse"],
        "val_rmse_ms": mv["rmse_ms"],
        "val_nrmse": mv["nrmse"],
        "val_mape": mv["mape"],
        "n_violated": f.n_violated,
        "solve_s": f.solve_s,
        "iterations": f.iterations,
        "status": f.status,
        "chosen": chosen,
    }


def exact_result(x: np.ndarray) -> FitResult:
    """A known table (an analytic device's) in the form of a fit result: nothing was solved."""
    return FitResult(x=np.asarray(x, dtype=np.float64), lam=0.0, lam_rel=0.0, status="exact", iterations=0, solve_s=0.0,
                     n_violated=0, objective=float("nan"), scale=1.0, polished=False)


def robust_lambda_scan(
    A_tr: sp.spmatrix,
    l_tr: np.ndarray,
    A_val: sp.spmatrix,
    l_val: np.ndarray,
    V: sp.spmatrix,
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    ridge: float = DEFAULT_RIDGE,
    threshold: float = 4.0,
    max_rounds: int = 3,
    space: SearchSpace | None = None,
) -> tuple[int, list[FitResult], list[dict[str, Any]], np.ndarray]:
    """`lambda_scan` with outlier rejection: refit without networks whose relative residual exceeds
    `threshold` robust standard deviations (1.4826·MAD), recomputed on all rows each round.

    A network timed during a burst of interference on a shared machine is off by tens of percent,
    and least squares spreads that error over every variable it uses. A row that is the only
    observation of some variable is always kept. Returns the scan of the last round and the mask of
    kept rows; threshold ≤ 0 disables rejection.
    """
    l_tr = np.asarray(l_tr, dtype=np.float64)
    A_tr = sp.csr_matrix(A_tr)
    keep = np.ones(len(l_tr), dtype=bool)
    for _ in range(max_rounds):
        best, results, rows = lambda_scan(A_tr[keep], l_tr[keep], A_val, l_val, V, lambdas, ridge=ridge, space=space)
        if threshold <= 0:
            break
        rel = (A_tr @ results[best].x - l_tr) / l_tr
        dev = np.abs(rel - np.median(rel))
        sigma = 1.4826 * np.median(dev)
        new = dev <= threshold * max(sigma, MIN_OUTLIER_SIGMA)
        uncovered = observation_counts(A_tr[new]) == 0
        if uncovered.any():
            new |= (A_tr[:, np.flatnonzero(uncovered)].getnnz(axis=1) > 0)
        if np.array_equal(new, keep):
            break
        keep = new
    return best, results, rows, keep


# ---- prediction and the LUT artifact ------------------------------------------------------------
def predict(space: SearchSpace, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Whole-network latency of eq. lat, Σ_i L_{Θ_i}(c_i, c_{i+1}) = (A x)_p, for node choice indices idx ((n+1,) or (P, n+1))."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (space.n_variables,):
        raise ValueError(f"x has shape {x.shape}; space {space.name!r} has {space.n_variables} variables")
    return x[space.variable_ids(np.asarray(idx, dtype=np.int64))].sum(axis=-1)


def lut_records(space: SearchSpace, x: np.ndarray, n_obs: np.ndarray) -> dict[str, list]:
    """Columns of the "lut" artifact: one row per variable (Θ, c_in, c_out) of eq. lat_variables, with latency_ms and n_obs."""
    x = np.asarray(x, dtype=np.float64)
    n_obs = np.asarray(n_obs, dtype=np.int64)
    if x.shape != (space.n_variables,) or n_obs.shape != (space.n_variables,):
        raise ValueError(f"x and n_obs must have one entry per variable ({space.n_variables}); got {x.shape}, {n_obs.shape}")
    keys = space.variables
    return {
        "in_h": [t.in_h for t, _, _ in keys],
        "in_w": [t.in_w for t, _, _ in keys],
        "stride": [t.stride for t, _, _ in keys],
        "kernel": [t.kernel for t, _, _ in keys],
        "kind": [t.kind for t, _, _ in keys],
        "c_in": [ci for _, ci, _ in keys],
        "c_out": [co for _, _, co in keys],
        "latency_ms": x.tolist(),
        "n_obs": n_obs.tolist(),
    }


def _columns(table: Any) -> dict[str, list]:
    if isinstance(table, Mapping):
        return {k: list(v) for k, v in table.items()}
    if hasattr(table, "to_pydict"):  # pyarrow
        return table.to_pydict()
    if hasattr(table, "to_dict"):  # pandas
        return {k: list(v) for k, v in table.to_dict(orient="list").items()}
    raise TypeError(f"cannot read a latency table from {type(table).__name__}")


def lut_vector(space: SearchSpace, table: Any) -> np.ndarray:
    """x of eq. lat from a "lut" table (pyarrow, pandas or column dict); refused unless its rows are exactly the space's variables."""
    cols = _columns(table)
    need = ("in_h", "in_w", "stride", "kernel", "kind", "c_in", "c_out", "latency_ms")
    lacking = [c for c in need if c not in cols]
    if lacking:
        raise LUTFitError(f"the latency table lacks columns {lacking}")
    index = {k: v for v, k in enumerate(space.variables)}
    x = np.full(space.n_variables, np.nan)
    seen = np.zeros(space.n_variables, dtype=bool)
    foreign: list[str] = []
    for h, w, s, k, kind, ci, co, lat in zip(*(cols[c] for c in need)):
        key = (Theta(int(h), int(w), int(s), int(k), str(kind)), int(ci), int(co))
        v = index.get(key)
        if v is None:
            foreign.append(_key_str(key))
            continue
        if seen[v]:
            raise LUTFitError(f"the latency table has two rows for {_key_str(key)}")
        seen[v] = True
        x[v] = float(lat) if lat is not None else np.nan
    if foreign:
        raise LUTFitError(
            f"the latency table has {len(foreign)} rows that are not variables of space {space.name!r}, e.g. "
            f"{', '.join(foreign[:3])}; it was fitted for another space"
        )
    missing = np.flatnonzero(~seen)
    if len(missing):
        names = ", ".join(_key_str(space.variables[v]) for v in missing[:5])
        raise LUTFitError(f"the latency table lacks {len(missing)} variables of space {space.name!r}: {names}")
    bad = np.flatnonzero(~np.isfinite(x))
    if len(bad):
        raise LUTFitError(f"the latency table has {len(bad)} non-finite latencies, e.g. {_key_str(space.variables[bad[0]])}")
    neg = np.flatnonzero(x < 0)
    if len(neg):  # the fit constrains x ≥ 0: a negative entry would decode into a negative latency
        raise LUTFitError(f"the latency table has {len(neg)} negative latencies, e.g. {x[neg[0]]:.4g} at "
                          f"{_key_str(space.variables[neg[0]])}; a latency is never negative")
    return x


# ---- validation metrics (§7, Fig. latency_correlation) ------------------------------------------
def latency_metrics(pred: np.ndarray, meas: np.ndarray, tau: bool = True) -> dict[str, float]:
    """Agreement of predicted and measured latency (§7 Fig. latency_correlation): rmse_ms; nrmse = RMSE / mean(measured);
    mape = mean |pred − meas| / meas; within_5pct, within_10pct = shares with |pred − meas| / meas ≤ 0.05, 0.10;
    kendall_tau = Kendall's τ-b (scipy). Ratios are fractions, not percent."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    meas = np.asarray(meas, dtype=np.float64).ravel()
    if pred.shape != meas.shape or len(meas) == 0:
        raise ValueError(f"pred and meas must be non-empty and of equal length; got {pred.shape}, {meas.shape}")
    err = pred - meas
    rmse = float(np.sqrt(np.mean(err**2)))
    rel = np.abs(err) / np.abs(meas)
    out = {
        "rmse_ms": rmse,
        "nrmse": rmse / float(np.mean(meas)),
        "mape": float(np.mean(rel)),
        "within_5pct": float(np.mean(rel <= 0.05)),
        "within_10pct": float(np.mean(rel <= 0.10)),
    }
    if tau:
        out["kendall_tau"] = float(kendalltau(pred, meas).statistic) if len(meas) > 1 else float("nan")
    return out


def flops_baseline(flops_train: np.ndarray, l_train: np.ndarray) -> float:
    """The FLOPs-proportional model l ≈ a·flops (least squares through the origin, cf. §4's FLOPs formula); returns a."""
    f = np.asarray(flops_train, dtype=np.float64).ravel()
    y = np.asarray(l_train, dtype=np.float64).ravel()
    if f.shape != y.shape or len(f) == 0:
        raise ValueError(f"flops and latencies must be non-empty and of equal length; got {f.shape}, {y.shape}")
    den = float(f @ f)
    if den == 0:
        raise ValueError("all FLOPs are zero; the proportional baseline is undefined")
    return float(f @ y) / den
