"""Lower convex hull of (latency, Σδ) over γ ≥ 0 (eq. lagrange; docs/method.md D14, D15); targets answered from it."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .lagrangian import Point, check_target
from .results import REL_TOL, DecodeResult, Hull
from .viterbi import viterbi_paths


def _supporting_points(chain) -> tuple[list[Point], int]:
    """Every Lagrangian minimiser found by splitting each hull segment at its slope until none is new; Viterbi calls."""
    fastest, top = chain.min_latency(), chain.unconstrained()
    points = [Point(top, float(chain.objective(top)), float(chain.latency(top))),
              Point(fastest, float(chain.objective(fastest)), float(chain.latency(fastest)))]
    calls = 2
    pending = [(0, 1)] if points[0].latency > points[1].latency + chain.ftol else []
    if not pending:  # one point: the unconstrained optimum
        points = points[:1] if points[1].objective >= points[0].objective else points[1:]
    while pending:
        gammas = np.array([max((points[b].objective - points[a].objective) / (points[a].latency - points[b].latency),
                               0.0) for a, b in pending])
        paths = viterbi_paths(chain, gammas)
        calls += len(pending)
        objectives, latencies = chain.objective(paths), chain.latency(paths)
        split = []
        for (a, b), g, path, objective, latency in zip(pending, gammas, paths, objectives, latencies):
            pa, pb = points[a], points[b]  # both ends of the segment: a new minimiser lies strictly below them
            if objective + g * latency < min(pa.objective + g * pa.latency,
                                             pb.objective + g * pb.latency) - chain.tol(g):
                points.append(Point(path, float(objective), float(latency)))
                c = len(points) - 1
                split += [(a, c), (c, b)]
        pending = split
    return points, calls


def _lower_left(points: list[Point], ftol: float) -> list[Point]:
    """The lower convex hull by the monotone chain, by increasing latency; collinear and duplicate points removed."""
    points = sorted(points, key=lambda p: (p.latency, p.objective))
    hull: list[Point] = []
    for q in points:
        while hull and abs(hull[-1].latency - q.latency) <= ftol:
            if q.objective < hull[-1].objective:
                hull.pop()
            else:
                break
        if hull and abs(hull[-1].latency - q.latency) <= ftol:
            continue
        while len(hull) >= 2:
            (_, y0, x0), (_, y1, x1) = hull[-2], hull[-1]
            cross = (x1 - x0) * (q.objective - y0) - (y1 - y0) * (q.latency - x0)
            if cross <= REL_TOL * (abs(x1 - x0) * abs(q.objective - y0) + abs(y1 - y0) * abs(q.latency - x0)):
                hull.pop()
            else:
                break
        hull.append(q)
    return hull


def lower_hull(chain) -> Hull:
    """All vertices of the lower convex hull of (latency, Σδ) of a `Chain` between min latency and γ = 0."""
    points, calls = _supporting_points(chain)
    hull = _lower_left(points, chain.ftol)
    latencies = np.array([p.latency for p in hull])
    objectives = np.array([p.objective for p in hull])
    slopes = (objectives[:-1] - objectives[1:]) / (latencies[1:] - latencies[:-1])
    return Hull(np.stack([p.path for p in hull]), latencies, objectives, slopes, calls)


def decode_from_hull(chain, targets: Sequence[float] | np.ndarray) -> list[DecodeResult]:
    """Each target's largest-latency hull vertex within it, its bound from the neighbouring slope (eq. lagrange)."""
    T = np.asarray(targets, dtype=np.float64).reshape(-1)
    if T.size == 0:
        return []
    h = chain.hull()
    if not np.isfinite(T).all():
        raise ValueError("latency targets must be finite")
    if float(T.min()) < h.latencies[0] - chain.ftol:
        check_target(chain, float(T.min()))  # raises InfeasibleTarget with the minimum latency
    H = h.latencies.size
    k = np.clip(np.searchsorted(h.latencies, T + chain.ftol, side="right") - 1, 0, H - 1)
    top = k == H - 1
    below = np.minimum(k, H - 2) if H > 1 else k
    gamma = np.where(top, 0.0, h.slopes[below] if H > 1 else 0.0)
    objective, latency = h.objectives[k], h.latencies[k]
    dual = np.where(top, objective, objective + gamma * (latency - T))
    gap = np.maximum(objective - dual, 0.0)
    exact = gap <= chain.tol(gamma)
    return [DecodeResult(h.paths[k[t]].copy(), float(objective[t]), float(latency[t]), float(gamma[t]), float(dual[t]),
                         float(gap[t]), bool(exact[t]), h.n_viterbi, float(T[t]), "hull") for t in range(T.size)]


__all__ = ["decode_from_hull", "lower_hull"]
