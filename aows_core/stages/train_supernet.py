"""`aows train-supernet`: train an OWS or AOWS slimmable supernet (§3, §5, §6).

With supernet.processes = N > 1 the command relaunches itself under torchrun (`launch`).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, Mapping

from . import add_config, forward_options, torchrun

if TYPE_CHECKING:
    from ..config import Settings
    from ..training.loop import RunControl
    from ..training.supernet import SupernetJob, SupernetResult

COMMAND = "train-supernet"
# malloc keeps what a pass frees: it trains with torch (docs/method.md D51).
KEEPS_FREED_MEMORY = True
HELP = "train an OWS or AOWS slimmable supernet (§3, §5, §6)"
PARSER_KWARGS: dict[str, Any] = {
    "description": "With supernet.processes = N > 1, relaunches itself under torchrun as N data-parallel processes."
}
INPUTS = ("lut", "init_from")
OUTPUTS = ("out_dir",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--method", choices=["ows", "aows"], default="ows")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--resume-dir", required=True, help="where the resume checkpoint lives (not an output)")
    p.add_argument("--lut", help="AOWS: the device's latency table")
    p.add_argument("--device", help="AOWS: the device name")
    p.add_argument("--target", help="AOWS: the latency target string")
    p.add_argument("--init-from", help="AOWS: the OWS checkpoint after the warm-up epochs")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (resume later)")
    p.add_argument("--print-launch", action="store_true",
                   help="with processes > 1: print the torchrun (or, in a multi-node SLURM job, srun) command and exit")
    p.add_argument("--quiet", action="store_true")


def launch(config: Mapping[str, Any], args: argparse.Namespace) -> bool:
    """With supernet.processes = N > 1 outside torchrun: run this command as N processes; True if it did."""
    from ..config import AowsSettings, SupernetSettings
    from ..training.supernet import training_threads

    sn = SupernetSettings.from_mapping(config["supernet"])  # the launcher needs no space
    n = int(sn.processes)
    if args.print_launch and n == 1:
        print("supernet.processes = 1: the command trains in its own process (nothing to launch)")
        return True
    if not (n > 1 and "RANK" not in os.environ):
        return False
    if sn.batch_size % n:
        raise ValueError(f"supernet.batch_size = {sn.batch_size} is not divisible by supernet.processes = {n}")
    argv = forward_options(args, ("method", "out_dir", "resume_dir", "lut", "device", "target", "init_from",
                                  "stop_after", "quiet"))
    threads = training_threads(sn, AowsSettings.from_mapping(config["aows"]), args.method)
    torchrun(COMMAND, config, argv, n, threads, int(sn.nodes), print_only=args.print_launch)
    return True


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, method: str = "ows",
        device: str | None = None, target: str | None = None, **control: Any) -> dict[str, Any]:
    """Train the supernet (OWS §5, or AOWS §6 with the device's LUT and target); rank 0 writes unaries.parquet,
    metrics.parquet and model.pt (and the per-epoch checkpoints, kept with the resume state while training).
    `control`: the fields of
    `training.loop.RunControl` (resume_dir, progress, stop_after)."""
    from ..config import resolve, resume_settings, settings_hash
    from ..training.loop import RunControl
    from ..training.supernet import SupernetJob, train_supernet

    if method not in ("ows", "aows"):
        raise ValueError(f"unknown method {method!r}; expected 'ows' or 'aows'")
    settings = resolve(config)
    key = settings_hash(resume_settings(config, "train_ows" if method == "ows" else "train_aows"))
    job = SupernetJob(key, method, device, target, init_from=inputs.get("init_from"))
    if method == "aows":
        job = _aows_job(settings, job, inputs.get("lut"))
    ctl = RunControl(**control)
    res = train_supernet(settings, outputs["out_dir"], job, ctl)
    if res.complete and res.main:  # rank 0 writes the artifacts
        _write(settings, job, res, outputs["out_dir"], ctl)
    return res.summary(int(settings.supernet.epochs))


def _aows_job(settings: Settings, job: SupernetJob, lut_path: Any) -> SupernetJob:
    """The AOWS job with its sampler (§6) steering towards the device's target on its LUT."""
    from dataclasses import replace

    from .. import artifacts
    from ..search.link import Link
    from ..search.targets import resolve_target
    from ..training.supernet import make_sampler

    E, W = int(settings.supernet.epochs), int(settings.aows.warmup_epochs)
    if lut_path is None or job.target is None or job.init_from is None:
        raise ValueError("AOWS needs --lut, --target and --init-from (the OWS checkpoint after the warm-up epochs)")
    if not W < E:
        raise ValueError(f"aows.warmup_epochs ({W}) must be smaller than supernet.epochs ({E})")
    x, tmeta = artifacts.read_lut(lut_path, settings.space, job.device)
    link = Link.from_meta(tmeta)
    target_value = resolve_target(job.target, settings.space, x, tmeta["unit_short"], link)
    # the sampler's chain is additive: it steers towards the budget g⁻¹(T) (D39); refuses an infeasible target (D14)
    return replace(job, sampler=make_sampler(settings, x, link.inverse(target_value)), target_value=target_value)


def _write(settings: Settings, job: SupernetJob, res: SupernetResult, out_dir: Any, control: RunControl) -> None:
    """unaries.parquet, metrics.parquet and model.pt of a finished training, then its resume state cleared."""
    import shutil
    from pathlib import Path

    from .. import artifacts
    from ..artifacts.resume import clear_resume
    from ..training.distributed import bn_description
    from ..training.supernet import EPOCHS_DIR, FROZEN_DESCRIPTION, LOSS_DESCRIPTION

    space, sn, aw, sampler, out_dir = settings.space, settings.supernet, settings.aows, job.sampler, Path(out_dir)
    ows, W = job.method == "ows", int(aw.warmup_epochs)
    meta = artifacts.provenance(
        space, seed=settings.seed, method=job.method, target=job.target,
        sampling=("uniform" if ows else f"uniform for {W} epochs, then {aw.sampling} from the relaxed marginals"),
        window=None if ows else int(aw.window),
        averaging="per epoch" if ows else f"most recent {aw.window} samples per (layer, width)",
        loss=LOSS_DESCRIPTION, unaries=sn.unaries, frozen_estimate=FROZEN_DESCRIPTION if sn.unaries == "frozen" else None,
        temperature_scale=res.sampler_scale, target_value=job.target_value,
        target_budget=None if sampler is None else sampler.target,
        processes=res.world, bn=bn_description(res.world, sync=bool(sn.sync_bn)), supernet=sn.to_dict(),
        data=res.spec.to_dict(), train={**settings.train.to_dict(), "resolved_device": res.train_device},
    )
    meta["device"] = job.device  # recorded also when None (OWS)
    last = res.metrics[-1]  # the width signal of the unaries that decide (the last epoch's)
    ws, se = last["width_signal"], last["width_signal_se"]
    meta.update(width_signal=ws, width_signal_se=se,
                width_signal_z=ws / se if ws is not None and se is not None and se > 0 else None,
                estimation_seconds=res.estimation_seconds)
    artifacts.write_records(res.rows, out_dir / "unaries.parquet", "unaries", meta)
    artifacts.write_records(res.metrics, out_dir / "metrics.parquet", "train_metrics", meta)
    artifacts.save_torch({"space": space.to_dict(), "space_hash": space.hash, "model": res.model_state,
                          "run_id": res.run_id}, out_dir / "model.pt")
    shutil.rmtree(control.resume_dir / EPOCHS_DIR, ignore_errors=True)  # copied into out_dir/checkpoints
    clear_resume(control.resume_dir / "checkpoint.pt")


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    if os.environ.get("RANK", "0") != "0":
        return  # rank 0 reports
    if r["complete"]:
        m = r["metrics"]
        print(f"wrote {args.out_dir}: {r['epochs']} epochs; last epoch max-config train accuracy "
              f"{100 * m['train_acc_max']:.1f} %, {m['images_per_s']:.0f} images/s")
    else:
        print(f"stopped at epoch {r['epoch']} step {r['step']}; rerun the same command to resume")
