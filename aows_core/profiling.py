"""The timing protocol (§4): randomised order, reference re-measurement for drift, test–retest noise, resume.

A session times every configuration of the configs file once (role `sample`), a reference
network every `reference_every` jobs (role `reference`) and `retest` networks a second time, at
least a third of the session later (role `retest`). The order is a seeded permutation, so a
resumed session runs exactly the remaining jobs. Each finished job is appended to a journal kept
outside Snakemake's outputs; the latency file is written (atomically) only when all jobs are done.

Drift correction: the reference's statistic, smoothed by a running median of 5 measurements (so a
single disturbed reference is ignored), is interpolated over job order,
drift_factor = ref(job) / baseline with baseline = the median of all (smoothed) reference measurements, and
latency_ms = latency_ms_raw / drift_factor. Noise floor: σ_n = RMS((m₁ − m₂)/m̄)/√2 over retest pairs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from . import io
from .space import SearchSpace

STATISTICS = {
    "median": lambda s: float(np.median(s)),
    "mean": lambda s: float(np.mean(s)),
    "min": lambda s: float(np.min(s)),
    "p10": lambda s: float(np.percentile(s, 10)),
}


# References in the running median that estimates drift (odd; 1 disables smoothing).
DRIFT_WINDOW = 5


class ProfilingError(RuntimeError):
    """A profiling session that cannot start or resume safely."""


@dataclass(frozen=True)
class Job:
    job: int
    role: str  # sample | reference | retest
    config_id: int
    channels: tuple[int, ...]
    set: str | None


def reference_config(space: SearchSpace) -> list[int]:
    """The drift reference: the middle width choice of every layer (a mid-latency network)."""
    return [c[(len(c) - 1) // 2] for c in space.layer_choices]


def plan(space: SearchSpace, configs: pa.Table, protocol: Mapping[str, Any], seed: int, analytic: bool) -> list[Job]:
    """The full, seeded job order of a session: shuffled samples, retests ≥ N/3 later, periodic references."""
    ids = configs.column("config_id").to_pylist()
    chans = [tuple(c) for c in configs.column("channels").to_pylist()]
    sets = configs.column("set").to_pylist()
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


def _plan_hash(jobs: list[Job], protocol: Mapping, fingerprint: Mapping, space: SearchSpace) -> str:
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


class Journal:
    """Append-only JSON-lines record of finished jobs; survives a kill (a torn last line is dropped)."""

    def __init__(self, path: Path, header: dict, sync_every: int):
        self.path = path
        self.sync_every = sync_every
        self.rows: list[dict] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            lines = path.read_text().splitlines()
            try:
                old = json.loads(lines[0]) if lines else {}
            except json.JSONDecodeError:
                old = None
            if old is None or not isinstance(old, dict):
                why = "has an unreadable header"
            elif old.get("fingerprint") != header["fingerprint"]:
                why = (f"holds timings from another device fingerprint ({old.get('fingerprint')}; this machine: "
                       f"{header['fingerprint']}), which cannot be mixed with this machine's")
            elif old.get("plan") != header["plan"]:
                why = "was made under other settings (configurations, protocol or space)"
            else:
                why = None
            if why is None:
                for line in lines[1:]:
                    try:
                        self.rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # torn write at the kill: that job is simply redone
                # keep only a clean prefix of consecutive jobs
                self.rows = [r for i, r in enumerate(self.rows) if r["job"] == i]
            elif len(lines) > 1:
                stale = path.with_name(path.name + ".stale")
                os.replace(path, stale)
                io.notice(f"the profiling journal {path} {why}: its {len(lines) - 1} timings are kept in {stale}; "
                          f"profiling this device afresh")
        self._rewrite(header)
        self._fh = open(path, "a")
        self._since_sync = 0

    def _rewrite(self, header: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            fh.write(json.dumps(header) + "\n")
            for r in self.rows:
                fh.write(json.dumps(r) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def append(self, row: dict) -> None:
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        self.rows.append(row)
        self._since_sync += 1
        if self._since_sync >= self.sync_every:
            os.fsync(self._fh.fileno())
            self._since_sync = 0

    def close(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def remove(self) -> None:
        """A finished session's journal (and a set-aside one): its timings are in the latency artifact now."""
        for p in (self.path, self.path.with_name(self.path.name + ".stale")):
            p.unlink(missing_ok=True)


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


def read_configs(path: str | os.PathLike, space: SearchSpace) -> tuple[pa.Table, dict]:
    """A configs artifact, refused if it was sampled from another space."""
    table, meta = io.read_table(path, "configs")
    if meta.get("space_hash") != space.hash:
        raise io.ArtifactError(
            f"{path} was sampled from space {meta.get('space_name')!r} (hash {meta.get('space_hash')}), but the "
            f"configured space is {space.name!r} (hash {space.hash}); rerun `aows sample` for this space"
        )
    return table, meta


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


def profile(
    space: SearchSpace,
    device_name: str,
    device_spec: Mapping[str, Any],
    configs_path: str | os.PathLike,
    out_path: str | os.PathLike,
    resume_dir: str | os.PathLike,
    protocol: Mapping[str, Any],
    seed: int,
    progress: bool = True,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Time every configuration on the device under the protocol; resumable; writes the latency artifact."""
    from .devices import get_device

    configs, cmeta = read_configs(configs_path, space)
    device = get_device(dict(device_spec), space, seed)
    fingerprint = device.fingerprint()
    jobs = plan(space, configs, protocol, seed, device.analytic)
    header = {"plan": _plan_hash(jobs, protocol, fingerprint, space), "fingerprint": fingerprint, "space": space.hash}
    journal = Journal(Path(resume_dir) / f"profile_{device_name}.jsonl", header, protocol["checkpoint_every"])
    counts = timing_counts(device, protocol)
    done = len(journal.rows)
    t0 = journal.rows[0]["t_abs"] if journal.rows else time.time()
    todo = jobs[done:] if stop_after is None else jobs[done : done + stop_after]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), initial=done, desc=f"profile {device_name}", unit="net", smoothing=0.05)
    session_start = time.perf_counter()
    try:
        for j in todo:
            t_abs = time.time()
            journal.append(
                {
                    "job": j.job,
                    "role": j.role,
                    "config_id": j.config_id,
                    "channels": list(j.channels),
                    "set": j.set,
                    "t_abs": t_abs,
                    **time_network(device, j.channels, j.job, counts, protocol["statistic"]),
                }
            )
            if bar is not None:
                bar.update(1)
    finally:
        journal.close()
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - session_start
    rows = journal.rows
    if len(rows) < len(jobs):
        return {"complete": False, "done": len(rows), "total": len(jobs)}
    rows, baseline = correct_drift([dict(r) for r in rows])
    noise = retest_noise(rows) if not device.analytic else retest_noise([])
    timed = sum(r["timed_s"] for r in rows)
    overhead = sum(r["overhead_s"] for r in rows)
    for r in rows:
        r["t_start_s"] = r["t_abs"] - t0
    meta = io.provenance(
        space_name=space.name,
        space_hash=space.hash,
        space=space.to_dict(),
        device=device_name,
        device_spec=dict(device_spec),
        fingerprint=fingerprint,
        unit=f"{device.unit} per forward of a batch of {device_spec.get('batch_size', 1)} images",
        unit_short=device.unit,
        analytic=device.analytic,
        protocol=dict(protocol),
        statistic=protocol["statistic"],
        seed=seed,
        reference_channels=reference_config(space),
        reference_baseline=baseline,
        configs_sampler=cmeta.get("sampler"),
        timed_s=timed,
        overhead_s=overhead,
        session_wall_s=wall,
        **noise,
    )
    io.write_records(rows, out_path, "latency", meta)
    journal.remove()  # a forced rerun times every network again
    return {"complete": True, "done": len(rows), "total": len(jobs), **noise, "reference_baseline": baseline}


def read_latency(path: str | os.PathLike, space: SearchSpace, device: str | None = None) -> tuple[pa.Table, dict]:
    """A latency artifact, refused if it comes from another space or (when given) another device."""
    table, meta = io.read_table(path, "latency")
    if meta.get("space_hash") != space.hash:
        raise io.ArtifactError(
            f"{path} was profiled on space {meta.get('space_name')!r} (hash {meta.get('space_hash')}), not the "
            f"configured {space.name!r} (hash {space.hash}); profile this space first"
        )
    if device is not None and meta.get("device") != device:
        raise io.ArtifactError(
            f"{path} holds timings of device {meta.get('device')!r} (fingerprint {meta.get('fingerprint')}), "
            f"not of {device!r}; use that device's latency file"
        )
    return table, meta
