"""What the chain decoders return (eq. lagrange; docs/method.md D14, D15) and REL_TOL, their relative tolerance."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Comparisons of energies, objectives and latencies use REL_TOL times a per-instance scale (`Chain.tol`, `Chain.ftol`).
REL_TOL = 1e-9


class InfeasibleTarget(ValueError):
    """A latency target below the smallest latency reachable (D14); `min_latency` holds it."""

    def __init__(self, message: str, min_latency: float):
        super().__init__(message)
        self.min_latency = float(min_latency)


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


__all__ = ["REL_TOL", "DecodeResult", "Hull", "InfeasibleTarget"]
