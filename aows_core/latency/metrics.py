"""Agreement of predicted and measured latency (§7, Fig. latency_correlation) and the FLOPs baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

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


# 1.4826 × the median absolute deviation is the standard deviation of a normal sample: a spread robust to outliers.
MAD_TO_SIGMA = 1.4826
# The table is at the timing noise while its held-out relative RMS is within this many σ_n (a perfect table's RMS is
# σ_n: each held-out timing carries that noise); beyond it, and above MIN_MODEL_ERROR, the device is not additive.
MODEL_LIMIT = 1.5
MIN_MODEL_ERROR = 0.005  # an analytic device (σ_n 0) is exact to rounding
# A quarter of the held-out squared error in networks slower than every retested one: their noise is unmeasured.
REACH_SHARE = 0.25
# Width resolution (docs/latency-model.md): the device sees the space's widths when the table ranks held-out
# networks with Kendall τ ≥ TAU_MIN (τ = 0.5 is a correlation of 0.71: timing noise as large as the held-out
# networks' own spread) and predicts its largest network at least RANGE_SIGMAS σ_n slower than its smallest (else
# fewer than about RANGE_SIGMAS / 2 latency levels are told apart across the whole space). The default torch-cpu
# table: τ 0.93, its finalists alone span 35 σ_n.
TAU_MIN = 0.5
RANGE_SIGMAS = 5.0


def held_out_tau(pred: np.ndarray, meas: np.ndarray) -> float | None:
    """Kendall's τ-b of predicted and measured held-out latency; 0 when the predictions do not vary (a constant table
    ranks nothing), None with fewer than two networks."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    meas = np.asarray(meas, dtype=np.float64).ravel()
    if len(meas) < 2:
        return None
    tau = float(kendalltau(pred, meas).statistic)
    return tau if np.isfinite(tau) else 0.0


def width_resolution(tau: float | None, sigma_n: float, span: float | None = None) -> dict[str, Any]:
    """Whether the device resolves the space's widths (docs/latency-model.md): the held-out Kendall τ ≥ TAU_MIN, and
    `span` = L(max config) ÷ L(min config) as the table predicts it (eq. lat) at least 1 + RANGE_SIGMAS·σ_n (a test
    whose input is None is skipped). Returns width_resolved, kendall_tau, latency_span, span_sigmas ((span − 1) ÷ σ_n;
    None when σ_n is 0 or the span unknown) and unresolved_because (the failed tests, in words)."""
    sigmas = (span - 1) / sigma_n if span is not None and sigma_n > 0 else None
    failed = []
    if tau is not None and tau < TAU_MIN:
        failed.append(f"the table ranks held-out networks with Kendall τ {tau:.2f} (< {TAU_MIN})")
    if span is not None and span - 1 < RANGE_SIGMAS * sigma_n:
        failed.append(f"it predicts the largest network only {span:.3g}× the smallest ({100 * (span - 1):+.1f} %, "
                      f"{sigmas:.1f} σ_n; widths are resolved from {RANGE_SIGMAS:g} σ_n)")
    return {"width_resolved": not failed, "kendall_tau": tau, "latency_span": span, "span_sigmas": sigmas,
            "unresolved_because": failed}


def _unresolved_message(res: dict[str, Any], sigma_n: float, noise_message: str, device: str) -> str:
    """What an unresolved device means and what to do (distinct from the noise gate's advice)."""
    key = f"devices.{device}." if device else "the device's "
    msg = (f"the device does not resolve this space's widths: {' and '.join(res['unresolved_because'])}. Every width "
           "costs about the same on it: the timing is launch-bound (a pass is dominated by fixed per-kernel launch and "
           "per-call costs, not by the layers' work) or the inputs or the batch are too small for the device. Raise "
           f"{key}batch_size or the space's input resolution, or on torch-cuda time CUDA graphs (timing: graph), "
           "then profile again.")
    if not noise_message:
        return msg
    if res["span_sigmas"] is not None and res["span_sigmas"] >= RANGE_SIGMAS:  # the extremes stand out: noise may rank
        return (f"{msg} The noise gate failed too, and the space's extremes are {res['span_sigmas']:.0f} σ_n apart, "
                f"so the noise itself may be what scrambles the ranking: {noise_message}")
    return (f"{msg} The noise gate failed too (σ_n {100 * sigma_n:.1f} %), but that noise is measured between networks "
            "the device hardly tells apart: a quieter host or more repeats will not make the widths visible.")


@dataclass(frozen=True)
class SessionNoise:
    """What a profiling session measured of its own noise (§4): the test–retest σ_n, the latencies of its retested
    networks (how far the retest pairs reach) and the noise gate's message when the session failed it ("" if not)."""

    sigma_n: float
    retested_ms: Sequence[float] | np.ndarray = ()
    message: str = ""


def adequacy(pred: np.ndarray, meas: np.ndarray, noise: SessionNoise, *, unit: str = "ms", coverage: float = 0.95,
             span: float | None = None, device: str = "") -> dict[str, Any]:
    """One report on what the table's held-out error means (§4, §7; docs/method.md "Is the table good enough?"):
    the `noise` (σ_n, and the noise gate's message when the session failed it), the error beyond the noise
    (`model_error` = sqrt(max(0, RMS² − σ_n²)) of measured ÷ predicted, and the interval [ratio_low, ratio_high]
    that `coverage` of held-out networks fall in), the reach of the retest pairs (`error_beyond_retest`: the share of
    the squared error in networks slower than every retested one, whose own noise σ_n does not measure), whether the
    device resolves the widths (`width_resolution`, with `span` = the table's L(max config) ÷ L(min config)), a
    `verdict` — width_unresolved, too_noisy, model_limited or at_noise, the first that holds — and one `message`
    that says what it means and what to do (`device`: the configured name, for the settings it names)."""
    pred = np.asarray(pred, dtype=np.float64).ravel()
    meas = np.asarray(meas, dtype=np.float64).ravel()
    sigma_n, noise_message = noise.sigma_n, noise.message
    retested_ms = np.asarray(noise.retested_ms, dtype=np.float64).ravel()
    ratio = meas / pred
    rms = float(np.sqrt(np.mean((ratio - 1) ** 2)))
    lo, hi = (float(q) for q in np.quantile(ratio, [(1 - coverage) / 2, (1 + coverage) / 2]))
    model_error = float(np.sqrt(max(0.0, rms**2 - sigma_n**2)))
    reach = float(retested_ms.max()) if retested_ms.size else None
    beyond = meas > reach if reach is not None else np.zeros(meas.size, dtype=bool)
    sq = (pred - meas) ** 2
    share = float(sq[beyond].sum() / sq.sum()) if sq.sum() > 0 else 0.0
    interval = (f"{100 * coverage:.0f} % of held-out networks ran within {100 * (lo - 1):+.1f} … {100 * (hi - 1):+.1f} % "
                f"of their prediction")
    resolution = width_resolution(held_out_tau(pred, meas), sigma_n, span)
    if not resolution["width_resolved"]:
        verdict = "width_unresolved"
        message = f"{_unresolved_message(resolution, sigma_n, noise_message, device)} {interval}."
    elif noise_message:
        verdict, message = "too_noisy", f"{noise_message} {interval}."
    elif rms > MODEL_LIMIT * sigma_n and rms > MIN_MODEL_ERROR:
        verdict = "model_limited"
        message = (f"the table's held-out error (RMS {100 * rms:.1f} %) is {rms / max(sigma_n, 1e-12):.1f}× the timing "
                   f"noise σ_n {100 * sigma_n:.1f} %: about {100 * model_error:.1f} % is the device's own "
                   f"non-additivity, which no number of repeats removes. {interval}: targets closer than that are "
                   "not told apart by the table, and the decisions are timed on the device before they are kept "
                   "(verify).")
        if share >= REACH_SHARE:
            message += (f" {int(beyond.sum())} held-out networks slower than every retested one (> {reach:.3g} {unit}) "
                        f"carry {100 * share:.0f} % of that error: their own timing noise is not in σ_n; more retest "
                        "pairs (profiling.retest) would measure it.")
    else:
        verdict = "at_noise"
        message = (f"the table's held-out error (RMS {100 * rms:.1f} %) is within {MODEL_LIMIT} σ_n "
                   f"({100 * sigma_n:.1f} %): as good as the timings allow. {interval}.")
    return {"verdict": verdict, "message": message, "sigma_n": float(sigma_n), "rel_rms": rms,
            "model_error": model_error, "ratio_low": lo, "ratio_high": hi, "coverage": coverage,
            "retest_reach_ms": reach, "beyond_retest": int(beyond.sum()), "error_beyond_retest": share, **resolution}


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
