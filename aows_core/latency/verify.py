"""Verification of a decision on its device (docs/method.md D36): time the decided network, refit the table with
its timing, decide again, until the decided network's timing confirms its prediction and its median's upper bound,
kept a session margin under, meets the target.

The decoder seeks the fastest-looking networks, so a decision lands where the table errs low more often than a
random network does (eq. lat's error is selected, not averaged). Profiling times random networks; this loop times
the one that matters and gives it the weight to correct the table around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..config import LutSettings
from ..search.link import IDENTITY, Link
from ..search.results import InfeasibleTarget
from ..space import SearchSpace
from .fit import fit_table

Channels = tuple[int, ...]


# The level of a timing's upper bound (D36): the slowest of 5 rounds (`verify.rounds`' default) is under the median
# with probability 2^-5; more rounds keep the level and drop their slowest outliers.
LEVEL = 2.0 ** -5


@dataclass(frozen=True)
class Timing:
    """A decided network's timing (D36): the median over its rounds and their range, an interval that holds the
    median with probability 1 − 2^(1−n) over n rounds (75 % at 3, 94 % at 5), and `upper`, the median's upper
    confidence bound at LEVEL (distribution-free: an order statistic), which a decision must meet its target by."""

    ms: float
    lo: float
    hi: float
    rounds: int
    upper: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Timing":
        v = np.sort(np.asarray(values, dtype=np.float64))
        return cls(float(np.median(v)), float(v[0]), float(v[-1]), int(v.size), float(v[upper_rank(v.size) - 1]))

    @property
    def half_width(self) -> float:
        """The interval's half-width relative to the median."""
        return (self.hi - self.lo) / (2 * self.ms)


def upper_rank(n: int) -> int:
    """The least k whose k-th smallest of n rounds is under their median with probability P(Bin(n, ½) ≥ k) ≤ LEVEL;
    n (the slowest) when none is (fewer than 5 rounds)."""
    from scipy.stats import binom

    return next((k for k in range(1, n + 1) if binom.sf(k - 1, n, 0.5) <= LEVEL), n)


def session_margin(sigma_n: float) -> float:
    """The relative margin a verified decision keeps under its target (D36): exp(z·√2·σ_n) − 1, z the standard
    normal's upper LEVEL quantile (σ_n and the margin in log time). Another session times a network off this one's
    median by the host's state, which a session's consecutive rounds do not show but its profile's retest noise σ_n
    does (measured: ln(measured ÷ verified) spread 1.0–1.6 σ_n over three runs); a median this far under the target
    stays under it when timed again with probability 1 − LEVEL."""
    from scipy.stats import norm

    return float(math.expm1(norm.isf(LEVEL) * math.sqrt(2.0) * sigma_n))


def verify_decision(
    decide: Callable[[np.ndarray, float], dict[str, Any]],
    time_network: Callable[[Sequence[int]], Timing],
    refit: Callable[[Mapping[Channels, float]], np.ndarray],
    x0: np.ndarray,
    *,
    target_ms: float,
    tolerance: float,
    max_rounds: int,
    margin: float = 0.0,
) -> tuple[dict[str, Any], np.ndarray, list[dict[str, Any]]]:
    """Decide on `x0` aiming `margin` (relative) under `target_ms`, time the decided network; until its timing
    confirms its prediction within `tolerance` (relative) and its bound — the larger of its median's upper bound
    (`Timing.upper`) and its median raised by the margin — meets the target, refit on every timing so far and decide
    again — at most `max_rounds` refits, so at most `max_rounds` + 1 networks timed. A network predicted within the
    tolerance whose bound is over the target makes the next decision aim under its prediction by that overshoot
    (`aim_ms`: prediction × target ÷ bound, so that a network the table errs on as much lands within the target); one
    predicted worse is left to the refit. When no network meets the first aim, the decision aims at the target.

    Returns the final decision (its `predicted_latency_ms` from the final table), that table, and one trace row per
    round: the decided channels, the latency aimed at, predicted and measured latency (the median over the timing's
    rounds, their range, its upper bound, the bound it is judged by and the count), relative error predicted ÷
    measured − 1, whether the bound meets the target, and whether the network was timed in that round (else in an
    earlier one). The final decision's
    network is always timed: the last trace row says how far it lands. When a refit leaves no network meeting the
    aim, the decision before it stands and its trace row says so (`stopped`)."""
    x, aim, timed, trace = np.asarray(x0, dtype=np.float64), float(target_ms) / (1.0 + margin), {}, []
    try:
        row = decide(x, aim)
    except InfeasibleTarget:  # the margin leaves no network: the target itself, its bound judged as before
        if margin <= 0:
            raise
        aim = float(target_ms)
        row = decide(x, aim)
    for k in range(max_rounds + 1):
        c = tuple(int(v) for v in row["channels"])
        new = c not in timed
        if new:
            timed[c] = time_network(list(c))
        t = timed[c]
        err = row["predicted_latency_ms"] / t.ms - 1.0
        bound = max(t.upper, t.ms * (1.0 + margin))
        accurate, meets = abs(err) <= tolerance, bound <= target_ms
        trace.append({"round": k, "channels": list(c), "aim_ms": aim, "predicted_ms": float(row["predicted_latency_ms"]),
                      "measured_ms": t.ms, "measured_lo_ms": t.lo, "measured_hi_ms": t.hi, "measured_upper_ms": t.upper,
                      "bound_ms": bound, "timing_rounds": t.rounds,
                      "rel_error": float(err), "meets_target": meets, "timed": new})
        if (accurate and meets) or k == max_rounds:
            break
        x_new = refit({n: v.ms for n, v in timed.items()})
        aim_new = min(aim, row["predicted_latency_ms"] * target_ms / bound) if accurate else aim
        try:
            row_new = decide(x_new, aim_new)
        except InfeasibleTarget as e:  # the device is slower than the table said: no network meets the aim now
            trace[-1]["stopped"] = f"no network meets the target (aiming at {aim_new:.4g}) under the refitted table ({e})"
            break
        x, row, aim = x_new, row_new, aim_new
    return row, x, trace


def refit_with(space: SearchSpace, sets: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
               timed: Mapping[Channels, float], lut: LutSettings, weight: int,
               link: Link = IDENTITY) -> np.ndarray:
    """The table fitted as `fit-lut` fits it (§4 eq. linear_lat, λ on lambda_val; the `lut:` settings) under the LUT's
    `link` (D39), held fixed, with each verified network added to the training networks `weight` times."""
    idx_tr, l_tr, ids_tr = sets["train"]
    vi = np.stack([space.indices(list(c)) for c in timed])
    vl = np.array(list(timed.values()), dtype=np.float64)
    train = (np.concatenate([idx_tr] + [vi] * weight), np.concatenate([l_tr] + [vl] * weight),
             np.concatenate([ids_tr] + [np.full(len(vl), -1, dtype=ids_tr.dtype)] * weight))
    return fit_table(space, {**sets, "train": train}, lut, link=link).fit.x
