"""`aows profile`: time whole networks on a device (§4)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from . import add_config

if TYPE_CHECKING:
    from ..space import SearchSpace

COMMAND = "profile"
HELP = "time whole networks on a device (§4)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("configs",)
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--device", required=True, help="a device name from the config's `devices`")
    p.add_argument("--configs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--resume-dir", default="results/.resume", help="where the resume journal lives (not an output)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many jobs (resume later)")
    p.add_argument("--quiet", action="store_true")


def profile_session(
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
    """Time every configuration on the device under the protocol (§4, D3, D4); resumable; writes the latency artifact."""
    from .. import artifacts
    from ..devices import get_device
    from ..latency.protocol import (correct_drift, plan_hash, profile_plan, reference_config, retest_noise,
                                    time_network, timing_counts)

    configs, cmeta = artifacts.read_configs(configs_path, space)
    device = get_device(dict(device_spec), space, seed)
    fingerprint = device.fingerprint()
    jobs = profile_plan(space, configs, protocol, seed, device.analytic)
    header = {"plan": plan_hash(jobs, protocol, fingerprint, space), "fingerprint": fingerprint, "space": space.hash}
    journal = artifacts.Journal(Path(resume_dir) / f"profile_{device_name}.jsonl", header, protocol["checkpoint_every"])
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
    meta = artifacts.provenance(
        space.to_dict(),
        device_name,
        space_name=space.name,
        space_hash=space.hash,
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
    artifacts.write_records(rows, out_path, "latency", meta)
    journal.remove()  # a forced rerun times every network again
    return {"complete": True, "done": len(rows), "total": len(jobs), **noise, "reference_baseline": baseline}


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str,
        resume_dir: str = "results/.resume", progress: bool = True, stop_after: int | None = None) -> dict[str, Any]:
    """Profile the sampled configurations on `device` with the config's protocol (§4)."""
    from ..config import space_from_config, stage_settings

    spec = stage_settings(config, "profile", device)["devices"][device]
    return profile_session(
        space_from_config(config), device, spec, inputs["configs"], outputs["out"], resume_dir, config["profiling"],
        config["seed"], progress=progress, stop_after=stop_after,
    )


def report(res: dict[str, Any], args: argparse.Namespace) -> None:
    if res["complete"]:
        print(f"wrote {args.out}: {res['done']} timings; σ_n = {100 * res['sigma_n']:.2f} % over {res['retest_pairs']} retest pairs")
    else:
        print(f"stopped after {res['done']}/{res['total']} jobs; rerun the same command to resume")
