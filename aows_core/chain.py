"""Chain MRF over a search space: exact min-sum decoding (eq. viterbi).

Energies are minimised: E(c) = Σ_i u_i(c_i) + Σ_i P_i(c_i, c_{i+1}) over nodes 0..n with ragged
choice counts. Numpy only (no torch, cvxpy or pandas), so a decode in a fresh process is fast.

Tie rule: among all optimal paths, `viterbi` returns the lexicographically smallest sequence of
choice indices (c_0 first). It computes exact costs-to-go backwards, then walks forwards taking
the smallest index that attains the optimum at every node.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


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
    """E(c) of one path: Σ u_i(c_i) + Σ P_i(c_i, c_{i+1})."""
    e = sum(float(u[k]) for u, k in zip(unaries, path))
    return e + sum(float(p[path[i], path[i + 1]]) for i, p in enumerate(pairwise))
