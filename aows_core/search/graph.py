"""Residual search spaces decoded as a chain (docs/method.md D44): a path decomposition in node order.

A space's nodes 0..n carry width choices and its edges (layers, src → dst; src = dst for a one-width layer)
latency tables, so E_γ(c) = Σ_v δ_v(c_v) + γ Σ_e L_e(c_src, c_dst) (eq. viterbi, eq. lat). Position t of the
compiled chain introduces node t; its state is the joint choice of A_t = {t} ∪ {u < t : u has an edge to a node
> t} (the product of the active nodes' choices in increasing node order, the first the most significant). The
transition t → t+1 charges every edge whose later endpoint is t+1 and forbids states that disagree on a carried
node; node t's unary sits on position t. The chain's own recursions then minimise (T·log-sum-exp for §6) the
widths that leave the state, which is D44's elimination of the inner widths, so every decoder of a
`aows_core.search.chain.Chain` (Viterbi, eq. lagrange's breakpoint search, the exact label DP, the hull, the relaxed
min-sum) applies unchanged. `SpaceChain` has `Chain`'s API in node terms; `space_chain` returns a plain `Chain`
for a chain space (MobileNet-v1), whose results stay bit-identical. Numpy only.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property, lru_cache
from typing import Sequence

import numpy as np

from ..space import MAX_ENTRIES, MAX_STATES, SearchSpace, frontier
from .chain import Chain
from .lagrangian import check_target
from .marginals import Marginals, NodeMarginals
from .results import DecodeResult, Hull
from .viterbi import viterbi


# ---------------------------------------------------------------------------------------------
# The path decomposition (depends on node counts and edges only)
# ---------------------------------------------------------------------------------------------
class _Layout:
    """Active nodes, state digits, charged edges and forbid masks of the compiled chain (D44)."""

    def __init__(self, counts: tuple[int, ...], edges: tuple[tuple[int, int], ...]):
        n1 = len(counts)
        self.active: list[list[int]] = []
        self.digits: list[dict[int, np.ndarray]] = []
        for t, act in enumerate(frontier(n1, edges)):
            dims = [counts[u] for u in act]
            size = int(np.prod(dims, dtype=np.int64))
            if size > MAX_STATES:
                raise ValueError(
                    f"node {t}: the compiled chain's state holds nodes {act} with {size} joint choices "
                    f"(more than {MAX_STATES}); this space's edges keep too many widths active at once"
                )
            grid = np.unravel_index(np.arange(size), dims) if len(act) > 1 else (np.arange(size),)
            self.active.append(act)
            self.digits.append({u: np.asarray(g, dtype=np.int64) for u, g in zip(act, grid)})
        self.sizes = np.array([d[t].size for t, d in enumerate(self.digits)], dtype=np.int64)
        K = int(self.sizes.max())
        if n1 * K * K > MAX_ENTRIES:  # the chain pads every transition to K × K
            t = int(self.sizes.argmax())
            raise ValueError(f"node {t}: the compiled chain's state holds nodes {self.active[t]} with {K} joint "
                             f"choices; {n1} positions of {K} × {K} transitions exceed {MAX_ENTRIES} entries")
        # Transition t → t+1: the edges whose later endpoint is t+1 (node 0's self-edges go on the first one).
        self.charged: list[list[int]] = [[] for _ in range(max(n1 - 1, 0))]
        for e, (s, d) in enumerate(edges):
            self.charged[max(s, d, 1) - 1].append(e)
        self.forbid: list[np.ndarray | None] = []
        for t in range(n1 - 1):
            carried = [u for u in self.active[t] if u in self.digits[t + 1] and u != t + 1]
            f = None
            for u in carried:
                g = self.digits[t][u][:, None] != self.digits[t + 1][u][None, :]
                f = g if f is None else f | g
            self.forbid.append(f)
        self.edges = edges

    def index(self, t: int, v: int) -> np.ndarray:
        """Choice of node v along the rows (state of position t) or columns (position t+1) of transition t."""
        return self.digits[t + 1][v][None, :] if v == t + 1 else self.digits[t][v][:, None]

    def tables(self, tables: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per transition, Σ of its charged edges' table entries, (S_t, S_{t+1})."""
        out = []
        for t, es in enumerate(self.charged):
            shape = (int(self.sizes[t]), int(self.sizes[t + 1]))
            T = None
            for e in es:
                s, d = self.edges[e]
                v = tables[e][self.index(t, s), self.index(t, d)]
                T = np.broadcast_to(v, shape).copy() if T is None else T + v
            out.append(np.zeros(shape) if T is None else T)
        return out

    def unaries(self, unaries: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Node t's unary on every state of position t."""
        return [unaries[t][self.digits[t][t]] for t in range(len(self.digits))]

    def to_nodes(self, paths: np.ndarray) -> np.ndarray:
        """State paths (…, n+1) → node choice indices (…, n+1)."""
        paths = np.asarray(paths)
        out = np.empty(paths.shape, dtype=np.int64)
        for t, d in enumerate(self.digits):
            out[..., t] = d[t][paths[..., t]]
        return out


@lru_cache(maxsize=16)
def _layout(counts: tuple[int, ...], edges: tuple[tuple[int, int], ...]) -> _Layout:
    return _Layout(counts, edges)


# ---------------------------------------------------------------------------------------------
# The compiled chain in node terms
# ---------------------------------------------------------------------------------------------
class SpaceChain:
    """`Chain`'s API over a space's nodes and edges (D44): paths are (n+1,) node choice indices."""

    def __init__(self, edges: Sequence[tuple[int, int]], unaries: Sequence[np.ndarray], tables: Sequence[np.ndarray]):
        us = [np.asarray(u, dtype=np.float64).reshape(-1) for u in unaries]
        self.edges = tuple((int(s), int(d)) for s, d in edges)
        n1 = len(us)
        for i, u in enumerate(us):
            if u.size == 0:
                raise ValueError(f"node {i} has no choices")
            bad = np.flatnonzero(np.isnan(u) | (u == -np.inf))
            if bad.size:
                raise ValueError(f"node {i} choice {int(bad[0])}: unary is {u[bad[0]]}; NaN marks an unvisited width "
                                 "(resolve it with apply_unvisited) and -inf is not allowed (+inf forbids a choice)")
            if not np.isfinite(u).any():
                raise ValueError(f"node {i}: every choice is forbidden (+inf)")
        if len(tables) != len(self.edges):
            raise ValueError(f"{len(self.edges)} edges need as many latency tables, got {len(tables)}")
        self.counts = np.array([u.size for u in us], dtype=np.int64)
        ls = []
        for e, ((s, d), t) in enumerate(zip(self.edges, tables)):
            if not (0 <= s < n1 and 0 <= d < n1):
                raise ValueError(f"edge {e} maps node {s} to node {d}; the chain has nodes 0..{n1 - 1}")
            t = np.asarray(t, dtype=np.float64)
            if t.shape != (self.counts[s], self.counts[d]):
                raise ValueError(f"latency table of edge {e} has shape {t.shape}, "
                                 f"expected {(int(self.counts[s]), int(self.counts[d]))}")
            used = np.diagonal(t) if s == d else t
            if not np.isfinite(used).all():
                raise ValueError(f"latency table of edge {e} holds non-finite entries (must be finite)")
            ls.append(t)
        self.n_nodes = n1
        self.max_choices = int(self.counts.max())
        self._us, self._ls = us, ls
        self.padded_unaries = np.full((n1, self.max_choices), np.inf)
        for i, u in enumerate(us):
            self.padded_unaries[i, : u.size] = u
        self.padded_latency = np.zeros((len(ls), self.max_choices, self.max_choices))  # per space edge
        for e, t in enumerate(ls):
            self.padded_latency[e, : t.shape[0], : t.shape[1]] = t
        self._src = np.array([s for s, _ in self.edges], dtype=np.int64)
        self._dst = np.array([d for _, d in self.edges], dtype=np.int64)
        self.node_index, self.edge_index = np.arange(n1), np.arange(len(ls))
        self.allowed = np.isfinite(self.padded_unaries)
        self.layout = _layout(tuple(int(k) for k in self.counts), self.edges)

    @cached_property
    def compiled(self) -> Chain:
        """The equivalent chain over the layout's states (transitions that disagree on a carried node forbidden)."""
        lay = self.layout
        return Chain(lay.unaries(self._us), lay.tables(self._ls), forbid=lay.forbid)

    # ---- accessors (Chain's, in node terms) -------------------------------------------------
    @property
    def unaries(self) -> list[np.ndarray]:
        """δ_v per node, +inf on forbidden choices."""
        return [u.copy() for u in self._us]

    @property
    def latency_tables(self) -> list[np.ndarray]:
        """L_e per space edge (|C_src| × |C_dst|; only the diagonal of a one-width layer is read)."""
        return [t.copy() for t in self._ls]

    @property
    def ftol(self) -> float:
        return self.compiled.ftol

    def tol(self, gamma: float = 0.0) -> float:
        return self.compiled.tol(gamma)

    def objective(self, path) -> np.ndarray | float:
        """Σ_v δ_v(c_v) of one node path or a batch (B, n+1) (eq. viterbi)."""
        p = np.asarray(path)
        if p.ndim == 1:
            return float(self.padded_unaries[self.node_index, p].sum())
        return self.padded_unaries[self.node_index, p].sum(axis=1)

    def latency(self, path) -> np.ndarray | float:
        """Σ_e L_e(c_src, c_dst) of one node path or a batch (B, n+1) (eq. lat)."""
        p = np.asarray(path)
        if p.ndim == 1:
            return float(self.padded_latency[self.edge_index, p[self._src], p[self._dst]].sum())
        return self.padded_latency[self.edge_index, p[:, self._src], p[:, self._dst]].sum(axis=1)

    def energy(self, path, gamma: float) -> float:
        """E_γ(c) = Σδ + γ ΣL (eq. lagrange_subproblem)."""
        return float(self.objective(path)) + gamma * float(self.latency(path))

    def channels(self, path: Sequence[int], widths: Sequence[Sequence[int]]) -> list[int]:
        return [int(widths[i][int(c)]) for i, c in enumerate(path)]

    def negated(self) -> "SpaceChain":
        """The same space with −L (the slow side of a target met from above, D31)."""
        return SpaceChain(self.edges, self._us, [-t for t in self._ls])

    # ---- decoders (the compiled chain's, paths mapped to nodes) ------------------------------
    def solve(self, gamma: float, tie: str | None = None) -> np.ndarray:
        """argmin Σδ + γ ΣL (eq. lagrange_subproblem / viterbi), ties as `Chain.solve` on the compiled states."""
        return self.layout.to_nodes(self.compiled.solve(gamma, tie))

    def min_latency(self) -> np.ndarray:
        """Exact minimum-latency configuration (D14)."""
        return self.layout.to_nodes(self.compiled.min_latency())

    def max_latency(self) -> np.ndarray:
        """Exact maximum-latency configuration."""
        return self.layout.to_nodes(self.compiled.max_latency())

    def unconstrained(self) -> np.ndarray:
        """argmin Σδ (γ = 0), ties toward lower latency."""
        return self.layout.to_nodes(self.compiled.unconstrained())

    def check_target(self, target: float) -> tuple[np.ndarray, float, float]:
        """(min-latency path, its latency, its Σδ); `InfeasibleTarget` with the minimum latency below it (D14)."""
        return check_target(self, target, "node choice indices")

    def _result(self, r: DecodeResult) -> DecodeResult:
        """A compiled decode in node terms; Σδ and latency recomputed from the node path (eq. lat)."""
        path = self.layout.to_nodes(r.path)
        return dataclasses.replace(r, path=path, objective=float(self.objective(path)),
                                   latency=float(self.latency(path)))

    def decode(self, target: float, *, exact: bool = False, max_iter: int = 100_000,
               max_labels: int = 200_000) -> DecodeResult:
        """max_γ min_c Σδ + γ(L(c) − L_T) (eq. lagrange) on the compiled chain; exact=True: the true optimum."""
        self.check_target(float(target))
        return self._result(self.compiled.decode(target, exact=exact, max_iter=max_iter, max_labels=max_labels))

    def decode_exact(self, target: float, *, max_labels: int = 200_000) -> DecodeResult:
        """Exact min{Σδ : L(c) ≤ L_T} by the bounded Pareto-label DP over the compiled states (D15, D44)."""
        return self.decode(target, exact=True, max_labels=max_labels)

    def hull(self) -> Hull:
        """Vertices of the lower convex hull of (latency, Σδ) (eq. lagrange), node paths."""
        h = self.compiled.hull()
        paths = self.layout.to_nodes(h.paths)
        return Hull(paths, np.asarray(self.latency(paths)), np.asarray(self.objective(paths)), h.slopes, h.n_viterbi)

    def decode_many(self, targets) -> list[DecodeResult]:
        """Many targets answered from the hull (eq. lagrange)."""
        T = np.asarray(targets, dtype=np.float64).reshape(-1)
        if T.size and np.isfinite(T).all():
            self.check_target(float(T.min()))
        return [self._result(r) for r in self.compiled.decode_many(T)]

    def marginals(self, gamma: float, temperature: float) -> "SpaceMarginals":
        """Gibbs marginals of exp(−E_γ/T) per node (§6, D17; inner widths log-sum-exp'ed out, D44)."""
        return SpaceMarginals(self, self.compiled.marginals(gamma, temperature))


class SpaceMarginals(NodeMarginals):
    """The relaxed min-sum (§6) of a `SpaceChain`: per-node marginals, edge pair marginals, samplers."""

    def __init__(self, chain: SpaceChain, states: Marginals):
        self.chain, self.states = chain, states
        self.gamma, self.temperature, self.log_z = states.gamma, states.temperature, states.log_z
        lay, K = chain.layout, chain.max_choices
        lp = np.full((chain.n_nodes, K), -np.inf)
        with np.errstate(divide="ignore"):
            for v, act in enumerate(lay.active):
                s = states._log_probs[v, : lay.sizes[v]]
                if len(act) == 1:
                    lp[v, : s.size] = s
                    continue
                axes = tuple(i for i, u in enumerate(act) if u != v)
                g = s.reshape([int(chain.counts[u]) for u in act])
                m = g.max(axis=axes, keepdims=True)
                m = np.where(np.isfinite(m), m, 0.0)
                lp[v, : chain.counts[v]] = (m + np.log(np.exp(g - m).sum(axis=axes, keepdims=True))).reshape(-1)
        self._log_probs, self._probs = lp, np.exp(lp)

    def pairwise(self, e: int) -> np.ndarray:
        """Joint marginal p(c_src, c_dst) of space edge e, (|C_src|, |C_dst|) (diagonal for a one-width layer)."""
        ch, lay = self.chain, self.chain.layout
        s, d = ch.edges[e]
        if s == d:
            return np.diag(self._probs[s, : ch.counts[s]])
        t = max(s, d) - 1
        P = self.states.pairwise(t)
        out = np.zeros((ch.counts[s], ch.counts[d]))
        np.add.at(out, (np.broadcast_to(lay.index(t, s), P.shape), np.broadcast_to(lay.index(t, d), P.shape)), P)
        return out

    def sample_joint(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """(size, n+1) configurations drawn jointly from exp(−E_γ/T): FFBS on the compiled chain (D20, D44)."""
        return self.chain.layout.to_nodes(self.states.sample_joint(size, rng))


# ---------------------------------------------------------------------------------------------
# Factories
# ---------------------------------------------------------------------------------------------
def space_chain(space: SearchSpace, unaries: Sequence[np.ndarray], tables: Sequence[np.ndarray]) -> Chain | SpaceChain:
    """The decoder of a space (D44): a plain `Chain` for a chain space (MobileNet-v1), a `SpaceChain` otherwise."""
    if space.is_chain:
        return Chain(unaries, tables)
    return SpaceChain(space.edges, unaries, tables)


def space_latency_chain(space: SearchSpace, tables: Sequence[np.ndarray]) -> Chain | SpaceChain:
    """`space_chain` with zero unaries (latency only, eq. lat)."""
    return space_chain(space, [np.zeros(len(c)) for c in space.choices], tables)


def space_argmin(space: SearchSpace, unaries: Sequence[np.ndarray], pairwise: Sequence[np.ndarray]) -> np.ndarray:
    """The exact argmin over the space's configurations of Σ u_n(c_n) + Σ_e P_e(c_src, c_dst) (untoleranced min-sum,
    lexicographically smallest on ties; choice indices of nodes 0..n): `viterbi` on a chain, the compiled chain at
    γ = 1 otherwise (D44). Each unary and table is padded (entries beyond a node's choices are ignored)."""
    sizes = [len(c) for c in space.choices]
    if space.is_chain:
        return viterbi([u[:k] for u, k in zip(unaries, sizes)],
                       [P[:sizes[i], :sizes[i + 1]] for i, P in enumerate(pairwise)])[0]
    return SpaceChain(space.edges, [u[:k] for u, k in zip(unaries, sizes)],
                      [P[: sizes[s], : sizes[d]] for P, (s, d) in zip(pairwise, space.edges)]).solve(1.0)


__all__ = ["MAX_ENTRIES", "MAX_STATES", "SpaceChain", "SpaceMarginals", "space_argmin", "space_chain",
           "space_latency_chain"]
