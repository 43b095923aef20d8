"""The LUT fit of §4 (eq. linear_lat + a soft monotonicity prior), solved by OSQP; cvxpy as a reference.

    min_x ‖A x − l‖² + λ ‖max(V x, 0)‖₁ + ρ ‖x‖²   subject to x ≥ 0      (docs/method.md D5, D7)

It is solved in a sparse *residual form* (never forming the dense Gram AᵀA): with residuals
r = A x − l and hinge slacks s,

    min_{x,r,s} rᵀr + λ 1ᵀs + ρ xᵀx   s.t.  A x − r = l,  V x − s ≤ 0,  s ≥ 0,  x ≥ 0.

λ enters only the linear term q; each λ of the grid is one independent cold solve (see `fit_osqp`).
Latencies are divided by their median before the solve, so the grid DEFAULT_LAMBDAS and the ridge
(DEFAULT_RIDGE times the mean diagonal of AᵀA) are dimensionless; FitResult.lam reports λ in ms units
(λ_ms = λ_rel · median(l)). λ, the smoothness prior's μ (D38) and the link (D39) are chosen on held-out networks
(lambda_val) only.
osqp and cvxpy are imported inside the functions that use them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from ..config import LutSettings
from ..search.link import IDENTITY, Link
from ..space import SearchSpace
from .lut import (
    LUTFitError,
    _missing_message,
    check_coverage,
    design_matrix,
    monotonicity_matrix,
    observation_counts,
    smoothness_matrix,
)
from .metrics import latency_metrics

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
    mu: float = 0.0  # weight of the smoothness prior μ‖Dx‖² (D38), the same in scaled and ms units
    link: Link = IDENTITY  # whole-network latency g(Ax) (D39); the identity is eq. lat

    def predict(self, A: sp.spmatrix) -> np.ndarray:
        """Predicted latency g(A x) of the networks whose rows are A."""
        return np.asarray(self.link(A @ self.x), dtype=np.float64)


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


def objective(A: sp.spmatrix, l: np.ndarray, V: sp.spmatrix, x: np.ndarray, lam: float, ridge_abs: float,
              D: sp.spmatrix | None = None, mu: float = 0.0) -> float:
    """Value of ‖Ax − l‖² + λ‖max(Vx, 0)‖₁ + ρ‖x‖² (§4 fit objective) + μ‖Dx‖² (the smoothness prior, D38) in
    whatever units A, l, x, λ, ρ are given."""
    r = A @ x - l
    smooth = float(mu) * float(np.sum((D @ x) ** 2)) if D is not None and mu else 0.0
    return float(r @ r + lam * np.maximum(V @ x, 0).sum() + ridge_abs * (x @ x)) + smooth


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


@dataclass(frozen=True)
class Prior:
    """The fit's terms besides the data and the monotonicity prior (§4): the ridge ρ (relative to the mean diagonal of
    AᵀA) and the smoothness prior μ‖Dx‖² of D38 (none when `mu` is 0 or `D` None)."""

    ridge: float = DEFAULT_RIDGE
    D: sp.spmatrix | None = None
    mu: float = 0.0


NO_SMOOTHING = Prior()


@dataclass
class _ResidualQP:
    """§4's fit in residual form over z = (x, r, s, u): ½ zᵀHz + qᵀz s.t. lo ≤ Cz ≤ hi, with H = diag(2ρ, 2, 0, 2μ),
    r = Ax − l, s ≥ Vx, u = Dx; latencies divided by `scale`, λ only in q."""

    H: sp.spmatrix
    C: sp.spmatrix
    lo: np.ndarray
    hi: np.ndarray
    n: int  # table entries x
    P: int  # residuals r (measured networks)
    K: int  # hinge slacks s (prior inequalities)
    M: int  # smoothness rows u
    scale: float
    rho: float
    Ds: sp.spmatrix

    def q(self, lam_rel: float) -> np.ndarray:
        """The linear term: λ (relative) on the hinge slacks."""
        return np.concatenate([np.zeros(self.n + self.P), np.full(self.K, lam_rel), np.zeros(self.M)])


def _residual_qp(A: sp.csr_matrix, l: np.ndarray, V: sp.csr_matrix, prior: Prior) -> _ResidualQP:
    """The QP of `fit_osqp` (never forming AᵀA)."""
    P_rows, n = A.shape
    K = V.shape[0]
    mu = float(prior.mu)
    if not np.isfinite(mu) or mu < 0:
        raise ValueError(f"the smoothness weight must be finite and ≥ 0; got {mu}")
    Ds = sp.csr_matrix(prior.D, dtype=np.float64) if prior.D is not None and mu > 0 else sp.csr_matrix((0, n))
    M = Ds.shape[0]
    scale, rho = _scale_of(l), _ridge_abs(A, prior.ridge)
    H = sp.diags(np.concatenate([np.full(n, 2.0 * rho), np.full(P_rows, 2.0), np.zeros(K), np.full(M, 2.0 * mu)]),
                 format="csc")
    C = sp.vstack(
        [
            sp.hstack([A, -sp.identity(P_rows), sp.csr_matrix((P_rows, K + M))]),
            sp.hstack([V, sp.csr_matrix((K, P_rows)), -sp.identity(K), sp.csr_matrix((K, M))]),
            sp.hstack([sp.identity(n), sp.csr_matrix((n, P_rows + K + M))]),
            sp.hstack([sp.csr_matrix((K, n + P_rows)), sp.identity(K), sp.csr_matrix((K, M))]),
            sp.hstack([Ds, sp.csr_matrix((M, P_rows + K)), -sp.identity(M)]),
        ],
        format="csc",
    )
    inf, ls = np.inf, l / scale
    lo = np.concatenate([ls, np.full(K, -inf), np.zeros(n), np.zeros(K), np.zeros(M)])
    hi = np.concatenate([ls, np.zeros(K), np.full(n, inf), np.full(K, inf), np.zeros(M)])
    return _ResidualQP(H, C, lo, hi, n, P_rows, K, M, scale, rho, Ds)


def fit_osqp(A: sp.spmatrix, l: np.ndarray, V: sp.spmatrix, lambdas: Sequence[float] = DEFAULT_LAMBDAS,
             prior: Prior = NO_SMOOTHING, space: SearchSpace | None = None, **osqp_settings: Any) -> list[FitResult]:
    """Solve §4's min ‖Ax − l‖² + λ‖max(Vx, 0)‖₁ + ρ‖x‖² + μ‖Dx‖², x ≥ 0 for each λ (relative units), one cold OSQP
    solve each; ρ, μ and D are the `prior` (μ‖Dx‖² the smoothness prior of D38)."""
    A, l, V = _check_inputs(A, l, V, space)
    lambdas = [float(v) for v in lambdas]
    if not lambdas or any(not np.isfinite(v) or v < 0 for v in lambdas):
        raise ValueError(f"lambdas must be a non-empty list of finite values ≥ 0; got {lambdas}")
    qp = _residual_qp(A, l, V, prior)
    settings = {**OSQP_SETTINGS, **osqp_settings}
    algebra = osqp_algebra()
    # One independent, cold solve per λ: OSQP scales the problem with the λ's own cost vector and starts from the
    # initial rho. (Reusing one factorisation through update(q=...) converged 3-10× slower here, which cost more than
    # the repeated setup.)
    return [_solve(qp, lam_rel, settings, algebra, (A, l, V, float(prior.mu))) for lam_rel in lambdas]


def _solve(qp: _ResidualQP, lam_rel: float, settings: Mapping[str, Any], algebra: str, data: tuple) -> FitResult:
    """One cold OSQP solve of the QP at λ (relative); a solve that did not converge is an error."""
    import osqp

    A, l, V, mu = data
    t0 = time.perf_counter()
    solver = osqp.OSQP(algebra=algebra)
    solver.setup(qp.H, qp.q(lam_rel), qp.C, qp.lo, qp.hi, **settings)
    res = solver.solve(raise_error=False)
    solve_s = time.perf_counter() - t0
    status, scale = str(res.info.status), qp.scale
    if res.info.status_val != osqp.SolverStatus.OSQP_SOLVED:
        raise LUTFitError(
            f"OSQP did not solve the latency fit for λ = {lam_rel:g} (relative; {lam_rel * scale:g} in ms): "
            f"status {status!r} after {res.info.iter} iterations"
        )
    x = np.maximum(np.asarray(res.x[: qp.n], dtype=np.float64), 0.0) * scale
    return FitResult(x=x, lam=lam_rel * scale, lam_rel=lam_rel, status=status, iterations=int(res.info.iter),
                     solve_s=solve_s, n_violated=int(np.sum(V @ x > VIOLATION_TOL * scale)),
                     objective=objective(A, l, V, x, lam_rel * scale, qp.rho, qp.Ds, mu), scale=scale,
                     polished=int(res.info.status_polish) == 1, mu=mu)


def fit_cvxpy(
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


def lambda_scan(train: tuple[sp.spmatrix, np.ndarray], val: tuple[sp.spmatrix, np.ndarray], V: sp.spmatrix,
                lambdas: Sequence[float] = DEFAULT_LAMBDAS, prior: Prior = NO_SMOOTHING,
                space: SearchSpace | None = None, **osqp_settings: Any) -> tuple[int, list[FitResult], list[dict[str, Any]]]:
    """Fit §4's objective (with the `prior`'s ridge and smoothness μ‖Dx‖², D38) over the λ grid on the `train` networks
    (A, l); pick the λ of least RMSE on the `val` (lambda_val) networks; rows of the "lut_fit" schema."""
    results = fit_osqp(*train, V, lambdas, prior, space, **osqp_settings)
    rows = [scan_row(f, *train, *val) for f in results]
    best = choose(rows)
    rows[best]["chosen"] = True
    return best, results, rows


def choose(rows: Sequence[Mapping[str, Any]]) -> int:
    """The fit of least lambda_val RMSE (§4: λ is chosen on held-out networks only, and so are μ and the link);
    ties go to the earlier row: the smaller μ and λ, the additive fit before a link."""
    return int(np.argmin([r["val_rmse_ms"] for r in rows]))


def scan_row(
    f: FitResult, A_tr: sp.spmatrix, l_tr: np.ndarray, A_val: sp.spmatrix, l_val: np.ndarray, chosen: bool = False
) -> dict[str, Any]:
    """A row of the "lut_fit" report: train and lambda_val errors of one fit (its link applied, D39)."""
    mt = latency_metrics(f.predict(A_tr), np.asarray(l_tr, dtype=np.float64), tau=False)
    mv = latency_metrics(f.predict(A_val), np.asarray(l_val, dtype=np.float64), tau=False)
    return {
        "lam": f.lam,
        "mu": f.mu,
        "link_knot_ms": None if f.link.identity else f.link.knot_ms,
        "link_slope": f.link.slope,
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


# Gauss–Newton steps of the linked fit (D39): κ and the excess above the knot settle within a few.
LINK_ITERATIONS = 5
# A fitted slope below this is no link: the networks above the knot cost their layers' sum (within 0.1 %).
MIN_LINK_SLOPE = 1e-3


def fit_linked(A_tr: sp.spmatrix, l_tr: np.ndarray, V: sp.spmatrix, base: FitResult, knot: float, *,
               prior: Prior = NO_SMOOTHING, slope: float | None = None, iterations: int = LINK_ITERATIONS) -> FitResult:
    """The table under the link g(s) = s + κ·max(0, s − knot) (D39), at `base`'s λ and the `prior`'s ridge and
    smoothness, from `base`'s additive table.

    Each iteration takes the excess h_p = max(0, a_pᵀx − knot) of the current table as a fixed column and solves §4's
    fit for (x, κ ≥ 0) together (κ outside the priors); the excess is then recomputed — a Gauss–Newton step of the
    piecewise-linear model. With a given `slope` (held fixed) the rows above the knot are §4's scaled by 1 + κ, their
    latencies raised by κ·knot."""
    A_tr = sp.csr_matrix(A_tr, dtype=np.float64)
    l_tr = np.asarray(l_tr, dtype=np.float64)
    n = A_tr.shape[1]

    def loss(x: np.ndarray, k: float) -> float:  # squared error of the linked prediction
        return float(np.sum((Link(knot, k)(A_tr @ x) - l_tr) ** 2))

    x, k = np.asarray(base.x, dtype=np.float64), 0.0 if slope is None else float(slope)
    f, best = base, loss(x, k)
    for _ in range(iterations):
        s = A_tr @ x
        h = np.maximum(0.0, s - knot)
        if not h.any():
            break
        if slope is None:
            A = sp.hstack([A_tr, sp.csr_matrix(h[:, None])], format="csr")
            pad = lambda M: None if M is None else sp.hstack([M, sp.csr_matrix((M.shape[0], 1))], format="csr")  # noqa: E731
            g = fit_osqp(A, l_tr, pad(V), [base.lam_rel], replace(prior, D=pad(prior.D)))[0]
            g, k_new = replace(g, x=g.x[:n]), float(g.x[n])
        else:
            on = s > knot
            g = fit_osqp(sp.diags(np.where(on, 1.0 + k, 1.0)) @ A_tr, l_tr + np.where(on, k * knot, 0.0), V,
                         [base.lam_rel], prior)[0]
            k_new = k
        for t in (1.0, 0.5, 0.25, 0.125):  # damped: the longest step along (x, κ) that lowers the linked loss
            xt, kt = x + t * (g.x - x), k + t * (k_new - k)
            new = loss(xt, kt)
            if new < best * (1 - 1e-6):
                break
        else:  # no step lowers it: converged
            break
        f, x, k, best = replace(g, x=xt), xt, kt, new
    if slope is not None:  # the given link, whether or not a step moved the table
        return replace(f, x=x, link=Link(float(knot), k) if k > 0 else IDENTITY)
    return replace(f, link=Link(float(knot), k) if k >= MIN_LINK_SLOPE and f is not base else IDENTITY)


@dataclass
class TableFit:
    """What `fit_table` chose (§4): the fit, every candidate's "lut_fit" row (the chosen one marked) and how many
    training networks use each variable (the LUT's n_obs)."""

    fit: FitResult
    rows: list[dict[str, Any]]
    n_obs: np.ndarray

    @property
    def row(self) -> dict[str, Any]:
        """The chosen fit's row of the report."""
        return next(r for r in self.rows if r["chosen"])


def candidates(train: tuple[sp.spmatrix, np.ndarray], val: tuple[sp.spmatrix, np.ndarray], V: sp.spmatrix,
               D: sp.spmatrix, settings: LutSettings, link: Link | None) -> tuple[list[FitResult], list[dict]]:
    """Every fit the table is chosen from, with its "lut_fit" row: the (μ, λ) grid of §4's fit with the smoothness
    prior (D38), then from the grid's best the table under a link (D39) at each knot of `lut.link_knots` — or under
    `link`, held fixed (a verified decision's refit keeps its LUT's link)."""
    results: list[FitResult] = []
    rows: list[dict[str, Any]] = []
    for mu in settings.smoothness:
        b, res, rws = lambda_scan(train, val, V, settings.lambdas, Prior(settings.ridge, D, float(mu)))
        rws[b]["chosen"] = False
        results += res
        rows += rws
    base = results[choose(rows)]
    if link is not None:
        knots = [] if link.identity else [(link.knot_ms, link.slope)]
    else:
        s = train[0] @ base.x
        knots = [(float(np.quantile(s, q)), None) for q in settings.link_knots]
    prior = Prior(settings.ridge, D if base.mu else None, base.mu)
    for knot, slope in knots:
        f = fit_linked(*train, V, base, knot, prior=prior, slope=slope)
        results.append(f)
        rows.append(scan_row(f, *train, *val))
    return results, rows


def fit_table(space: SearchSpace, sets: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
              settings: LutSettings = LutSettings(), exact: np.ndarray | None = None,
              link: Link | None = None) -> TableFit:
    """Fit the LUT on the train set (§4 eq. linear_lat) under the `lut:` settings: the candidate of least lambda_val
    RMSE (`candidates`, `choose`); `exact`: an analytic device's known table; `link`: fit under this link, held fixed.
    `sets` is `lut.split_sets(...)`."""
    idx_tr, l_tr, _ = sets["train"]
    idx_val, l_val, _ = sets["lambda_val"]
    A_tr = design_matrix(space, idx_tr)
    A_val = design_matrix(space, idx_val)
    n_obs = observation_counts(A_tr)
    check_coverage(space, n_obs)
    if exact is not None:
        # FLOPs decompose exactly over layers (§7.2): the table is known, nothing to fit; the report still says how
        # well it reproduces the profiled networks.
        fit = exact_result(exact)
        return TableFit(fit, [scan_row(fit, A_tr, l_tr, A_val, l_val, chosen=True)], n_obs)
    results, rows = candidates((A_tr, l_tr), (A_val, l_val), monotonicity_matrix(space), smoothness_matrix(space),
                               settings, link)
    best = len(rows) - 1 if link is not None and not link.identity else choose(rows)
    rows[best]["chosen"] = True
    return TableFit(results[best], rows, n_obs)
