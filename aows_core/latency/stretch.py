"""The host's state stretches the latency scale (docs/method.md D37): paired timing (D27) divides each network by a
reference timed beside it, which cancels a host state that slows every network by the same factor; on a CPU whose
state slows small and large networks by different factors the ratio itself moves with the state:

    log(l / l_ref) = (1 + β·h) · log(l₀ / l_ref₀),    h = log(reference level / reference baseline)

β is estimated from the session's retest pairs (the same network timed twice in different host states), beside the
reference's own timing noise where that resolves, and, when it resolves (|β| ≥ MIN_Z standard errors, and 1 + β·h
stays within [0.5, 2] over the session), every paired timing is expressed at the baseline's state: l / baseline is
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


def _through_origin(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Least squares y ≈ X·c without intercept: (c, standard errors), None when X is rank-deficient."""
    xtx = X.T @ X
    if np.linalg.matrix_rank(xtx) < X.shape[1]:
        return None
    c = np.linalg.solve(xtx, X.T @ y)
    res = y - X @ c
    cov = float(res @ res) / (len(y) - X.shape[1]) * np.linalg.inv(xtx)
    return c, np.sqrt(np.diag(cov))


def estimate_stretch(rows: list[dict], baseline: float) -> dict[str, Any]:
    """β of D37 by least squares through the origin over the (sample, retest) pairs:
    Δ log ratio = β · Δh · mean log ratio + γ · Δh; with its standard error, the pairs, the session's h range and
    whether it resolves (`applied`). γ is the reference's own timing noise: where the reference alone ran slow, h rose
    and every ratio fell by the same amount whatever its size, so γ is minus the share of h's variance that is the
    reference's noise (−1 where the host did not move). β alone reads that as β ≈ γ ÷ mean log ratio, hence β is
    taken from the two-term fit when γ resolves (|γ| ≥ MIN_Z standard errors), else from β alone, which resolves with
    fewer pairs. Rows must be paired-corrected to `baseline` with β = 0."""
    h = host_state(rows)
    logr = np.log(np.array([r["latency_ms"] for r in rows], dtype=np.float64) / baseline)
    first = {r["config_id"]: i for i, r in enumerate(rows) if r["role"] == "sample"}
    pairs = [(first[r["config_id"]], i) for i, r in enumerate(rows) if r["role"] == "retest" and r["config_id"] in first]
    out: dict[str, Any] = {"beta": 0.0, "beta_se": math.inf, "gamma": 0.0, "gamma_se": math.inf, "pairs": len(pairs),
                           "applied": False,
                           "h_low": float(h.min()) if h.size else 0.0, "h_high": float(h.max()) if h.size else 0.0}
    if len(pairs) < MIN_PAIRS:
        return out
    a, b = np.array(pairs).T
    dh = h[b] - h[a]
    x = dh * 0.5 * (logr[a] + logr[b])
    y = logr[b] - logr[a]
    alone = _through_origin(x[:, None], y)
    if alone is None:
        return out
    (beta,), (se,) = alone
    both = _through_origin(np.c_[x, dh], y)
    if both is not None:
        (beta2, gamma), (se2, gamma_se) = both
        out.update(gamma=float(gamma), gamma_se=float(gamma_se))
        if abs(gamma) >= MIN_Z * gamma_se:  # the reference's own noise moves h: β beside it
            beta, se = beta2, se2
    # a first-order model: a β that more than halves or doubles the scale within the session's states is not trusted
    scale = (1 + beta * out["h_low"], 1 + beta * out["h_high"])
    within = min(scale) >= 0.5 and max(scale) <= 2.0
    out.update(beta=float(beta), beta_se=float(se), applied=bool(abs(beta) >= MIN_Z * se and beta != 0 and within))
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
