"""Chain MRF over a search space: Viterbi, constrained decode, hull, exact mode, relaxed min-sum (§5, §6).

A chain has nodes 0..n; node i has k_i choices (fixed end nodes have k = 1). Unaries δ_i have length
k_i, latency tables L_i are k_i × k_{i+1}. Energies are MINIMISED:

    E_γ(c) = Σ_i δ_i(c_i) + γ Σ_i L_i(c_i, c_{i+1})                      (eq. viterbi)

Σδ(c) is the *objective*, Σ L(c) the *latency*. A unary of +inf forbids a choice (`apply_unvisited`,
docs/method.md D13); NaN or -inf unaries and non-finite latencies are refused. `forbid` (a boolean mask
per edge) forbids transitions: +inf in every min-sum, −inf in the log domain (a residual space's compiled
chain, `aows_core.search.graph`, D44); without it every result is what it was. Paths are int64 choice
indices of every node 0..n. Ties: the lexicographically smallest path among optima (`viterbi`,
`Chain.solve`); `tie="low"|"high"` and `unconstrained`/`min_latency`/`max_latency` break ties on
latency / Σδ first. Comparisons use REL_TOL times a per-instance scale (Σ_i max|δ_i|, Σ_i max|L_i|);
a configuration is feasible for L_T when L(c) ≤ L_T + REL_TOL·Σ_i max|L_i|.

Guarantees: `Chain.decode(L_T)` (eq. lagrange) raises `InfeasibleTarget` iff L_T < min latency (D14),
else returns a feasible configuration with γ*, the dual bound and the gap; `exact=True` closes the gap
(D15); `Chain.hull()` lists every vertex of the lower convex hull of (L, Σδ); `Chain.marginals(γ, T)`
runs the corrected relaxed min-sum of §6 (D17) in the log domain. The full contract (tie rules and
guarantees of each decoder) is in docs/method.md. Numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

REL_TOL = 1e-9
UNVISITED_POLICIES = ("exclude", "pessimistic", "error")


class InfeasibleTarget(ValueError):
    """A latency target below the smallest latency reachable (D14); `min_latency` holds it."""

    def __init__(self, message: str, min_latency: float):
        super().__init__(message)
        self.min_latency = float(min_latency)


# ---------------------------------------------------------------------------------------------
# Plain functions kept for other modules (signature and tie rule are part of the contract).
# ---------------------------------------------------------------------------------------------
def viterbi(unaries: Sequence[np.ndarray], pairwise: Sequence[np.ndarray]) -> tuple[np.ndarray, float]:
    """Exact argmin of Σ u_i(c_i) + Σ P_i(c_i, c_{i+1}) (eq. viterbi); lexicographically smallest on ties."""
    n = len(unaries)
    if len(pairwise) != n - 1:
        raise ValueError(f"a chain of {n} nodes needs {n - 1} pairwise tables, got {len(pairwise)}")
    # beta[i][c] = min energy of nodes i..n-1 given c_i = c (unary of node i included).
    beta: list[np.ndarray] = [None] * n  # type: ignore[list-item]
    beta[n - 1] = np.asarray(unaries[n - 1], dtype=np.float64)
    for i in range(n - 2, -1, -1):
        beta[i] = np.asarray(unaries[i], dtype=np.float64) + (pairwise[i] + beta[i + 1][None, :]).min(axis=1)
    path = np.empty(n, dtype=np.int64)
    path[0] = int(np.argmin(beta[0]))
    for i in range(n - 1):
        path[i + 1] = int(np.argmin(pairwise[i][path[i]] + beta[i + 1]))
    return path, float(beta[0][path[0]])


def energy(path: Sequence[int], unaries: Sequence[np.ndarray], pairwise: Sequence[np.ndarray]) -> float:
    """E(c) of one path: Σ u_i(c_i) + Σ P_i(c_i, c_{i+1}) (eq. viterbi)."""
    e = sum(float(u[k]) for u, k in zip(unaries, path))
    return e + sum(float(p[path[i], path[i + 1]]) for i, p in enumerate(pairwise))


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeResult:
    """A constrained decision (eq. lagrange): configuration, objective Σδ, latency, γ*, dual bound, gap."""

    path: np.ndarray
    objective: float
    latency: float
    gamma: float
    dual_bound: float
    gap: float
    exact: bool
    n_viterbi: int
    target: float
    method: str  # "unconstrained" | "lagrangian" | "exact" | "hull"
    n_labels: int = 0


@dataclass(frozen=True)
class Hull:
    """Vertices of the lower-left convex hull of (latency, Σδ), by increasing latency (eq. lagrange)."""

    paths: np.ndarray  # (H, n+1) choice indices
    latencies: np.ndarray  # (H,) increasing
    objectives: np.ndarray  # (H,) decreasing
    slopes: np.ndarray  # (H-1,) γ at which vertices h and h+1 are both Lagrangian minimisers
    n_viterbi: int


# ---------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------
def _width_name(widths: Sequence[Sequence[int]] | None, i: int, j: int) -> str:
    if widths is not None:
        try:
            return f"choice {j} (width {widths[i][j]})"
        except (IndexError, TypeError):
            pass
    return f"choice {j}"


def apply_unvisited(
    unaries: Sequence[np.ndarray], policy: str, *, widths: Sequence[Sequence[int]] | None = None
) -> list[np.ndarray]:
    """Resolve unvisited widths (NaN δ, count 0, eq. average_error) by policy: exclude | pessimistic | error.

    * "exclude": the choice becomes +inf (forbidden); a node left with no allowed choice is an error.
    * "pessimistic": the choice gets the largest visited δ of the same node (as bad as the worst
      visited width of that layer); a node with no visited choice is an error.
    * "error": any unvisited choice is an error naming node and width.
    ±inf in a visited unary is always an error (NaN is the only marker of "unvisited").
    """
    if policy not in UNVISITED_POLICIES:
        raise ValueError(f"unknown unvisited policy {policy!r}; valid: {list(UNVISITED_POLICIES)}")
    out: list[np.ndarray] = []
    for i, u in enumerate(unaries):
        u = np.array(u, dtype=np.float64, copy=True).reshape(-1)
        if u.size == 0:
            raise ValueError(f"node {i} has no choices")
        bad = np.flatnonzero(np.isinf(u))
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"node {i} {_width_name(widths, i, j)}: visited unary is {u[j]} (must be finite)")
        nan = np.isnan(u)
        if nan.any():
            if policy == "error":
                j = int(np.flatnonzero(nan)[0])
                raise ValueError(
                    f"node {i} {_width_name(widths, i, j)} was never visited (δ is NaN) and the unvisited policy is 'error'"
                )
            if nan.all():
                raise ValueError(f"node {i}: no choice was visited; policy {policy!r} leaves it without an allowed choice")
            u[nan] = np.inf if policy == "exclude" else float(u[~nan].max())
        out.append(u)
    return out


def check_target(decoder, target: float, indices: str = "choice indices") -> tuple[np.ndarray, float, float]:
    """(min-latency path, its latency, its Σδ) of a `Chain` or `SpaceChain`; `InfeasibleTarget` naming the minimum
    latency for a target below it (D14)."""
    lo = decoder.min_latency()
    L_lo = float(decoder.latency(lo))
    if not np.isfinite(target):
        raise ValueError(f"latency target must be finite, got {target}")
    if target < L_lo - decoder.ftol:
        raise InfeasibleTarget(
            f"latency target {target:.6g} is below the minimum latency {L_lo:.6g} reachable in this space "
            f"(minimum-latency configuration: {indices} {lo.tolist()})",
            L_lo,
        )
    return lo, L_lo, float(decoder.objective(lo))


# ---------------------------------------------------------------------------------------------
# The chain
# ---------------------------------------------------------------------------------------------
class Chain:
    """A chain MRF instance (eq. viterbi): padded per-instance arrays computed once, decoders as methods.

    `forbid[i]` (optional, (k_i, k_{i+1}) booleans or None): True marks a transition not allowed (D44).
    """

    def __init__(self, unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray], *,
                 forbid: Sequence[np.ndarray | None] | None = None):
        n = len(unaries)
        if n < 1:
            raise ValueError("a chain needs at least one node")
        if len(latency) != n - 1:
            raise ValueError(f"a chain of {n} nodes needs {n - 1} latency tables, got {len(latency)}")
        us = [np.asarray(u, dtype=np.float64).reshape(-1) for u in unaries]
        ks = np.array([u.size for u in us], dtype=np.int64)
        for i, u in enumerate(us):
            if u.size == 0:
                raise ValueError(f"node {i} has no choices")
            bad = np.flatnonzero(np.isnan(u) | (u == -np.inf))
            if bad.size:
                j = int(bad[0])
                raise ValueError(
                    f"node {i} choice {j}: unary is {u[j]}; NaN marks an unvisited width (resolve it with "
                    "apply_unvisited) and -inf is not allowed (+inf forbids a choice)"
                )
            if not np.isfinite(u).any():
                raise ValueError(f"node {i}: every choice is forbidden (+inf)")
        ls = []
        for i, t in enumerate(latency):
            t = np.asarray(t, dtype=np.float64)
            if t.shape != (ks[i], ks[i + 1]):
                raise ValueError(f"latency table of edge {i} has shape {t.shape}, expected {(int(ks[i]), int(ks[i + 1]))}")
            bad = np.argwhere(~np.isfinite(t))
            if bad.size:
                a, b = (int(x) for x in bad[0])
                raise ValueError(f"latency table of edge {i} entry ({a}, {b}) is {t[a, b]} (must be finite)")
            ls.append(t)
        fb = self._forbid_masks(forbid, ks)
        if fb is not None:  # forbidden transitions keep a finite 0 in the table (D44)
            ls = [np.where(f, 0.0, t) if f is not None else t for t, f in zip(ls, fb)]
        K = int(ks.max())
        self.n_nodes = n
        self.counts = ks
        self.K = K
        U = np.full((n, K), np.inf)
        for i, u in enumerate(us):
            U[i, : u.size] = u
        Lp = np.zeros((max(n - 1, 0), K, K))
        for i, t in enumerate(ls):
            Lp[i, : t.shape[0], : t.shape[1]] = t
        self._U = U
        self._Lp = Lp
        self._negLp = -Lp
        self._Z = np.zeros_like(Lp)
        self.allowed = np.isfinite(U)
        self._zinf = np.where(self.allowed, 0.0, np.inf)  # 0 on allowed choices, +inf elsewhere
        self._zeros = np.zeros((n, K))
        self._arN = np.arange(n)
        self._arE = np.arange(n - 1)
        self._arK = np.arange(K)
        self.d_scale = float(sum(np.abs(u[np.isfinite(u)]).max() for u in us))
        self.l_scale = float(sum(np.abs(t).max() for t in ls)) if ls else 0.0
        self.ftol = REL_TOL * self.l_scale
        self._cache: dict[str, object] = {}
        # Forbidden transitions (D44): +inf added to every min-sum, −inf to every log-domain message.
        self.has_forbid = fb is not None
        self._forbid = fb
        if self.has_forbid:
            F = np.zeros((max(n - 1, 0), K, K))
            for i, f in enumerate(fb):
                if f is not None:
                    F[i, : f.shape[0], : f.shape[1]][f] = np.inf
            self._F = F
            if not np.isfinite(self._latency_to_go()[0] + self._zinf[0]).any():
                raise ValueError("the forbidden transitions leave no allowed path through the chain")

    @staticmethod
    def _forbid_masks(forbid: Sequence[np.ndarray | None] | None, ks: np.ndarray) -> list[np.ndarray | None] | None:
        """Boolean per-edge masks (True = transition not allowed), or None when nothing is forbidden."""
        if forbid is None:
            return None
        if len(forbid) != len(ks) - 1:
            raise ValueError(f"a chain of {len(ks)} nodes needs {len(ks) - 1} forbid masks, got {len(forbid)}")
        out: list[np.ndarray | None] = []
        for i, f in enumerate(forbid):
            if f is not None:
                f = np.asarray(f, dtype=bool)
                if f.shape != (ks[i], ks[i + 1]):
                    raise ValueError(f"forbid mask of edge {i} has shape {f.shape}, expected {(int(ks[i]), int(ks[i + 1]))}")
                f = f if f.any() else None
            out.append(f)
        return out if any(f is not None for f in out) else None

    def _pf(self, A: np.ndarray) -> np.ndarray:
        """A padded (n−1, K, K) pairwise array with +inf on forbidden transitions (A itself when none are)."""
        return A + self._F if self.has_forbid else A

    # ---- accessors --------------------------------------------------------------------------
    @property
    def unaries(self) -> list[np.ndarray]:
        """δ_i per node (eq. average_error), +inf on forbidden choices."""
        return [self._U[i, :k].copy() for i, k in enumerate(self.counts)]

    @property
    def latency_tables(self) -> list[np.ndarray]:
        """L_i per edge (eq. lat)."""
        return [self._Lp[i, : self.counts[i], : self.counts[i + 1]].copy() for i in range(self.n_nodes - 1)]

    def tol(self, gamma: float = 0.0) -> float:
        """Absolute tolerance for Lagrangian energies at γ: REL_TOL·(Σ max|δ| + γ Σ max|L|)."""
        return REL_TOL * (self.d_scale + gamma * self.l_scale)

    def objective(self, path: Sequence[int] | np.ndarray) -> np.ndarray | float:
        """Σ_i δ_i(c_i) of one path (float) or of a batch (B, n+1) of paths (array) (eq. viterbi)."""
        p = np.asarray(path)
        if p.ndim == 1:
            return float(self._U[self._arN, p].sum())
        return self._U[self._arN, p].sum(axis=1)

    def latency(self, path: Sequence[int] | np.ndarray) -> np.ndarray | float:
        """Σ_i L_i(c_i, c_{i+1}) of one path (float) or of a batch (B, n+1) of paths (eq. lat)."""
        p = np.asarray(path)
        if p.ndim == 1:
            return float(self._Lp[self._arE, p[:-1], p[1:]].sum())
        return self._Lp[self._arE, p[:, :-1], p[:, 1:]].sum(axis=1)

    def energy(self, path: Sequence[int], gamma: float) -> float:
        """E_γ(c) = Σδ + γ ΣL (eq. lagrange_subproblem)."""
        return float(self.objective(path)) + gamma * float(self.latency(path))

    # ---- exact min-sum ----------------------------------------------------------------------
    def _viterbi_one(self, gamma: float) -> np.ndarray:
        n, U, ar = self.n_nodes, self._U, self._arK
        G = self._pf(self._Lp * gamma)
        ptr = np.empty((max(n - 1, 0), self.K), dtype=np.int64)
        beta = U[n - 1]
        for i in range(n - 2, -1, -1):
            M = G[i] + beta
            j = M.argmin(1)
            ptr[i] = j
            beta = U[i] + M[ar, j]
        path = np.empty(n, dtype=np.int64)
        c = int(beta.argmin())
        path[0] = c
        pl = ptr.tolist()
        for i in range(n - 1):
            c = pl[i][c]
            path[i + 1] = c
        return path

    def _viterbi_batch(self, gammas: np.ndarray) -> np.ndarray:
        """Plain Viterbi for several γ at once: (G, n+1) paths, same tie rule as `solve`."""
        n, U, K = self.n_nodes, self._U, self.K
        g = np.asarray(gammas, dtype=np.float64)[:, None, None]
        B = g.shape[0]
        ptr = np.empty((max(n - 1, 0), B, K), dtype=np.int64)
        beta = np.broadcast_to(U[n - 1], (B, K))
        arB = np.arange(B)[:, None]
        arK = self._arK[None, :]
        for i in range(n - 2, -1, -1):
            M = g * self._Lp[i] + beta[:, None, :]
            if self.has_forbid:
                M = M + self._F[i]
            j = M.argmin(2)
            ptr[i] = j
            beta = U[i] + M[arB, arK, j]
        paths = np.empty((B, n), dtype=np.int64)
        paths[:, 0] = beta.argmin(1)
        arb = np.arange(B)
        for i in range(n - 1):
            paths[:, i + 1] = ptr[i][arb, paths[:, i]]
        return paths

    def _lex(self, a: np.ndarray, A: np.ndarray, b: np.ndarray, B: np.ndarray, tol_a: float, tol_b: float) -> np.ndarray:
        """Lexicographic min-sum: minimise primary (a, A); within tol_a, secondary (b, B); then smallest index."""
        n, ar = self.n_nodes, self._arK
        A = self._pf(A)
        p, s = a[n - 1], b[n - 1]
        ptr = np.empty((max(n - 1, 0), self.K), dtype=np.int64)

        def pick(P: np.ndarray, S: np.ndarray) -> np.ndarray:
            m = P.min(-1, keepdims=True)
            cand = P <= m + tol_a
            S2 = np.where(cand, S, np.inf)
            ms = S2.min(-1, keepdims=True)
            cand &= S2 <= ms + tol_b
            return cand.argmax(-1)

        for i in range(n - 2, -1, -1):
            P = A[i] + p
            S = B[i] + s
            j = pick(P, S)
            ptr[i] = j
            p = a[i] + P[ar, j]
            s = b[i] + S[ar, j]
        path = np.empty(n, dtype=np.int64)
        c = int(pick(p, s))
        path[0] = c
        for i in range(n - 1):
            c = int(ptr[i, c])
            path[i + 1] = c
        return path

    def solve(self, gamma: float, tie: str | None = None) -> np.ndarray:
        """argmin_c Σδ + γ ΣL (eq. lagrange_subproblem / viterbi); tie None = lexicographic, "low"/"high" latency."""
        gamma = float(gamma)
        if not (gamma >= 0 and np.isfinite(gamma)):
            raise ValueError(f"gamma must be finite and ≥ 0, got {gamma}")
        if tie is None:
            return self._viterbi_one(gamma)
        if tie not in ("low", "high"):
            raise ValueError(f"tie must be None, 'low' or 'high', got {tie!r}")
        sec = self._Lp if tie == "low" else self._negLp
        return self._lex(self._U, self._Lp * gamma, self._zeros, sec, self.tol(gamma), REL_TOL * self.l_scale)

    def min_latency(self) -> np.ndarray:
        """Exact minimum-latency configuration over allowed choices (Viterbi on latency alone; D14)."""
        if "min" not in self._cache:
            self._cache["min"] = self._lex(self._zinf, self._Lp, self._U, self._Z, self.ftol, REL_TOL * self.d_scale)
        return self._cache["min"].copy()  # type: ignore[union-attr]

    def max_latency(self) -> np.ndarray:
        """Exact maximum-latency configuration over allowed choices (Viterbi on −latency)."""
        if "max" not in self._cache:
            self._cache["max"] = self._lex(self._zinf, self._negLp, self._U, self._Z, self.ftol, REL_TOL * self.d_scale)
        return self._cache["max"].copy()  # type: ignore[union-attr]

    def unconstrained(self) -> np.ndarray:
        """argmin Σδ (γ = 0, eq. viterbi), ties toward lower latency then lexicographic."""
        if "top" not in self._cache:
            self._cache["top"] = self._lex(self._U, self._Z, self._zeros, self._Lp, REL_TOL * self.d_scale, self.ftol)
        return self._cache["top"].copy()  # type: ignore[union-attr]

    # ---- constrained decode (eq. lagrange) ----------------------------------------------------
    def _check_target(self, target: float) -> tuple[np.ndarray, float, float]:
        return check_target(self, target)

    def decode(self, target: float, *, exact: bool = False, max_iter: int = 100_000, max_labels: int = 200_000) -> DecodeResult:
        """max_γ min_c Σδ + γ(L(c) − L_T) by exact breakpoint search (eq. lagrange); exact=True: true optimum."""
        target = float(target)
        lo, L_lo, D_lo = self._check_target(target)
        top = self.unconstrained()
        L_top, D_top = float(self.latency(top)), float(self.objective(top))
        if L_top <= target + self.ftol:
            return DecodeResult(top, D_top, L_top, 0.0, D_top, 0.0, True, 2, target, "unconstrained")
        F, L_F, D_F = lo, L_lo, D_lo  # feasible end (optimal for large γ)
        L_I, D_I = L_top, D_top  # infeasible end (optimal at γ = 0): only its latency and objective are needed
        best, L_b, D_b = F, L_F, D_F
        dual, gamma_star = D_top, 0.0  # g(0) = min Σδ
        gammas = [0.0]
        calls = 2
        for _ in range(max_iter):
            gamma = max((D_F - D_I) / (L_I - L_F), 0.0)
            c = self._viterbi_one(gamma)
            calls += 1
            gammas.append(gamma)
            D_c, L_c = float(self.objective(c)), float(self.latency(c))
            g = D_c + gamma * (L_c - target)
            if g > dual:
                dual, gamma_star = g, gamma
            feasible = L_c <= target + self.ftol
            if feasible and (D_c < D_b or (D_c == D_b and L_c < L_b)):
                best, L_b, D_b = c, L_c, D_c
            E_c = D_c + gamma * L_c
            if E_c < min(D_F + gamma * L_F, D_I + gamma * L_I) - self.tol(gamma):
                if feasible:
                    F, L_F, D_F = c, L_c, D_c
                else:
                    L_I, D_I = L_c, D_c
            else:
                break
        else:
            raise RuntimeError(f"Lagrangian breakpoint search did not terminate in {max_iter} iterations")
        gap = max(D_b - dual, 0.0)
        tol = self.tol(gamma_star)
        res = DecodeResult(best, D_b, L_b, gamma_star, dual, gap, gap <= tol, calls, target, "lagrangian")
        if not exact or res.exact:
            return res
        return self._exact(res, np.unique(np.array(gammas)), max_labels)

    def decode_exact(self, target: float, *, max_labels: int = 200_000) -> DecodeResult:
        """Exact min{Σδ : L(c) ≤ L_T} (the primal of eq. lagrange) by bounded Pareto-label DP."""
        return self.decode(target, exact=True, max_labels=max_labels)

    def _completion(self, gammas: np.ndarray) -> np.ndarray:
        """h[g, i, c] = min over completions of Σ_{j>i} δ_j + γ_g Σ_{j≥i} L_j given c_i = c."""
        n = self.n_nodes
        g = gammas[:, None, None]
        h = np.zeros((gammas.size, n, self.K))
        for i in range(n - 2, -1, -1):
            nxt = self._U[i + 1] + h[:, i + 1]
            M = g * self._Lp[i] + nxt[:, None, :]
            h[:, i] = (M + self._F[i] if self.has_forbid else M).min(2)
        return h

    def _latency_to_go(self) -> np.ndarray:
        n = self.n_nodes
        h = np.zeros((n, self.K))
        for i in range(n - 2, -1, -1):
            M = self._Lp[i] + (self._zinf[i + 1] + h[i + 1])[None, :]
            h[i] = (M + self._F[i] if self.has_forbid else M).min(1)
        return h

    def _exact(self, lag: DecodeResult, gammas: np.ndarray, max_labels: int) -> DecodeResult:
        n, T = self.n_nodes, lag.target
        inc = lag.objective
        btol = REL_TOL * max(self.d_scale, abs(inc))
        gam = np.asarray(gammas, dtype=np.float64)
        H = self._completion(gam)  # (G, n, K)
        hL = self._latency_to_go()
        limit = T + self.ftol
        c0 = np.flatnonzero(self.allowed[0])
        Lv = np.zeros(c0.size)
        Dv = self._U[0, c0].copy()
        cv = c0.astype(np.int64)
        keep = (Lv + hL[0, cv] <= limit) & ((Dv[None] + gam[:, None] * (Lv[None] - T) + H[:, 0, cv]).max(0) <= inc + btol)
        Lv, Dv, cv = Lv[keep], Dv[keep], cv[keep]
        choices = [cv]
        parents = [np.full(cv.size, -1, dtype=np.int64)]
        total = int(cv.size)
        for j in range(n - 1):
            ac = np.flatnonzero(self.allowed[j + 1])
            m, k = Lv.size, ac.size
            Ln = Lv[:, None] + self._Lp[j][cv][:, ac]
            if self.has_forbid:
                Ln = Ln + self._F[j][cv][:, ac]  # +inf: dropped by the latency-to-go test below
            Ln = Ln.ravel()
            Dn = (Dv[:, None] + self._U[j + 1, ac][None, :]).ravel()
            cn = np.broadcast_to(ac, (m, k)).ravel()
            pn = np.broadcast_to(np.arange(m)[:, None], (m, k)).ravel()
            ok = Ln + hL[j + 1, cn] <= limit
            Ln, Dn, cn, pn = Ln[ok], Dn[ok], cn[ok], pn[ok]
            if Ln.size:
                bound = (Dn[None] + gam[:, None] * (Ln[None] - T) + H[:, j + 1, cn]).max(0)
                ok = bound <= inc + btol
                Ln, Dn, cn, pn = Ln[ok], Dn[ok], cn[ok], pn[ok]
            if Ln.size > 1:  # Pareto filter per choice: keep (L, D) not dominated within the same c
                order = np.lexsort((Dn, Ln, cn))
                Ln, Dn, cn, pn = Ln[order], Dn[order], cn[order], pn[order]
                _, rank = np.unique(Dn, return_inverse=True)
                val = rank.astype(np.int64) - cn * (Dn.size + 1)
                run = np.minimum.accumulate(val)
                nd = np.empty(val.size, dtype=bool)
                nd[0] = True
                nd[1:] = val[1:] < run[:-1]
                Ln, Dn, cn, pn = Ln[nd], Dn[nd], cn[nd], pn[nd]
            if Ln.size > max_labels:
                raise RuntimeError(
                    f"exact decode exceeded max_labels={max_labels} at node {j + 1} ({Ln.size} labels); "
                    f"the Lagrangian answer (gap {lag.gap:.3g}) is the best available"
                )
            total += int(Ln.size)
            Lv, Dv, cv = Ln, Dn, cn
            choices.append(cv)
            parents.append(pn)
        if Lv.size == 0:  # cannot happen in exact arithmetic (the incumbent survives); keep it safe
            return DecodeResult(lag.path, lag.objective, lag.latency, lag.gamma, lag.dual_bound, lag.gap, True,
                                lag.n_viterbi + gam.size, T, "exact", total)
        dmin = Dv.min()
        cand = np.flatnonzero(Dv <= dmin + REL_TOL * max(self.d_scale, abs(dmin)))
        t = int(cand[np.argmin(Lv[cand])])
        if Dv[t] > inc:
            path = lag.path
        else:
            path = np.empty(n, dtype=np.int64)
            for j in range(n - 1, -1, -1):
                path[j] = choices[j][t]
                t = int(parents[j][t])
        D, L = float(self.objective(path)), float(self.latency(path))
        gap = max(D - lag.dual_bound, 0.0)
        return DecodeResult(path, D, L, lag.gamma, lag.dual_bound, gap, True, lag.n_viterbi + gam.size, T, "exact", total)

    # ---- the Lagrangian hull ----------------------------------------------------------------
    def hull(self) -> Hull:
        """All vertices of the lower convex hull of (latency, Σδ) between min latency and γ = 0 (eq. lagrange)."""
        if "hull" in self._cache:
            return self._cache["hull"]  # type: ignore[return-value]
        lo, top = self.min_latency(), self.unconstrained()
        pts: list[tuple[float, float, np.ndarray]] = [
            (float(self.latency(top)), float(self.objective(top)), top),
            (float(self.latency(lo)), float(self.objective(lo)), lo),
        ]
        calls = 2
        pending = [(0, 1)] if pts[0][0] > pts[1][0] + self.ftol else []
        if not pending:
            pts = pts[:1] if pts[1][1] >= pts[0][1] else pts[1:]  # one point: the unconstrained optimum
        while pending:
            gam = np.array([max((pts[b][1] - pts[a][1]) / (pts[a][0] - pts[b][0]), 0.0) for a, b in pending])
            paths = self._viterbi_batch(gam)
            calls += len(pending)
            Ds, Ls = self.objective(paths), self.latency(paths)
            nxt = []
            for (a, b), g, p, D, L in zip(pending, gam, paths, Ds, Ls):
                E = D + g * L
                if E < min(pts[a][1] + g * pts[a][0], pts[b][1] + g * pts[b][0]) - self.tol(g):
                    pts.append((float(L), float(D), p))
                    c = len(pts) - 1
                    nxt += [(a, c), (c, b)]
            pending = nxt
        pts.sort(key=lambda t: (t[0], t[1]))
        hull: list[tuple[float, float, np.ndarray]] = []
        for q in pts:  # lower hull by monotone chain; collinear / duplicate points removed
            while hull and abs(hull[-1][0] - q[0]) <= self.ftol:
                if q[1] < hull[-1][1]:
                    hull.pop()
                else:
                    break
            if hull and abs(hull[-1][0] - q[0]) <= self.ftol:
                continue
            while len(hull) >= 2:
                (x0, y0, _), (x1, y1, _) = hull[-2], hull[-1]
                cross = (x1 - x0) * (q[1] - y0) - (y1 - y0) * (q[0] - x0)
                if cross <= REL_TOL * (abs(x1 - x0) * abs(q[1] - y0) + abs(y1 - y0) * abs(q[0] - x0)):
                    hull.pop()
                else:
                    break
            hull.append(q)
        Lh = np.array([h[0] for h in hull])
        Dh = np.array([h[1] for h in hull])
        slopes = (Dh[:-1] - Dh[1:]) / (Lh[1:] - Lh[:-1])
        res = Hull(np.stack([h[2] for h in hull]), Lh, Dh, slopes, calls)
        self._cache["hull"] = res
        return res

    def decode_many(self, targets: Sequence[float] | np.ndarray) -> list[DecodeResult]:
        """Answer many targets from the hull (eq. lagrange): largest-latency vertex ≤ target, bound from neighbours."""
        T = np.asarray(targets, dtype=np.float64).reshape(-1)
        if T.size == 0:
            return []
        h = self.hull()
        if not np.isfinite(T).all():
            raise ValueError("latency targets must be finite")
        tmin = float(T.min())
        if tmin < h.latencies[0] - self.ftol:
            self._check_target(tmin)  # raises InfeasibleTarget with the minimum latency
        H = h.latencies.size
        k = np.clip(np.searchsorted(h.latencies, T + self.ftol, side="right") - 1, 0, H - 1)
        top = k == H - 1
        kk = np.minimum(k, H - 2) if H > 1 else k
        gam = np.where(top, 0.0, h.slopes[kk] if H > 1 else 0.0)
        Dk, Lk = h.objectives[k], h.latencies[k]
        dual = np.where(top, Dk, Dk + gam * (Lk - T))
        gap = np.maximum(Dk - dual, 0.0)
        exact = gap <= REL_TOL * (self.d_scale + gam * self.l_scale)
        out = []
        for t in range(T.size):
            out.append(
                DecodeResult(h.paths[k[t]].copy(), float(Dk[t]), float(Lk[t]), float(gam[t]), float(dual[t]),
                             float(gap[t]), bool(exact[t]), h.n_viterbi, float(T[t]), "hull")
            )
        return out

    # ---- relaxed min-sum (§6) ---------------------------------------------------------------
    def marginals(self, gamma: float, temperature: float) -> "Marginals":
        """Relaxed min-sum (§6, corrected as in D17): Gibbs marginals of exp(−E_γ/T), log-domain.

        Any finite γ: a negative γ (a target met from above, D31) tilts the distribution toward slower paths.
        """
        T, gamma = float(temperature), float(gamma)
        if not (T > 0 and np.isfinite(T)):
            raise ValueError(f"temperature must be finite and > 0, got {temperature}")
        if not np.isfinite(gamma):
            raise ValueError(f"gamma must be finite, got {gamma}")
        n, K = self.n_nodes, self.K
        a = self._U * (-1.0 / T)  # −δ/T, −inf on forbidden / padded choices
        W = self._Lp * (-gamma / T)  # −γL/T
        if self.has_forbid:
            return self._marginals_forbid(a, W - self._F, gamma, T)
        la = np.empty((n, K))
        la[0] = a[0]
        for i in range(n - 1):
            M = la[i][:, None] + W[i]
            m = M.max(0)
            la[i + 1] = a[i + 1] + m + np.log(np.exp(M - m).sum(0))
        lb = np.empty((n, K))
        lb[n - 1] = 0.0
        for i in range(n - 2, -1, -1):
            M = W[i] + (a[i + 1] + lb[i + 1])[None, :]
            m = M.max(1)
            lb[i] = m + np.log(np.exp(M - m[:, None]).sum(1))
        m = la[n - 1].max()
        log_z = float(m + np.log(np.exp(la[n - 1] - m).sum()))
        lp = la + lb
        lp = lp - lp.max(1, keepdims=True)  # shift first: the mode gets exactly 0 whatever the scale
        lp -= np.log(np.exp(lp).sum(1, keepdims=True))  # then normalise in log space
        return Marginals(self, gamma, T, la, lb, W, lp, np.exp(lp), log_z)

    def _marginals_forbid(self, a: np.ndarray, W: np.ndarray, gamma: float, T: float) -> "Marginals":
        """`marginals` with −inf on forbidden transitions: an all −inf column or row stays −inf, never NaN."""
        n, K = self.n_nodes, self.K
        la = np.empty((n, K))
        la[0] = a[0]
        with np.errstate(divide="ignore"):
            for i in range(n - 1):
                M = la[i][:, None] + W[i]
                m = _finite_max(M, 0)
                la[i + 1] = a[i + 1] + m + np.log(np.exp(M - m).sum(0))
            lb = np.empty((n, K))
            lb[n - 1] = 0.0
            for i in range(n - 2, -1, -1):
                M = W[i] + (a[i + 1] + lb[i + 1])[None, :]
                m = _finite_max(M, 1)
                lb[i] = m + np.log(np.exp(M - m[:, None]).sum(1))
            m = la[n - 1].max()
            log_z = float(m + np.log(np.exp(la[n - 1] - m).sum()))
            lp = la + lb
            lp = lp - lp.max(1, keepdims=True)
            lp -= np.log(np.exp(lp).sum(1, keepdims=True))
        return Marginals(self, gamma, T, la, lb, W, lp, np.exp(lp), log_z)

    def negated(self) -> "Chain":
        """The same chain with −L (the "slow side" of a target met from above, D31); forbids kept."""
        return Chain(self.unaries, [-t for t in self.latency_tables], forbid=self._forbid)

    # ---- thin conveniences --------------------------------------------------------------------
    def channels(self, path: Sequence[int], widths: Sequence[Sequence[int]]) -> list[int]:
        """Widths c_0..c_n (eq. search_space) of every node for a path of choice indices."""
        return [int(widths[i][int(c)]) for i, c in enumerate(path)]


def _finite_max(M: np.ndarray, axis: int) -> np.ndarray:
    """M.max(axis) with 0 where a slice is all −inf (so M − max stays −inf, not NaN)."""
    m = M.max(axis)
    return np.where(np.isfinite(m), m, 0.0)


class NodeMarginals:
    """Per-node marginals p_i (padded `_p`, `_lp` over `chain.counts`) and the samplers built on them (§6)."""

    chain: Any
    _p: np.ndarray
    _lp: np.ndarray

    @property
    def probs(self) -> list[np.ndarray]:
        """p_i(c) per node (ragged), each summing to 1."""
        return [self._p[i, :k].copy() for i, k in enumerate(self.chain.counts)]

    @property
    def log_probs(self) -> list[np.ndarray]:
        """log p_i(c) per node (ragged); −inf on forbidden choices."""
        return [self._lp[i, :k].copy() for i, k in enumerate(self.chain.counts)]

    def mean_entropy(self) -> float:
        """Mean over nodes with several allowed choices of H(p_i) / log(#allowed): 1 uniform, 0 a single path."""
        hs = []
        for i, k in enumerate(self.chain.counts):
            p = self._p[i, :k]
            m = int((self.chain.allowed[i, :k]).sum())
            if m > 1:
                q = p[p > 0]
                hs.append(float(-(q * np.log(q)).sum() / np.log(m)))
        return float(np.mean(hs)) if hs else 0.0

    def sample_per_node(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """(size, n+1) configurations, each node drawn independently from p_i (the paper's §6 reading)."""
        cdf = np.cumsum(self._p, axis=1)
        cdf /= cdf[:, -1:]
        u = rng.random((self.chain.n_nodes, int(size)))
        idx = (cdf[:, :, None] <= u[:, None, :]).sum(1)
        return np.minimum(idx, (self.chain.counts - 1)[:, None]).T.astype(np.int64)

    def sample(self, size: int, rng: np.random.Generator, mode: str = "per_node") -> np.ndarray:
        """Sample configurations (§6): mode "per_node" (product of marginals, default) or "joint" (FFBS)."""
        if mode == "per_node":
            return self.sample_per_node(size, rng)
        if mode == "joint":
            return self.sample_joint(size, rng)
        raise ValueError(f"unknown sampling mode {mode!r}; valid: 'per_node', 'joint'")


@dataclass
class Marginals(NodeMarginals):
    """Output of the relaxed min-sum (§6): per-node Gibbs marginals, messages, log Z, and samplers."""

    chain: Chain
    gamma: float
    temperature: float
    _la: np.ndarray  # log forward messages (= −α/T), padded (n+1, K)
    _lb: np.ndarray  # log backward messages (= −β/T)
    _W: np.ndarray  # −γL/T, padded
    _lp: np.ndarray  # normalised log marginals, padded (−inf on padding / forbidden)
    _p: np.ndarray
    log_z: float  # log Σ_c exp(−E_γ(c)/T)
    _cond: np.ndarray | None = field(default=None, repr=False)

    @property
    def alpha(self) -> list[np.ndarray]:
        """Forward messages α_i(c) in energy units (D17), δ_i(c) included."""
        return [-self.temperature * self._la[i, :k] for i, k in enumerate(self.chain.counts)]

    @property
    def beta(self) -> list[np.ndarray]:
        """Backward messages β_i(c) in energy units (D17), δ_i(c) excluded; β_n = 0."""
        return [-self.temperature * self._lb[i, :k] for i, k in enumerate(self.chain.counts)]

    def pairwise(self, i: int) -> np.ndarray:
        """Joint marginal p(c_i, c_{i+1}) of edge i, shape (k_i, k_{i+1})."""
        ch = self.chain
        a_next = -ch._U[i + 1] / self.temperature
        M = self._la[i][:, None] + self._W[i] + (a_next + self._lb[i + 1])[None, :]
        M = M - M.max()
        P = np.exp(M)
        P /= P.sum()
        return P[: ch.counts[i], : ch.counts[i + 1]]

    def sample_joint(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """(size, n+1) configurations drawn jointly from exp(−E_γ/T) by forward-filtering backward-sampling."""
        ch = self.chain
        n, B = ch.n_nodes, int(size)
        if self._cond is None and n > 1:
            M = self._la[:-1, :, None] + self._W  # [i, c_i, c_{i+1}] ∝ log p(c_i | c_{i+1}) + const
            if ch.has_forbid:  # a state no predecessor reaches: its (never used) row stays finite
                m = M.max(1, keepdims=True)
                M = np.exp(M - np.where(np.isfinite(m), m, 0.0))
                cdf = np.cumsum(M, axis=1)
                cdf /= np.where(cdf[:, -1:, :] > 0, cdf[:, -1:, :], 1.0)
            else:
                M = np.exp(M - M.max(1, keepdims=True))
                cdf = np.cumsum(M, axis=1)
                cdf /= cdf[:, -1:, :]
            self._cond = np.ascontiguousarray(cdf.transpose(0, 2, 1))  # [i, c_{i+1}, c_i]
        u = rng.random((n, B))
        out = np.empty((n, B), dtype=np.int64)
        last = self._la[n - 1]
        w = np.exp(last - last.max())
        cdf = np.cumsum(w)
        cdf /= cdf[-1]
        out[n - 1] = (cdf[:, None] <= u[n - 1][None, :]).sum(0)
        for i in range(n - 2, -1, -1):
            rows = self._cond[i][out[i + 1]]  # (B, K)
            out[i] = (rows <= u[i][:, None]).sum(1)
        np.minimum(out, (ch.counts - 1)[:, None], out=out)
        return out.T.copy()


# ---------------------------------------------------------------------------------------------
# Thin functional API
# ---------------------------------------------------------------------------------------------
def min_latency(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> np.ndarray:
    """Exact minimum-latency configuration (Viterbi on latency alone; D14)."""
    return Chain(unaries, latency).min_latency()


def max_latency(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> np.ndarray:
    """Exact maximum-latency configuration (Viterbi on −latency)."""
    return Chain(unaries, latency).max_latency()


def unconstrained(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> np.ndarray:
    """argmin Σδ (eq. viterbi at γ = 0), ties toward lower latency then lexicographic."""
    return Chain(unaries, latency).unconstrained()


def decode(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray], target: float, *, exact: bool = False) -> DecodeResult:
    """Constrained decode under a latency budget (eq. lagrange); exact=True closes the duality gap."""
    return Chain(unaries, latency).decode(target, exact=exact)


def lagrangian_hull(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> Hull:
    """All vertices of the lower convex hull of (latency, Σδ) (eq. lagrange over all γ ≥ 0)."""
    return Chain(unaries, latency).hull()


def decode_many(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray], targets: Sequence[float]) -> list[DecodeResult]:
    """Many targets answered from one hull computation (eq. lagrange)."""
    return Chain(unaries, latency).decode_many(targets)


def marginals(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray], gamma: float, temperature: float) -> Marginals:
    """Relaxed min-sum marginals at temperature T (§6, D17)."""
    return Chain(unaries, latency).marginals(gamma, temperature)


def sample(
    unaries: Sequence[np.ndarray],
    latency: Sequence[np.ndarray],
    gamma: float,
    temperature: float,
    size: int,
    rng: np.random.Generator,
    mode: str = "per_node",
) -> np.ndarray:
    """(size, n+1) configurations from the relaxed min-sum (§6): "per_node" marginals or "joint" FFBS."""
    return Chain(unaries, latency).marginals(gamma, temperature).sample(size, rng, mode)


def latency_chain(latency: Sequence[np.ndarray]) -> Chain:
    """A chain with zero unaries (latency only, eq. lat): node counts from the table shapes."""
    tables = [np.asarray(t, dtype=np.float64) for t in latency]
    if not tables:
        raise ValueError("a latency chain needs at least one latency table")
    counts = [tables[0].shape[0], *(t.shape[1] for t in tables)]
    return Chain([np.zeros(k) for k in counts], tables)
