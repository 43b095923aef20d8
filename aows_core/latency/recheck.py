"""Profiled networks timed again in a later session (docs/method.md D40): how far `measure`'s session sits from the
profile's own timings, the part of a finalist's measured ÷ predicted that belongs to the session, not the table.

Paired timing (D27) puts the reference network exactly on the profile's scale; the other networks' ratios to it move
between sessions where the host's state slows them unequally (D37). `measure` times `measure.recheck` profiled
networks, spread over the profile's latency range, in every round beside the finalists; their medians against their
profiled latency give the session's agreement: the RMS and mean relative deviation (per third of the range), what
timing noise alone would leave, and the log-scale slope s of log(session / b) = s · log(profiled / b) (b the
reference baseline) with its standard error. Nothing is corrected with it: on the recorded sessions a fitted slope
moved as much between sessions a minute apart as the error it would remove (bench/calibration.py).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

MIN_NETWORKS = 6
BEYOND_NOISE = 1.5  # a session departs from the profile when its RMS exceeds this × the noise-only RMS

Channels = tuple[int, ...]


def recheck_networks(latency: Mapping[str, Sequence], k: int) -> list[tuple[Channels, float]]:
    """`k` profiled networks spread evenly over the profile's log-latency range, each with its profiled latency (the
    geometric mean of its corrected timings): retested networks first (two timings each), then sampled ones."""
    if k <= 0:
        return []
    logs: dict[Channels, list[float]] = {}
    retested: set[Channels] = set()
    for ch, lat, role in zip(latency["channels"], latency["latency_ms"], latency["role"]):
        if role == "reference":  # the reference network is exact by construction (D27): it says nothing
            continue
        c = tuple(int(v) for v in ch)
        logs.setdefault(c, []).append(math.log(float(lat)))
        if role == "retest":
            retested.add(c)
    pool = [c for c in logs if c in retested] if len(retested) >= k else list(logs)
    pool.sort(key=lambda c: float(np.mean(logs[c])))
    pick = sorted({int(round(q)) for q in np.linspace(0, len(pool) - 1, min(k, len(pool)))})
    return [(pool[i], float(np.exp(np.mean(logs[pool[i]])))) for i in pick]


def origin_slope(profiled: Sequence[float], session: Sequence[float], baseline: float) -> tuple[float, float]:
    """s and its standard error in log(session / baseline) = s · log(profiled / baseline), least squares."""
    x = np.log(np.asarray(profiled, dtype=np.float64) / baseline)
    y = np.log(np.asarray(session, dtype=np.float64) / baseline)
    xx = float(x @ x)
    if x.size < 2 or xx <= 0:
        return 1.0, math.inf
    s = float(x @ y) / xx
    res = y - s * x
    return s, math.sqrt(float(res @ res) / (x.size - 1) / xx)


def session_agreement(rows: Sequence[Mapping[str, Any]], networks: Sequence[tuple[Channels, float]], baseline: float,
                      sigma_n: float, round_noise: float, rounds: int) -> dict[str, Any]:
    """The session's corrected `recheck` rows (network = index into `networks`) against their profiled latency: each
    network's median over rounds; RMS and mean of measured ÷ profiled − 1, overall and per third of the profiled
    latency range (fastest, middle, slowest); `noise_rms`, what timing noise alone leaves (the profile's σ_n over √2
    for a retested network's two timings, the session's round noise over √rounds for the median); `departs` when
    the RMS exceeds BEYOND_NOISE × that; the slope s ± SE (`origin_slope`)."""
    per: dict[int, list[float]] = {}
    for r in rows:
        if r["role"] == "recheck":
            per.setdefault(int(r["network"]), []).append(float(r["latency_ms"]))
    keys = sorted(per, key=lambda k: networks[k][1])
    prof = np.array([networks[k][1] for k in keys])
    meas = np.array([float(np.median(per[k])) for k in keys])
    noise = math.sqrt(sigma_n**2 / 2 + 1.25**2 * round_noise**2 / max(rounds, 1))  # 1.25: a median's efficiency
    out: dict[str, Any] = {"networks": len(keys), "noise_rms": noise, "departs": False}
    if len(keys) < MIN_NETWORKS:
        return out
    rel = meas / prof - 1
    thirds = np.array_split(rel, 3)
    s, se = origin_slope(prof, meas, baseline)
    rms = float(np.sqrt(np.mean(rel**2)))
    out.update(rms=rms, mean=float(rel.mean()), by_third=[float(t.mean()) for t in thirds], max_abs=float(np.abs(rel).max()),
               slope=s, slope_se=se, departs=bool(rms > BEYOND_NOISE * noise))
    return out


def agreement_note(a: Mapping[str, Any] | None) -> str:
    """One line for the CLI and the results: how far this session sits from the profile, and what it means."""
    if not a or not a.get("networks"):
        return "no profiled network timed again (measure.recheck is 0): the session's own share of the error is unknown"
    if "rms" not in a:
        return f"{a['networks']} profiled networks timed again: too few to say (≥ {MIN_NETWORKS})"
    fast, mid, slow = (100 * v for v in a["by_third"])
    head = (f"{a['networks']} profiled networks timed again: {100 * a['rms']:.1f} % RMS from their profiled latency "
            f"(timing noise alone ≈ {100 * a['noise_rms']:.1f} %; fastest / middle / slowest third {fast:+.1f} / "
            f"{mid:+.1f} / {slow:+.1f} %, scale {a['slope']:.3f} ± {a['slope_se']:.3f})")
    if a["departs"]:
        return (head + ": this session departs from the profile beyond timing noise, so finalists' misses of that size "
                "are the session's, not the table's; measure again later, or on a quieter machine")
    return head + ": the session agrees with the profile within its noise"
