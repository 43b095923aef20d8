"""Latency targets (§5, docs/method.md D16): the grammar (defined in config), per-edge LUT tables, the range, feasibility."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..config import TARGET_PATTERN, Target, parse_target  # noqa: F401  (the target grammar lives in config)
from ..space import SearchSpace
from .graph import space_latency_chain
from .link import IDENTITY, Link
from .results import InfeasibleTarget

__all__ = ["TARGET_PATTERN", "Target", "parse_target", "lut_tables", "latency_range", "resolve_target", "check_feasible",
           "DeviceTable"]


@dataclass(frozen=True, eq=False)
class DeviceTable:
    """A device's latency table as the decoders read it (§4, §5): the LUT vector `x`, the unit of its entries (ms, or
    MMAC for `flops`), its link g (D39) and the device's name, which labels the decisions."""

    x: np.ndarray
    unit: str
    link: Link = IDENTITY
    device: str = ""

    def resolve(self, target: Target | str, space: SearchSpace) -> float:
        """`resolve_target` under this table."""
        return resolve_target(target, space, self.x, self.unit, self.link)

    def with_x(self, x: np.ndarray) -> "DeviceTable":
        """The same device, unit and link with another table (a verified decision's refit, D36)."""
        return replace(self, x=x)


def lut_tables(space: SearchSpace, x: np.ndarray) -> list[np.ndarray]:
    """Per-edge latency tables L_e(c_src, c_dst) of eq. lat from a LUT vector (0.0 off the diagonal of a one-width
    layer, never read: D44); NaN/inf refused."""
    x = np.asarray(x, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        theta, ci, co = space.variables[int(bad[0])]
        raise ValueError(f"the latency table holds {bad.size} non-finite entries, e.g. {theta} c_in={ci} c_out={co}")
    return [x[t] if (t >= 0).all() else np.where(t >= 0, x[np.maximum(t, 0)], 0.0) for t in space.edge_tables]


def latency_range(space: SearchSpace, x: np.ndarray, link: Link = IDENTITY) -> tuple[float, float, list[int], list[int]]:
    """(L_min, L_max) of the space under a LUT and its link (D39), with the two configurations (exact Viterbi on
    latency, D44 for a residual space; g is increasing, so the additive extremes are the linked ones)."""
    chain = space_latency_chain(space, lut_tables(space, x))
    lo, hi = chain.min_latency(), chain.max_latency()
    return (float(link(float(chain.latency(lo)))), float(link(float(chain.latency(hi)))), space.channels_of(lo),
            space.channels_of(hi))


def resolve_target(target: Target | str, space: SearchSpace, x: np.ndarray, unit: str, link: Link = IDENTITY) -> float:
    """The target in the LUT's unit (ms, or MMAC for `flops`), on the scale of predicted latency g(Σ_i L_i) (D39);
    a unit mismatch is an error."""
    t = parse_target(target) if isinstance(target, str) else target
    if t.is_relative:
        lo, hi, _, _ = latency_range(space, x, link)
        return t.resolve(lo, hi)
    if unit != t.unit:
        raise ValueError(
            f"target {t.text!r} is in {t.unit}, but this device's latency table is in {unit}; "
            f"use {'an ms' if unit == 'ms' else 'a mflops'} target or a relative 'range:' target"
        )
    return t.value


def check_feasible(target: str, space: SearchSpace, x: np.ndarray, unit: str, device: str,
                   link: Link = IDENTITY) -> tuple[float, float, float]:
    """(value, L_min, L_max) of a target; `InfeasibleTarget` naming the minimum if no network meets it (D14)."""
    value = resolve_target(target, space, x, unit, link)
    lo, hi, fastest, _ = latency_range(space, x, link)
    if value < lo:
        raise InfeasibleTarget(
            f"target {target!r} = {value:.4g} {unit} is below the smallest latency any network of the space reaches on "
            f"device {device!r}: {lo:.4g} {unit} (configuration {fastest}); choose a target ≥ {lo:.4g}"
            f"{'ms' if unit == 'ms' else 'mflops'} "
            f"or a relative one such as 'range:0.2'",
            lo,
        )
    return value, lo, hi
