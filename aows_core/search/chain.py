"""The chain MRF (eq. viterbi, eq. lat; docs/method.md D14, D15, D44): padded arrays, energies, tolerances, decoders.

A chain has nodes 0..n; node i has k_i choices (fixed end nodes have k = 1). Unaries δ_i have length
k_i, latency tables L_i are k_i × k_{i+1}. Energies are MINIMISED:

    E_γ(c) = Σ_i δ_i(c_i) + γ Σ_i L_i(c_i, c_{i+1})                      (eq. viterbi)

Σδ(c) is the *objective*, Σ L(c) the *latency*. A unary of +inf forbids a choice (`unvisited.apply_unvisited`,
D13); NaN or -inf unaries and non-finite latencies are refused. `forbid` (a boolean mask per edge) forbids
transitions: +inf in every min-sum, −inf in the log domain (a residual space's compiled chain,
`aows_core.search.graph`, D44); without it every result is what it was. Paths are int64 choice indices of every
node 0..n. Ties: the lexicographically smallest path among optima (`Chain.solve`); `tie="low"|"high"` and
`unconstrained`/`min_latency`/`max_latency` break ties on latency / Σδ first. Comparisons use REL_TOL times a
per-instance scale (Σ_i max|δ_i|, Σ_i max|L_i|); a configuration is feasible for L_T when
L(c) ≤ L_T + REL_TOL·Σ_i max|L_i|.

`Chain` holds the arrays; each decoder lives in its own module and takes the chain: `viterbi` (eq. viterbi),
`lagrangian` (eq. lagrange, D14), `exact` (D15), `hull` (the lower convex hull), `marginals` (§6, D17, D20).
The full contract (tie rules and guarantees of each decoder) is in docs/method.md. Numpy only.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .exact import exact_decode
from .hull import decode_from_hull, lower_hull
from .lagrangian import breakpoint_search, check_target
from .marginals import Marginals, relaxed_min_sum
from .results import REL_TOL, DecodeResult, Hull
from .viterbi import Key, latency_to_go, lexicographic_path, viterbi_path


def _checked_unaries(unaries: Sequence[np.ndarray]) -> list[np.ndarray]:
    """δ_i as flat float arrays; NaN, −inf, an empty node or a node with every choice +inf refused."""
    out = [np.asarray(u, dtype=np.float64).reshape(-1) for u in unaries]
    for i, u in enumerate(out):
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
    return out


def _checked_tables(latency: Sequence[np.ndarray], counts: np.ndarray) -> list[np.ndarray]:
    """L_i as (k_i, k_{i+1}) float arrays; a wrong shape or a non-finite entry refused."""
    out = []
    for i, table in enumerate(latency):
        table = np.asarray(table, dtype=np.float64)
        if table.shape != (counts[i], counts[i + 1]):
            raise ValueError(f"latency table of edge {i} has shape {table.shape}, expected "
                             f"{(int(counts[i]), int(counts[i + 1]))}")
        bad = np.argwhere(~np.isfinite(table))
        if bad.size:
            a, b = (int(x) for x in bad[0])
            raise ValueError(f"latency table of edge {i} entry ({a}, {b}) is {table[a, b]} (must be finite)")
        out.append(table)
    return out


def _forbid_masks(forbid: Sequence[np.ndarray | None] | None, counts: np.ndarray) -> list[np.ndarray | None] | None:
    """Boolean per-edge masks (True = transition not allowed), or None when nothing is forbidden."""
    if forbid is None:
        return None
    if len(forbid) != len(counts) - 1:
        raise ValueError(f"a chain of {len(counts)} nodes needs {len(counts) - 1} forbid masks, got {len(forbid)}")
    out: list[np.ndarray | None] = []
    for i, mask in enumerate(forbid):
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (counts[i], counts[i + 1]):
                raise ValueError(f"forbid mask of edge {i} has shape {mask.shape}, expected "
                                 f"{(int(counts[i]), int(counts[i + 1]))}")
            mask = mask if mask.any() else None
        out.append(mask)
    return out if any(mask is not None for mask in out) else None


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
        unaries = _checked_unaries(unaries)
        counts = np.array([u.size for u in unaries], dtype=np.int64)
        tables = _checked_tables(latency, counts)
        masks = _forbid_masks(forbid, counts)
        if masks is not None:  # forbidden transitions keep a finite 0 in the table (D44)
            tables = [np.where(f, 0.0, t) if f is not None else t for t, f in zip(tables, masks)]
        self._pad(unaries, tables, counts)
        self.d_scale = float(sum(np.abs(u[np.isfinite(u)]).max() for u in unaries))  # Σ_i max|δ_i|
        self.l_scale = float(sum(np.abs(t).max() for t in tables)) if tables else 0.0  # Σ_i max|L_i|
        self.ftol = REL_TOL * self.l_scale  # latency tolerance: feasible when L(c) ≤ L_T + ftol
        self._solved: dict[str, object] = {}  # min / max latency, unconstrained optimum, hull
        self._set_forbidden(masks)

    def _pad(self, unaries: list[np.ndarray], tables: list[np.ndarray], counts: np.ndarray) -> None:
        """The (n+1, K) unaries (+inf on padding) and (n, K, K) latency (0 on padding), K = the most choices."""
        n, K = len(unaries), int(counts.max())
        self.n_nodes, self.counts, self.max_choices = n, counts, K
        self.padded_unaries = np.full((n, K), np.inf)  # δ_i(c), +inf on forbidden and padded choices
        for i, u in enumerate(unaries):
            self.padded_unaries[i, : u.size] = u
        self.padded_latency = np.zeros((max(n - 1, 0), K, K))  # L_i(c, c′), 0 on padding and forbidden transitions
        for i, t in enumerate(tables):
            self.padded_latency[i, : t.shape[0], : t.shape[1]] = t
        self.negated_latency = -self.padded_latency
        self.zero_latency = np.zeros_like(self.padded_latency)
        self.allowed = np.isfinite(self.padded_unaries)
        self.allowed_zero = np.where(self.allowed, 0.0, np.inf)  # 0 on allowed choices, +inf elsewhere
        self.zero_unaries = np.zeros((n, K))
        self.node_index, self.edge_index, self.choice_index = np.arange(n), np.arange(n - 1), np.arange(K)

    def _set_forbidden(self, masks: list[np.ndarray | None] | None) -> None:
        """Forbidden transitions (D44): +inf added to every min-sum, −inf to every log-domain message."""
        self.forbid_masks = masks
        self.has_forbid = masks is not None
        self.forbidden_inf: np.ndarray | None = None  # (n, K, K): +inf on forbidden transitions, else 0
        if not self.has_forbid:
            return
        self.forbidden_inf = np.zeros(self.padded_latency.shape)
        for i, mask in enumerate(masks):
            if mask is not None:
                self.forbidden_inf[i, : mask.shape[0], : mask.shape[1]][mask] = np.inf
        if not np.isfinite(latency_to_go(self)[0] + self.allowed_zero[0]).any():
            raise ValueError("the forbidden transitions leave no allowed path through the chain")

    def with_forbidden(self, pairwise: np.ndarray) -> np.ndarray:
        """A padded (n, K, K) pairwise array with +inf on forbidden transitions (the array itself when none are)."""
        return pairwise + self.forbidden_inf if self.has_forbid else pairwise

    # ---- accessors and energies ---------------------------------------------------------------
    @property
    def unaries(self) -> list[np.ndarray]:
        """δ_i per node (eq. average_error), +inf on forbidden choices."""
        return [self.padded_unaries[i, :k].copy() for i, k in enumerate(self.counts)]

    @property
    def latency_tables(self) -> list[np.ndarray]:
        """L_i per edge (eq. lat)."""
        return [self.padded_latency[i, : self.counts[i], : self.counts[i + 1]].copy() for i in range(self.n_nodes - 1)]

    def tol(self, gamma: float | np.ndarray = 0.0) -> float | np.ndarray:
        """Absolute tolerance for Lagrangian energies at γ: REL_TOL·(Σ max|δ| + γ Σ max|L|)."""
        return REL_TOL * (self.d_scale + gamma * self.l_scale)

    def objective(self, path: Sequence[int] | np.ndarray) -> np.ndarray | float:
        """Σ_i δ_i(c_i) of one path (float) or of a batch (B, n+1) of paths (array) (eq. viterbi)."""
        p = np.asarray(path)
        if p.ndim == 1:
            return float(self.padded_unaries[self.node_index, p].sum())
        return self.padded_unaries[self.node_index, p].sum(axis=1)

    def latency(self, path: Sequence[int] | np.ndarray) -> np.ndarray | float:
        """Σ_i L_i(c_i, c_{i+1}) of one path (float) or of a batch (B, n+1) of paths (eq. lat)."""
        p = np.asarray(path)
        if p.ndim == 1:
            return float(self.padded_latency[self.edge_index, p[:-1], p[1:]].sum())
        return self.padded_latency[self.edge_index, p[:, :-1], p[:, 1:]].sum(axis=1)

    def energy(self, path: Sequence[int], gamma: float) -> float:
        """E_γ(c) = Σδ + γ ΣL (eq. lagrange_subproblem)."""
        return float(self.objective(path)) + gamma * float(self.latency(path))

    def channels(self, path: Sequence[int], widths: Sequence[Sequence[int]]) -> list[int]:
        """Widths c_0..c_n (eq. search_space) of every node for a path of choice indices."""
        return [int(widths[i][int(c)]) for i, c in enumerate(path)]

    def negated(self) -> "Chain":
        """The same chain with −L (the "slow side" of a target met from above, D31); forbids kept."""
        return Chain(self.unaries, [-t for t in self.latency_tables], forbid=self.forbid_masks)

    # ---- exact min-sum (module viterbi) -------------------------------------------------------
    def solve(self, gamma: float, tie: str | None = None) -> np.ndarray:
        """argmin_c Σδ + γ ΣL (eq. lagrange_subproblem / viterbi); tie None = lexicographic, "low"/"high" latency."""
        gamma = float(gamma)
        if not (gamma >= 0 and np.isfinite(gamma)):
            raise ValueError(f"gamma must be finite and ≥ 0, got {gamma}")
        if tie is None:
            return viterbi_path(self, gamma)
        if tie not in ("low", "high"):
            raise ValueError(f"tie must be None, 'low' or 'high', got {tie!r}")
        latency = self.padded_latency if tie == "low" else self.negated_latency
        return lexicographic_path(self, Key(self.padded_unaries, self.padded_latency * gamma, self.tol(gamma)),
                                  Key(self.zero_unaries, latency, REL_TOL * self.l_scale))

    def _cached(self, name: str, primary: Key, secondary: Key) -> np.ndarray:
        if name not in self._solved:
            self._solved[name] = lexicographic_path(self, primary, secondary)
        return self._solved[name].copy()  # type: ignore[union-attr]

    def min_latency(self) -> np.ndarray:
        """Exact minimum-latency configuration over allowed choices (Viterbi on latency alone; D14)."""
        return self._cached("min", Key(self.allowed_zero, self.padded_latency, self.ftol),
                            Key(self.padded_unaries, self.zero_latency, REL_TOL * self.d_scale))

    def max_latency(self) -> np.ndarray:
        """Exact maximum-latency configuration over allowed choices (Viterbi on −latency)."""
        return self._cached("max", Key(self.allowed_zero, self.negated_latency, self.ftol),
                            Key(self.padded_unaries, self.zero_latency, REL_TOL * self.d_scale))

    def unconstrained(self) -> np.ndarray:
        """argmin Σδ (γ = 0, eq. viterbi), ties toward lower latency then lexicographic."""
        return self._cached("top", Key(self.padded_unaries, self.zero_latency, REL_TOL * self.d_scale),
                            Key(self.zero_unaries, self.padded_latency, self.ftol))

    # ---- constrained decode (modules lagrangian, exact, hull) ---------------------------------
    def check_target(self, target: float) -> tuple[np.ndarray, float, float]:
        """(min-latency path, its latency, its Σδ); `InfeasibleTarget` naming the minimum latency below it (D14)."""
        return check_target(self, target)

    def decode(self, target: float, *, exact: bool = False, max_iter: int = 100_000,
               max_labels: int = 200_000) -> DecodeResult:
        """max_γ min_c Σδ + γ(L(c) − L_T) by exact breakpoint search (eq. lagrange); exact=True: true optimum (D15)."""
        result, gammas = breakpoint_search(self, float(target), max_iter)
        if not exact or result.exact:
            return result
        return exact_decode(self, result, gammas, max_labels)

    def decode_exact(self, target: float, *, max_labels: int = 200_000) -> DecodeResult:
        """Exact min{Σδ : L(c) ≤ L_T} (the primal of eq. lagrange) by bounded Pareto-label DP."""
        return self.decode(target, exact=True, max_labels=max_labels)

    def hull(self) -> Hull:
        """All vertices of the lower convex hull of (latency, Σδ) between min latency and γ = 0 (eq. lagrange)."""
        if "hull" not in self._solved:
            self._solved["hull"] = lower_hull(self)
        return self._solved["hull"]  # type: ignore[return-value]

    def decode_many(self, targets: Sequence[float] | np.ndarray) -> list[DecodeResult]:
        """Answer many targets from the hull (eq. lagrange): largest-latency vertex ≤ target, bound from neighbours."""
        return decode_from_hull(self, targets)

    # ---- relaxed min-sum (module marginals) ---------------------------------------------------
    def marginals(self, gamma: float, temperature: float) -> Marginals:
        """Relaxed min-sum (§6, corrected as in D17): Gibbs marginals of exp(−E_γ/T), log-domain.

        Any finite γ: a negative γ (a target met from above, D31) tilts the distribution toward slower paths.
        """
        return relaxed_min_sum(self, gamma, temperature)


__all__ = ["Chain"]
