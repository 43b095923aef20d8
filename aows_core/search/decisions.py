"""Decisions (§5): the constrained decode of each target (eq. lagrange) as rows of the decisions contract; Σδ of a configuration."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..config import DecodeSettings
from ..space import SearchSpace
from .graph import space_chain
from .results import DecodeResult
from .targets import DeviceTable, lut_tables
from .unvisited import apply_unvisited


def decision_row(space: SearchSpace, result: DecodeResult, table: DeviceTable, *, method: str, target: str,
                 policy: str | None, epoch: int | None) -> dict[str, Any]:
    """A row of the decisions contract from a chain decode of the budget g⁻¹(target) (D39): target and predicted
    latency on the scale of the table's link g, γ and the dual bound on the decoder's additive scale."""
    link = table.link
    return {
        "method": method,
        "device": table.device,
        "target": target,
        "target_ms": float(link(float(result.target))),
        "unit": table.unit,
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


def decide(space: SearchSpace, unaries: Sequence[np.ndarray], table: DeviceTable, targets: Sequence[str], *,
           method: str, decode: DecodeSettings = DecodeSettings(), epoch: int | None = None) -> list[dict[str, Any]]:
    """Decisions for each target: the constrained optimum of Σδ + γΣL (eq. lagrange; exact mode unless `decode.exact`
    is off, unvisited widths by `decode.unvisited`) under the budget g⁻¹(target) of the table's link (D39)."""
    policy = decode.unvisited
    u = apply_unvisited(unaries, policy, widths=space.choices)
    chain = space_chain(space, u, lut_tables(space, table.x))  # a residual space compiled to a chain (D44)
    rows = []
    for t in targets:
        budget = table.link.inverse(table.resolve(t, space))
        rows.append(decision_row(space, chain.decode(budget, exact=decode.exact), table, method=method, target=t,
                                 policy=policy, epoch=epoch))
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


# Random configurations on which the proxy stage checks Σδ against the supernet itself (D25).
SUM_DELTA_CHECKS = 100


def check_configs(space: SearchSpace, seed: int) -> np.ndarray:
    """(SUM_DELTA_CHECKS, n_layers) choice indices of the Σδ check (D25): uniform, from a seeded stream no training
    or estimation pass draws from."""
    from .sampler import uniform_layer_indices

    return uniform_layer_indices(space, SUM_DELTA_CHECKS, np.random.default_rng([int(seed), 0xC4EC]))


def sum_delta(unaries: Sequence[np.ndarray], idx: np.ndarray) -> float:
    """Σ_i δ_i(c_i) of a configuration's node indices (§5 eq. unaries; NaN if a width was never visited)."""
    return float(sum(u[int(k)] for u, k in zip(unaries, idx)))
