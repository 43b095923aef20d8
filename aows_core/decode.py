"""Decisions from unaries, a LUT and latency targets (§5 eq. lagrange / viterbi).

Target strings (the Snakemake wildcard): `4.5ms` (absolute, ms devices), `325mflops` (absolute,
`flops` device: millions of multiply-accumulates, as the paper and the MobileNet literature count
"FLOPs"), `range:0.3` (= L_min + 0.3·(L_max − L_min), where L_min and L_max are the exact minimum-
and maximum-latency configurations of the space under that device's LUT). Relative targets make
one config meaningful on any machine. Numpy only (plus pyarrow for the artifacts).
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

from . import io
from .chain import Chain, DecodeResult, apply_unvisited
from .config import TARGET_PATTERN, Target, parse_target  # noqa: F401  (the target grammar)
from .space import SearchSpace

def lut_tables(space: SearchSpace, x: np.ndarray) -> list[np.ndarray]:
    """Per-edge latency tables L_i(c_i, c_{i+1}) of eq. lat from a LUT vector; NaN/inf refused."""
    x = np.asarray(x, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        theta, ci, co = space.variables[int(bad[0])]
        raise ValueError(f"the latency table holds {bad.size} non-finite entries, e.g. {theta} c_in={ci} c_out={co}")
    return [x[t] for t in space.edge_tables]


def latency_range(space: SearchSpace, x: np.ndarray) -> tuple[float, float, list[int], list[int]]:
    """(L_min, L_max) of the space under a LUT, with the two configurations (exact Viterbi on latency)."""
    chain = Chain([np.zeros(len(c)) for c in space.choices], lut_tables(space, x))
    lo, hi = chain.min_latency(), chain.max_latency()
    return float(chain.latency(lo)), float(chain.latency(hi)), space.channels_of(lo), space.channels_of(hi)


def resolve_target(target: Target | str, space: SearchSpace, x: np.ndarray, unit: str) -> float:
    """The target in the LUT's unit (ms, or MMAC for `flops`); a unit mismatch is an error."""
    t = parse_target(target) if isinstance(target, str) else target
    if t.kind == "range":
        lo, hi, _, _ = latency_range(space, x)
        return lo + t.value * (hi - lo)
    want = "MMAC" if t.kind == "mflops" else "ms"
    if unit != want:
        raise ValueError(
            f"target {t.text!r} is in {want}, but this device's latency table is in {unit}; "
            f"use {'an ms' if unit == 'ms' else 'a mflops'} target or a relative 'range:' target"
        )
    return t.value


def read_unaries(path: str | os.PathLike, space: SearchSpace, epoch: int | None = None) -> tuple[list[np.ndarray], dict, int]:
    """Per-node unaries δ (NaN where count = 0) of one epoch (default: the last) from a unaries artifact."""
    table, meta = io.read_table(path, "unaries")
    if meta.get("space_hash") != space.hash:
        raise io.ArtifactError(
            f"{path} holds unaries of space {meta.get('space_name')!r} (hash {meta.get('space_hash')}), not of the "
            f"configured {space.name!r} (hash {space.hash}); decode with unaries of a supernet of this space"
        )
    epochs = table.column("epoch").to_numpy()
    if len(epochs) == 0:
        raise io.ArtifactError(f"{path} holds no unaries")
    chosen = int(epochs.max()) if epoch is None or epoch < 0 else int(epoch)
    if chosen not in set(epochs.tolist()):
        raise ValueError(f"{path} has no epoch {chosen}; available epochs: {sorted(set(epochs.tolist()))}")
    sel = epochs == chosen
    layers = table.column("layer").to_numpy()[sel]
    widths = table.column("width").to_numpy()[sel]
    counts = table.column("count").to_numpy()[sel]
    deltas = table.column("delta").to_numpy(zero_copy_only=False)[sel].astype(np.float64)
    if (counts < 0).any():
        k = int(np.flatnonzero(counts < 0)[0])
        raise io.ArtifactError(f"{path}: layer {int(layers[k])} width {int(widths[k])} has count {int(counts[k])}; a count "
                               f"is never negative: the file is corrupt, rerun the supernet training that wrote it")
    u = [np.zeros(1)] + [np.full(len(c), np.nan) for c in space.layer_choices] + [np.zeros(1)]
    seen = [np.zeros(len(c), bool) for c in space.layer_choices]
    for layer, w, n, d in zip(layers, widths, counts, deltas):
        layer, w = int(layer), int(w)
        if not 0 <= layer < space.n_layers or w not in space.layer_choices[layer]:
            raise io.ArtifactError(f"{path}: layer {layer} width {w} is not in space {space.name!r}")
        j = space.layer_choices[layer].index(w)
        seen[layer][j] = True
        if n > 0:
            if not math.isfinite(d):
                raise ValueError(f"{path}: visited unary at layer {layer} width {w} is {d} (count {n}); retrain or fix it")
            u[layer + 1][j] = d
    for layer, s in enumerate(seen):
        if not s.all():
            missing = [w for w, ok in zip(space.layer_choices[layer], s) if not ok]
            raise io.ArtifactError(f"{path}: epoch {chosen} lacks rows for layer {layer} widths {missing}")
    return u, meta, chosen


def decision_row(
    space: SearchSpace, result: DecodeResult, *, method: str, device: str, target: str, unit: str, policy: str | None,
    epoch: int | None,
) -> dict[str, Any]:
    """A row of the decisions contract from a chain decode."""
    return {
        "method": method,
        "device": device,
        "target": target,
        "target_ms": float(result.target),
        "unit": unit,
        "channels": space.channels_of(result.path),
        "predicted_latency_ms": float(result.latency),
        "objective": float(result.objective),
        "gamma": float(result.gamma),
        "dual_bound": float(result.dual_bound),
        "gap": float(result.gap),
        "exact": bool(result.exact),
        "unvisited_policy": policy,
        "epoch": epoch,
    }


def decide(
    space: SearchSpace,
    unaries: Sequence[np.ndarray],
    x: np.ndarray,
    targets: Sequence[str],
    *,
    method: str,
    device: str,
    unit: str,
    policy: str = "exclude",
    exact: bool = True,
    epoch: int | None = None,
) -> list[dict[str, Any]]:
    """Decisions for each target: the constrained optimum of Σδ + γΣL (eq. lagrange; exact mode by default)."""
    u = apply_unvisited(unaries, policy, widths=space.choices)
    chain = Chain(u, lut_tables(space, x))
    rows = []
    for t in targets:
        value = resolve_target(t, space, x, unit)
        rows.append(
            decision_row(space, chain.decode(value, exact=exact), method=method, device=device, target=t, unit=unit,
                         policy=policy, epoch=epoch)
        )
    return rows


def write_decisions(rows: list[dict], path: str | os.PathLike, meta: Mapping[str, Any]) -> None:
    io.write_records(rows, path, "decisions", io.provenance(**meta))


def read_decisions(paths: Sequence[str | os.PathLike], space: SearchSpace, device: str) -> list[dict[str, Any]]:
    """Every row of the finalists' decision artifacts, refused if decided for another space or device."""
    rows = []
    for p in paths:
        table, meta = io.read_table(p, "decisions")
        if meta.get("space_hash") != space.hash:
            raise io.ArtifactError(f"{p} was decided on space {meta.get('space_hash')}, not the configured {space.hash}")
        for r in table.to_pylist():
            if r["device"] != device:
                raise io.ArtifactError(f"{p} is a decision for device {r['device']!r}, not {device!r}")
            rows.append({**r, "source": str(p)})
    return rows
