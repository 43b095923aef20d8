"""Constrained decode by the Lagrangian dual (eq. lagrange; docs/method.md D14, D15): breakpoint search, bound, gap."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .results import DecodeResult, InfeasibleTarget
from .viterbi import viterbi_path


def check_target(decoder, target: float, indices: str = "choice indices") -> tuple[np.ndarray, float, float]:
    """(min-latency path, its latency, its Σδ) of a `Chain` or `SpaceChain`; `InfeasibleTarget` naming the minimum
    latency for a target below it (D14)."""
    fastest = decoder.min_latency()
    fastest_latency = float(decoder.latency(fastest))
    if not np.isfinite(target):
        raise ValueError(f"latency target must be finite, got {target}")
    if target < fastest_latency - decoder.ftol:
        raise InfeasibleTarget(
            f"latency target {target:.6g} is below the minimum latency {fastest_latency:.6g} reachable in this space "
            f"(minimum-latency configuration: {indices} {fastest.tolist()})",
            fastest_latency,
        )
    return fastest, fastest_latency, float(decoder.objective(fastest))


class Point(NamedTuple):
    """A configuration with its Σδ and latency (a point of the (latency, Σδ) plane)."""

    path: np.ndarray
    objective: float
    latency: float


class _BreakpointSearch:
    """The dual segment [feasible end, infeasible end] of eq. lagrange, the best feasible path seen, the best dual."""

    def __init__(self, chain, target: float, fastest: Point, optimum: Point):
        self.chain, self.target = chain, target
        self.feasible_end = fastest  # the Lagrangian minimiser for large γ
        self.infeasible_end = optimum  # the Lagrangian minimiser at γ = 0
        self.best = fastest
        self.dual, self.gamma_star = optimum.objective, 0.0  # g(0) = min Σδ
        self.gammas = [0.0]
        self.n_viterbi = 2

    def next_gamma(self) -> float:
        """γ at which both ends have the same Lagrangian energy (≥ 0)."""
        f, i = self.feasible_end, self.infeasible_end
        return max((f.objective - i.objective) / (i.latency - f.latency), 0.0)

    def visit(self, gamma: float) -> bool:
        """Solve eq. lagrange_subproblem at γ and update the bound and the best path; False: no new breakpoint."""
        ch = self.chain
        path = viterbi_path(ch, gamma)
        self.n_viterbi += 1
        self.gammas.append(gamma)
        p = Point(path, float(ch.objective(path)), float(ch.latency(path)))
        dual = p.objective + gamma * (p.latency - self.target)
        if dual > self.dual:
            self.dual, self.gamma_star = dual, gamma
        feasible = p.latency <= self.target + ch.ftol
        b = self.best
        if feasible and (p.objective < b.objective or (p.objective == b.objective and p.latency < b.latency)):
            self.best = p
        f, i = self.feasible_end, self.infeasible_end
        below_both = p.objective + gamma * p.latency < min(f.objective + gamma * f.latency,
                                                             i.objective + gamma * i.latency) - ch.tol(gamma)
        if not below_both:
            return False
        if feasible:
            self.feasible_end = p
        else:
            self.infeasible_end = p
        return True


def breakpoint_search(chain, target: float, max_iter: int) -> tuple[DecodeResult, np.ndarray]:
    """max_γ min_c Σδ + γ(L(c) − L_T) on a `Chain` (eq. lagrange): the best feasible visited path, γ*, dual bound
    and gap, and the visited γ (sorted, unique; the exact mode prunes with them)."""
    fastest, fastest_latency, fastest_objective = check_target(chain, target)
    top = chain.unconstrained()
    optimum = Point(top, float(chain.objective(top)), float(chain.latency(top)))
    if optimum.latency <= target + chain.ftol:
        result = DecodeResult(top, optimum.objective, optimum.latency, 0.0, optimum.objective, 0.0, True, 2, target,
                              "unconstrained")
        return result, np.array([0.0])
    search = _BreakpointSearch(chain, target, Point(fastest, fastest_objective, fastest_latency), optimum)
    for _ in range(max_iter):
        if not search.visit(search.next_gamma()):
            break
    else:
        raise RuntimeError(f"Lagrangian breakpoint search did not terminate in {max_iter} iterations")
    best = search.best
    gap = max(best.objective - search.dual, 0.0)
    result = DecodeResult(best.path, best.objective, best.latency, search.gamma_star, search.dual, gap,
                          gap <= chain.tol(search.gamma_star), search.n_viterbi, target, "lagrangian")
    return result, np.unique(np.array(search.gammas))


__all__ = ["Point", "breakpoint_search", "check_target"]
