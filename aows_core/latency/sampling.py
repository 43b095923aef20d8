"""Which networks to profile (§4, supplementary A): uniform and coverage-biased configuration sampling.

The training set of the latency model is drawn by coverage-biased sampling: the next network is the
exact minimiser (`search.graph.space_argmin`: Viterbi on a chain, a residual space's compiled chain, D44) of
the paper's Iverson energy (eq. A.2) as the dominant term of a lexicographic energy, until every variable
of eq. lat is seen `coverage` times; λ and the final quality are measured on two separate uniform sets
(docs/method.md D1, D2). `coverage_lower_bound` is the least number of networks any sampler needs. Numpy only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..config import SamplingSettings
from ..search.graph import space_argmin
from ..space import SearchSpace, multiplier_configs

SeedLike = int | np.random.Generator | np.random.SeedSequence | None

SETS = ("train", "lambda_val", "test")

_BLOCKED = float(2**40)  # unary of padded (non-existent) choices; far above any real energy


def _sizes(space: SearchSpace) -> np.ndarray:
    return np.array([len(c) for c in space.choices], dtype=np.int64)


def uniform_configs(space: SearchSpace, n: int, rng: SeedLike) -> np.ndarray:
    """n configurations, every node independently uniform over its choices (§4); shape (n, n_nodes)."""
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    gen = np.random.default_rng(rng)
    return gen.integers(0, _sizes(space)[None, :], size=(int(n), space.n_nodes), dtype=np.int64)


def coverage_counts(space: SearchSpace, idx: np.ndarray) -> np.ndarray:
    """N(v): how often each latency variable appears in the configurations idx (once per use, eq. lat)."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1, space.n_nodes)
    if len(idx) == 0:
        return np.zeros(space.n_variables, dtype=np.int64)
    return np.bincount(space.variable_ids(idx).ravel(), minlength=space.n_variables).astype(np.int64)


def networks_to_cover(space: SearchSpace, idx: np.ndarray, coverage: int = 1) -> int | None:
    """Length of the shortest prefix of idx in which every variable is seen ≥ coverage times (None if never)."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1, space.n_nodes)
    if coverage <= 0:
        return 0
    if len(idx) == 0:
        return None
    vids = space.variable_ids(idx)  # (P, E)
    var = vids.ravel()
    pos = np.repeat(np.arange(len(idx)), vids.shape[1])
    counts = np.bincount(var, minlength=space.n_variables)
    if counts.min() < coverage:
        return None
    order = np.lexsort((pos, var))  # grouped by variable, positions ascending
    start = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return int(pos[order][start + coverage - 1].max()) + 1


def coverage_lower_bound(space: SearchSpace, coverage: int = 1) -> int:
    """Fewest networks any sampler needs for every variable to be seen ≥ coverage times (supp. A)."""
    # For a set F of edges, the variables that only edges in F can hold need R·|vars| uses, and one
    # network supplies at most |F| of them. F ranges over single edges and over each variable's
    # set of edges; with F = all edges of one Θ this is ceil(R·|group| / m_group). On the presets
    # the bound is R × the largest unshared table (ImageNet: 196 R; default space: 64 R).
    if coverage < 0:
        raise ValueError(f"coverage must be non-negative, got {coverage}")
    edges_of: list[set[int]] = [set() for _ in range(space.n_variables)]
    for e, tab in enumerate(space.edge_tables):
        for v in np.unique(tab[tab >= 0]):  # (−1: off the diagonal of a one-width layer)
            edges_of[int(v)].add(e)
    signatures = {frozenset(s) for s in edges_of} | {frozenset([e]) for e in range(space.n_edges)}
    best = 0
    for F in signatures:
        held = sum(1 for s in edges_of if s <= F)
        best = max(best, math.ceil(coverage * held / len(F)))
    return best


class CoverageSampler:
    """Stateful coverage-biased sampler: counts N(v), next network = argmin of the energy of supp. A."""

    def __init__(
        self, space: SearchSpace, seed: SeedLike = None, start: np.ndarray | None = None, secondary: bool = True
    ) -> None:
        self.space = space
        self.secondary = secondary  # False: the paper's Iverson energy alone (ablation)
        n, E, V = space.n_nodes, space.n_edges, space.n_variables
        sizes = _sizes(space)
        K = int(sizes.max())
        # Optional relabelling of each node's choices (changes only which minimiser the tie rule picks).
        if seed is None:
            self._perm = [np.arange(k) for k in sizes]
        else:
            gen = np.random.default_rng(seed)
            self._perm = [gen.permutation(int(k)) for k in sizes]
        # Padded tables in relabelled order: T[e, a, b] = variable of edge e for the a-th/b-th choice of its
        # src/dst nodes; padding (and the unused off-diagonal of a one-width layer) points at a sentinel
        # variable V whose count never equals M.
        self._src = np.array([a for a, _ in space.edges], dtype=np.int64)
        self._dst = np.array([b for _, b in space.edges], dtype=np.int64)
        self._self = self._src == self._dst
        T = np.full((E, K, K), V, dtype=np.int64)
        for i, (tab, a, b) in enumerate(zip(space.edge_tables, self._src, self._dst)):
            t = tab[np.ix_(self._perm[a], self._perm[b])]
            T[i, : sizes[a], : sizes[b]] = np.where(t >= 0, t, V)
        self._T = T
        self._valid = np.arange(K)[None, :] < sizes[:, None]  # (n, K)
        self._blocked = np.where(self._valid, 0.0, _BLOCKED)
        self._edges = np.arange(E)
        self._nodes = np.arange(n)
        self._to_orig = np.zeros((n, K), dtype=np.int64)  # relabelled index -> choice index
        self._to_perm = np.zeros((n, K), dtype=np.int64)  # choice index -> relabelled index
        for j, p in enumerate(self._perm):
            self._to_orig[j, : len(p)] = p
            self._to_perm[j, p] = np.arange(len(p))
        self.counts = np.zeros(V + 1, dtype=np.int64)  # N(v); last entry is the padding sentinel
        self.counts[V] = np.iinfo(np.int64).max // 2
        self.usage = np.zeros((n, K), dtype=np.int64)  # U_j(c), relabelled order
        if start is not None:
            self.observe(start)

    @property
    def n_variables(self) -> int:
        return self.space.n_variables

    @property
    def min_count(self) -> int:
        """M = min_v N(v) (supp. A)."""
        return int(self.counts[: self.n_variables].min())

    def observe(self, idx: np.ndarray) -> None:
        """Add configurations (choice indices, original order) to the counts without proposing them."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1, self.space.n_nodes)
        p = self._to_perm[self._nodes[None, :], idx]
        np.add.at(self.counts, self._T[self._edges[None, :], p[:, self._src], p[:, self._dst]].ravel(), 1)
        np.add.at(self.usage, (np.broadcast_to(self._nodes, p.shape).ravel(), p.ravel()), 1)

    def energy_terms(self) -> tuple[np.ndarray, np.ndarray]:
        """Unaries and pairwise tables (relabelled, padded) of the lexicographic energy in the module docstring."""
        M = self.min_count
        fresh = self.counts[self._T] == M  # (E, K, K): [N(v_i(a, b)) = M]
        if not self.secondary:
            return self._blocked.copy(), fresh * np.float64(-1.0)
        D = np.zeros_like(self.usage)  # fresh variables each node choice touches (a one-width layer's once)
        np.add.at(D, self._src, fresh.sum(axis=2))
        np.add.at(D, self._dst[~self._self], fresh[~self._self].sum(axis=1))
        s = np.where(self._valid, D.max(axis=1, keepdims=True) - D, 0)
        u_min = np.where(self._valid, self.usage, np.iinfo(np.int64).max).min(axis=1, keepdims=True)
        r = np.where(self._valid, self.usage - u_min, 0)
        w2 = int(r.max(axis=1).sum()) + 1
        sec = s * w2 + r
        w = int(sec.max(axis=1).sum()) + 1
        unaries = sec.astype(np.float64) + self._blocked
        pairwise = fresh * np.float64(-w)
        return unaries, pairwise

    def propose(self) -> np.ndarray:
        """The next configuration (choice indices of nodes 0..n): exact argmin of E(c) (supp. A), counts updated."""
        unaries, pairwise = self.energy_terms()
        path = space_argmin(self.space, unaries, pairwise)  # a residual space: its compiled chain (D44)
        np.add.at(self.counts, self._T[self._edges, path[self._src], path[self._dst]], 1)
        self.usage[self._nodes, path] += 1
        return self._to_orig[self._nodes, path]


def biased_configs(
    space: SearchSpace,
    coverage: int | None = 1,
    n: int | None = None,
    *,
    seed: SeedLike = None,
    start: np.ndarray | None = None,
    secondary: bool = True,
) -> np.ndarray:
    """Coverage-biased configurations (supp. A) until every variable is seen ≥ coverage times, or exactly n."""
    # Give either `coverage` (R) or `n` (n wins). `start`: configurations already profiled; their
    # counts are included, they are not returned. Deterministic: with seed=None ties follow the
    # decoder's lexicographic rule on the space's choice order; a seed first relabels every node's
    # choices by a seeded permutation (same seed, same result). secondary=False minimises the
    # paper's Iverson energy alone (ablation). Returns (P, n_nodes) choice indices.
    if n is not None:
        if n < 0:
            raise ValueError(f"n must be non-negative, got {n}")
        coverage = None
    elif coverage is None or coverage < 0:
        raise ValueError(f"give a non-negative coverage or a count n (got coverage={coverage}, n={n})")
    sampler = CoverageSampler(space, seed=seed, start=start, secondary=secondary)
    out: list[np.ndarray] = []
    if n is not None:
        for _ in range(int(n)):
            out.append(sampler.propose())
    else:
        while sampler.min_count < coverage:
            out.append(sampler.propose())
    if not out:
        return np.zeros((0, space.n_nodes), dtype=np.int64)
    return np.stack(out)


def config_sets(
    space: SearchSpace, seed: int, coverage: int, n_lambda_val: int, n_test: int
) -> dict[str, np.ndarray]:
    """Profiling sets (§4): train (coverage-biased, R = coverage); lambda_val, test (uniform, independent)."""
    train_ss, val_ss, test_ss = np.random.SeedSequence(int(seed)).spawn(3)
    return {
        "train": biased_configs(space, coverage, seed=np.random.default_rng(train_ss)),
        "lambda_val": uniform_configs(space, n_lambda_val, np.random.default_rng(val_ss)),
        "test": uniform_configs(space, n_test, np.random.default_rng(test_ss)),
    }


def config_rows(space: SearchSpace, seed: int, sampling: SamplingSettings) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows of the "configs" artifact: train (coverage-biased, + anchors), lambda_val and test (uniform) (§4, supp. A)."""
    s = sampling
    sets = config_sets(space, seed, s.coverage, s.lambda_val, s.test)
    rows, counts = [], {}
    for name in SETS:
        idx = sets[name]
        counts[name] = len(idx)
        sampler = "biased" if name == "train" else "uniform"
        for k in idx:
            rows.append({"config_id": len(rows), "channels": space.channels_of(k), "set": name, "sampler": sampler})
        if name == "train" and s.anchors:  # the uniform multipliers, min and max included, if not sampled already
            seen = {tuple(r["channels"]) for r in rows}
            for _, ch in multiplier_configs(space):
                if tuple(ch) not in seen:
                    rows.append({"config_id": len(rows), "channels": list(ch), "set": "train", "sampler": "anchor"})
                    seen.add(tuple(ch))
                    counts["anchors"] = counts.get("anchors", 0) + 1
    return rows, counts
