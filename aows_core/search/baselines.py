"""Baselines (§3, §7): greedy trimming (AutoSlim) and uniform width multipliers, and their decisions.

Both decisions read a device's LUT only to pick, per target, a configuration from a list that does
not depend on the LUT: the first point of the greedy trajectory that meets the target, or the largest
uniform multiplier that meets it (docs/method.md D22, D23). No search objective exists for them, so
`objective`, `gamma`, `dual_bound` and `gap` are null in their decisions and `exact` is false.
The trajectory itself is `greedy_trim` (one trimming loop) driven by any score; `greedy_search`
drives it with a sub-network scorer (duck-typed: `.space`, `.y`, `.score`). Numpy only.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..space import SearchSpace, multiplier_configs
from .graph import space_latency_chain
from .results import InfeasibleTarget
from .targets import DeviceTable, lut_tables


def baseline_row(space: SearchSpace, method: str, device: str, target: str, value: float, unit: str,
                 channels: list[int], latency: float) -> dict[str, Any]:
    """A row of the decisions contract for a baseline (no objective, γ, bound or gap)."""
    return {"method": method, "device": device, "target": target, "target_ms": float(value), "unit": unit,
            "channels": [int(c) for c in channels], "predicted_latency_ms": float(latency), "objective": None,
            "gamma": None, "dual_bound": None, "gap": None, "exact": False, "unvisited_policy": None, "epoch": None}


def _latencies(space: SearchSpace, table: DeviceTable, configs: Sequence[Sequence[int]]) -> np.ndarray:
    chain = space_latency_chain(space, lut_tables(space, table.x))
    paths = np.array([space.indices(c) for c in configs])
    return np.asarray(table.link(np.asarray(chain.latency(paths), dtype=np.float64)), dtype=np.float64)


def _decide_from(space: SearchSpace, table: DeviceTable, configs: Sequence[Sequence[int]], targets: Sequence[str], *,
                 method: str, pick: int, infeasible: Callable[[str, float, np.ndarray], str]) -> list[dict[str, Any]]:
    """Per target, the first (pick=0) or last (pick=-1) of `configs` whose predicted latency (LUT and link) meets it."""
    lat = _latencies(space, table, configs)
    rows = []
    for t in targets:
        value = table.resolve(t, space)
        ok = np.flatnonzero(lat <= value)
        if not ok.size:
            raise InfeasibleTarget(infeasible(t, value, lat), float(lat.min()))
        k = int(ok[pick])
        rows.append(baseline_row(space, method, table.device, t, value, table.unit, list(configs[k]), lat[k]))
    return rows


def decide_greedy(space: SearchSpace, trajectory: Sequence[Sequence[int]], table: DeviceTable,
                  targets: Sequence[str]) -> list[dict[str, Any]]:
    """Per target, the first point of the greedy trajectory whose LUT latency meets it (§3)."""
    unit = table.unit
    return _decide_from(
        space, table, trajectory, targets, method="greedy", pick=0,
        infeasible=lambda t, value, lat: f"target {t!r} = {value:.4g} {unit}: no point of the greedy trajectory "
        f"meets it (its fastest is {lat.min():.4g} {unit})",
    )


def decide_uniform(space: SearchSpace, table: DeviceTable, targets: Sequence[str]) -> list[dict[str, Any]]:
    """Per target, the largest uniform width multiplier whose LUT latency meets it (§7)."""
    cands, unit = multiplier_configs(space), table.unit
    return _decide_from(
        space, table, [c for _, c in cands], targets, method="uniform", pick=-1,
        infeasible=lambda t, value, lat: f"target {t!r} = {value:.4g} {unit}: even the smallest uniform multiplier "
        f"({cands[0][0]:.3g}×) takes {lat[0]:.4g} {unit}",
    )


# ---------------------------------------------------------------------------------------------
# Greedy trimming (AutoSlim, §3)
# ---------------------------------------------------------------------------------------------
def greedy_trim(
    choices_counts: Sequence[int],
    score: Callable[[np.ndarray, int], Any] | None,
    start: Sequence[int] | None = None,
    *,
    fixed_ends: bool = True,
    on_step: Callable[[np.ndarray, int, Any, int], None] | None = None,
    score_many: Callable[[list[np.ndarray], list[int]], Sequence[Any]] | None = None,
) -> list[np.ndarray]:
    """AutoSlim-style greedy trimming (§3): from `start` (default max) down to the min config, lowest score first.

    At each step every searchable node (nodes 1..n-1 when `fixed_ends`, else all) that can still go
    one choice lower yields a candidate (that node lowered by one), scored in ascending node order by
    `score(candidate, node)` (lower is better: a float, or a tuple compared lexicographically); ties go
    to the lowest node index; a NaN float is refused. `score_many(candidates, nodes)`, when given, scores
    a step's candidates in one call instead (a batched scorer), with the same order and ties.
    `on_step(config, node, score, n_candidates)` follows each step. Returns the configurations (choice
    indices per node) from `start` to the all-lowest one.
    """
    if (score is None) == (score_many is None):
        raise ValueError("give exactly one of score and score_many")
    counts = np.asarray(choices_counts, dtype=np.int64)
    if counts.ndim != 1 or counts.size == 0 or (counts < 1).any():
        raise ValueError(f"choices_counts must be positive integers, got {list(counts)}")
    cur = counts - 1 if start is None else np.array(start, dtype=np.int64)
    if cur.shape != counts.shape or (cur < 0).any() or (cur >= counts).any():
        raise ValueError(f"start {list(cur)} is not a configuration of a chain with counts {list(counts)}")
    nodes = np.arange(1, counts.size - 1) if fixed_ends else np.arange(counts.size)
    traj = [cur.copy()]
    while True:
        movable = [int(i) for i in nodes if cur[i] > 0]
        if not movable:
            return traj
        cands = [_lowered(cur, i) for i in movable]
        scores = list(score_many(cands, movable)) if score_many is not None else None
        best_i, best_s = -1, None
        for k, (i, cand) in enumerate(zip(movable, cands)):
            s = scores[k] if scores is not None else score(cand, i)
            if not isinstance(s, tuple):
                s = float(s)
                if np.isnan(s):
                    raise ValueError(f"score_fn returned NaN for the candidate lowering node {i}: {cand.tolist()}")
            if best_i < 0 or s < best_s:
                best_i, best_s = i, s
        cur = cur.copy()
        cur[best_i] -= 1
        traj.append(cur)
        if on_step is not None:
            on_step(cur, best_i, best_s, len(movable))


def _lowered(cur: np.ndarray, node: int) -> np.ndarray:
    """A copy of configuration `cur` with `node` one choice lower (a greedy candidate, §3)."""
    cand = cur.copy()
    cand[node] -= 1
    return cand


def first_meeting(
    trajectory: Sequence[np.ndarray], latency_fn: Callable[[np.ndarray], float], target: float
) -> tuple[int, np.ndarray]:
    """First point of a greedy trajectory whose latency ≤ target (§3): (index, configuration)."""
    lats = []
    for t, c in enumerate(trajectory):
        lat = float(latency_fn(c))
        if lat <= target:
            return t, np.asarray(c)
        lats.append(lat)
    if not lats:
        raise ValueError("empty trajectory")
    lmin = min(lats)
    raise InfeasibleTarget(
        f"latency target {target:.6g} is below the minimum latency {lmin:.6g} along the greedy trajectory", lmin
    )


def trajectory_row(space: SearchSpace, step: int, layer_idx: Sequence[int], layer: int, errors: int, ce: float, n: int,
                   candidates: int) -> dict[str, Any]:
    """A row of the "greedy_trajectory" artifact: the configuration after `step` trims, and its error and CE."""
    return {"step": step, "channels": space.layer_channels(layer_idx), "lowered_layer": layer, "errors": errors,
            "error": errors / n, "cross_entropy": ce / n, "candidates": candidates}


def greedy_search(scorer: Any, on_step: Callable[[dict[str, Any]], None] | None = None,
                  batched: bool | None = None) -> list[dict[str, Any]]:
    """AutoSlim trimming (§3, D22) from max to min: each step lowers the layer with the least (errors, CE) increase.

    `scorer.score(channels, start_edge=...)` → (errors, summed CE) on `scorer.n` images; candidates are
    scored in ascending layer order, so each reuses the cached activations entering its layer. Batched
    (`batched`, default the scorer's own `batched` attribute, set on CUDA): a step's candidates in one
    `scorer.score_many(list of channels)` call, the same scores. `on_step(row)` follows each trimming step
    (a progress bar).
    """
    space = scorer.space
    counts = [len(c) for c in space.choices]
    start = np.asarray(counts, dtype=np.int64) - 1
    errors, ce = scorer.score(space.channels_of(start))
    n = scorer.n
    rows = [trajectory_row(space, 0, start[1:-1].tolist(), -1, errors, ce, n, 0)]

    def step(cur: np.ndarray, node: int, s: tuple, candidates: int) -> None:
        rows.append(trajectory_row(space, len(rows), cur[1:-1].tolist(), node - 1, s[0], s[1], n, candidates))
        if on_step is not None:
            on_step(rows[-1])

    if getattr(scorer, "batched", False) if batched is None else batched:
        greedy_trim(counts, None, on_step=step,
                    score_many=lambda cands, _nodes: scorer.score_many([space.channels_of(c) for c in cands]))
    else:
        greedy_trim(counts, lambda cand, node: scorer.score(space.channels_of(cand), start_edge=node - 1), on_step=step)
    return rows
