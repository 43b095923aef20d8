"""The timing protocol of §4 (profiling) and of §7's finalist measurements, as pure functions.

Profiling: a seeded job order (`profile_plan`) of every configuration once (role `sample`) and `retest` networks a
second time at least a third of the session later. Every job times the network and the reference network in
alternating chunks (paired timing, docs/method.md D27): latency_ms = stat(network) / reference level × the session's
reference baseline (`correct`), the level being the running median of neighbouring jobs' references while the host is
steady and the job's own where it jumped (`paired_reference`). Jobs whose chunk ratios disagree far more than the
session's typical job were disturbed while timed and are timed again within a budget (`disturbed`). An analytic
device (FLOPs) is counted once, uncorrected.

Noise floor: σ_n = RMS((m₁ − m₂)/m̄)/√2 over retest pairs; the noise gate (`noise_gate`) compares it with `max_noise`.
Measuring (§7, D24): finalists in shuffled rounds timed exactly as profiling timed (`measure_plan`), more rounds
until the last ones are as quiet as the profile (`settle_rounds`, D46), corrected to the LUT's reference baseline
(`finalist_rows`). Devices are duck-typed (`measure`, `measure_paired`, `analytic`, `spec`,
`keys`); the journal, the device session and the files belong to the stages.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..config import ProfilingSettings
from ..search.link import IDENTITY, Link
from ..space import SearchSpace
from .lut import columns_of, predict
from .metrics import MAD_TO_SIGMA

STATISTICS = {
    "median": lambda s: float(np.median(s)),
    "mean": lambda s: float(np.mean(s)),
    "min": lambda s: float(np.min(s)),
    "p10": lambda s: float(np.percentile(s, 10)),
}


# Neighbouring jobs' references in the running median a paired job is divided by while the host is steady (odd).
REFERENCE_WINDOW = 5


# A retest comes at least this share of the session after its first timing: the pair sees two states of the host.
RETEST_GAP = 1 / 3


@dataclass(frozen=True)
class Job:
    """One timing of a profiling session (§4): its index, role, configuration and set."""

    job: int
    role: str  # sample | retest | retime
    config_id: int
    channels: tuple[int, ...]
    set: str | None


def reference_config(space: SearchSpace) -> list[int]:
    """The drift reference: the middle width choice of every layer (a mid-latency network)."""
    return space.middle_config


@dataclass(frozen=True)
class Pairing:
    """What `time_network` times beside a network (D27): the reference (None: not paired), the chunks and the
    reference's share of them."""

    reference: tuple[int, ...] | None = None
    chunks: int = 1
    share: float = 1.0


UNPAIRED = Pairing()


def profile_plan(space: SearchSpace, configs: Any, protocol: ProfilingSettings, seed: int, analytic: bool) -> list[Job]:
    """The full, seeded job order of a session (§4): shuffled samples, then retests ≥ N/3 later."""
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
    if not analytic and protocol.retest > 0 and n >= 3:
        gap = math.ceil(n * RETEST_GAP)
        eligible = [k for k in order if pos_of[k] + gap < n]
        prefer = [k for k in eligible if sets[k] == "test"]
        pool = prefer if len(prefer) >= protocol.retest else eligible
        chosen = rng.choice(len(pool), size=min(protocol.retest, len(pool)), replace=False)
        for c in sorted(chosen):
            k = pool[c]
            key = rng.uniform(pos_of[k] + gap, n) - 0.5  # strictly after pos + gap - 0.5
            keyed.append((float(key), Job(-1, "retest", ids[k], chans[k], sets[k])))
    keyed.sort(key=lambda kj: kj[0])
    return number_jobs([(j.role, j.config_id, j.channels, j.set) for _, j in keyed], 0)


def number_jobs(items: Sequence[tuple[str, int, Sequence[int], str | None]], first: int) -> list[Job]:
    """Jobs numbered from `first` for (role, config_id, channels, set) items."""
    return [Job(first + i, role, cid, tuple(ch), st) for i, (role, cid, ch, st) in enumerate(items)]


def plan_hash(jobs: list[Job], protocol: ProfilingSettings, fingerprint: Mapping, space: SearchSpace) -> str:
    """Identity of a session's plan (jobs, protocol, device fingerprint, space): a journal resumes only the same plan."""
    blob = json.dumps(
        {
            "jobs": [(j.role, j.config_id, j.channels) for j in jobs],
            "protocol": protocol.to_dict(),
            "fingerprint": dict(fingerprint),
            "space": space.hash,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def retest_noise(rows: list[dict]) -> dict[str, Any]:
    """σ_n = RMS((m₁ − m₂)/m̄)/√2 over (sample, retest) pairs, the pairs' own ±5 % / ±10 % shares, and `retest_nrmse`
    = RMS(m₁ − m₂)/√2 ÷ mean(m̄): the held-out NRMSE of a perfect table under this noise, the floor in NRMSE's own
    terms where the noise grows with latency."""
    first = {r["config_id"]: r["latency_ms"] for r in rows if r["role"] == "sample"}
    pairs = [(first[r["config_id"]], r["latency_ms"]) for r in rows if r["role"] == "retest" and r["config_id"] in first]
    if not pairs:
        return {"sigma_n": 0.0, "retest_pairs": 0, "retest_within_5pct": 1.0, "retest_within_10pct": 1.0,
                "retest_nrmse": 0.0}
    m = np.asarray(pairs)
    rel = (m[:, 0] - m[:, 1]) / m.mean(axis=1)
    return {
        "sigma_n": float(np.sqrt(np.mean(rel**2)) / math.sqrt(2)),
        "retest_pairs": len(pairs),
        "retest_within_5pct": float(np.mean(np.abs(rel) <= 0.05)),
        "retest_within_10pct": float(np.mean(np.abs(rel) <= 0.10)),
        "retest_nrmse": float(np.sqrt(np.mean((m[:, 0] - m[:, 1]) ** 2) / 2) / m.mean()),
    }


def running_median(values: np.ndarray, window: int) -> np.ndarray:
    """Centred running median (the window shrinks at the ends): one disturbed reference is ignored."""
    h = window // 2
    return np.array([np.median(values[max(0, i - h) : i + h + 1]) for i in range(len(values))])


# A job's own reference replaces its neighbours' running median when it departs from it by more than this many
# robust standard deviations of the session's reference noise: the host changed speed during that job.
JUMP_SIGMAS = 3.0
# The floor of that noise (relative): on a perfectly steady host a change of 0.3 % is not a jump.
MIN_REFERENCE_SIGMA = 1e-3


def paired_reference(rows: list[dict], window: int = REFERENCE_WINDOW) -> np.ndarray:
    """Per row, the reference level its network is divided by (D27): the running median of the neighbouring jobs'
    own references while the host is steady (less noise), the job's own reference where it jumped or where the
    row holds a later re-timing (`own_reference`)."""
    order = np.argsort([r["job"] for r in rows], kind="stable")
    own = np.array([rows[i]["ref_ms_raw"] for i in order], dtype=np.float64)
    smooth = running_median(own, window)
    dev = np.log(own / smooth)
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(dev))) if dev.size else 0.0
    alone = np.array([bool(rows[i].get("own_reference")) for i in order], dtype=bool)
    used = np.where((np.abs(dev) > JUMP_SIGMAS * max(sigma, MIN_REFERENCE_SIGMA)) | alone, own, smooth)
    out = np.empty(len(rows))
    out[order] = used
    return out


def correct(rows: list[dict], baseline: float | None = None) -> tuple[list[dict], float]:
    """Paired correction (D27): latency_ms = latency_ms_raw / reference level × baseline (`paired_reference`); returns
    rows and the session's baseline (the median of its jobs' reference timings). Latencies are expressed at
    `baseline` (another session's, e.g. the LUT's) when given; drift_factor = reference level ÷ baseline, the host's
    state. Rows timed without a reference (an analytic device) are counted, not timed: left as they are."""
    if not rows or not all(math.isfinite(r["ref_ms_raw"]) for r in rows):
        for r in rows:
            r["drift_factor"], r["latency_ms"] = 1.0, r["latency_ms_raw"]
        return rows, float("nan")
    session = float(np.median([r["ref_ms_raw"] for r in rows]))
    to = session if baseline is None else float(baseline)
    for r, ref in zip(rows, paired_reference(rows)):
        r["latency_ms"] = r["latency_ms_raw"] / ref * to
        r["drift_factor"] = ref / to
    return rows, session


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
    limit = disturbed_limit([r["ratio_spread"] for r in rows])
    bad = [r for r in rows if r["ratio_spread"] > limit]
    return sorted(bad, key=lambda r: -r["ratio_spread"])[:budget]


# What a re-timing keeps of the job it re-times: its place in the session and what it times.
JOB_KEYS = ("job", "role", "config_id", "channels", "set", "round", "network", "retime_of", "cause", "t_abs")


def merge_retimed(rows: list[dict], retimed: list[dict], level: float | None = None) -> list[dict]:
    """Each re-timed job keeps the best of its timings: outside a spell of the host first (`in_spell` against the
    session's quiet `level`, when given, D47), then the less disturbed (lower chunk-ratio spread, D27); `retimed`
    marks it."""
    by_job: dict[int, list[dict]] = {}
    for r in retimed:
        by_job.setdefault(r["retime_of"], []).append(r)

    def worse(r: dict) -> tuple[bool, float]:
        return level is not None and in_spell(r, level), r["ratio_spread"]

    out = []
    for r in rows:
        r = {**r, "retimed": r["job"] in by_job}
        best = min(by_job.get(r["job"], []), key=worse, default=None)
        if best is not None and worse(best) < worse(r):
            r.update({k: v for k, v in best.items() if k not in JOB_KEYS})
            r["own_reference"] = True  # timed later than its neighbours: only its own reference describes the host
        out.append(r)
    return out


# The host's spells (D47): a job whose own reference ran SPELL_RISE times slower than the session's quiet level — the
# QUIET_QUANTILE of its first timings' references, the host uncontended — was timed while something else held the
# machine, when a network and the reference do not slow alike and their ratio errs by up to ±40 %.
SPELL_RISE = 1.2
QUIET_QUANTILE = 0.1
# A job timed in a spell is timed again at most this many times, until once outside one.
SPELL_TRIES = 2
# A session timed in spells for at least this share of its jobs has no quiet majority to return to: re-timing a part
# of it mixes the host's two states in one table, which measured worse than leaving them (D47 stands aside).
SPELL_MAJORITY = 0.5


def quiet_level(rows: list[dict]) -> float:
    """The session's quiet reference level (D47): the QUIET_QUANTILE of its jobs' reference timings (inf unpaired)."""
    refs = np.asarray([r["ref_ms_raw"] for r in rows], dtype=np.float64)
    refs = refs[np.isfinite(refs)]
    return float(np.quantile(refs, QUIET_QUANTILE)) if refs.size else math.inf


def in_spell(row: Mapping[str, Any], level: float) -> bool:
    """Whether a job was timed in one of the host's spells: its reference above SPELL_RISE × the quiet level (D47)."""
    return bool(row["ref_ms_raw"] > SPELL_RISE * level)


def spell_level(rows: list[dict]) -> float | None:
    """The quiet level a session's spells are re-timed against (D47), or None where there is none to return to: an
    unpaired session, or one timed in spells for SPELL_MAJORITY of its jobs or more."""
    level = quiet_level(rows)
    if not math.isfinite(level) or np.mean([in_spell(r, level) for r in rows]) >= SPELL_MAJORITY:
        return None
    return level


def spell_record(plain: list[dict], again: list[dict], kept: list[dict]) -> dict[str, Any]:
    """What a latency file says of the host's spells (D47): the quiet level, whether spells were timed again, and how
    many jobs were first timed in one, re-timed for one, and kept in one, from a session's first timings, its
    re-timings and its kept rows."""
    level = quiet_level(plain)
    return {"quiet_level_ms": level if math.isfinite(level) else None,
            "spells_retimed": spell_level(plain) is not None,
            "timed_in_spell": sum(in_spell(r, level) for r in plain),
            "retimed_in_spell": sum(r.get("cause") == "spell" for r in again),
            "left_in_spell": sum(in_spell(r, level) for r in kept)}


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


def noise_gate(sigma_n: float, threshold: float) -> dict[str, Any]:
    """Whether a session was too noisy to trust (σ_n above the threshold), with the message that says so and what
    to do."""
    message = ""
    if sigma_n > threshold:
        message = (
            f"the device was too noisy for this latency table: test–retest noise σ_n = {100 * sigma_n:.1f} % exceeds "
            f"the gate {100 * threshold:.1f} %. Close other programs (a test suite or a training on the same cores is "
            "enough), pin the timing to one core (`taskset -c 1 snakemake ...`), raise profiling.repeats, then "
            "profile again (delete the device's results/latency file). Targets closer than twice the noise cannot be "
            "told apart (profiling.max_noise)."
        )
    return {"max_noise": float(threshold), "too_noisy": bool(message), "noise_message": message}


def timing_counts(device, protocol: ProfilingSettings) -> tuple[int, int, float]:
    """(repeats, warm-up, minimum timed seconds) of the protocol; one plain count on an analytic device."""
    if device.analytic:
        return 1, 0, 0.0
    return int(protocol.repeats), int(protocol.warmup), protocol.min_time_ms / 1e3


def time_network(device, channels, job: int, counts: tuple[int, int, float], statistic: str,
                 pairing: Pairing = UNPAIRED) -> dict[str, Any]:
    """Time one network under the protocol (§4): the fitted statistic, the raw per-repeat statistics and, when paired,
    the paired timing (D27): the reference's statistic over its chunks, the ratio of the two statistics (both pooled
    over the alternating chunks, so both see the same mixture of the host's states) and the per-chunk ratios'
    relative range (max − min)/median, which shows a job disturbed while it was timed."""
    repeats, warmup, min_time = counts
    paired = pairing.reference is not None and not device.analytic
    if paired:
        m = device.measure_paired(list(channels), list(pairing.reference), repeats, warmup, job, min_time,
                                  pairing.chunks, pairing.share)
        s = np.concatenate(m.network)
        stat = STATISTICS[statistic]
        ref = stat(np.concatenate(m.reference))
        ratios = np.array([stat(a) / stat(b) for a, b in zip(m.network, m.reference)])
        pair = {"ref_ms_raw": ref, "pair_ratio": stat(s) / ref,
                "ratio_spread": float((ratios.max() - ratios.min()) / np.median(ratios))}
    else:
        m = device.measure(list(channels), repeats, warmup, job, min_time_s=min_time)
        s = np.asarray(m.samples, dtype=np.float64)
        pair = {"ref_ms_raw": float("nan"), "pair_ratio": float("nan"), "ratio_spread": float("nan")}
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


def pairing_of(device, protocol: ProfilingSettings, space: SearchSpace) -> Pairing:
    """What `time_network` times beside each network under `protocol` (D27): the reference, unless the device is
    analytic (counted, not timed)."""
    if device.analytic:
        return UNPAIRED
    return Pairing(tuple(reference_config(space)), int(protocol.chunks), float(protocol.reference_share))


# Decisions must carry the LUT's own prediction; anything looser means they were decided on another table.
PREDICTION_RTOL = 1e-9


class MeasureError(RuntimeError):
    """A measurement session that cannot run: a finalist, LUT or device that does not match."""


@dataclass(frozen=True)
class MeasureJob:
    """One timing of a measuring session (§7): its index, round, role, network and the job it re-times."""

    job: int
    round: int
    role: str  # finalist | retime
    network: int  # index into the distinct finalists
    channels: tuple[int, ...]
    retime_of: int | None = None


def measure_plan(networks: Sequence[Sequence[int]], rounds: int, seed: int, analytic: bool,
                 job_offset: int = 0) -> list[MeasureJob]:
    """The seeded job order (§7 timed with §4's protocol): per round shuffle(networks), each timed with its own
    reference (D27); analytic: one round in order."""
    rng = np.random.default_rng([seed, 0x3EA5E])
    nets = [tuple(int(c) for c in n) for n in networks]
    jobs: list[MeasureJob] = []
    for r in range(1 if analytic else rounds):
        for k in (range(len(nets)) if analytic else rng.permutation(len(nets))):
            jobs.append(MeasureJob(job_offset + len(jobs), r, "finalist", int(k), nets[int(k)]))
    return jobs


def retime_jobs(jobs: Sequence[MeasureJob], rows: list[dict], protocol: ProfilingSettings,
                analytic: bool) -> list[MeasureJob]:
    """The measuring session's `jobs` disturbed while timed (their `rows`), to time again as profiling does (D27): at
    most `retime` × its jobs, most disturbed first, numbered on from the last (none on an analytic device)."""
    if analytic or not jobs:
        return []
    by_job = {j.job: j for j in jobs}
    first = max(by_job) + 1
    again = [by_job[r["job"]] for r in disturbed(rows, math.ceil(protocol.retime * len(rows)))]
    return [MeasureJob(first + k, j.round, "retime", j.network, j.channels, j.job) for k, j in enumerate(again)]


# The timing settings a later session must share with the profile (§4: timed in the same form).
SAME_FORM = ("statistic", "repeats", "warmup", "min_time_ms", "chunks", "reference_share")


def protocol_differences(used: Mapping[str, Any], protocol: ProfilingSettings) -> list[str]:
    """The timing settings (§4 same form) in which `protocol` differs from the `used` one (a latency file's record):
    "key old → new" each; a session recorded before paired timing (D27) differs in its pairing."""
    now = protocol.to_dict()
    differ = [f"{k} {used[k]!r} → {now[k]!r}" for k in SAME_FORM if k in used and used[k] != now[k]]
    pairing = used.get("pairing", "interpolated")  # sessions recorded before D27 interpolated their reference
    return ([] if pairing == "paired" else [f"pairing {pairing!r} → 'paired'"]) + differ


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


def time_jobs(device, jobs: list[MeasureJob], protocol: ProfilingSettings, space: SearchSpace,
              on_step: Callable[[], None] | None = None) -> list[dict]:
    """Each job timed as profiling times it (same repeats, warm-up, minimum time, statistic and pairing, §4, D27)."""
    counts = timing_counts(device, protocol)
    pairing = pairing_of(device, protocol, space)
    rows = []
    for j in jobs:
        t_abs = time.time()
        rows.append({"job": j.job, "round": j.round, "role": j.role, "network": j.network, "t_abs": t_abs,
                     **time_network(device, j.channels, j.job, counts, protocol.statistic, pairing)})
        if on_step is not None:
            on_step()
    return rows


def round_noise(per_net: Mapping[int, Sequence[float]]) -> float:
    """The session's noise from its rounds: pooled standard deviation of log latency across rounds (≈ σ_n)."""
    dev = [np.log(v) - np.log(v).mean() for v in (np.asarray(x, dtype=np.float64) for x in per_net.values()) if v.size > 1]
    dof = sum(d.size - 1 for d in dev)
    return float(np.sqrt(sum(float((d**2).sum()) for d in dev) / dof)) if dof else 0.0


# A measuring session is as quiet as its profile when its rounds vary by at most QUIET_FACTOR × the profile's σ_n
# (round noise and σ_n estimate the same per-timing noise) — or by QUIET_FLOOR: the median of 5 such rounds lies
# within about ±1 %, far finer than the 5 % a finalist is judged on — and never by more than the noise gate (D46).
QUIET_FACTOR = 1.5
QUIET_FLOOR = 0.02


def quiet_limit(sigma_n: float, max_noise: float) -> float:
    """The round noise below which a measuring session is as quiet as the profile it checks (D46)."""
    return float(min(max_noise, max(QUIET_FACTOR * sigma_n, QUIET_FLOOR)))


def window_noise(rows: list[dict], baseline: float) -> float:
    """The round noise of measuring rows corrected to `baseline` (`correct` on copies, then `round_noise`)."""
    corrected, _ = correct([dict(r) for r in rows], baseline)
    per: dict[int, list[float]] = {}
    for r in corrected:
        per.setdefault(r["network"], []).append(r["latency_ms"])
    return round_noise(per)


def window_level(rows: list[dict], baseline: float) -> float:
    """The host's speed over measuring rows against the profile's (D46): the median of their reference timings ÷
    `baseline` (above 1: slower than when profiled)."""
    return float(np.median([r["ref_ms_raw"] for r in rows])) / baseline


@dataclass(frozen=True)
class QuietTarget:
    """What a measuring session times on to (D46): the LUT's reference baseline its timings are corrected to, the
    round noise that is as quiet as the profile (`quiet_limit`) — also the host's speed's relative distance from the
    profile's it may be at — and the seconds of further rounds at most."""

    baseline: float
    quiet: float
    budget_s: float


@dataclass(frozen=True)
class Settling:
    """How long a measuring session timed until its last rounds were as quiet as the profile and the host back at
    its profiled speed (D46): the limit, the noise and the host's speed (`window_level`) of each window of rounds
    considered, the rounds timed in all and the seconds the further ones took."""

    quiet: float
    noise: tuple[float, ...]
    level: tuple[float, ...]
    rounds_timed: int
    extra_s: float

    @staticmethod
    def holds(noise: float, level: float, quiet: float) -> bool:
        """A window as quiet as the profile, on a host within `quiet` of its profiled speed."""
        return noise <= quiet and abs(math.log(level)) <= quiet

    @property
    def settled(self) -> bool:
        return self.holds(self.noise[-1], self.level[-1], self.quiet)

    def to_dict(self) -> dict[str, Any]:
        return {"settled": self.settled, "quiet": self.quiet, "rounds_timed": self.rounds_timed,
                "extra_s": self.extra_s, "window_noise": list(self.noise), "window_level": list(self.level)}

    def message(self, budget_s: float) -> str:
        """Why the session's finalists may be off (empty when it settled)."""
        if self.settled:
            return ""
        return (f"the host did not become as quiet as when profiled within measure.settle_s = {budget_s:g} s of "
                f"further rounds (round noise {100 * self.noise[-1]:.1f} % over the last rounds, the reference at "
                f"{100 * (self.level[-1] - 1):+.1f} % of its profiled time; within {100 * self.quiet:.1f} % needed): "
                f"another program, or the host's own bursts; measure again later")


def settle_rounds(device, jobs: list[MeasureJob], rows: list[dict], protocol: ProfilingSettings, space: SearchSpace,
                  seed: int, target: QuietTarget,
                  on_step: Callable[[], None] | None = None) -> tuple[list[MeasureJob], list[dict], Settling]:
    """The measuring session timed on (D46): while its last R rounds (R those of `jobs`, timed as `rows`) vary more
    than `target.quiet` (`window_noise`) or the host's speed is further than that from the profile's
    (`window_level`), one more round of the same networks, each its own seeded shuffle, for at most
    `target.budget_s` seconds; returns the jobs and rows of the last R rounds, the earlier ones dropped."""
    rounds = max(j.round for j in jobs) + 1
    nets = {j.network: j.channels for j in jobs}
    noise, level = [window_noise(rows, target.baseline)], [window_level(rows, target.baseline)]
    extra, last = 0.0, rounds
    while not Settling.holds(noise[-1], level[-1], target.quiet) and extra < target.budget_s:
        order = np.random.default_rng([seed, 0x3EA5E, last]).permutation(len(nets))
        more = [MeasureJob(jobs[-1].job + 1 + i, last, "finalist", int(k), nets[int(k)]) for i, k in enumerate(order)]
        timed = time_jobs(device, more, protocol, space, on_step)
        extra += sum(r["timed_s"] + r["overhead_s"] for r in timed)
        jobs, rows, last = jobs + more, rows + timed, last + 1
        keep = [i for i, j in enumerate(jobs) if j.round >= last - rounds]
        jobs, rows = [jobs[i] for i in keep], [rows[i] for i in keep]
        noise.append(window_noise(rows, target.baseline))
        level.append(window_level(rows, target.baseline))
    return jobs, rows, Settling(target.quiet, tuple(noise), tuple(level), last, extra)


@dataclass(frozen=True)
class FinalistSession:
    """How a measuring session's timings become its finalists' rows (§7, D24): the device's name; the LUT's reference
    `baseline` they are corrected to (an `analytic` device is counted, not corrected); whether this machine's
    fingerprint `match`es the LUT's; the noise gate `max_noise` of the session's rounds and whether the LUT's profile
    failed its own (`lut_too_noisy`)."""

    device: str
    baseline: float
    analytic: bool = False
    match: bool = True
    max_noise: float = math.inf
    lut_too_noisy: bool = False


def finalist_rows(finalists: Sequence[Mapping[str, Any]], rows: list[dict], nets: Sequence[tuple[int, ...]],
                  session: FinalistSession) -> tuple[list[dict[str, Any]], float, float]:
    """Correct the timings to the LUT's reference baseline and give each finalist its median over rounds (§7, D24);
    returns the rows, the session's own baseline and its noise across rounds. A finalist is flagged `too_noisy` when
    the LUT's profile failed the noise gate or this session's noise across rounds exceeds the gate."""
    analytic = session.analytic
    rows, session_baseline = correct(rows, None if analytic else session.baseline)
    per_net: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        per_net.setdefault(r["network"], []).append((r["latency_ms_raw"], r["latency_ms"]))
    noise = 0.0 if analytic else round_noise({k: [c for _, c in v] for k, v in per_net.items()})
    noisy = bool(session.lut_too_noisy or noise > session.max_noise)
    index = {n: k for k, n in enumerate(nets)}
    out_rows = []
    for f in finalists:
        raw, cor = np.asarray(per_net[index[tuple(int(c) for c in f["channels"])]]).T
        measured = float(np.median(cor))
        out_rows.append(
            {
                "method": f["method"],
                "device": session.device,
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
                "fingerprint_match": bool(session.match),
                "too_noisy": noisy,
            }
        )
    return out_rows, session_baseline, noise
