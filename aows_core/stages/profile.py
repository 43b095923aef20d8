"""`aows profile`: time whole networks on a device (§4)."""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

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


class _Session:
    """The journal, device and progress of one profiling session: jobs are appended in timeline order."""

    def __init__(self, journal, device, protocol: Mapping[str, Any], space: SearchSpace, bar, stop_after: int | None):
        from ..latency.protocol import pairing_of, timing_counts

        self.journal, self.device, self.bar = journal, device, bar
        self.statistic = protocol["statistic"]
        self.counts = timing_counts(device, protocol)
        self.pairing = pairing_of(device, protocol, space)
        self.budget = stop_after if stop_after is not None else math.inf
        self.jobs: list = []

    def run(self, todo: Sequence, retime_of: Mapping[int, int] | None = None) -> bool:
        """Append `todo` to the timeline and time what the journal lacks; False when `stop_after` ran out first."""
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
            if retime_of is not None:
                row["retime_of"] = retime_of[j.job]
            self.journal.append(row)
            self.budget -= 1
            if self.bar is not None:
                self.bar.update(1)
        return True

    def rows(self) -> list[dict]:
        """The timed jobs of the timeline, each re-timed job merged into its original (D27), with its round."""
        from ..latency.protocol import merge_retimed

        rows = self.journal.rows[: len(self.jobs)]
        plain = [dict(r) for r in rows if r["role"] != "retime"]
        return merge_retimed(plain, [dict(r) for r in rows if r["role"] == "retime"])


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
    targets: Sequence[str] = (),
    lut_cfg: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Time every configuration on the device under the protocol (§4, D3, D4, D27); time again the jobs disturbed
    while timed (within `retime`); with `lut_cfg`, fit between rounds and time more coverage-biased networks until
    the λ-validation error reaches the noise floor or stops improving (supp. A, D28); apply the noise gate against
    `targets`. Resumable at any job; writes the latency artifact."""
    from .. import artifacts
    from ..devices import get_device
    from ..latency.protocol import (Job, correct_profile, disturbed, disturbed_mask, large_ratio_of, noise_gate,
                                    number_jobs, plan_hash, profile_plan, reference_config, reference_instability,
                                    retest_noise)
    from ..latency.rounds import next_round, round_error, stop_reason

    configs, cmeta = artifacts.read_configs(configs_path, space)
    device = get_device(dict(device_spec), space, seed)
    fingerprint = device.fingerprint()
    plan = profile_plan(space, configs, protocol, seed, device.analytic)
    max_rounds = 1 if device.analytic or lut_cfg is None else int(protocol["max_rounds"])
    header = {"plan": plan_hash(plan, {**protocol, "max_rounds": max_rounds}, fingerprint, space),
              "fingerprint": fingerprint, "space": space.hash}
    journal = artifacts.Journal(Path(resume_dir) / f"profile_{device_name}.jsonl", header, protocol["checkpoint_every"])
    t0 = journal.rows[0]["t_abs"] if journal.rows else time.time()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), initial=len(journal.rows), desc=f"profile {device_name}", unit="net", smoothing=0.05)
    sess = _Session(journal, device, protocol, space, bar, stop_after)
    pairing = "paired" if sess.pairing.reference is not None else "interpolated"
    ref = reference_config(space)
    round_of = {j.job: 0 for j in plan}
    history: list[dict[str, Any]] = []
    stopped, threshold = "", math.inf
    session_start = time.perf_counter()
    try:
        complete, todo = sess.run(plan), plan
        next_id = max((j.config_id for j in plan), default=-1) + 1
        while complete:
            rows, _, _ = correct_profile(sess.rows(), pairing, protocol["stretch"])
            threshold = _threshold(protocol, targets, rows, device.analytic)
            if pairing == "paired":  # this round's disturbed jobs, timed again (D27)
                mine = {j.job for j in todo}
                again = disturbed([r for r in rows if r["job"] in mine], math.ceil(protocol["retime"] * len(todo)))
                first = len(sess.jobs)
                retime = [Job(first + k, "retime", r["config_id"], tuple(r["channels"]), r["set"])
                          for k, r in enumerate(again)]
                complete = sess.run(retime, {j.job: r["job"] for j, r in zip(retime, again)})
                if not complete:
                    break
                rows, _, _ = correct_profile(sess.rows(), pairing, protocol["stretch"])
            if max_rounds == 1:
                break
            err, n_train = round_error(space, rows, lut_cfg)
            history.append({"round": len(history), "train_networks": n_train, "val_nrmse": err,
                            "sigma_n": retest_noise(rows)["sigma_n"], "jobs": len(sess.jobs)})
            stopped = stop_reason(history, history[-1]["sigma_n"], max_rounds, protocol["min_improvement"]) or ""
            if stopped:
                break
            k = len(history)
            timed = [r["channels"] for r in rows if r["role"] == "sample" and r["set"] == "train"]
            new = next_round(space, timed, protocol["round_coverage"], seed, k)
            items = [("sample", next_id + i, tuple(space.channels_of(c)), "train") for i, c in enumerate(new)]
            next_id += len(items)
            todo = number_jobs(items, len(sess.jobs), protocol, ref, pairing == "interpolated")
            round_of.update({j.job: k for j in todo})
            complete = sess.run(todo)
    finally:
        journal.close()
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - session_start
    if not complete:
        return {"complete": False, "done": len(journal.rows), "total": len(sess.jobs)}
    timed_s = sum(r["timed_s"] for r in journal.rows)
    overhead = sum(r["overhead_s"] for r in journal.rows)
    rows, baseline, stretch = correct_profile(sess.rows(), pairing, protocol["stretch"] and not device.analytic)
    noise = retest_noise(rows) if not device.analytic else retest_noise([])
    gate = noise_gate(noise["sigma_n"], reference_instability(rows, pairing), threshold, pairing)
    for r in rows:
        r["t_start_s"] = r["t_abs"] - t0
        r["round"] = round_of[r["job"]]
    n_retimed = sum(r["role"] == "retime" for r in journal.rows)
    columns = {k: [r[k] for r in rows] for k in ("role", "ratio_spread", "latency_ms")}
    n_disturbed = int(disturbed_mask(columns)[0].sum())
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
        pairing=pairing,
        seed=seed,
        reference_channels=ref,
        reference_baseline=baseline,
        large_reference_channels=None if sess.pairing.large is None else list(sess.pairing.large),
        large_reference_ratio=large_ratio_of(rows),
        configs_sampler=cmeta.get("sampler"),
        timed_s=timed_s,
        overhead_s=overhead,
        session_wall_s=wall,
        retimed=n_retimed,
        disturbed=n_disturbed,
        stretch=stretch,
        rounds=history,
        rounds_stopped=stopped,
        next_job=len(sess.jobs),
        targets=list(targets),
        **noise,
        **gate,
    )
    artifacts.write_records(rows, out_path, "latency", meta)
    journal.remove()  # a forced rerun times every network again
    if gate["too_noisy"]:
        warnings.warn(f"{device_name}: {gate['noise_message']}", stacklevel=2)
    return {"complete": True, "done": len(rows), "total": len(sess.jobs), **noise, **gate, "retimed": n_retimed,
            "disturbed": n_disturbed,
            "rounds": history, "rounds_stopped": stopped, "reference_baseline": baseline, "stretch": stretch}


def _threshold(protocol: Mapping[str, Any], targets: Sequence[str], rows: list[dict], analytic: bool) -> float:
    """The noise gate's threshold: `max_noise`, or auto from the targets resolved on the session's own timings
    (range: targets between its fastest and slowest timed network); analytic devices have no noise."""
    from ..config import parse_target
    from ..latency.protocol import noise_threshold

    if analytic:
        return float("inf")
    lat = [r["latency_ms"] for r in rows if r["role"] in ("sample", "retest")]
    lo, hi = (min(lat), max(lat)) if lat else (0.0, 0.0)
    values = []
    for t in map(parse_target, targets):
        if t.kind == "range":
            values.append(lo + t.value * (hi - lo))
        elif t.kind == "ms":
            values.append(t.value)
    return noise_threshold(protocol["max_noise"], values)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str,
        resume_dir: str = "results/.resume", progress: bool = True, stop_after: int | None = None) -> dict[str, Any]:
    """Profile the sampled configurations on `device` with the config's protocol (§4)."""
    from ..config import aows_targets, device_targets, space_from_config, stage_settings, validate

    spec = stage_settings(config, "profile", device)["devices"][device]
    targets = sorted(set(device_targets(config, device)) | set(aows_targets(config, device)))
    return profile_session(
        space_from_config(config), device, spec, inputs["configs"], outputs["out"], resume_dir, config["profiling"],
        config["seed"], progress=progress, stop_after=stop_after, targets=targets,
        lut_cfg=validate({})["lut"],  # rounds stop on the default fit: a change of `lut` settings refits, never re-times
    )


def stretch_note(s: Mapping[str, Any]) -> str:
    """One line on the host's stretch (D37): β with its standard error and whether the timings were corrected."""
    head = f"host stretch β = {s['beta']:+.3f} ± {s['beta_se']:.3f} over {s['pairs']} retest pairs"
    return head + (f", h ∈ [{s['h_low']:+.3f}, {s['h_high']:+.3f}]: timings expressed at the baseline's host state "
                   "(docs/method.md D37)" if s["applied"] else ": does not resolve, timings left as paired")


def report(res: dict[str, Any], args: argparse.Namespace) -> None:
    if res["complete"]:
        print(f"wrote {args.out}: {res['done']} timings ({res['retimed']} timed again: disturbed; "
              f"{res['disturbed']} still disturbed for their latency, fitted unless lut.exclude_disturbed: "
              "docs/method.md D43); "
              f"σ_n = {100 * res['sigma_n']:.2f} % over {res['retest_pairs']} retest pairs")
        for h in res["rounds"]:
            err = "— (not every variable timed yet)" if h["val_nrmse"] is None else f"{100 * h['val_nrmse']:.2f} %"
            print(f"  round {h['round']}: {h['train_networks']} training networks, λ-validation NRMSE {err}")
        if res["rounds_stopped"]:
            print(f"  stopped: {res['rounds_stopped']}")
        if res.get("stretch"):
            print(f"  {stretch_note(res['stretch'])}")
        if res["too_noisy"]:
            print(f"WARNING: {res['noise_message']}")
    else:
        print(f"stopped after {res['done']}/{res['total']} jobs; rerun the same command to resume")
