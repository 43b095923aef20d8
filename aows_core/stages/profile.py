"""`aows profile`: time whole networks on a device (§4)."""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from . import add_config

if TYPE_CHECKING:
    from ..config import ProfilingSettings, Settings
    from ..space import SearchSpace
    from ..training.loop import RunControl

COMMAND = "profile"
HELP = "time whole networks on a device (§4)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("configs",)
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p, timing=True)
    p.add_argument("--device", required=True, help="a device name from the config's `devices`")
    p.add_argument("--configs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--resume-dir", default="results/.resume", help="where the resume journal lives (not an output)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many jobs (resume later)")
    p.add_argument("--quiet", action="store_true")


class _Session:
    """The journal, device and progress of one profiling session: jobs are appended in timeline order."""

    def __init__(self, journal, device, protocol: ProfilingSettings, space: SearchSpace, bar, stop_after: int | None):
        from ..latency.protocol import pairing_of, timing_counts

        self.journal, self.device, self.bar = journal, device, bar
        self.statistic = protocol.statistic
        self.counts = timing_counts(device, protocol)
        self.pairing = pairing_of(device, protocol, space)
        self.budget = stop_after if stop_after is not None else math.inf
        self.jobs: list = []

    def run(self, todo: Sequence, extra: Mapping[int, dict] | None = None) -> bool:
        """Append `todo` to the timeline and time what the journal lacks, each row with its `extra` fields (a
        re-timing's job and cause); False when `stop_after` ran out first."""
        from ..latency.protocol import time_network

        self.jobs.extend(todo)
        if self.bar is not None:
            self.bar.total = len(self.jobs)
            self.bar.refresh()
        for j in todo:
            if j.job < len(self.journal.rows):
                continue
            if self.budget <= 0:
                return False
            row = {"job": j.job, "role": j.role, "config_id": j.config_id, "channels": list(j.channels), "set": j.set,
                   "t_abs": time.time(), **time_network(self.device, j.channels, j.job, self.counts, self.statistic,
                                                         self.pairing)}
            if extra is not None:
                row.update(extra[j.job])
            self.journal.append(row)
            self.budget -= 1
            if self.bar is not None:
                self.bar.update(1)
        return True

    def timed(self) -> tuple[list[dict], list[dict]]:
        """The timeline's first timings and its re-timings, as journaled."""
        rows = self.journal.rows[: len(self.jobs)]
        return [dict(r) for r in rows if r["role"] != "retime"], [dict(r) for r in rows if r["role"] == "retime"]

    def rows(self) -> list[dict]:
        """The timed jobs of the timeline, each re-timed job merged into its original: its timing outside a spell of
        the host first (D47), then the less disturbed (D27)."""
        from ..latency.protocol import merge_retimed, spell_level

        plain, again = self.timed()
        return merge_retimed(plain, again, spell_level(plain))


@dataclass(frozen=True)
class ProfileJob:
    """One device's profiling session as the config sets it (§4): the space, the device's name and settings, the
    timing protocol, the seed, and the targets its noise gate is set against (D27)."""

    space: SearchSpace
    device: str
    spec: Mapping[str, Any]
    protocol: ProfilingSettings
    seed: int
    targets: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Settings, device: str) -> "ProfileJob":
        """The session of `device` under resolved settings: its targets are its decode and AOWS targets."""
        targets = sorted(set(settings.decode.targets_for(device)) | set(settings.aows.targets_for(device)))
        return cls(settings.space, device, settings.device(device), settings.profiling, settings.seed, tuple(targets))


def profile_session(job: ProfileJob, configs_path: str | os.PathLike, out_path: str | os.PathLike,
                    control: RunControl) -> dict[str, Any]:
    """Time every configuration on the device under the protocol (§4, D4, D27), then time again the jobs disturbed
    while timed (within `retime`); apply the noise gate against the job's targets. Resumable at any job (`control`:
    the journal's folder, a progress bar, a stop after N jobs); writes the latency artifact."""
    from .. import artifacts
    from ..devices import get_device
    from ..latency.protocol import plan_hash, profile_plan

    space, protocol = job.space, job.protocol
    configs, cmeta = artifacts.read_configs(configs_path, space)
    device = get_device(dict(job.spec), space, job.seed)
    fingerprint = device.fingerprint()
    plan = profile_plan(space, configs, protocol, job.seed, device.analytic)
    header = {"plan": plan_hash(plan, protocol, fingerprint, space), "fingerprint": fingerprint, "space": space.hash}
    journal = artifacts.Journal(control.resume_dir / f"profile_{job.device}.jsonl", header, protocol.checkpoint_every)
    bar = None
    if control.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), initial=len(journal.rows), desc=f"profile {job.device}", unit="net", smoothing=0.05)
    sess = _Session(journal, device, protocol, space, bar, control.stop_after)
    session_start = time.perf_counter()
    try:
        complete = sess.run(plan) and _retime(sess, protocol)
    finally:
        journal.close()
        if bar is not None:
            bar.close()
    if not complete:
        return {"complete": False, "done": len(journal.rows), "total": len(sess.jobs)}
    res = _write(sess, job, cmeta, out_path, time.perf_counter() - session_start)
    journal.remove()  # a forced rerun times every network again
    return res


def _retime(sess: _Session, protocol: ProfilingSettings) -> bool:
    """Time again, in rounds, the jobs disturbed while timed (D27: chunk ratios spread, at most `retime` × the
    session's jobs, most disturbed first) and those timed in one of the host's spells (D47: until timed outside one,
    at most `spell_retime` × the jobs and SPELL_TRIES times each, the slowest reference first; not where the host was
    in spells for most of the session, `spell_level`); none on an analytic device. False when `stop_after` ran out
    first. Each round follows from the journal alone, so a resumed session re-times exactly what an uninterrupted one
    does."""
    from ..latency.protocol import Job

    while True:
        todo = _retime_round(sess, protocol)
        if not todo:
            return True
        first = len(sess.jobs)
        jobs = [Job(first + k, "retime", r["config_id"], tuple(r["channels"]), r["set"])
                for k, (r, _) in enumerate(todo)]
        if not sess.run(jobs, {j.job: {"retime_of": r["job"], "cause": c} for j, (r, c) in zip(jobs, todo)}):
            return False


def _retime_round(sess: _Session, protocol: ProfilingSettings) -> list[tuple[dict, str]]:
    """The next round of re-timings (see `_retime`): (the job's first timing, "disturbed" or "spell") each."""
    from ..latency.protocol import SPELL_TRIES, disturbed, in_spell, merge_retimed, spell_level

    if sess.device.analytic:
        return []
    plain, again = sess.timed()
    todo: list[tuple[dict, str]] = []
    if not again:  # the first round: the disturbed jobs, once (D27)
        todo = [(r, "disturbed") for r in disturbed(plain, math.ceil(protocol.retime * len(plain)))]
    level = spell_level(plain)
    if level is None:
        return todo
    spells = [r for r in again if r.get("cause") == "spell"]
    tries = Counter(r["retime_of"] for r in spells)
    chosen = {r["job"] for r, _ in todo}
    left = math.ceil(protocol.spell_retime * len(plain)) - len(spells)
    kept = [r for r in merge_retimed(plain, again, level)
            if in_spell(r, level) and tries[r["job"]] < SPELL_TRIES and r["job"] not in chosen]
    first = {r["job"]: r for r in plain}
    todo += [(first[r["job"]], "spell") for r in sorted(kept, key=lambda r: -r["ref_ms_raw"])[: max(left, 0)]]
    return todo


def _write(sess: _Session, job: ProfileJob, cmeta: Mapping[str, Any], out_path: str | os.PathLike,
           wall: float) -> dict[str, Any]:
    """The latency artifact of a finished session: every job corrected (D27), σ_n and the noise gate."""
    from .. import artifacts
    from ..latency.protocol import correct, noise_gate, reference_config, retest_noise, spell_record

    device, journal, space, protocol = sess.device, sess.journal, job.space, job.protocol
    rows, baseline = correct(sess.rows())
    spells = spell_record(*sess.timed(), rows)
    noise = retest_noise(rows) if not device.analytic else retest_noise([])
    gate = noise_gate(noise["sigma_n"], _threshold(protocol, job.targets, rows, device))
    t0 = journal.rows[0]["t_abs"]
    for r in rows:
        r["t_start_s"] = r["t_abs"] - t0
    n_retimed = sum(r["role"] == "retime" for r in journal.rows)
    meta = artifacts.provenance(
        space.to_dict(),
        job.device,
        space_name=space.name,
        space_hash=space.hash,
        device_spec=dict(job.spec),
        fingerprint=device.fingerprint(),
        unit=f"{device.unit} per forward of a batch of {job.spec.get('batch_size', 1)} images",
        unit_short=device.unit,
        analytic=device.analytic,
        protocol={**protocol.to_dict(), "pairing": "paired"},  # the protocol later sessions must share (D27)
        statistic=protocol.statistic,
        pairing="analytic" if device.analytic else "paired",
        seed=job.seed,
        reference_channels=reference_config(space),
        reference_baseline=baseline,
        configs_sampler=cmeta.get("sampler"),
        timed_s=sum(r["timed_s"] for r in journal.rows),
        overhead_s=sum(r["overhead_s"] for r in journal.rows),
        session_wall_s=wall,
        retimed=n_retimed,
        next_job=len(sess.jobs),
        targets=list(job.targets),
        **spells,
        **noise,
        **gate,
    )
    artifacts.write_records(rows, out_path, "latency", meta)
    if gate["too_noisy"]:
        warnings.warn(f"{job.device}: {gate['noise_message']}", stacklevel=3)
    return {"complete": True, "done": len(rows), "total": len(sess.jobs), **noise, **gate, "retimed": n_retimed,
            "reference_baseline": baseline, **spells}


def _threshold(protocol: ProfilingSettings, targets: Sequence[str], rows: list[dict], device: Any) -> float:
    """The noise gate's threshold: `max_noise`, or auto from the targets in the device's unit resolved on the
    session's own timings (range: targets between its fastest and slowest timed network); analytic devices have no
    noise."""
    from ..config import parse_target
    from ..latency.protocol import noise_threshold

    if device.analytic:
        return float("inf")
    lat = [r["latency_ms"] for r in rows if r["role"] in ("sample", "retest")]
    lo, hi = (min(lat), max(lat)) if lat else (0.0, 0.0)
    values = [t.resolve(lo, hi) for t in map(parse_target, targets) if t.is_relative or t.unit == device.unit]
    return noise_threshold(protocol.max_noise, values)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str,
        resume_dir: str = "results/.resume", progress: bool = True, stop_after: int | None = None) -> dict[str, Any]:
    """Profile the sampled configurations on `device` with the config's protocol (§4)."""
    from ..config import resolve
    from ..training.loop import RunControl

    return profile_session(ProfileJob.of(resolve(config), device), inputs["configs"], outputs["out"],
                           RunControl(resume_dir, progress, stop_after))


def report(res: dict[str, Any], args: argparse.Namespace) -> None:
    if res["complete"]:
        print(f"wrote {args.out}: {res['done']} timings ({res['retimed']} timed again: disturbed while timed, or in "
              f"one of the host's spells: {res['timed_in_spell']} at first, {res['left_in_spell']} at the end); "
              f"σ_n = {100 * res['sigma_n']:.2f} % over {res['retest_pairs']} retest pairs")
        if not res["spells_retimed"] and res["timed_in_spell"]:
            print(f"the host was in spells for most of the session ({res['timed_in_spell']} of {res['done']} jobs): "
                  "none timed again (D47); profile again when it is quieter")
        if res["too_noisy"]:
            print(f"WARNING: {res['noise_message']}")
    else:
        print(f"stopped after {res['done']}/{res['total']} jobs; rerun the same command to resume")
