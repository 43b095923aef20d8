"""Supernet training: OWS (uniform sampling, §5) and AOWS (adaptive sampling, §6), resumable at any step.

Each step is a sandwich step (§3): the max configuration on labels, the sliced min configuration
and `n_random` per-sample random passes distilled from the max. The per-sample differences
CE(sampled) − CE(max) of the same step (train-mode BN, before the update) feed the unaries of
eq. average_error: OWS averages them per (layer, width) over each epoch; AOWS keeps the mean of the
most recent K samples per (layer, width).

AOWS runs W warm-up epochs of uniform sampling that are identical to OWS's first W epochs under the
same seed, so it starts from the OWS checkpoint written after W epochs; its window is seeded with
the OWS means of epoch W (each cell repeated min(count, K) times), so a width visited during warm-up
keeps its estimate. Then configurations come from the relaxed min-sum marginals at the current γ
(constrained decode at the current unaries) and temperature T(u) of supplementary B.

Determinism: every random choice of step k of epoch e derives from (seed, e, k) — data order and
augmentation (data.py), configurations (here) — so a run killed at any step and resumed from its
last checkpoint ends exactly where an uninterrupted run ends. Checkpoints are atomic and live in
`resume_dir`, outside Snakemake's declared outputs. Single process; BN statistics are the batch's.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import torch

from . import io
from .config import settings_hash, space_from_config, stage_settings
from .space import SearchSpace

io.SCHEMAS.setdefault(
    "train_metrics",
    pa.schema(
        [
            ("epoch", pa.int32()),
            ("steps", pa.int64()),
            ("images", pa.int64()),
            ("seconds", pa.float64()),
            ("images_per_s", pa.float64()),
            ("loss_max", pa.float64()),
            ("loss_min", pa.float64()),
            ("loss_random", pa.float64()),
            ("train_acc_max", pa.float64()),
            ("sampling", pa.string()),
            ("gamma", pa.float64()),
            ("temperature", pa.float64()),
            ("scale", pa.float64()),
        ]
    ),
)

LOSS_DESCRIPTION = "hard-label CE(sampled configuration) - CE(max configuration), same sample and step, train-mode BN"


class CheckpointError(ValueError):
    """A resume checkpoint that belongs to another run (space, settings, method or target)."""


def data_spec(config: Mapping[str, Any]):
    """The DataSpec of a validated config (training batches of the supernet)."""
    from .data import DataSpec

    d, s = config["data"], config["supernet"]
    return DataSpec(
        name=d["dataset"], root=d["root"], download=d["download"], search_val=d["search_val"],
        calibration=d["calibration"], train_subset=d["train_subset"], batch_size=s["batch_size"],
        seed=config["seed"], channels_last=s["channels_last"], num_workers=d["num_workers"],
    )


def _atomic_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def uniform_indices(space: SearchSpace, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, n_layers) choice indices, each layer uniform over its widths (§5 per-sample sampling)."""
    return np.stack([rng.integers(0, len(c), size) for c in space.layer_choices], axis=1)


def _run_id(config: Mapping[str, Any], method: str, device: str | None, target: str | None) -> str:
    stage = "train_ows" if method == "ows" else "train_aows"
    blob = json.dumps({"settings": settings_hash(stage_settings(config, stage)), "method": method, "device": device,
                       "target": target}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def train_supernet(
    config: Mapping[str, Any],
    out_dir: str | os.PathLike,
    resume_dir: str | os.PathLike,
    *,
    method: str = "ows",
    lut_path: str | os.PathLike | None = None,
    device: str | None = None,
    target: str | None = None,
    init_from: str | os.PathLike | None = None,
    progress: bool = True,
    stop_after_steps: int | None = None,
) -> dict[str, Any]:
    """Train an OWS or AOWS supernet; writes unaries.parquet, metrics.parquet, model.pt and per-epoch checkpoints."""
    from .aows import AOWSSampler, TemperatureSchedule
    from .data import check_space, load
    from .supernet import SlimmableMobileNetV1, sandwich_step, widths_tensor
    from .unaries import EpochUnaries, WindowUnaries

    if method not in ("ows", "aows"):
        raise ValueError(f"unknown method {method!r}; expected 'ows' or 'aows'")
    space = space_from_config(config)
    sn, aw, seed = config["supernet"], config["aows"], int(config["seed"])
    E, W = int(sn["epochs"]), int(aw["warmup_epochs"])
    out_dir, resume_dir = Path(out_dir), Path(resume_dir)
    torch.set_num_threads(int(sn["threads"]))

    sampler = schedule = None
    if method == "aows":
        if lut_path is None or target is None or init_from is None:
            raise ValueError("AOWS needs --lut, --target and --init-from (the OWS checkpoint after the warm-up epochs)")
        if not W < E:
            raise ValueError(f"aows.warmup_epochs ({W}) must be smaller than supernet.epochs ({E})")
        schedule = TemperatureSchedule(W, E)
        from .decode import resolve_target
        from .stages import read_lut

        x, tmeta = read_lut(lut_path, space)
        target_value = resolve_target(target, space, x, tmeta["unit_short"])
        sampler = AOWSSampler(space, x, target_value, policy=aw["unvisited"], mode=aw["sampling"],
                              scale=aw["temperature_scale"], seed=seed)  # refuses an infeasible target here

    spec = data_spec(config)
    splits = load(spec)
    check_space(splits.info, space)
    steps = splits.steps_per_epoch
    R, B = int(sn["n_random"]), int(sn["batch_size"])

    torch.manual_seed(seed)
    model = SlimmableMobileNetV1(space, channels_last=bool(sn["channels_last"]))
    opt = torch.optim.SGD(model.parameters(), lr=sn["lr"], momentum=sn["momentum"], weight_decay=sn["weight_decay"],
                          nesterov=sn["momentum"] > 0)
    estimator = EpochUnaries(space) if method == "ows" else WindowUnaries(space, int(aw["window"]))
    run_id = _run_id(config, method, device, target)
    ckpt_path = resume_dir / "checkpoint.pt"
    epoch, step = 0, 0
    rows: list[dict] = []
    metrics: list[dict] = []
    acc = _EpochAccumulator()

    if ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False)
        if state.get("space_hash") != space.hash or state.get("run_id") != run_id:
            raise CheckpointError(
                f"{ckpt_path} belongs to another run (space {state.get('space_hash')} vs {space.hash}, run "
                f"{state.get('run_id')} vs {run_id}: the space, training settings, method or target differ); "
                f"delete it to start this run from scratch"
            )
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        estimator.load_state_dict(state["unaries"])
        if sampler is not None and state.get("sampler"):
            sampler.load_state_dict(state["sampler"])
        epoch, step, rows, metrics = state["epoch"], state["step"], state["rows"], state["metrics"]
        acc = _EpochAccumulator(**state["acc"])
    elif method == "aows":
        state = torch.load(init_from, weights_only=False)
        if state.get("space_hash") != space.hash or state.get("completed_epochs") != W:
            raise CheckpointError(
                f"{init_from} is not the OWS checkpoint after {W} epochs of this space "
                f"(space {state.get('space_hash')}, after {state.get('completed_epochs')} epochs)"
            )
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        ows = EpochUnaries(space)
        ows.load_state_dict(state["unaries_last_epoch"])
        estimator.seed_means(ows.delta(), ows.counts())
        epoch, rows, metrics = W, list(state["rows"]), list(state["metrics"])

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=E * steps, initial=epoch * steps + step, desc=f"supernet {method}", unit="step")
    done_now = 0
    t_last = time.perf_counter()
    while epoch < E:
        adaptive = method == "aows" and epoch >= W
        for x, y in splits.train_batches(epoch, start_step=step):
            rng = np.random.default_rng([seed, epoch, step, 0xA0])
            if adaptive:
                T = schedule.at_step(epoch, step, steps)
                idx = sampler.sample(estimator, T, R * B, rng)[:, 1:-1]
            else:
                idx = uniform_indices(space, R * B, rng)
            widths = widths_tensor(space, idx).reshape(R, B, space.n_layers)
            res = sandwich_step(model, x, y, widths, opt, R, label_smoothing=sn["label_smoothing"], step=step)
            estimator.update(idx.reshape(R, B, space.n_layers), res.diffs())
            now = time.perf_counter()
            acc.add(res, len(y), now - t_last, sampler.last if adaptive else None)
            t_last = now
            step += 1
            done_now += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(img_s=f"{acc.images / max(acc.seconds, 1e-9):.0f}", loss=f"{res.loss:.3f}")
            if step % sn["checkpoint_every"] == 0 and step < steps:
                _save(ckpt_path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space)
            if stop_after_steps is not None and done_now >= stop_after_steps:
                _save(ckpt_path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space)
                if bar is not None:
                    bar.close()
                return {"complete": False, "epoch": epoch, "step": step}
        # end of epoch
        rows.extend(estimator.rows(space, epoch))
        metrics.append(acc.row(epoch, "aows" if adaptive else "uniform"))
        epoch_state = {
            "space_hash": space.hash, "completed_epochs": epoch + 1, "model": model.state_dict(),
            "optimizer": opt.state_dict(), "unaries_last_epoch": estimator.state_dict(), "rows": rows, "metrics": metrics,
        }
        _atomic_save(epoch_state, out_dir / "checkpoints" / f"after_{epoch + 1}.pt")
        if method == "ows":
            estimator.reset()
        epoch, step, acc = epoch + 1, 0, _EpochAccumulator()
        _save(ckpt_path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space)
    if bar is not None:
        bar.close()

    meta = io.provenance(
        space_name=space.name, space_hash=space.hash, seed=seed, method=method, device=device, target=target,
        sampling=("uniform" if method == "ows" else f"uniform for {W} epochs, then {aw['sampling']} from the relaxed marginals"),
        window=None if method == "ows" else int(aw["window"]),
        averaging="per epoch" if method == "ows" else f"most recent {aw['window']} samples per (layer, width)",
        loss=LOSS_DESCRIPTION, temperature_scale=None if sampler is None else sampler.s,
        supernet=dict(sn), data=spec.to_dict(),
    )
    io.write_records(rows, out_dir / "unaries.parquet", "unaries", meta)
    io.write_records(metrics, out_dir / "metrics.parquet", "train_metrics", meta)
    _atomic_save({"space": space.to_dict(), "space_hash": space.hash, "model": model.state_dict(), "run_id": run_id},
                 out_dir / "model.pt")
    return {"complete": True, "epochs": E, "metrics": metrics[-1]}


class _EpochAccumulator:
    """Running sums for one epoch's metrics row."""

    def __init__(self, steps: int = 0, images: int = 0, seconds: float = 0.0, loss_max: float = 0.0,
                 loss_min: float = 0.0, loss_random: float = 0.0, acc: float = 0.0, last: dict | None = None):
        self.steps, self.images, self.seconds = steps, images, seconds
        self.loss_max, self.loss_min, self.loss_random, self.acc = loss_max, loss_min, loss_random, acc
        self.last = last or {}

    def add(self, res, n: int, seconds: float, sampler_last: dict | None) -> None:
        self.steps += 1
        self.images += n
        self.seconds += seconds
        self.loss_max += res.loss_max
        self.loss_min += res.loss_min
        self.loss_random += float(np.mean(res.loss_random))
        self.acc += res.acc_max
        if sampler_last:
            self.last = {k: sampler_last.get(k) for k in ("gamma", "temperature", "scale")}

    def state(self) -> dict:
        return {"steps": self.steps, "images": self.images, "seconds": self.seconds, "loss_max": self.loss_max,
                "loss_min": self.loss_min, "loss_random": self.loss_random, "acc": self.acc, "last": self.last}

    def row(self, epoch: int, sampling: str) -> dict:
        s = max(self.steps, 1)
        return {
            "epoch": epoch, "steps": self.steps, "images": self.images, "seconds": self.seconds,
            "images_per_s": self.images / max(self.seconds, 1e-9), "loss_max": self.loss_max / s,
            "loss_min": self.loss_min / s, "loss_random": self.loss_random / s, "train_acc_max": self.acc / s,
            "sampling": sampling, "gamma": self.last.get("gamma"), "temperature": self.last.get("temperature"),
            "scale": self.last.get("scale"),
        }


def _save(path: Path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space) -> None:
    _atomic_save(
        {
            "run_id": run_id, "space_hash": space.hash, "epoch": epoch, "step": step, "model": model.state_dict(),
            "optimizer": opt.state_dict(), "unaries": estimator.state_dict(),
            "sampler": None if sampler is None else sampler.state_dict(), "rows": rows, "metrics": metrics,
            "acc": acc.state(),
        },
        path,
    )
