"""`aows train-supernet`: train an OWS or AOWS slimmable supernet (§3, §5, §6).

With supernet.processes = N > 1 the command relaunches itself under torchrun (`launch`).
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Mapping

from . import add_config, forward_options, torchrun

COMMAND = "train-supernet"
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
    n = int(config["supernet"]["processes"])
    if args.print_launch and n == 1:
        print("supernet.processes = 1: the command trains in its own process (nothing to launch)")
        return True
    if not (n > 1 and "RANK" not in os.environ):
        return False
    if config["supernet"]["batch_size"] % n:
        raise ValueError(f"supernet.batch_size = {config['supernet']['batch_size']} is not divisible by "
                         f"supernet.processes = {n}")
    argv = forward_options(args, ("method", "out_dir", "resume_dir", "lut", "device", "target", "init_from",
                                  "stop_after", "quiet"))
    from ..training.supernet import training_threads

    torchrun(COMMAND, config, argv, n, training_threads(config, args.method), int(config["supernet"]["nodes"]),
             print_only=args.print_launch)
    return True


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, resume_dir,
        method: str = "ows", device: str | None = None, target: str | None = None, progress: bool = True,
        stop_after: int | None = None) -> dict[str, Any]:
    """Train the supernet (OWS §5, or AOWS §6 with the device's LUT and target); rank 0 writes unaries.parquet,
    metrics.parquet and model.pt (and the per-epoch checkpoints, kept with the resume state while training)."""
    import shutil
    from pathlib import Path

    from .. import artifacts
    from ..config import space_from_config
    from ..search.link import Link
    from ..search.targets import resolve_target
    from ..artifacts.resume import clear_resume
    from ..training.distributed import bn_description
    from ..training.supernet import EPOCHS_DIR, FROZEN_DESCRIPTION, LOSS_DESCRIPTION, make_sampler, train_supernet

    if method not in ("ows", "aows"):
        raise ValueError(f"unknown method {method!r}; expected 'ows' or 'aows'")
    space = space_from_config(config)
    sn, aw, seed = config["supernet"], config["aows"], int(config["seed"])
    E, W = int(sn["epochs"]), int(aw["warmup_epochs"])
    lut_path, init_from = inputs.get("lut"), inputs.get("init_from")
    sampler = None
    if method == "aows":
        if lut_path is None or target is None or init_from is None:
            raise ValueError("AOWS needs --lut, --target and --init-from (the OWS checkpoint after the warm-up epochs)")
        if not W < E:
            raise ValueError(f"aows.warmup_epochs ({W}) must be smaller than supernet.epochs ({E})")
        x, tmeta = artifacts.read_lut(lut_path, space, device)
        link = Link.from_meta(tmeta)
        target_value = resolve_target(target, space, x, tmeta["unit_short"], link)
        # the sampler's chain is additive: it steers towards the budget g⁻¹(T) (D39); refuses an infeasible target (D14)
        sampler = make_sampler(space, config, x, link.inverse(target_value))

    out_dir = Path(outputs["out_dir"])
    res = train_supernet(config, out_dir, resume_dir, method=method, sampler=sampler, device=device, target=target,
                         init_from=init_from, progress=progress, stop_after=stop_after)
    if not res.complete or not res.main:  # rank 0 writes the artifacts
        return res.summary(E)
    meta = artifacts.provenance(
        space, seed=seed, method=method, target=target,
        sampling=("uniform" if method == "ows" else f"uniform for {W} epochs, then {aw['sampling']} from the relaxed marginals"),
        window=None if method == "ows" else int(aw["window"]),
        averaging="per epoch" if method == "ows" else f"most recent {aw['window']} samples per (layer, width)",
        loss=LOSS_DESCRIPTION, unaries=sn["unaries"],
        frozen_estimate=FROZEN_DESCRIPTION if sn["unaries"] == "frozen" else None,
        temperature_scale=res.sampler_scale, target_value=None if sampler is None else target_value,
        target_budget=None if sampler is None else sampler.target,
        processes=res.world, bn=bn_description(res.world, sync=bool(sn["sync_bn"])), supernet=dict(sn), data=res.spec.to_dict(),
        train={**config["train"], "resolved_device": res.train_device},
    )
    meta["device"] = device  # recorded also when None (OWS)
    last = res.metrics[-1]  # the width signal of the unaries that decide (the last epoch's)
    ws, se = last["width_signal"], last["width_signal_se"]
    meta.update(width_signal=ws, width_signal_se=se,
                width_signal_z=ws / se if ws is not None and se is not None and se > 0 else None,
                estimation_seconds=res.estimation_seconds)
    artifacts.write_records(res.rows, out_dir / "unaries.parquet", "unaries", meta)
    artifacts.write_records(res.metrics, out_dir / "metrics.parquet", "train_metrics", meta)
    artifacts.save_torch({"space": space.to_dict(), "space_hash": space.hash, "model": res.model_state,
                          "run_id": res.run_id}, out_dir / "model.pt")
    shutil.rmtree(Path(resume_dir) / EPOCHS_DIR, ignore_errors=True)  # copied into out_dir/checkpoints
    clear_resume(Path(resume_dir) / "checkpoint.pt")
    return res.summary(E)


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    if os.environ.get("RANK", "0") != "0":
        return  # rank 0 reports
    if r["complete"]:
        m = r["metrics"]
        print(f"wrote {args.out_dir}: {r['epochs']} epochs; last epoch max-config train accuracy "
              f"{100 * m['train_acc_max']:.1f} %, {m['images_per_s']:.0f} images/s")
    else:
        print(f"stopped at epoch {r['epoch']} step {r['step']}; rerun the same command to resume")
