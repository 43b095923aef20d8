"""Typed readers (and the decisions writer): each artifact refused, with ONE wording, if from another space or device.

`require_space` and `require_device` are the only space/device checks of the project's files; every
reader here (and in torchfiles.py) goes through them, so a foreign artifact is named the same way
everywhere: "<path> <how it was made> space 'name' (hash h), not the configured 'name' (hash h); <remedy>".
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from ..latency.lut import LUTFitError, lut_vector
from ..search.unaries import node_deltas
from ..space import SearchSpace
from .parquet import ArtifactError, provenance, read_table, write_records

# kind → (how the artifact relates to its space, what to do about a foreign one)
SPACE_WORDING: dict[str, tuple[str, str]] = {
    "configs": ("was sampled from", "rerun `aows sample` for this space"),
    "latency": ("was profiled on", "profile this space first"),
    "lut": ("is a latency table of", "fit a table for this space"),
    "unaries": ("holds unaries of", "decode with unaries of a supernet of this space"),
    "decisions": ("was decided on", "decide again for this space"),
    "greedy_trajectory": ("belongs to", "rerun `aows greedy` for this space"),
    "supernet": ("was trained on", "retrain the supernet for this space"),
    "network": ("holds a network of", "retrain this decision for this space"),
    "epoch_checkpoint": ("is an OWS checkpoint of", "train OWS for this space first"),
}

# kind → (what the artifact holds, what to pass instead, whether to name its fingerprint); `{device}`: the configured one
DEVICE_WORDING: dict[str, tuple[str, str, bool]] = {
    "latency": ("holds timings of", "use that device's latency file", True),
    "lut": ("is the latency table of", "pass results/lut/{device}/lut.parquet", False),
}


def _space_name(meta: Mapping[str, Any]) -> Any:
    return meta.get("space_name") or (meta.get("space") or {}).get("name")


def require_space(meta: Mapping[str, Any], space: SearchSpace, path: str | os.PathLike, kind: str) -> None:
    """Refuse an artifact (its metadata, or a torch file's dict) made for another search space (eq. search_space)."""
    if meta.get("space_hash") == space.hash:
        return
    verb, remedy = SPACE_WORDING[kind]
    raise ArtifactError(f"{path} {verb} space {_space_name(meta)!r} (hash {meta.get('space_hash')}), not the configured "
                        f"{space.name!r} (hash {space.hash}); {remedy}")


def require_device(meta: Mapping[str, Any], device: str | None, path: str | os.PathLike, kind: str) -> None:
    """Refuse an artifact of another device (no check when `device` is None)."""
    if device is None or meta.get("device") == device:
        return
    verb, remedy, fingerprint = DEVICE_WORDING[kind]
    fp = f" (fingerprint {meta.get('fingerprint')})" if fingerprint else ""
    raise ArtifactError(f"{path} {verb} device {meta.get('device')!r}{fp}, not {device!r}; {remedy.format(device=device)}")


def read_configs(path: str | os.PathLike, space: SearchSpace) -> tuple[pa.Table, dict]:
    """A configs artifact, refused if it was sampled from another space."""
    table, meta = read_table(path, "configs")
    require_space(meta, space, path, "configs")
    return table, meta


def read_latency(path: str | os.PathLike, space: SearchSpace, device: str | None = None) -> tuple[pa.Table, dict]:
    """A latency artifact, refused if it comes from another space or (when given) another device."""
    table, meta = read_table(path, "latency")
    require_space(meta, space, path, "latency")
    require_device(meta, device, path, "latency")
    return table, meta


def read_lut(path: str | os.PathLike, space: SearchSpace, device: str | None = None) -> tuple[np.ndarray, dict]:
    """A LUT artifact as a vector over the space's variables (eq. lat_variables); refused if from another space or (given) device."""
    table, meta = read_table(path, "lut")
    require_space(meta, space, path, "lut")
    require_device(meta, device, path, "lut")
    try:
        return lut_vector(space, table), meta
    except LUTFitError as e:
        raise ArtifactError(f"{path}: {e}; refit the table with `aows fit-lut`") from e


def require_fitted_on(lut_path: str | os.PathLike, tmeta: Mapping[str, Any], latency: str | os.PathLike,
                      lmeta: Mapping[str, Any], device: str) -> None:
    """Refuse a LUT that was not fitted on this latency file (same device, same fingerprint)."""
    if tmeta.get("device") != device or tmeta.get("fingerprint") != lmeta.get("fingerprint"):
        raise ArtifactError(
            f"{lut_path} (device {tmeta.get('device')!r}, fingerprint {tmeta.get('fingerprint')}) was not fitted on "
            f"{latency} (device {lmeta.get('device')!r}, fingerprint {lmeta.get('fingerprint')}); fit the LUT on that file"
        )


def read_unaries(path: str | os.PathLike, space: SearchSpace, epoch: int | None = None) -> tuple[list[np.ndarray], dict, int]:
    """Per-node unaries δ of eq. average_error (NaN where count = 0) of one epoch (default: the last).

    Where an epoch holds both, the frozen-weight estimate is read, not the training-time one (D26).
    """
    table, meta = read_table(path, "unaries")
    require_space(meta, space, path, "unaries")
    epochs = table.column("epoch").to_numpy()
    if len(epochs) == 0:
        raise ArtifactError(f"{path} holds no unaries")
    chosen = int(epochs.max()) if epoch is None or epoch < 0 else int(epoch)
    if chosen not in set(epochs.tolist()):
        raise ValueError(f"{path} has no epoch {chosen}; available epochs: {sorted(set(epochs.tolist()))}")
    est = np.asarray([e or "training" for e in table.column("estimator").to_pylist()], dtype=object)
    sel = epochs == chosen
    estimator = "frozen" if (est[sel] == "frozen").any() else "training"
    sel &= est == estimator
    layers = table.column("layer").to_numpy()[sel]
    widths = table.column("width").to_numpy()[sel]
    counts = table.column("count").to_numpy()[sel]
    deltas = table.column("delta").to_numpy(zero_copy_only=False)[sel].astype(np.float64)
    meta = {**meta, "estimator": estimator}
    return node_deltas(space, layers, widths, counts, deltas, path, epoch=chosen, error=ArtifactError), meta, chosen


def write_decisions(rows: list[dict], path: str | os.PathLike, meta: Mapping[str, Any]) -> None:
    """Write a decisions artifact (one row per target) with provenance."""
    write_records(rows, path, "decisions", provenance(**meta))


def read_decisions(paths: Sequence[str | os.PathLike], space: SearchSpace, device: str) -> list[dict[str, Any]]:
    """Every row of the finalists' decision artifacts, refused if decided for another space or device; a decision
    verified on its device (docs/method.md D36) carries its verified table as `verified_lut`."""
    rows = []
    for p in paths:
        table, meta = read_table(p, "decisions")
        require_space(meta, space, p, "decisions")
        verified = {v["target"]: np.asarray(v["lut"], dtype=np.float64)
                    for v in (meta.get("verification") or {}).get("targets", [])}
        for r in table.to_pylist():
            if r["device"] != device:
                raise ArtifactError(f"{p} is a decision for device {r['device']!r}, not {device!r}")
            rows.append({**r, "source": str(p), "verified_lut": verified.get(r["target"])})
    return rows


def read_decision(path: str | os.PathLike, space: SearchSpace) -> tuple[dict[str, Any], dict]:
    """The one decision (row) of a decisions artifact that a retraining trains, and its metadata."""
    table, meta = read_table(path, "decisions")
    require_space(meta, space, path, "decisions")
    rows = table.to_pylist()
    if len(rows) != 1:
        raise ArtifactError(f"{path} holds {len(rows)} decisions; a retraining trains exactly one (one target per file)")
    return rows[0], meta


def decision_channels(path: str | os.PathLike) -> list[int]:
    """The widths a one-decision artifact decided (the workflow keys a finalist's retraining by them)."""
    rows = read_table(path, "decisions")[0].column("channels").to_pylist()
    if len(rows) != 1:
        raise ArtifactError(f"{path} holds {len(rows)} decisions; a retraining trains exactly one (one target per file)")
    return [int(c) for c in rows[0]]


def read_trajectory(path: str | os.PathLike, space: SearchSpace) -> tuple[pa.Table, dict]:
    """A greedy_trajectory artifact (§3 AutoSlim), refused if it belongs to another space."""
    table, meta = read_table(path, "greedy_trajectory")
    require_space(meta, space, path, "greedy_trajectory")
    return table, meta


def read_by_finalist(paths: Sequence[str | os.PathLike], kind: str) -> dict[tuple[str, str], list[dict]]:
    """Rows of `kind` artifacts keyed by (method, target)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for p in paths:
        for r in read_table(p, kind)[0].to_pylist():
            out.setdefault((r["method"], r["target"]), []).append(r)
    return out
