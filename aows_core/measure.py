"""Timing the finalists on the real device (§7, Tables cpu/gpu), in the form and protocol of profiling (§4).

One session per device times every distinct finalist network (several methods or targets may give the
same network: it is timed once per round and the result shared) for R rounds. Each round is

    reference, shuffle(finalists + [reference]), reference

in a seeded order, so the reference is interleaved with the finalists. Every job gets the profiling
statistic (median, mean, min or p10 of its repeats) on the same backend, with the same repeats, warm-up
and minimum timed time. Drift correction is that of profiling (`profiling.correct_drift`: the reference
series smoothed by a running median and interpolated over job order gives ref(job)), but normalised to
the LUT's reference baseline rather than the session's own:

    corrected = raw × reference_baseline(LUT) / ref(job),

so measured latencies are comparable with the LUT's predictions even when the machine drifted since it
was profiled. A finalist's measured latency is the median over rounds of its corrected statistic. An
analytic device (`flops`) is counted once, without reference: corrected = raw.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from . import io
from .config import space_from_config, stage_settings
from .decode import read_decisions
from .profiling import correct_drift, read_latency, reference_config, time_network, timing_counts

io.SCHEMAS.setdefault(
    "measure",
    pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("target_ms", pa.float64()),
            ("unit", pa.string()),
            ("channels", io.CHANNELS),
            ("predicted_ms", pa.float64()),
            ("measured_ms_raw", pa.float64()),
            ("measured_ms", pa.float64()),
            ("measured_ms_min", pa.float64()),
            ("measured_ms_max", pa.float64()),
            ("rounds", pa.int32()),
            ("meets_target_predicted", pa.bool_()),
            ("meets_target_measured", pa.bool_()),
            ("rel_error", pa.float64()),
            ("fingerprint_match", pa.bool_()),
        ]
    ),
)

# Decisions must carry the LUT's own prediction; anything looser means they were decided on another table.
PREDICTION_RTOL = 1e-9


class MeasureError(RuntimeError):
    """A measurement session that cannot run: a finalist, LUT or device that does not match."""


@dataclass(frozen=True)
class MeasureJob:
    job: int
    round: int
    role: str  # finalist | reference
    network: int  # index into the distinct networks; -1 for the reference
    channels: tuple[int, ...]


def plan(
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


def _same_target(device, spec: Mapping, lmeta: Mapping, protocol: Mapping, latency: str | os.PathLike) -> None:
    """Refuse a session whose device settings or timing protocol differ from the profiled ones (§4 same form)."""
    from .devices.base import normalise_spec

    spec_then = dict(lmeta.get("device_spec") or {})
    then = {"backend": spec_then.get("backend"), **normalise_spec(spec_then)}
    now = {"backend": spec.get("backend"), **device.spec}
    differ = [k for k in ("backend", *device.keys) if then.get(k) != now.get(k)]
    if differ:
        raise MeasureError(
            f"the configured settings of this device differ from those {latency} was profiled with: "
            + ", ".join(f"{k} {then.get(k)!r} → {now.get(k)!r}" for k in differ)
            + "; the LUT describes another target — profile and fit it again with these settings"
        )
    used = lmeta.get("protocol", {})
    differ = [k for k in ("statistic", "repeats", "warmup", "min_time_ms") if k in used and used[k] != protocol[k]]
    if differ:
        raise MeasureError(
            f"the timing protocol differs from the one {latency} was profiled with: "
            + ", ".join(f"{k} {used[k]!r} → {protocol[k]!r}" for k in differ)
            + "; finalists must be timed as the LUT's networks were (profile again, or restore these settings)"
        )


def measure(
    config: Mapping[str, Any],
    device_name: str,
    decisions: Sequence[str | os.PathLike],
    latency: str | os.PathLike,
    lut_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    progress: bool = True,
    job_offset: int | None = None,
) -> list[dict[str, Any]]:
    """Stage: time every finalist of a device for R rounds, drift-corrected to the LUT's reference (§7); writes "measure".

    `job_offset` is the first job index (the synthetic device's virtual clock); by default the session
    continues the profiling session's clock.
    """
    from . import lut
    from .devices import get_device
    from .stages import read_lut

    space = space_from_config(config)
    spec = dict(stage_settings(config, "measure", device_name)["devices"][device_name])
    protocol, settings, seed = dict(config["profiling"]), dict(config["measure"]), int(config["seed"])
    ltable, lmeta = read_latency(latency, space, device_name)
    x, tmeta = read_lut(lut_path, space)
    if tmeta.get("device") != device_name or tmeta.get("fingerprint") != lmeta.get("fingerprint"):
        raise io.ArtifactError(
            f"{lut_path} (device {tmeta.get('device')!r}, fingerprint {tmeta.get('fingerprint')}) was not fitted on "
            f"{latency} (device {lmeta.get('device')!r}, fingerprint {lmeta.get('fingerprint')}); fit the LUT on that file"
        )
    finalists = read_decisions(decisions, space, device_name)
    if not finalists:
        raise MeasureError(f"no finalists to measure on device {device_name!r}: the decision files hold no rows")
    for f in finalists:
        pred = float(lut.predict(space, x, space.indices(f["channels"])))
        if not math.isclose(pred, f["predicted_latency_ms"], rel_tol=PREDICTION_RTOL, abs_tol=1e-12):
            raise MeasureError(
                f"{f['source']}: {f['method']} @ {f['target']} predicts {f['predicted_latency_ms']:.6g} but {lut_path} "
                f"gives {pred:.6g} for its channels; it was decided on another LUT — decide again"
            )
        f["predicted_ms"] = pred

    device = get_device(spec, space, seed)
    try:
        fingerprint = device.fingerprint()
        _same_target(device, spec, lmeta, protocol, latency)
        match = fingerprint == lmeta.get("fingerprint")
        if not match and settings["on_fingerprint_mismatch"] != "flag":
            raise MeasureError(
                f"this machine's device fingerprint differs from the one the LUT was profiled on:\n"
                f"  LUT ({latency}): {lmeta.get('fingerprint')}\n  this machine: {fingerprint}\n"
                f"Timings of two machines are not comparable. Measure on the profiled machine, profile again on this "
                f"one, or set measure.on_fingerprint_mismatch: flag to measure anyway (rows get fingerprint_match false)."
            )
        nets = sorted({tuple(int(c) for c in f["channels"]) for f in finalists})
        ref = reference_config(space)
        if not device.analytic and list(lmeta.get("reference_channels") or []) != ref:
            raise MeasureError(f"{latency} used reference {lmeta.get('reference_channels')}, not {ref}; profile again")
        if job_offset is None:
            jobs_done = ltable.column("job").to_numpy()
            job_offset = int(jobs_done.max()) + 1 if len(jobs_done) else 0
        jobs = plan(nets, ref, int(settings["rounds"]), seed, device.analytic, job_offset)
        rows = _time(device, jobs, protocol, device_name, progress)
    finally:
        device.close()

    baseline = float(lmeta["reference_baseline"]) if not device.analytic else float("nan")
    rows, session_baseline = correct_drift(rows, baseline=None if device.analytic else baseline)
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
    meta = io.provenance(
        space_name=space.name,
        space_hash=space.hash,
        device=device_name,
        device_spec=spec,
        fingerprint=fingerprint,
        lut_fingerprint=lmeta.get("fingerprint"),
        fingerprint_match=bool(match),
        unit=lmeta.get("unit"),
        unit_short=lmeta.get("unit_short"),
        analytic=device.analytic,
        protocol=protocol,
        statistic=protocol["statistic"],
        rounds=1 if device.analytic else int(settings["rounds"]),
        measure=settings,
        seed=seed,
        job_offset=job_offset,
        reference_channels=ref,
        reference_baseline=baseline,
        session_reference_baseline=session_baseline,
        correction="corrected = raw × reference_baseline(LUT) / ref(job); ref = running median of the reference "
        "series interpolated over job order (as in profiling)",
        networks=[list(n) for n in nets],
        decisions=[f["source"] for f in finalists],
        latency=str(latency),
        lut=str(lut_path),
        lut_lambda=tmeta.get("lam"),
        timings=rows,
    )
    io.write_records(out_rows, out, "measure", meta)
    return out_rows


def _time(device, jobs: list[MeasureJob], protocol: Mapping[str, Any], name: str, progress: bool) -> list[dict]:
    """Each job timed as profiling times it (same repeats, warm-up, minimum time and statistic, §4)."""
    counts = timing_counts(device, protocol)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=f"measure {name}", unit="net")
    rows = []
    try:
        for j in jobs:
            t_abs = time.time()
            rows.append({"job": j.job, "round": j.round, "role": j.role, "network": j.network, "t_abs": t_abs,
                         **time_network(device, j.channels, j.job, counts, protocol["statistic"])})
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return rows
