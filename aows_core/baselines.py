"""Decisions of the baselines (§3, §7): greedy trimming (AutoSlim) and uniform width multipliers.

Both read a device's LUT only to pick, per target, a configuration from a list that does not depend
on the LUT: the first point of the greedy trajectory that meets the target, or the largest uniform
multiplier that meets it. No search objective exists for them, so `objective`, `gamma`,
`dual_bound` and `gap` are null in their decisions and `exact` is false.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .chain import Chain, InfeasibleTarget
from .decode import lut_tables, resolve_target
from .space import SearchSpace, multiplier_configs


def _row(space: SearchSpace, method: str, device: str, target: str, value: float, unit: str, channels: list[int],
         latency: float) -> dict[str, Any]:
    return {"method": method, "device": device, "target": target, "target_ms": float(value), "unit": unit,
            "channels": [int(c) for c in channels], "predicted_latency_ms": float(latency), "objective": None,
            "gamma": None, "dual_bound": None, "gap": None, "exact": False, "unvisited_policy": None, "epoch": None}


def _latencies(space: SearchSpace, x: np.ndarray, configs: Sequence[Sequence[int]]) -> np.ndarray:
    chain = Chain([np.zeros(len(c)) for c in space.choices], lut_tables(space, x))
    paths = np.array([space.indices(c) for c in configs])
    return np.asarray(chain.latency(paths), dtype=np.float64)


def decide_greedy(space: SearchSpace, trajectory: Sequence[Sequence[int]], x: np.ndarray, targets: Sequence[str],
                  *, device: str, unit: str) -> list[dict[str, Any]]:
    """Per target, the first point of the greedy trajectory whose LUT latency meets it (§3)."""
    lat = _latencies(space, x, trajectory)
    rows = []
    for t in targets:
        value = resolve_target(t, space, x, unit)
        ok = np.flatnonzero(lat <= value)
        if not ok.size:
            raise InfeasibleTarget(f"target {t!r} = {value:.4g} {unit}: no point of the greedy trajectory meets it "
                                   f"(its fastest is {lat.min():.4g} {unit})", float(lat.min()))
        k = int(ok[0])
        rows.append(_row(space, "greedy", device, t, value, unit, list(trajectory[k]), lat[k]))
    return rows


def decide_uniform(space: SearchSpace, x: np.ndarray, targets: Sequence[str], *, device: str,
                   unit: str) -> list[dict[str, Any]]:
    """Per target, the largest uniform width multiplier whose LUT latency meets it."""
    cands = multiplier_configs(space)
    lat = _latencies(space, x, [c for _, c in cands])
    rows = []
    for t in targets:
        value = resolve_target(t, space, x, unit)
        ok = np.flatnonzero(lat <= value)
        if not ok.size:
            raise InfeasibleTarget(f"target {t!r} = {value:.4g} {unit}: even the smallest uniform multiplier "
                                   f"({cands[0][0]:.3g}×) takes {lat[0]:.4g} {unit}", float(lat.min()))
        k = int(ok[-1])
        rows.append(_row(space, "uniform", device, t, value, unit, cands[k][1], lat[k]))
    return rows
