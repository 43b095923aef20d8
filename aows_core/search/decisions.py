"""Decisions (§5): the constrained decode of each target (eq. lagrange) as rows of the decisions contract; Σδ of a configuration."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..space import SearchSpace
from .results import DecodeResult
from .unvisited import apply_unvisited
from .graph import space_chain
from .link import IDENTITY, Link
from .targets import lut_tables, resolve_target


def decision_row(
    space: SearchSpace, result: DecodeResult, *, method: str, device: str, target: str, unit: str, policy: str | None,
    epoch: int | None, link: Link = IDENTITY,
) -> dict[str, Any]:
    """A row of the decisions contract from a chain decode of the budget g⁻¹(target) (D39): target and predicted
    latency on the scale of g, γ and the dual bound on the decoder's additive scale."""
    return {
        "method": method,
        "device": device,
        "target": target,
        "target_ms": float(link(float(result.target))),
        "unit": unit,
        "channels": space.channels_of(result.path),
        "predicted_latency_ms": float(link(float(result.latency))),
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
    link: Link = IDENTITY,
) -> list[dict[str, Any]]:
    """Decisions for each target: the constrained optimum of Σδ + γΣL (eq. lagrange; exact mode by default) under
    the budget g⁻¹(target) of the LUT's link (D39)."""
    u = apply_unvisited(unaries, policy, widths=space.choices)
    chain = space_chain(space, u, lut_tables(space, x))  # a residual space compiled to a chain (D44)
    rows = []
    for t in targets:
        value = resolve_target(t, space, x, unit, link)
        rows.append(
            decision_row(space, chain.decode(link.inverse(value), exact=exact), method=method, device=device, target=t,
                         unit=unit, policy=policy, epoch=epoch, link=link)
        )
    return rows


# Σδ(min) − Σδ(max) below this many standard errors: the unaries carry no detectable width signal.
Z_DETECT = 3.0


def width_signal_note(z: float | None) -> str | None:
    """The plain warning a decision carries when its unaries show no width signal beyond noise (or None)."""
    if z is None or not z >= Z_DETECT:
        return (f"no width signal detectable: the max network beats the min network under these unaries by "
                f"z = {z if z is not None else float('nan'):.2f} standard errors (< {Z_DETECT:g}); the decisions follow "
                f"noise, not accuracy. Train the supernet longer (supernet.epochs, data.train_subset) or estimate "
                f"the unaries on more configurations (supernet.estimate_configs for OWS, aows.final_configs for AOWS).")
    return None


def sum_delta(unaries: Sequence[np.ndarray], idx: np.ndarray) -> float:
    """Σ_i δ_i(c_i) of a configuration's node indices (§5 eq. unaries; NaN if a width was never visited)."""
    return float(sum(u[int(k)] for u, k in zip(unaries, idx)))
