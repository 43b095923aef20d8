"""Exact constrained optimum min{Σδ : L(c) ≤ L_T} (eq. 8; docs/method.md D15): Pareto labels, Lagrangian pruning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .results import REL_TOL, DecodeResult
from .viterbi import latency_to_go


class Labels(NamedTuple):
    """Partial paths ending at one node: latency and Σδ so far, the node's choice, the label they extend."""

    latency: np.ndarray
    objective: np.ndarray
    choice: np.ndarray
    parent: np.ndarray  # index into the previous node's labels (−1 at node 0)

    def select(self, keep: np.ndarray) -> "Labels":
        return Labels(self.latency[keep], self.objective[keep], self.choice[keep], self.parent[keep])


@dataclass(frozen=True)
class Pruning:
    """What a partial path must satisfy to be extended: a feasible completion, a Lagrangian bound ≤ the incumbent."""

    gammas: np.ndarray  # (G,) the multipliers the breakpoint search visited
    completion: np.ndarray  # (G, n+1, K): `completion_energy`
    latency_to_go: np.ndarray  # (n+1, K): `viterbi.latency_to_go`
    target: float
    limit: float  # the target plus the latency tolerance
    incumbent: float  # Σδ of the Lagrangian answer
    bound_tol: float

    def apply(self, labels: Labels, node: int) -> Labels:
        labels = labels.select(labels.latency + self.latency_to_go[node, labels.choice] <= self.limit)
        if labels.latency.size:
            bound = (labels.objective[None] + self.gammas[:, None] * (labels.latency[None] - self.target)
                     + self.completion[:, node, labels.choice]).max(0)
            labels = labels.select(bound <= self.incumbent + self.bound_tol)
        return labels


def completion_energy(chain, gammas: np.ndarray) -> np.ndarray:
    """h[g, i, c] = min over completions of Σ_{j>i} δ_j + γ_g Σ_{j≥i} L_j given c_i = c."""
    n = chain.n_nodes
    g = gammas[:, None, None]
    h = np.zeros((gammas.size, n, chain.max_choices))
    for i in range(n - 2, -1, -1):
        next_cost = chain.padded_unaries[i + 1] + h[:, i + 1]
        step = g * chain.padded_latency[i] + next_cost[:, None, :]
        h[:, i] = (step + chain.forbidden_inf[i] if chain.has_forbid else step).min(2)
    return h


def _extend(chain, labels: Labels, node: int) -> Labels:
    """Every label at `node` extended by every allowed choice of node + 1."""
    allowed = np.flatnonzero(chain.allowed[node + 1])
    m, k = labels.latency.size, allowed.size
    latency = labels.latency[:, None] + chain.padded_latency[node][labels.choice][:, allowed]
    if chain.has_forbid:
        latency = latency + chain.forbidden_inf[node][labels.choice][:, allowed]  # +inf: pruned by the latency test
    objective = (labels.objective[:, None] + chain.padded_unaries[node + 1, allowed][None, :]).ravel()
    choice = np.broadcast_to(allowed, (m, k)).ravel()
    parent = np.broadcast_to(np.arange(m)[:, None], (m, k)).ravel()
    return Labels(latency.ravel(), objective, choice, parent)


def _pareto(labels: Labels) -> Labels:
    """Per choice, the labels no other label of the same choice dominates in (latency, Σδ)."""
    labels = labels.select(np.lexsort((labels.objective, labels.latency, labels.choice)))
    _, rank = np.unique(labels.objective, return_inverse=True)
    key = rank.astype(np.int64) - labels.choice * (labels.objective.size + 1)
    running_min = np.minimum.accumulate(key)
    kept = np.empty(key.size, dtype=bool)
    kept[0] = True
    kept[1:] = key[1:] < running_min[:-1]
    return labels.select(kept)


def _best_path(chain, layers: list[Labels], incumbent: DecodeResult) -> np.ndarray:
    """The smallest-Σδ label at the last node (then the smallest latency), traced back; the incumbent if not better."""
    last = layers[-1]
    d_min = last.objective.min()
    near = np.flatnonzero(last.objective <= d_min + REL_TOL * max(chain.d_scale, abs(d_min)))
    t = int(near[np.argmin(last.latency[near])])
    if last.objective[t] > incumbent.objective:
        return incumbent.path
    path = np.empty(len(layers), dtype=np.int64)
    for j in range(len(layers) - 1, -1, -1):
        path[j] = layers[j].choice[t]
        t = int(layers[j].parent[t])
    return path


def exact_decode(chain, lagrangian: DecodeResult, gammas: np.ndarray, max_labels: int) -> DecodeResult:
    """The true constrained optimum of a `Chain`, pruned by the Lagrangian answer and the visited γ (D15)."""
    gammas = np.asarray(gammas, dtype=np.float64)
    target, incumbent = lagrangian.target, lagrangian.objective
    prune = Pruning(gammas, completion_energy(chain, gammas), latency_to_go(chain), target, target + chain.ftol,
                    incumbent, REL_TOL * max(chain.d_scale, abs(incumbent)))
    first = np.flatnonzero(chain.allowed[0])
    labels = prune.apply(Labels(np.zeros(first.size), chain.padded_unaries[0, first].copy(), first.astype(np.int64),
                                np.full(first.size, -1, dtype=np.int64)), 0)
    layers, total = [labels], int(labels.latency.size)
    for node in range(chain.n_nodes - 1):
        labels = prune.apply(_extend(chain, labels, node), node + 1)
        if labels.latency.size > 1:
            labels = _pareto(labels)
        if labels.latency.size > max_labels:
            raise RuntimeError(
                f"exact decode exceeded max_labels={max_labels} at node {node + 1} ({labels.latency.size} labels); "
                f"the Lagrangian answer (gap {lagrangian.gap:.3g}) is the best available"
            )
        total += int(labels.latency.size)
        layers.append(labels)
    n_viterbi = lagrangian.n_viterbi + gammas.size
    if labels.latency.size == 0:  # cannot happen in exact arithmetic (the incumbent survives); keep it safe
        r = lagrangian
        return DecodeResult(r.path, r.objective, r.latency, r.gamma, r.dual_bound, r.gap, True, n_viterbi, target,
                            "exact", total)
    path = _best_path(chain, layers, lagrangian)
    objective, latency = float(chain.objective(path)), float(chain.latency(path))
    gap = max(objective - lagrangian.dual_bound, 0.0)
    return DecodeResult(path, objective, latency, lagrangian.gamma, lagrangian.dual_bound, gap, True, n_viterbi, target,
                        "exact", total)


__all__ = ["Labels", "Pruning", "completion_energy", "exact_decode"]
