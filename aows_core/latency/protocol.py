"""The timing protocol of §4 (profiling) and of §7's finalist measurements, as pure functions.

Profiling: a seeded job order (`profile_plan`) of every configuration once (role `sample`) and
`retest` networks a second time at least a third of the session later. Two corrections for a host
whose speed changes (docs/method.md D3, D27):

- `paired` (default): every job times the network and the reference network in alternating chunks;
  latency_ms = stat(network) / reference level × the session's reference baseline (`correct_paired`), the level
  being the running median of neighbouring jobs' references while the host is steady and the job's own where it
  jumped (`paired_reference`). Jobs whose chunk ratios disagree far more than the session's typical job were
  disturbed while timed and are timed again within a budget (`disturbed`). Where the host's state slows small and
  large networks by different factors, a large reference timed in the same chunks can measure it per job (D41,
  `correct_large`, optional), and what is left is expressed at the baseline's state (D37, `stretch`).
- `interpolated`: a reference job every `reference_every` jobs, smoothed by a running median of
  DRIFT_WINDOW measurements and interpolated over job order (`correct_drift`).

Noise floor: σ_n = RMS((m₁ − m₂)/m̄)/√2 over retest pairs; the noise gate (`noise_gate`) compares it
and the reference's instability with `max_noise`. Measuring (§7, D24): finalists in shuffled rounds
timed exactly as profiling timed (`measure_plan`), corrected to the LUT's reference baseline
(`finalist_rows`), beside profiled networks timed again that say how far the session sits from the profile (D40,
`aows_core.latency.recheck`). Devices are duck-typed (`measure`, `measure_paired`, `analytic`, `spec`, `keys`);
the journal, the device session and the files belong to the stages.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..search.link import IDENTITY, Link
from ..space import SearchSpace
from .lut import columns_of, predict
from .recheck import session_agreement
from .stretch import apply_stretch, estimate_stretch

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
    role: str  # sample | reference | retest | retime
    config_id: int
    channels: tuple[int, ...]
    set: str | None


def reference_config(space: SearchSpace) -> list[int]:
    """The drift reference: the middle width choice of every layer (a mid-latency network)."""
    return space.middle_config


def large_reference_config(space: SearchSpace) -> list[int]:
    """The large reference of paired timing (D41): the widest choice of every layer, the slowest network."""
    return space.max_config


@dataclass(frozen=True)
class Pairing:
    """What `time_network` times beside a network (D27, D41): the reference (None: not paired), the chunks, the
    reference's share, and the large reference with its share (None: none)."""

    reference: tuple[int, ...] | None = None
    chunks: int = 1
    share: float = 1.0
    large: tuple[int, ...] | None = None
    large_share: float = 0.0


UNPAIRED = Pairing()


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
    interleave = not analytic and protocol["pairing"] == "interpolated"  # paired jobs carry their own reference
    return number_jobs([(j.role, j.config_id, j.channels, j.set) for _, j in keyed], 0, protocol,
                       reference_config(space), interleave)


def number_jobs(items: Sequence[tuple[str, int, Sequence[int], str | None]], first: int, protocol: Mapping[str, Any],
                reference: Sequence[int], interleave: bool) -> list[Job]:
    """Jobs numbered from `first` for (role, config_id, channels, set) items; when interpolating, the reference
    every `reference_every` jobs and at the end."""
    out: list[Job] = []
    ref = tuple(int(c) for c in reference)
    for i, (role, cid, ch, st) in enumerate(items):
        if interleave and i % protocol["reference_every"] == 0:
            out.append(Job(first + len(out), "reference", -1, ref, None))
        out.append(Job(first + len(out), role, cid, tuple(ch), st))
    if interleave and items:
        out.append(Job(first + len(out), "reference", -1, ref, None))
    return out


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


def retest_noise(rows: list[dict]) -> dict[str, Any]:
    """σ_n = RMS((m₁ − m₂)/m̄)/√2 over (sample, retest) pairs, and the pairs' own ±5 % / ±10 % shares; with ≥ 6
    pairs also σ_n of the fastest, middle and slowest third of them (`sigma_n_by_speed`, docs/method.md D34), and
    `retest_nrmse` = RMS(m₁ − m₂)/√2 ÷ mean(m̄): the held-out NRMSE of a perfect table under this noise, the floor
    in NRMSE's own terms where the noise grows with latency (D39)."""
    first = {r["config_id"]: r["latency_ms"] for r in rows if r["role"] == "sample"}
    pairs = [(first[r["config_id"]], r["latency_ms"]) for r in rows if r["role"] == "retest" and r["config_id"] in first]
    if not pairs:
        return {"sigma_n": 0.0, "retest_pairs": 0, "retest_within_5pct": 1.0, "retest_within_10pct": 1.0,
                "sigma_n_by_speed": None, "retest_nrmse": 0.0}
    m = np.asarray(pairs)
    rel = (m[:, 0] - m[:, 1]) / m.mean(axis=1)
    thirds = np.array_split(rel[np.argsort(m.mean(axis=1))], 3) if len(rel) >= 6 else None
    return {
        "sigma_n": float(np.sqrt(np.mean(rel**2)) / math.sqrt(2)),
        "retest_pairs": len(pairs),
        "retest_within_5pct": float(np.mean(np.abs(rel) <= 0.05)),
        "retest_within_10pct": float(np.mean(np.abs(rel) <= 0.10)),
        "sigma_n_by_speed": None if thirds is None else [float(np.sqrt(np.mean(t**2)) / math.sqrt(2)) for t in thirds],
        "retest_nrmse": float(np.sqrt(np.mean((m[:, 0] - m[:, 1]) ** 2) / 2) / m.mean()),
    }


def speed_dependent_noise(by_speed: list[float] | None, ratio: float = 2.0) -> str:
    """A sentence when the slowest third of the retest pairs varies `ratio`× more than the fastest (D34), else ""."""
    if not by_speed or by_speed[2] < ratio * max(by_speed[0], 1e-12) or by_speed[2] < 0.01:
        return ""
    return (f"the slowest third of the retest pairs varies by σ {100 * by_speed[2]:.1f} % against "
            f"{100 * by_speed[0]:.1f} % for the fastest third: something competes for cache or memory bandwidth "
            f"(another program or virtual machine), which slows large networks more than the reference, and the "
            f"pooled σ_n understates their noise; profile again on a quieter host")


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


# A job's own reference replaces its neighbours' running median when it departs from it by more than this many
# robust standard deviations of the session's reference noise: the host changed speed during that job.
JUMP_SIGMAS = 3.0


def paired_reference(rows: list[dict], window: int = DRIFT_WINDOW) -> np.ndarray:
    """Per row, the reference level its network is divided by (D27): the running median of the neighbouring jobs'
    own references while the host is steady (less noise), the job's own reference where it jumped or where the
    row holds a later re-timing (`own_reference`)."""
    order = np.argsort([r["job"] for r in rows], kind="stable")
    own = np.array([rows[i]["ref_ms_raw"] for i in order], dtype=np.float64)
    smooth = running_median(own, window)
    dev = np.log(own / smooth)
    sigma = 1.4826 * float(np.median(np.abs(dev))) if dev.size else 0.0
    alone = np.array([bool(rows[i].get("own_reference")) for i in order], dtype=bool)
    used = np.where((np.abs(dev) > JUMP_SIGMAS * max(sigma, 1e-3)) | alone, own, smooth)
    out = np.empty(len(rows))
    out[order] = used
    return out


def correct_paired(rows: list[dict], baseline: float | None = None,
                   large_ratio: float | None = None) -> tuple[list[dict], float]:
    """Paired correction (D27): latency_ms = latency_ms_raw / reference level × baseline (`paired_reference`), then
    the large reference's (`correct_large`, D41); returns rows and the session's baseline.

    The session's baseline is the median of its jobs' reference timings; latencies are expressed at
    `baseline` (another session's, e.g. the LUT's) when given, and so is the large reference's ratio `large_ratio`.
    drift_factor = reference level ÷ baseline, the host's state (= latency_ms_raw / latency_ms until the large
    reference's or the stretch's correction, D41, D37).
    """
    session = float(np.median([r["ref_ms_raw"] for r in rows])) if rows else float("nan")
    to = session if baseline is None else float(baseline)
    for r, ref in zip(rows, paired_reference(rows)):
        r["latency_ms"] = r["latency_ms_raw"] / ref * to
        r["drift_factor"] = ref / to
    return correct_large(rows, to, large_ratio), session


def large_ratio_of(rows: list[dict]) -> float | None:
    """The session's large-reference ratio q₀ (D41): the median over jobs of large reference ÷ reference, or None
    when no job timed a large reference."""
    q = [r["large_ref_ms_raw"] / r["ref_ms_raw"] for r in rows if math.isfinite(r.get("large_ref_ms_raw", math.nan))]
    return float(np.median(q)) if q else None


def correct_large(rows: list[dict], baseline: float, large_ratio: float | None = None) -> list[dict]:
    """The large reference's correction (D41): in a job where the large reference ran at q = large ÷ reference
    instead of the session's ratio q₀ (`large_ratio`, else `large_ratio_of(rows)`), the log-latency axis from the
    reference to the large reference, [0, log q] above log(baseline), is mapped linearly onto [0, log q₀]: a paired
    latency m = log(latency ÷ baseline) in between becomes m·log q₀ ÷ log q, one beyond the large reference moves by
    log(q₀ ÷ q), one at or below the reference is unchanged. Rows without a large reference are unchanged."""
    q0 = large_ratio if large_ratio is not None else large_ratio_of(rows)
    if q0 is None or not q0 > 1:
        return rows
    top0 = math.log(q0)
    for r in rows:
        big = r.get("large_ref_ms_raw", math.nan)
        if not math.isfinite(big) or not big > r["ref_ms_raw"]:
            continue
        m, top = math.log(r["latency_ms"] / baseline), math.log(big / r["ref_ms_raw"])
        if m > 0:
            r["latency_ms"] = baseline * math.exp(m * top0 / top if m < top else m - top + top0)
    return rows


def correct(rows: list[dict], pairing: str, baseline: float | None = None,
            large_ratio: float | None = None) -> tuple[list[dict], float]:
    """The protocol's correction: `correct_paired` or `correct_drift` (D3, D27, D41)."""
    if pairing != "paired":
        return correct_drift(rows, baseline=baseline)
    return correct_paired(rows, baseline, large_ratio)


def correct_profile(rows: list[dict], pairing: str, estimate: bool) -> tuple[list[dict], float, dict[str, Any] | None]:
    """A profiling session's correction: `correct` with the stretch (D37) estimated from its own retest pairs when
    `estimate` and the timings are paired; returns rows, the session's baseline and the stretch (None otherwise)."""
    rows, baseline = correct(rows, pairing)
    if pairing != "paired" or not estimate:
        return rows, baseline, None
    stretch = estimate_stretch(rows, baseline)
    return apply_stretch(rows, stretch, baseline), baseline, stretch


# A job whose chunk ratios spread this many times more than the session's typical job was disturbed while timed.
RETIME_FACTOR = 3.0


def disturbed_limit(spreads: Sequence[float]) -> float:
    """The chunk-ratio range above which a job was disturbed while timed: RETIME_FACTOR × the median range of the
    jobs (D27); inf where none was timed paired (no range: NaN)."""
    s = np.asarray(spreads, dtype=np.float64)
    s = s[np.isfinite(s)]
    return RETIME_FACTOR * float(np.median(s)) if s.size else math.inf


def disturbed(rows: list[dict], budget: int) -> list[dict]:
    """The jobs to time again: chunk-ratio range above `disturbed_limit` of these jobs, most disturbed first, at
    most `budget`."""
    timed = [r for r in rows if r["role"] != "reference"]
    limit = disturbed_limit([r["ratio_spread"] for r in timed])
    bad = [r for r in timed if r["ratio_spread"] > limit]
    return sorted(bad, key=lambda r: -r["ratio_spread"])[:budget]


# A job's spread is judged against the jobs nearest it in latency, this share of the session's (at least LOCAL_MIN):
# on a shared cache the largest networks' chunk ratios spread several times more than the rest in every host state.
LOCAL_SHARE, LOCAL_MIN = 0.1, 15


def local_limits(spreads: Sequence[float], latencies: Sequence[float]) -> np.ndarray:
    """Per job, RETIME_FACTOR × the median chunk-ratio range of the jobs nearest it in latency (a window of
    LOCAL_SHARE of the jobs, at least LOCAL_MIN); inf where a job has no range (NaN: not timed paired)."""
    s = np.asarray(spreads, dtype=np.float64)
    lat = np.asarray(latencies, dtype=np.float64)
    out = np.full(s.shape, math.inf)
    timed = np.flatnonzero(np.isfinite(s))
    if timed.size == 0:
        return out
    order = timed[np.argsort(lat[timed], kind="stable")]
    w = min(order.size, max(LOCAL_MIN, int(LOCAL_SHARE * order.size)))
    starts = np.clip(np.arange(order.size) - w // 2, 0, order.size - w)
    windows = np.lib.stride_tricks.sliding_window_view(s[order], w)
    out[order] = RETIME_FACTOR * np.median(windows, axis=1)[starts]
    return out


def disturbed_mask(columns: Mapping[str, Sequence]) -> tuple[np.ndarray, float]:
    """Per row of a latency table: was its kept timing disturbed — chunk-ratio range above `local_limits` (3× that of
    the networks of its latency), re-timing included (D43)? With the median of the limits; all False for interpolated
    or analytic timings."""
    spread = np.asarray(columns["ratio_spread"], dtype=np.float64)
    timed = (np.asarray(columns["role"]) != "reference") & np.isfinite(spread)
    limits = local_limits(np.where(timed, spread, np.nan), columns["latency_ms"])
    return timed & (spread > limits), float(np.median(limits[timed])) if timed.any() else math.inf


def merge_retimed(rows: list[dict], retimed: list[dict]) -> list[dict]:
    """Each re-timed job keeps the less disturbed of its two timings (lower chunk-ratio spread); `retimed` marks it."""
    by_job = {r["retime_of"]: r for r in retimed}
    out = []
    for r in rows:
        r = {**r, "retimed": r["job"] in by_job}
        again = by_job.get(r["job"])
        if again is not None and again["ratio_spread"] < r["ratio_spread"]:
            r.update({k: v for k, v in again.items() if k not in ("job", "role", "config_id", "channels", "set",
                                                                 "retime_of", "t_abs")})
            r["own_reference"] = True  # timed later than its neighbours: only its own reference describes the host
        out.append(r)
    return out


def target_gaps(targets_ms: Sequence[float]) -> float:
    """The smallest relative gap (t_{k+1} − t_k)/t_k between adjacent distinct targets; inf with fewer than two."""
    t = np.unique(np.asarray([v for v in targets_ms if v > 0], dtype=np.float64))
    return float(np.min(np.diff(t) / t[:-1])) if t.size >= 2 else float("inf")


# The auto noise gate never admits more than this (relative σ_n).
MAX_NOISE_CAP = 0.05


def noise_threshold(max_noise: str | float, targets_ms: Sequence[float]) -> float:
    """`max_noise` as a number: auto = half the smallest relative gap between adjacent targets, at most 5 %."""
    if max_noise != "auto":
        return float(max_noise)
    return float(min(MAX_NOISE_CAP, 0.5 * target_gaps(targets_ms)))


def reference_instability(rows: list[dict], pairing: str) -> float:
    """Median relative change between successive reference timings, in job order (the host's speed jumps)."""
    if pairing == "paired":
        ref = [r["ref_ms_raw"] for r in sorted(rows, key=lambda r: r["job"]) if r["role"] != "reference"]
    else:
        ref = [r["latency_ms_raw"] for r in sorted(rows, key=lambda r: r["job"]) if r["role"] == "reference"]
    v = np.asarray(ref, dtype=np.float64)
    if v.size < 2:
        return 0.0
    return float(np.median(np.abs(np.diff(v)) / (0.5 * (v[1:] + v[:-1]))))


def noise_gate(sigma_n: float, instability: float, threshold: float, pairing: str) -> dict[str, Any]:
    """Whether a session was too noisy to trust (σ_n, or an interpolated reference that jumps, above the threshold),
    with the message that says so and what to do."""
    reasons = []
    if sigma_n > threshold:
        reasons.append(f"test–retest noise σ_n = {100 * sigma_n:.1f} % exceeds the gate {100 * threshold:.1f} %")
    if pairing == "interpolated" and instability > threshold:
        reasons.append(f"the reference jumps by {100 * instability:.1f} % (median) between its timings, more than "
                       f"{100 * threshold:.1f} %, so interpolating it cannot follow the host")
    message = ""
    if reasons:
        message = (
            "the device was too noisy for this latency table: " + "; ".join(reasons) + ". Close other programs "
            "(a test suite or a training on the same cores is enough), pin the timing to one core "
            "(`taskset -c 1 snakemake ...`), raise profiling.repeats, "
            + ("use profiling.pairing: paired, " if pairing == "interpolated" else "")
            + "then profile again (delete the device's results/latency file). Targets closer than twice the noise "
            "cannot be told apart (profiling.max_noise)."
        )
    return {"max_noise": float(threshold), "reference_instability": float(instability),
            "too_noisy": bool(reasons), "noise_message": message}


def timing_counts(device, protocol: Mapping[str, Any]) -> tuple[int, int, float]:
    """(repeats, warm-up, minimum timed seconds) of the protocol; one plain count on an analytic device."""
    if device.analytic:
        return 1, 0, 0.0
    return int(protocol["repeats"]), int(protocol["warmup"]), protocol["min_time_ms"] / 1e3


def time_network(device, channels, job: int, counts: tuple[int, int, float], statistic: str,
                 pairing: Pairing = UNPAIRED) -> dict[str, Any]:
    """Time one network under the protocol (§4): the fitted statistic, the raw per-repeat statistics and, when paired,
    the paired timing (D27): the reference's statistic over its chunks, the ratio of the two statistics (both pooled
    over the alternating chunks, so both see the same mixture of the host's states), the per-chunk ratios' relative
    range (max − min)/median, which shows a job disturbed while it was timed, and the large reference's statistic
    (D41; NaN without one)."""
    repeats, warmup, min_time = counts
    paired = pairing.reference is not None and not device.analytic
    if paired:
        m = device.measure_paired(list(channels), list(pairing.reference), repeats, warmup, job, min_time,
                                  pairing.chunks, pairing.share,
                                  None if pairing.large is None else list(pairing.large), pairing.large_share)
        s = np.concatenate(m.network)
        stat = STATISTICS[statistic]
        ref = stat(np.concatenate(m.reference))
        ratios = np.array([stat(a) / stat(b) for a, b in zip(m.network, m.reference)])
        pair = {"ref_ms_raw": ref, "pair_ratio": stat(s) / ref,
                "ratio_spread": float((ratios.max() - ratios.min()) / np.median(ratios)),
                "large_ref_ms_raw": stat(np.concatenate(m.large)) if m.large else float("nan")}
    else:
        m = device.measure(list(channels), repeats, warmup, job, min_time_s=min_time)
        s = np.asarray(m.samples, dtype=np.float64)
        pair = {"ref_ms_raw": float("nan"), "pair_ratio": float("nan"), "ratio_spread": float("nan"),
                "large_ref_ms_raw": float("nan")}
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
        **pair,
    }


def pairing_of(device, protocol: Mapping[str, Any], space: SearchSpace) -> Pairing:
    """What `time_network` times beside each network under `protocol`: nothing unless paired (D27); the large
    reference when `large_reference_share` > 0 (D41)."""
    if device.analytic or protocol["pairing"] != "paired":
        return UNPAIRED
    large = float(protocol.get("large_reference_share", 0.0))
    return Pairing(tuple(reference_config(space)), int(protocol["chunks"]), float(protocol["reference_share"]),
                   tuple(large_reference_config(space)) if large > 0 else None, large)


# Decisions must carry the LUT's own prediction; anything looser means they were decided on another table.
PREDICTION_RTOL = 1e-9


class MeasureError(RuntimeError):
    """A measurement session that cannot run: a finalist, LUT or device that does not match."""


@dataclass(frozen=True)
class MeasureJob:
    """One timing of a measuring session (§7): its index, round, role and network."""

    job: int
    round: int
    role: str  # finalist | recheck | reference
    network: int  # index into the distinct finalists (or the recheck networks); -1 for the reference
    channels: tuple[int, ...]


def measure_plan(
    networks: Sequence[Sequence[int]], reference: Sequence[int], rounds: int, seed: int, analytic: bool, job_offset: int = 0,
    paired: bool = False, recheck: Sequence[Sequence[int]] = (),
) -> list[MeasureJob]:
    """The seeded job order (§7 timed with §4's protocol): per round ref, shuffle(networks + ref), ref; paired: per
    round shuffle(networks), each timed with its own reference (D27); analytic: one round, no ref. `recheck`
    networks (profiled ones, D40) join every round's shuffle, role `recheck`, network = index into them."""
    rng = np.random.default_rng([seed, 0x3EA5E])
    ref = tuple(int(c) for c in reference)
    nets = [("finalist", k, tuple(int(c) for c in n)) for k, n in enumerate(networks)]
    if not analytic:
        nets += [("recheck", k, tuple(int(c) for c in n)) for k, n in enumerate(recheck)]
    jobs: list[MeasureJob] = []

    def add(r: int, k: int) -> None:
        role, index, channels = ("reference", -1, ref) if k < 0 else nets[k]
        jobs.append(MeasureJob(job_offset + len(jobs), r, role, index, channels))

    for r in range(1 if analytic else rounds):
        if paired and not analytic:
            for k in rng.permutation(len(nets)):
                add(r, int(k))
            continue
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
    used = {"pairing": "interpolated", **used}  # sessions recorded before D27 interpolated their reference
    keys = ("statistic", "repeats", "warmup", "min_time_ms", "pairing") + (
        ("chunks", "reference_share", "large_reference_share") if protocol["pairing"] == "paired" else ())
    differ = [k for k in keys if k in used and used[k] != protocol[k]]
    return [f"{k} {used[k]!r} → {protocol[k]!r}" for k in differ]


def check_predictions(space: SearchSpace, x: np.ndarray, finalists: Sequence[dict[str, Any]], lut_path: Any,
                      link: Link = IDENTITY) -> None:
    """Refuse finalists not decided on this LUT and its link (their prediction must match, eq. lat, D39) — or, for a
    decision verified on the device (D36), on its verified table; sets each finalist's `predicted_ms`."""
    for f in finalists:
        table = f.get("verified_lut")
        pred = float(predict(space, x if table is None else table, space.indices(f["channels"]), link))
        if not math.isclose(pred, f["predicted_latency_ms"], rel_tol=PREDICTION_RTOL, abs_tol=1e-12):
            raise MeasureError(
                f"{f['source']}: {f['method']} @ {f['target']} predicts {f['predicted_latency_ms']:.6g} but "
                f"{lut_path if table is None else 'its verified table'} gives {pred:.6g} for its channels; "
                f"it was decided on another LUT — decide again"
            )
        f["predicted_ms"] = pred


def time_jobs(device, jobs: list[MeasureJob], protocol: Mapping[str, Any], space: SearchSpace,
              on_step: Callable[[], None] | None = None) -> list[dict]:
    """Each job timed as profiling times it (same repeats, warm-up, minimum time, statistic and pairing, §4, D27)."""
    counts = timing_counts(device, protocol)
    pairing = pairing_of(device, protocol, space)
    rows = []
    for j in jobs:
        t_abs = time.time()
        rows.append({"job": j.job, "round": j.round, "role": j.role, "network": j.network, "t_abs": t_abs,
                     **time_network(device, j.channels, j.job, counts, protocol["statistic"], pairing)})
        if on_step is not None:
            on_step()
    return rows


def round_noise(per_net: Mapping[int, Sequence[float]]) -> float:
    """The session's noise from its rounds: pooled standard deviation of log latency across rounds (≈ σ_n)."""
    dev = [np.log(v) - np.log(v).mean() for v in (np.asarray(x, dtype=np.float64) for x in per_net.values()) if v.size > 1]
    dof = sum(d.size - 1 for d in dev)
    return float(np.sqrt(sum(float((d**2).sum()) for d in dev) / dof)) if dof else 0.0


def finalist_rows(
    finalists: Sequence[Mapping[str, Any]], rows: list[dict], nets: Sequence[tuple[int, ...]], baseline: float,
    analytic: bool, device_name: str, match: bool, pairing: str = "interpolated", max_noise: float = float("inf"),
    lut_too_noisy: bool = False, recheck: Sequence[tuple[tuple[int, ...], float]] = (), sigma_n: float = 0.0,
    large_ratio: float | None = None,
) -> tuple[list[dict[str, Any]], float, float, dict[str, Any] | None]:
    """Correct the timings to the LUT's reference `baseline` and give each finalist its median over rounds (§7, D24);
    returns the rows, the session's own baseline, its noise across rounds and, with `recheck` networks (profiled ones
    and their profiled latency, timed in the session's rounds), the session's agreement with the profile (D40;
    `sigma_n` the profile's). A finalist is flagged `too_noisy` when the LUT's profile failed the noise gate or this
    session's noise across rounds exceeds `max_noise`. `large_ratio`: the profile's large-reference ratio (D41)."""
    if analytic:
        rows, session_baseline = correct_drift(rows)
    else:
        rows, session_baseline = correct(rows, pairing, baseline, large_ratio)
    per_net: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if r["role"] == "finalist":
            per_net.setdefault(r["network"], []).append((r["latency_ms_raw"], r["latency_ms"]))
    noise = 0.0 if analytic else round_noise({k: [c for _, c in v] for k, v in per_net.items()})
    agreement = None
    if recheck and not analytic:
        agreement = session_agreement(rows, recheck, baseline, sigma_n, noise, max(len(v) for v in per_net.values()))
    noisy = bool(lut_too_noisy or noise > max_noise)
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
                "too_noisy": noisy,
            }
        )
    return out_rows, session_baseline, noise, agreement
