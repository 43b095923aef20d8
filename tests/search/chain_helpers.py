"""Not a test module: one-call forms of the chain decoders (a fresh `Chain` per call), for the tests only."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from aows_core.search.chain import Chain
from aows_core.search.marginals import Marginals
from aows_core.search.results import DecodeResult, Hull


def min_latency(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> np.ndarray:
    """Exact minimum-latency configuration (Viterbi on latency alone; D14)."""
    return Chain(unaries, latency).min_latency()


def max_latency(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> np.ndarray:
    """Exact maximum-latency configuration (Viterbi on −latency)."""
    return Chain(unaries, latency).max_latency()


def unconstrained(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> np.ndarray:
    """argmin Σδ (eq. viterbi at γ = 0), ties toward lower latency then lexicographic."""
    return Chain(unaries, latency).unconstrained()


def decode(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray], target: float, *,
           exact: bool = False) -> DecodeResult:
    """Constrained decode under a latency budget (eq. lagrange); exact=True closes the duality gap."""
    return Chain(unaries, latency).decode(target, exact=exact)


def lagrangian_hull(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray]) -> Hull:
    """All vertices of the lower convex hull of (latency, Σδ) (eq. lagrange over all γ ≥ 0)."""
    return Chain(unaries, latency).hull()


def decode_many(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray],
                targets: Sequence[float]) -> list[DecodeResult]:
    """Many targets answered from one hull computation (eq. lagrange)."""
    return Chain(unaries, latency).decode_many(targets)


def marginals(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray], gamma: float,
              temperature: float) -> Marginals:
    """Relaxed min-sum marginals at temperature T (§6, D17)."""
    return Chain(unaries, latency).marginals(gamma, temperature)


def sample(unaries: Sequence[np.ndarray], latency: Sequence[np.ndarray], gamma: float, temperature: float, size: int,
           rng: np.random.Generator, mode: str = "per_node") -> np.ndarray:
    """(size, n+1) configurations from the relaxed min-sum (§6): "per_node" marginals or "joint" FFBS."""
    return Chain(unaries, latency).marginals(gamma, temperature).sample(size, rng, mode)
