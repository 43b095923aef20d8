"""`aows retrain`: train a decision's network from scratch; top-1 on the test split (§7).

With retrain.processes = N > 1 the command relaunches itself under torchrun (`launch`, docs/method.md D30).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from . import add_config, forward_options, torchrun

if TYPE_CHECKING:
    from ..config import Settings
    from ..training.distributed import Dist
    from ..training.loop import RunControl
    from ..training.retrain import RetrainJob

COMMAND = "retrain"
# malloc keeps what a pass frees: it trains with torch (docs/method.md D51).
KEEPS_FREED_MEMORY = True
HELP = "train a decision's network from scratch; top-1 on the test split (§7)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("decision",)
OUTPUTS = ("out_dir",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--decision", help="a decisions parquet (one row): retrain its network, labelled as its finalist")
    what.add_argument("--channels", help="or a network's searchable widths, 16-32-64 or 16,32,64 (no finalist label)")
    p.add_argument("--seed", type=int, nargs="+", help="this run's seed: initialisation, batch order and augmentation; "
                                                        "the data splits stay the config's top-level seed's (default: "
                                                        "that seed). Several: trained one after another in this "
                                                        "process, each in --out-dir/seed<S> and --resume-dir/seed<S>")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--resume-dir", required=True, help="where the resume checkpoint lives (not an output)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (resume later)")
    p.add_argument("--print-launch", action="store_true",
                   help="with processes > 1: print the torchrun (or, in a multi-node SLURM job, srun) command and exit")
    p.add_argument("--quiet", action="store_true")


def launch(config: Mapping[str, Any], args: argparse.Namespace) -> bool:
    """With retrain.processes = N > 1 outside torchrun: run this command as N processes; True if it did."""
    from ..config import RetrainSettings

    rt = RetrainSettings.from_mapping(config["retrain"])  # the launcher needs no space
    n = int(rt.processes)
    if args.print_launch and n == 1:
        print("retrain.processes = 1: the command trains in its own process (nothing to launch)")
        return True
    if not (n > 1 and "RANK" not in os.environ):
        return False
    if rt.batch_size % n:
        raise ValueError(f"retrain.batch_size = {rt.batch_size} is not divisible by retrain.processes = {n}")
    argv = forward_options(args, ("decision", "channels", "seed", "out_dir", "resume_dir", "stop_after", "quiet"))
    torchrun(COMMAND, config, argv, n, int(rt.threads), int(rt.nodes), print_only=args.print_launch)
    return True


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, resume_dir,
        seed: int | Sequence[int] | None = None, channels: str | None = None, progress: bool = True,
        stop_after: int | None = None) -> dict[str, Any]:
    """Retrain one decision's network (or the network `channels` names) from scratch (retrain.init), then its top-1 on the
    test split with a Wilson interval (§7), both on `train.device` in `train.precision` (D29); writes
    result.parquet and model.pt.

    `seed` (default: the config's top-level seed) drives initialisation, batch order and augmentation; the
    splits (train_subset, search_val, calibration) always come from the top-level seed, so every seed of a
    network trains and is compared on the same images. Several seeds train one after another in this process (one
    start for all, D52), each writing in `out_dir`/seed<S>; their resume states are cleared once all are written,
    so a run stopped after some seeds retrains none of them again. Under torchrun (retrain.processes > 1) every rank
    trains and evaluates its shard; rank 0 writes."""
    from pathlib import Path

    from ..artifacts.resume import clear_resume
    from ..config import resolve, resume_settings
    from ..training.distributed import process_group
    from ..training.loop import RunControl

    settings = resolve(config)
    decision = inputs.get("decision")
    seeds = [seed] if seed is None or isinstance(seed, int) else [int(s) for s in seed]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"retrain --seed {' '.join(map(str, seeds))}: a seed given twice")
    several = len(seeds) > 1

    def folder(root: Any, job: RetrainJob) -> Path:  # several seeds: one folder each
        return Path(root) / f"seed{job.seed}" if several else Path(root)

    resume = resume_settings(config, "retrain")
    jobs = [_job(settings, resume, decision, channels, s) for s in seeds]
    runs = []
    with process_group(int(settings.retrain.processes), str(settings.train.device), "retrain.processes",
                       deterministic=bool(settings.train.deterministic)) as ddp:
        for row, job in jobs:
            control = RunControl(folder(resume_dir, job), progress, stop_after)
            runs.append(_run(settings, row, job, control, decision, {"out_dir": folder(outputs["out_dir"], job)}, ddp))
            if not runs[-1]["complete"]:
                break
    if all(r["complete"] for r in runs) and ddp.main:
        for _, job in jobs:  # every seed written: none is trained again
            clear_resume(folder(resume_dir, job) / "checkpoint.pt")
    return runs[0] if not several else {"complete": all(r["complete"] for r in runs), "runs": runs}


def _job(settings: Settings, resume: Mapping[str, Any], decision: Any, channels: str | None,
         seed: int | None) -> tuple[dict[str, Any], RetrainJob]:
    """The finalist's row (method, device, target; all None for a network named by its widths) and its retraining."""
    from .. import artifacts
    from ..config import net_key, parse_net_key
    from ..training.retrain import RetrainJob, run_id

    if (decision is None) == (channels is None):
        raise ValueError("retrain one network: give exactly one of a decision and channels")
    space = settings.space
    seed = settings.seed if seed is None else int(seed)
    if decision is not None:
        row, _ = artifacts.read_decision(decision, space)
    else:
        row = {"method": None, "device": None, "target": None, "channels": parse_net_key(channels)}
        space.indices(row["channels"])  # a clear error if outside the space
    widths = tuple(int(c) for c in row["channels"])
    desc = f"retrain {row['method']} {row['target']}" if decision is not None else f"retrain {net_key(widths)}"
    return row, RetrainJob(widths, seed, run_id(resume, widths, seed), desc)


def _initial(settings: Settings, channels: Sequence[int]) -> dict[str, Any] | None:
    """Where the network's training starts: None from scratch, or (retrain.init: weights) its front slice of
    space.weights with the channels ordered as the supernet's (D48)."""
    if settings.retrain.init != "weights":
        return None
    from ..nets.supernet import Supernet

    widest = Supernet(settings.space)
    widest.load_state_dict(settings.initial_state())
    return widest.subnet_state_dict(channels)


def _run(settings: Settings, row: Mapping[str, Any], job: RetrainJob, control: RunControl, decision: Any,
         outputs: Mapping[str, Any], ddp: Dist) -> dict[str, Any]:
    """`run` in this process's place of the (data-parallel) run `ddp`: train, evaluate, and (rank 0) write."""
    import torch

    from ..config import net_key
    from ..data import check_dataset, load_splits, test_batches
    from ..evaluation import wilson_interval
    from ..nets.scoring import top1
    from ..training.accelerator import accelerator
    from ..training.distributed import bn_description, sum_over_ranks
    from ..training.retrain import train_network

    space, rt = settings.space, settings.retrain
    torch.set_num_threads(int(rt.threads))
    accel = accelerator(settings.train, ddp.device)
    spec = settings.data_spec("retrain", train_seed=job.seed)
    splits = load_splits(spec, device=accel.device)  # an in-memory dataset is held and augmented there
    check_dataset(splits.info, space)
    res = train_network(rt, space, job, splits, accel, control, ddp=ddp, init=_initial(settings, job.channels))
    if not res.complete:
        return {"complete": False, "epoch": res.epoch, "step": res.step}

    test = test_batches(spec, batch_size=int(rt.eval_batch_size), rank=ddp.rank, world_size=ddp.world,
                        pin_memory=accel.device.type == "cuda")
    with accel.autocast():
        correct, n = sum_over_ranks(list(top1(res.model, accel.batches(test))), ddp)  # each rank: 1/N of the images
    lo, hi = wilson_interval(correct, n)
    result = {
        "method": row["method"], "device": row["device"], "target": row["target"], "channels": list(job.channels),
        "seed": job.seed, "epochs": int(rt.epochs), "train_seconds": res.seconds,
        "final_train_loss": res.final_train_loss, "test_correct": correct, "test_n": n, "test_acc": correct / n,
        "test_acc_low": lo, "test_acc_high": hi,
    }
    if ddp.main:  # rank 0 writes
        label = {"decision": str(decision)} if decision is not None else {"network": net_key(job.channels)}
        _write(settings, result, res.model, outputs["out_dir"], dict(
            **label, retrain=rt.to_dict(), data=spec.to_dict(), processes=ddp.world,
            train={**settings.train.to_dict(), "resolved_device": str(accel.device)},
            bn=bn_description(ddp.world, masked=False, sync=bool(rt.sync_bn))))
    return {"complete": True, **result}


def _write(settings: Settings, result: Mapping[str, Any], model: Any, out_dir: Any, provenance: Mapping[str, Any]) -> None:
    """result.parquet and model.pt of a finished retraining (`provenance`: what the stage knows of it)."""
    from pathlib import Path

    from .. import artifacts

    space, channels, out_dir = settings.space, result["channels"], Path(out_dir)
    meta = artifacts.provenance(space, **provenance, interval="Wilson score, 95 %",
                                schedule="linear warm-up, then cosine")
    artifacts.write_records([result], out_dir / "result.parquet", "retrain", meta)
    artifacts.save_torch({"space": space.to_dict(), "space_hash": space.hash, "channels": channels,
                          "model": model.state_dict()}, out_dir / "model.pt")


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    from ..config import net_key

    if os.environ.get("RANK", "0") != "0":
        return  # rank 0 reports
    if "runs" in r:  # several seeds
        for run_ in r["runs"]:
            report(run_, args)
        return
    if r["complete"]:
        who = f"{r['method']} @ {r['target']}" if r["method"] is not None else net_key(r["channels"])
        print(f"{who} (seed {r['seed']}): test top-1 {100 * r['test_acc']:.2f} % "
              f"[{100 * r['test_acc_low']:.2f}, {100 * r['test_acc_high']:.2f}] (Wilson 95 %, n = {r['test_n']})")
    else:
        print(f"stopped at epoch {r['epoch']} step {r['step']}; rerun the same command to resume")
