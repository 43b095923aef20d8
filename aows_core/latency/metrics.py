"""Agreement of predicted and measured latency (§7, Fig. latency_correlation) and the FLOPs baseline."""

from __future__ import annotations


import numpy as np
from scipy.stats import kendalltau

# ---- validation metrics (§7, Fig. latency_correlation) ------------------------------------------
def latency_metrics(pred: np.ndarray, meas: np.ndarray, tau: bool = True) -> dict[str, float]:
    """Agreement of predicted and measured latency (§7 Fig. latency_correlation): rmse_ms; nrmse = RMSE / mean(measured);
    mape = mean |pred − meas| / meas; within_5pct, within_10pct = shares with |pred − meas| / meas ≤ 0.05, 0.10;
    kendall_tau = Kendall's τ-b (scipy). Ratios are fractions, not percent."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    meas = np.asarray(meas, dtype=np.float64).ravel()
    if pred.shape != meas.shape or len(meas) == 0:
        raise ValueError(f"pred and meas must be non-empty and of equal length; got {pred.shape}, {meas.shape}")
    err = pred - meas
    rmse = float(np.sqrt(np.mean(err**2)))
    rel = np.abs(err) / np.abs(meas)
    out = {
        "rmse_ms": rmse,
        "nrmse": rmse / float(np.mean(meas)),
        "mape": float(np.mean(rel)),
        "within_5pct": float(np.mean(rel <= 0.05)),
        "within_10pct": float(np.mean(rel <= 0.10)),
    }
    if tau:
        out["kendall_tau"] = float(kendalltau(pred, meas).statistic) if len(meas) > 1 else float("nan")
    return out


def table_adequacy(pred: np.ndarray, meas: np.ndarray, sigma_n: float, coverage: float = 0.95) -> dict[str, object]:
    """Is the table's held-out error timing noise or the device's non-additivity (§4, docs/method.md D34)?

    ratio_low / ratio_high: the (1 − coverage)/2 and (1 + coverage)/2 quantiles of measured ÷ predicted over the
    held-out networks, the interval a prediction of an unseen network carries; model_error: the relative RMS error
    left after the test timings' own noise, sqrt(max(0, RMS² − σ_n²)); model_limited: RMS > 1.5 σ_n (and > 0.5 %),
    with the message that says what it means."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    meas = np.asarray(meas, dtype=np.float64).ravel()
    ratio = meas / pred
    rms = float(np.sqrt(np.mean((ratio - 1) ** 2)))
    lo, hi = (float(q) for q in np.quantile(ratio, [(1 - coverage) / 2, (1 + coverage) / 2]))
    model_error = float(np.sqrt(max(0.0, rms**2 - sigma_n**2)))
    limited = bool(rms > 1.5 * sigma_n and rms > 0.005)  # an analytic device (σ_n 0) is exact to rounding
    message = ""
    if limited:
        message = (
            f"the table's held-out error (RMS {100 * rms:.1f} %) is {rms / max(sigma_n, 1e-12):.1f}× the timing noise "
            f"σ_n {100 * sigma_n:.1f} %: about {100 * model_error:.1f} % is the device's own non-additivity, which no "
            f"number of repeats removes. {100 * coverage:.0f} % of held-out networks ran within "
            f"{100 * (lo - 1):+.1f} … {100 * (hi - 1):+.1f} % of their prediction: a finalist's measured latency can "
            f"differ from its prediction by that much, and targets closer than that are not told apart by the table"
        )
    return {"rel_rms": rms, "ratio_low": lo, "ratio_high": hi, "coverage": coverage, "model_error": model_error,
            "model_limited": limited, "model_message": message}


# A quarter of the held-out squared error in networks slower than every retested one: their noise is unmeasured.
REACH_SHARE = 0.25


def retest_reach(pred: np.ndarray, meas: np.ndarray, retested_ms: np.ndarray, unit: str = "ms") -> dict[str, object]:
    """How much of the held-out error (squared, as NRMSE weighs it) sits in networks slower than every retested one,
    whose timing noise σ_n does not measure (docs/method.md D39): retest_reach_ms, beyond_retest (networks),
    error_beyond_retest (share), and the message when that share is ≥ REACH_SHARE."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    meas = np.asarray(meas, dtype=np.float64).ravel()
    retested_ms = np.asarray(retested_ms, dtype=np.float64).ravel()
    out: dict[str, object] = {"retest_reach_ms": None, "beyond_retest": 0, "error_beyond_retest": 0.0,
                              "reach_message": ""}
    if retested_ms.size == 0 or meas.size == 0:
        return out
    reach = float(retested_ms.max())
    beyond = meas > reach
    sq = (pred - meas) ** 2
    share = float(sq[beyond].sum() / sq.sum()) if sq.sum() > 0 else 0.0
    out.update(retest_reach_ms=reach, beyond_retest=int(beyond.sum()), error_beyond_retest=share)
    if share >= REACH_SHARE:
        out["reach_message"] = (
            f"{int(beyond.sum())} of {meas.size} held-out networks ran slower than every retested one (> {reach:.3g} {unit}) "
            f"and carry {100 * share:.0f} % of the held-out squared error: their own timing noise is not in σ_n, so "
            f"part of the table's error there may be timing rather than the device (docs/method.md D39); more retest "
            f"pairs (profiling.retest) would measure it")
    return out


def flops_baseline(flops_train: np.ndarray, l_train: np.ndarray) -> float:
    """The FLOPs-proportional model l ≈ a·flops (least squares through the origin, cf. §4's FLOPs formula); returns a."""
    f = np.asarray(flops_train, dtype=np.float64).ravel()
    y = np.asarray(l_train, dtype=np.float64).ravel()
    if f.shape != y.shape or len(f) == 0:
        raise ValueError(f"flops and latencies must be non-empty and of equal length; got {f.shape}, {y.shape}")
    den = float(f @ f)
    if den == 0:
        raise ValueError("all FLOPs are zero; the proportional baseline is undefined")
    return float(f @ y) / den


def validation_rows(
    pred: np.ndarray, meas: np.ndarray, flops_tr: np.ndarray, l_tr: np.ndarray, flops_te: np.ndarray
) -> tuple[list[dict], dict[str, float], dict[str, float], float, np.ndarray]:
    """The LUT against the FLOPs-proportional model on the test set (§7): (rows, lut metrics, flops metrics, a, baseline)."""
    a = flops_baseline(flops_tr, l_tr)
    base = a * np.asarray(flops_te)
    m_lut = latency_metrics(pred, meas)
    m_flops = latency_metrics(base, meas)
    n = len(meas)
    rows = [{"model": "lut", "n": n, **m_lut}, {"model": "flops_proportional", "n": n, **m_flops}]
    return rows, m_lut, m_flops, a, base
