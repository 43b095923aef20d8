"""Profiling in rounds (supplementary A, docs/method.md D28): fit between rounds; stop at the noise floor, when the
λ-validation error stops improving, or at the maximum; otherwise time more coverage-biased networks."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..space import SearchSpace
from .calm import fit_sets
from .fit import fit_table
from .lut import LUTFitError
from .sampling import biased_configs, coverage_counts

# The λ-validation NRMSE a table can reach on noisy timings: every validation timing carries noise σ_n.
FLOOR_FACTOR = 1.25


def round_error(space: SearchSpace, rows: Sequence[Mapping[str, Any]],
                lut_cfg: Mapping[str, Any]) -> tuple[float | None, int]:
    """(λ-validation NRMSE of the table fitted on the train rows as `fit-lut` fits it, number of train networks);
    None while some latency variable has not been timed yet (the next round's networks cover it)."""
    cols = {k: [r[k] for r in rows] for k in ("role", "set", "channels", "latency_ms", "config_id", "ratio_spread")}
    sets, _ = fit_sets(space, cols, lut_cfg)
    try:
        best, _, report, _, _ = fit_table(space, sets, lut_cfg)
    except LUTFitError:
        return None, int(len(sets["train"][1]))
    return float(report[best]["val_nrmse"]), int(len(sets["train"][1]))


def stop_reason(history: Sequence[Mapping[str, Any]], sigma_n: float, max_rounds: int, min_improvement: float) -> str | None:
    """Why profiling stops after the last round of `history` (None: time another round)."""
    last = history[-1]["val_nrmse"]
    if last is None:
        return f"maximum of {max_rounds} rounds (some latency variable still untimed)" if len(history) >= max_rounds else None
    if last <= FLOOR_FACTOR * sigma_n:
        return f"noise floor: λ-validation NRMSE {100 * last:.2f} % ≤ {FLOOR_FACTOR} σ_n = {100 * FLOOR_FACTOR * sigma_n:.2f} %"
    if len(history) >= 2 and history[-2]["val_nrmse"] is not None:
        prev = history[-2]["val_nrmse"]
        if prev - last < min_improvement * prev:
            return (f"no improvement: λ-validation NRMSE {100 * prev:.2f} % → {100 * last:.2f} % "
                    f"(less than {100 * min_improvement:.0f} % better)")
    if len(history) >= max_rounds:
        return f"maximum of {max_rounds} rounds"
    return None


def next_round(space: SearchSpace, timed: Sequence[Sequence[int]], round_coverage: int, seed: int, k: int) -> np.ndarray:
    """Choice indices of round `k`: coverage-biased networks (supp. A) until every variable has been seen
    `round_coverage` more times than the least-seen one so far, counting the `timed` training networks."""
    start = np.stack([space.indices(c) for c in timed])
    goal = int(coverage_counts(space, start).min()) + int(round_coverage)
    return biased_configs(space, goal, seed=np.random.default_rng([int(seed), 0x50F11E, int(k)]), start=start)
