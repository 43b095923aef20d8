"""The host's state stretches the latency scale (docs/method.md D37): paired timing (D27) divides each network by a
reference timed beside it, which cancels a host state that slows every network by the same factor; on a CPU whose
state slows small and large networks by different factors the ratio itself moves with the state:

    log(l / l_ref) = (1 + β·h) · log(l₀ / l_ref₀),    h = log(reference level / reference baseline)

β is estimated from the session's retest pairs (the same network timed twice in different host states) and, when it
resolves (|β| ≥ MIN_Z standard errors, and 1 + β·h stays within [0.5, 2] over the session), every paired timing is expressed at the baseline's state: l / baseline is
raised to 1 / (1 + β·h). β describes the profiling session only: later sessions (`measure`, the verified decisions)
do not apply it, since another session's host state is not on the profile's scale; `measure` says how far it sits
from the profile instead (D40, `aows_core.latency.recheck`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

MIN_Z = 2.5  # β applied only when it resolves: |β| / SE(β) ≥ MIN_Z (about 1 % two-sided)
MIN_PAIRS = 10


def host_state(rows: list[dict]) -> np.ndarray:
    """h per row: log of the reference level the row was divided by, over the baseline it was expressed at."""
    return np.log(np.array([r["drift_factor"] for r in rows], dtype=np.float64))


def estimate_stretch(rows: list[dict], baseline: float) -> dict[str, Any]:
    """β of D37 by least squares through the origin over the (sample, retest) pairs:
    Δ log ratio = β · Δh · mean log ratio; with its standard error, the pairs, the session's h range and whether it
    resolves (`applied`). Rows must be paired-corrected to `baseline` with β = 0."""
    h = host_state(rows)
    logr = np.log(np.array([r["latency_ms"] for r in rows], dtype=np.float64) / baseline)
    first = {r["config_id"]: i for i, r in enumerate(rows) if r["role"] == "sample"}
    pairs = [(first[r["config_id"]], i) for i, r in enumerate(rows) if r["role"] == "retest" and r["config_id"] in first]
    out: dict[str, Any] = {"beta": 0.0, "beta_se": math.inf, "pairs": len(pairs), "applied": False,
                           "h_low": float(h.min()) if h.size else 0.0, "h_high": float(h.max()) if h.size else 0.0}
    if len(pairs) < MIN_PAIRS:
        return out
    a, b = np.array(pairs).T
    x = (h[b] - h[a]) * 0.5 * (logr[a] + logr[b])
    y = logr[b] - logr[a]
    xx = float(x @ x)
    if xx <= 0:
        return out
    beta = float(x @ y) / xx
    res = y - beta * x
    se = math.sqrt(float(res @ res) / (len(y) - 1) / xx)
    # a first-order model: a β that more than halves or doubles the scale within the session's states is not trusted
    scale = (1 + beta * out["h_low"], 1 + beta * out["h_high"])
    within = min(scale) >= 0.5 and max(scale) <= 2.0
    out.update(beta=beta, beta_se=se, applied=bool(abs(beta) >= MIN_Z * se and beta != 0 and within))
    return out


def apply_stretch(rows: list[dict], stretch: Mapping[str, Any] | None, baseline: float) -> list[dict]:
    """Express a profiling session's paired timings at the baseline's host state (D37): latency_ms = baseline ·
    (latency_ms / baseline) ^ (1 / (1 + β·h)); rows unchanged when β did not resolve. drift_factor (the host's state)
    is left as it is, so applying it twice is an error of the caller, not of h."""
    if not stretch or not stretch.get("applied"):
        return rows
    beta = float(stretch["beta"])
    h = host_state(rows)
    scale = 1.0 + beta * h
    if np.any(scale <= 0.1):
        raise ValueError(f"host stretch β = {beta:.3g} over h ∈ [{h.min():.3g}, {h.max():.3g}] inverts the latency "
                         "scale; profile again with profiling.stretch: false")
    for r, s in zip(rows, scale):
        raw_ratio = r["latency_ms"] / baseline
        r["latency_ms"] = baseline * raw_ratio ** (1.0 / s)
    return rows
