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
