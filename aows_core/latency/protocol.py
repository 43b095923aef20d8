"""The timing protocol of §4 (profiling) and of §7's finalist measurements, as pure functions.

Profiling: a seeded job order (`profile_plan`) of every configuration once (role `sample`), a
reference network every `reference_every` jobs and `retest` networks a second time at least a third
of the session later. Drift correction (`correct_drift`): the reference series, smoothed by a running
median of DRIFT_WINDOW measurements, is interpolated over job order, drift_factor = ref(job) / baseline,
latency_ms = latency_ms_raw / drift_factor. Noise floor: σ_n = RMS((m₁ − m₂)/m̄)/√2 over retest pairs
(docs/method.md D3). Measuring (§7, D24): per round ref, shuffle(finalists + ref), ref (`measure_plan`),
corrected to the LUT's reference baseline (`finalist_rows`). Devices are duck-typed (`measure`,
`analytic`, `spec`, `keys`); the journal, the device session and the files belong to the stages.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..space import SearchSpace
from .lut import columns_of, predict

STATISTICS = {
    "median": lambda s: float(np.median(s)),
    "mean": lambda s: float(np.mean(s)),
    "min": lambda s: float(np.min(s)),
    "p10": lambda s: float(np.percentile(s, 10)),
}


# References in the running median that estimates drift (odd; 1 disables smoothing).
DRIFT_WINDOW = 5


@dataclass(frozen=True)
class Job:
    """One timing of a profiling session (§4): its index, role, configuration and set."""

    job: int
    role: str  # sample | reference | retest
    config_id: int
    channels: tuple[int, ...]
    set: str | None


def reference_config(space: SearchSpace) -> list[int]:
    """The drift reference: the middle width choice of every layer (a mid-latency network)."""
    return [c[(len(c) - 1) // 2] for c in space.layer_choices]


def profile_plan(space: SearchSpace, configs: Any, protocol: Mapping[str, Any], seed: int, analytic: bool) -> list[Job]:
    """The full, seeded job order of a session (§4): shuffled samples, retests ≥ N/3 later, periodic references."""
    cols = columns_of(configs)
    ids = list(cols["config_id"])
    chans = [tuple(c) for c in cols["channels"]]
    sets = list(cols["set"])
    rng = np.random.default_rng([seed, 0x9E0F11E])
    order = rng.permutation(len(ids))
    n = len(order)
    keyed: list[tuple[float, Job]] = []
    pos_of = {}
    for pos, k in enumerate(order):
        keyed.append((float(pos), Job(-1, "sample", ids[k], chans[k], sets[k])))
        pos_of[k] = pos
    if not analytic and protocol["retest"] > 0 and n >= 3:
        gap = math.ceil(n / 3)
        eligible = [k for k in order if pos_of[k] + gap < n]
        prefer = [k for k in eligible if sets[k] == "test"]
        pool = prefer if len(prefer) >= protocol["retest"] else eligible
        chosen = rng.choice(len(pool), size=min(protocol["retest"], len(pool)), replace=False)
        for c in sorted(chosen):
            k = pool[c]
            key = rng.uniform(pos_of[k] + gap, n) - 0.5  # strictly after pos + gap - 0.5
            keyed.append((float(key), Job(-1, "retest", ids[k], chans[k], sets[k])))
    keyed.sort(key=lambda kj: kj[0])
    jobs: list[Job] = []
    ref = tuple(reference_config(space))
    every = protocol["reference_every"]
    for i, (_, j) in enumerate(keyed):
        if not analytic and i % every == 0:
            jobs.append(Job(len(jobs), "reference", -1, ref, None))
        jobs.append(Job(len(jobs), j.role, j.config_id, j.channels, j.set))
    if not analytic:
        jobs.append(Job(len(jobs), "reference", -1, ref, None))
    return jobs


def plan_hash(jobs: list[Job], protocol: Mapping, fingerprint: Mapping, space: SearchSpace) -> str:
    """Identity of a session's plan (jobs, protocol, device fingerprint, space): a journal resumes only the same plan."""
    blob = json.dumps(
        {
            "jobs": [(j.role, j.config_id, j.channels) for j in jobs],
            "protocol": dict(protocol),
            "fingerprint": dict(fingerprint),
            "space": space.hash,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def retest_noise(rows: list[dict]) -> dict[str, float]:
    """σ_n = RMS((m₁ − m₂)/m̄)/√2 over (sample, retest) pairs, and the pairs' own ±5 % / ±10 % shares."""
    first = {r["config_id"]: r["latency_ms"] for r in rows if r["role"] == "sample"}
    pairs = [(first[r["config_id"]], r["latency_ms"]) for r in rows if r["role"] == "retest" and r["config_id"] in first]
    if not pairs:
        return {"sigma_n": 0.0, "retest_pairs": 0, "retest_within_5pct": 1.0, "retest_within_10pct": 1.0}
    m = np.asarray(pairs)
    rel = (m[:, 0] - m[:, 1]) / m.mean(axis=1)
    return {
        "sigma_n": float(np.sqrt(np.mean(rel**2)) / math.sqrt(2)),
        "retest_pairs": len(pairs),
        "retest_within_5pct": float(np.mean(np.abs(rel) <= 0.05)),
        "retest_within_10pct": float(np.mean(np.abs(rel) <= 0.10)),
    }


def running_median(values: np.ndarray, window: int) -> np.ndarray:
    """Centred running median (the window shrinks at the ends): one disturbed reference is ignored."""
    h = window // 2
    return np.array([np.median(values[max(0, i - h) : i + h + 1]) for i in range(len(values))])


def correct_drift(rows: list[dict], window: int = DRIFT_WINDOW,
                  baseline: float | None = None) -> tuple[list[dict], float]:
    """Fill drift_factor and latency_ms from the reference measurements; returns rows and the session's baseline.

    The reference series is smoothed by a running median over `window` measurements before it is
    interpolated, so a reference timed during a burst of interference does not distort its neighbours.
    Latencies are corrected to `baseline` (another session's, e.g. the LUT's) when given, else to this
    session's own baseline (the median of its smoothed references).
    """
    refs = [(r["job"], r["latency_ms_raw"]) for r in rows if r["role"] == "reference"]
    if not refs:
        for r in rows:
            r["drift_factor"], r["latency_ms"] = 1.0, r["latency_ms_raw"]
        return rows, float("nan")
    jobs, vals = np.asarray(refs, dtype=np.float64).T
    vals = running_median(vals, window)
    session = float(np.median(vals))
    to = session if baseline is None else float(baseline)
    for r in rows:
        f = float(np.interp(r["job"], jobs, vals)) / to
        r["drift_factor"] = f
        r["latency_ms"] = r["latency_ms_raw"] / f
    return rows, session


def timing_counts(device, protocol: Mapping[str, Any]) -> tuple[int, int, float]:
    """(repeats, warm-up, minimum timed seconds) of the protocol; one plain count on an analytic device."""
    if device.analytic:
        return 1, 0, 0.0
    return int(protocol["repeats"]), int(protocol["warmup"]), protocol["min_time_ms"] / 1e3


def time_network(device, channels, job: int, counts: tuple[int, int, float], statistic: str) -> dict[str, Any]:
    """Time one network under the protocol (§4): the fitted statistic and the raw per-repeat statistics."""
    repeats, warmup, min_time = counts
    m = device.measure(list(channels), repeats, warmup, job, min_time_s=min_time)
    s = np.asarray(m.samples, dtype=np.float64)
    return {
        "latency_ms_raw": STATISTICS[statistic](s),
        "median_ms": float(np.median(s)),
        "mean_ms": float(np.mean(s)),
        "min_ms": float(np.min(s)),
        "p10_ms": float(np.percentile(s, 10)),
        "p90_ms": float(np.percentile(s, 90)),
        "std_ms": float(np.std(s)),
        "n_repeats": int(s.size),
        "timed_s": float(m.timed_s),
        "overhead_s": float(m.overhead_s),
    }


# Decisions must carry the LUT's own prediction; anything looser means they were decided on another table.
PREDICTION_RTOL = 1e-9


class MeasureError(RuntimeError):
    """A measurement session that cannot run: a finalist, LUT or device that does not match."""


@dataclass(frozen=True)
class MeasureJob:
    """One timing of a measuring session (§7): its index, round, role and network."""

    job: int
    round: int
    role: str  # finalist | reference
    network: int  # index into the distinct networks; -1 for the reference
    channels: tuple[int, ...]


def measure_plan(
    networks: Sequence[Sequence[int]], reference: Sequence[int], rounds: int, seed: int, analytic: bool, job_offset: int = 0
) -> list[MeasureJob]:
    """The seeded job order (§7 timed with §4's protocol): per round ref, shuffle(networks + ref), ref; analytic: one round, no ref."""
    rng = np.random.default_rng([seed, 0x3EA5E])
    ref = tuple(int(c) for c in reference)
    nets = [tuple(int(c) for c in n) for n in networks]
    jobs: list[MeasureJob] = []

    def add(r: int, k: int) -> None:
        jobs.append(MeasureJob(job_offset + len(jobs), r, "reference" if k < 0 else "finalist", k, ref if k < 0 else nets[k]))

    for r in range(1 if analytic else rounds):
        if analytic:
            for k in range(len(nets)):
                add(r, k)
            continue
        add(r, -1)
        for k in rng.permutation(len(nets) + 1):
            add(r, int(k) if k < len(nets) else -1)
        add(r, -1)
    return jobs


def protocol_differences(used: Mapping[str, Any], protocol: Mapping[str, Any]) -> list[str]:
    """The timing settings (§4 same form) in which `protocol` differs from the `used` one: "key old → new" each."""
    differ = [k for k in ("statistic", "repeats", "warmup", "min_time_ms") if k in used and used[k] != protocol[k]]
    return [f"{k} {used[k]!r} → {protocol[k]!r}" for k in differ]


def check_predictions(space: SearchSpace, x: np.ndarray, finalists: Sequence[dict[str, Any]], lut_path: Any) -> None:
    """Refuse finalists not decided on this LUT (eq. lat prediction must match); sets each finalist's `predicted_ms`."""
    for f in finalists:
        pred = float(predict(space, x, space.indices(f["channels"])))
        if not math.isclose(pred, f["predicted_latency_ms"], rel_tol=PREDICTION_RTOL, abs_tol=1e-12):
            raise MeasureError(
                f"{f['source']}: {f['method']} @ {f['target']} predicts {f['predicted_latency_ms']:.6g} but {lut_path} "
                f"gives {pred:.6g} for its channels; it was decided on another LUT — decide again"
            )
        f["predicted_ms"] = pred


def time_jobs(device, jobs: list[MeasureJob], protocol: Mapping[str, Any],
              on_step: Callable[[], None] | None = None) -> list[dict]:
    """Each job timed as profiling times it (same repeats, warm-up, minimum time and statistic, §4)."""
    counts = timing_counts(device, protocol)
    rows = []
    for j in jobs:
        t_abs = time.time()
        rows.append({"job": j.job, "round": j.round, "role": j.role, "network": j.network, "t_abs": t_abs,
                     **time_network(device, j.channels, j.job, counts, protocol["statistic"])})
        if on_step is not None:
            on_step()
    return rows


def finalist_rows(
    finalists: Sequence[Mapping[str, Any]], rows: list[dict], nets: Sequence[tuple[int, ...]], baseline: float,
    analytic: bool, device_name: str, match: bool,
) -> tuple[list[dict[str, Any]], float]:
    """Drift-correct the timings to the LUT's reference `baseline` and give each finalist its median over rounds (§7, D24)."""
    rows, session_baseline = correct_drift(rows, baseline=None if analytic else baseline)
    per_net: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if r["role"] == "finalist":
            per_net.setdefault(r["network"], []).append((r["latency_ms_raw"], r["latency_ms"]))
    index = {n: k for k, n in enumerate(nets)}
    out_rows = []
    for f in finalists:
        raw, cor = np.asarray(per_net[index[tuple(int(c) for c in f["channels"])]]).T
        measured = float(np.median(cor))
        out_rows.append(
            {
                "method": f["method"],
                "device": device_name,
                "target": f["target"],
                "target_ms": f["target_ms"],
                "unit": f["unit"],
                "channels": [int(c) for c in f["channels"]],
                "predicted_ms": f["predicted_ms"],
                "measured_ms_raw": float(np.median(raw)),
                "measured_ms": measured,
                "measured_ms_min": float(cor.min()),
                "measured_ms_max": float(cor.max()),
                "rounds": len(cor),
                "meets_target_predicted": bool(f["predicted_ms"] <= f["target_ms"]),
                "meets_target_measured": bool(measured <= f["target_ms"]),
                "rel_error": f["predicted_ms"] / measured - 1.0,
                "fingerprint_match": bool(match),
            }
        )
    return out_rows, session_baseline
