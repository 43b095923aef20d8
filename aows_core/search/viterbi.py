"""Exact min-sum on a chain (eq. viterbi, eq. lagrange_subproblem; docs/method.md D15 ties): one γ, many γ, two keys."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


# ---------------------------------------------------------------------------------------------
# Plain functions kept for other modules (signature and tie rule are part of the contract).
# ---------------------------------------------------------------------------------------------
def viterbi(unaries: Sequence[np.ndarray], pairwise: Sequence[np.ndarray]) -> tuple[np.ndarray, float]:
    """Exact argmin of Σ u_i(c_i) + Σ P_i(c_i, c_{i+1}) (eq. viterbi); lexicographically smallest on ties."""
    n = len(unaries)
    if len(pairwise) != n - 1:
        raise ValueError(f"a chain of {n} nodes needs {n - 1} pairwise tables, got {len(pairwise)}")
    # cost_to_go[i][c] = min energy of nodes i..n-1 given c_i = c (unary of node i included).
    cost_to_go: list[np.ndarray] = [None] * n  # type: ignore[list-item]
    cost_to_go[n - 1] = np.asarray(unaries[n - 1], dtype=np.float64)
    for i in range(n - 2, -1, -1):
        step = pairwise[i] + cost_to_go[i + 1][None, :]
        cost_to_go[i] = np.asarray(unaries[i], dtype=np.float64) + step.min(axis=1)
    path = np.empty(n, dtype=np.int64)
    path[0] = int(np.argmin(cost_to_go[0]))
    for i in range(n - 1):
        path[i + 1] = int(np.argmin(pairwise[i][path[i]] + cost_to_go[i + 1]))
    return path, float(cost_to_go[0][path[0]])


def energy(path: Sequence[int], unaries: Sequence[np.ndarray], pairwise: Sequence[np.ndarray]) -> float:
    """E(c) of one path: Σ u_i(c_i) + Σ P_i(c_i, c_{i+1}) (eq. viterbi)."""
    e = sum(float(u[k]) for u, k in zip(unaries, path))
    return e + sum(float(p[path[i], path[i + 1]]) for i, p in enumerate(pairwise))


# ---------------------------------------------------------------------------------------------
# On a `Chain`'s padded arrays (forbidden transitions excluded)
# ---------------------------------------------------------------------------------------------
def viterbi_path(chain, gamma: float) -> np.ndarray:
    """argmin_c Σδ + γ ΣL of a `Chain` (eq. lagrange_subproblem): the lexicographically smallest optimal path."""
    n, unaries, choices = chain.n_nodes, chain.padded_unaries, chain.choice_index
    pairwise = chain.with_forbidden(chain.padded_latency * gamma)
    best_next = np.empty((max(n - 1, 0), chain.max_choices), dtype=np.int64)  # [i, c_i] → best c_{i+1}
    cost_to_go = unaries[n - 1]
    for i in range(n - 2, -1, -1):
        step = pairwise[i] + cost_to_go
        j = step.argmin(1)
        best_next[i] = j
        cost_to_go = unaries[i] + step[choices, j]
    path = np.empty(n, dtype=np.int64)
    c = int(cost_to_go.argmin())
    path[0] = c
    best_next_list = best_next.tolist()
    for i in range(n - 1):
        c = best_next_list[i][c]
        path[i + 1] = c
    return path


def viterbi_paths(chain, gammas: np.ndarray) -> np.ndarray:
    """`viterbi_path` for several γ at once: (G, n+1) paths, the same tie rule."""
    n, unaries, K = chain.n_nodes, chain.padded_unaries, chain.max_choices
    g = np.asarray(gammas, dtype=np.float64)[:, None, None]
    B = g.shape[0]
    best_next = np.empty((max(n - 1, 0), B, K), dtype=np.int64)
    cost_to_go = np.broadcast_to(unaries[n - 1], (B, K))
    batch_col = np.arange(B)[:, None]
    choice_row = chain.choice_index[None, :]
    for i in range(n - 2, -1, -1):
        step = g * chain.padded_latency[i] + cost_to_go[:, None, :]
        if chain.has_forbid:
            step = step + chain.forbidden_inf[i]
        j = step.argmin(2)
        best_next[i] = j
        cost_to_go = unaries[i] + step[batch_col, choice_row, j]
    paths = np.empty((B, n), dtype=np.int64)
    paths[:, 0] = cost_to_go.argmin(1)
    batch = np.arange(B)
    for i in range(n - 1):
        paths[:, i + 1] = best_next[i][batch, paths[:, i]]
    return paths


class Key(NamedTuple):
    """One key of a lexicographic min-sum: padded unaries (n+1, K), pairwise (n, K, K), and its tie tolerance."""

    unaries: np.ndarray
    pairwise: np.ndarray
    tol: float


def lexicographic_path(chain, primary: Key, secondary: Key) -> np.ndarray:
    """Minimise the primary energy; among paths within its tolerance, the secondary; then the smallest index."""
    n, choices = chain.n_nodes, chain.choice_index
    primary_pairwise = chain.with_forbidden(primary.pairwise)
    first, second = primary.unaries[n - 1], secondary.unaries[n - 1]  # costs to go of both keys
    best_next = np.empty((max(n - 1, 0), chain.max_choices), dtype=np.int64)

    def pick(first_step: np.ndarray, second_step: np.ndarray) -> np.ndarray:
        tied = first_step <= first_step.min(-1, keepdims=True) + primary.tol
        second_tied = np.where(tied, second_step, np.inf)
        tied &= second_tied <= second_tied.min(-1, keepdims=True) + secondary.tol
        return tied.argmax(-1)

    for i in range(n - 2, -1, -1):
        first_step = primary_pairwise[i] + first
        second_step = secondary.pairwise[i] + second
        j = pick(first_step, second_step)
        best_next[i] = j
        first = primary.unaries[i] + first_step[choices, j]
        second = secondary.unaries[i] + second_step[choices, j]
    path = np.empty(n, dtype=np.int64)
    c = int(pick(first, second))
    path[0] = c
    for i in range(n - 1):
        c = int(best_next[i, c])
        path[i + 1] = c
    return path


def latency_to_go(chain) -> np.ndarray:
    """h[i, c] = min over allowed completions of Σ_{j≥i} L_j given c_i = c (+inf where none is allowed)."""
    n = chain.n_nodes
    h = np.zeros((n, chain.max_choices))
    for i in range(n - 2, -1, -1):
        step = chain.padded_latency[i] + (chain.allowed_zero[i + 1] + h[i + 1])[None, :]
        h[i] = (step + chain.forbidden_inf[i] if chain.has_forbid else step).min(1)
    return h


__all__ = ["Key", "energy", "latency_to_go", "lexicographic_path", "viterbi", "viterbi_path", "viterbi_paths"]
