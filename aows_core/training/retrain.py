"""Retraining a decided configuration from scratch (§7): SGD (Nesterov), linear warm-up then cosine, label smoothing.

Initialisation derives from the run's seed, data order and augmentation from (seed, epoch, step) through
the splits' batch seed (`DataSpec.batch_seed`; the splits themselves always come from the config's
top-level seed, whatever the run's seed), so a run killed at any step and resumed
from its last checkpoint (`artifacts.resume`, outside the declared outputs) ends with the same
weights as an uninterrupted one. Device and precision: the config's `train:` section
(`training.accelerator`, docs/method.md D29), forwards under torch.autocast, fp16 with a gradient scaler
resumed with the rest. With `retrain.processes` = N > 1 (torchrun, `training.distributed`, docs/method.md
D30) rank r trains on its shard of every global batch, DistributedDataParallel averages the gradients, BatchNorm
running statistics are averaged after every step, and rank 0 writes the resume checkpoints. The stage evaluates
the result once on the test split (`nets.scoring.top1`, counts summed over ranks; `evaluation.wilson_interval`)
and writes it.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from ..config import resume_settings, settings_hash
from ..space import SearchSpace
from ..artifacts.resume import load_resume, save_resume
from ..artifacts.torchfiles import current_names
from .accelerator import Accelerator
from .distributed import Dist, average_buffers, bn_group, data_parallel, mean_over_ranks_tensor
from .loop import Position, progress_bar, run_epochs


def micro_batches(n: int, size: int | None) -> list[tuple[int, int]]:
    """[start, end) of the forward passes that share one optimiser step: `n` images in chunks of at most `size`
    (`retrain.micro_batch`; None: one pass), as equal as possible."""
    k = 1 if not size else -(-int(n) // int(size))
    edges = [round(i * n / k) for i in range(k + 1)]
    return [(edges[i], edges[i + 1]) for i in range(k)]


def learning_rate(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up over `warmup` steps to `base`, then cosine decay to 0 at `total` steps."""
    if step < warmup:
        return base * (step + 1) / warmup
    u = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1 + math.cos(math.pi * min(1.0, u)))


class LossLog:
    """The steps' training losses, kept on the training device and read at logging points (docs/method.md D29): a
    checkpoint, the end, the progress bar every `log_seconds`; on the CPU at every step. A non-finite loss raises
    there, with its epoch and step (the step itself was not applied); in fp16 the scaler skipped it."""

    log_seconds = 2.0

    def __init__(self, last_epoch: int, every_step: bool):
        self.last_epoch, self.every_step = last_epoch, every_step
        self._pending: list[tuple[int, int, torch.Tensor, bool]] = []
        self._text: str | None = None
        self._logged = -math.inf

    def add(self, epoch: int, step: int, value: torch.Tensor, skippable: bool) -> None:
        """Queue one step's global-batch loss (a 0-d float64 tensor)."""
        self._pending.append((epoch, step, value, skippable))

    def settle(self, acc: dict) -> None:
        """Read the queued losses in one copy; the last epoch's go into acc's sums, in step order."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        values = torch.stack([v for _, _, v, _ in pending]).tolist()
        for (epoch, k, _, skippable), value in zip(pending, values):
            if not math.isfinite(value):
                if skippable:
                    continue
                raise FloatingPointError(f"non-finite loss at epoch {epoch} step {k}; lower retrain.lr "
                                         "(the step was not applied)")
            if epoch == self.last_epoch:
                acc["loss_sum"], acc["loss_n"] = acc["loss_sum"] + value, acc["loss_n"] + 1
            self._text = f"{value:.3f}"

    def postfix(self, acc: dict) -> dict[str, str]:
        """The bar's loss, read every step on the CPU and every `log_seconds` elsewhere."""
        now = time.perf_counter()
        if self.every_step or now - self._logged >= self.log_seconds:
            self.settle(acc)
            self._logged = now
        return {"loss": self._text} if self._text is not None else {}


def run_id(config: Mapping[str, Any], channels: Sequence[int], seed: int | None = None) -> str:
    """The id a retraining's resume checkpoint must carry: the settings but the process count (a run resumes with
    another one, D30) and the channels; a run seed other than the config's is added (its splits are the config seed's)."""
    key: dict[str, Any] = {"settings": resume_settings(config, "retrain"), "channels": list(channels)}
    if seed is not None and int(seed) != int(config["seed"]):
        key["seed"] = int(seed)
    return settings_hash(key)


@dataclass
class RetrainResult:
    """Where a retraining stopped (`complete`: all epochs done) and what it ends with."""

    complete: bool
    epoch: int
    step: int
    model: torch.nn.Module
    seconds: float
    loss_sum: float
    loss_n: int

    @property
    def final_train_loss(self) -> float:
        """Mean training loss over the last epoch's steps."""
        return self.loss_sum / max(self.loss_n, 1)


def train_network(config: Mapping[str, Any], space: SearchSpace, channels: Sequence[int], splits: Any,
                  resume_dir: str | os.PathLike, accel: Accelerator, *, seed: int | None = None, progress: bool = True,
                  stop_after: int | None = None, desc: str = "retrain", ddp: Dist | None = None) -> RetrainResult:
    """Train the fixed-width network of `channels` from scratch on `splits` (§7) on `accel`'s device and
    precision, resumable at any step; `ddp`: this process's place in a data-parallel run (default: alone).

    `seed` (default: the config's top-level seed) initialises the weights; the batches are the splits'."""
    from ..nets.batchnorm import synchronised
    from ..nets.network import Network
    from ..nets.sandwich import defers, kept_buffers, restore_where, scaler_skip, step_unless

    rt = config["retrain"]
    seed = int(config["seed"]) if seed is None else int(seed)
    if splits.spec.batch_seed != seed:
        raise ValueError(f"the splits' batches are seeded with {splits.spec.batch_seed}, this run with {seed}: "
                         f"load them with data_spec(config, 'retrain', train_seed={seed})")
    ddp = ddp or Dist(device=accel.device)
    channels = [int(c) for c in channels]
    steps, E = splits.steps_per_epoch, int(rt["epochs"])
    total, warmup = E * steps, int(round(float(rt["warmup_epochs"]) * steps))

    torch.manual_seed(seed)
    model = Network(space, channels).to(accel.device)
    if splits.spec.channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    scaler = accel.grad_scaler()
    opt = torch.optim.SGD(model.parameters(), lr=rt["lr"], momentum=rt["momentum"], weight_decay=rt["weight_decay"],
                          nesterov=rt["momentum"] > 0)
    rid = run_id(config, channels, seed)
    ckpt = Path(resume_dir) / "checkpoint.pt"
    pos = Position()
    acc = {"seconds": 0.0, "loss_sum": 0.0, "loss_n": 0, "t0": 0.0}
    state = load_resume(ckpt, rid)
    if state is not None:
        model.load_state_dict(current_names(state["model"], space, ckpt, "the retraining"))
        opt.load_state_dict(state["optimizer"])
        if scaler is not None and "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        pos = Position(state["epoch"], state["step"])
        acc["seconds"], acc["loss_sum"], acc["loss_n"] = (state[k] for k in ("seconds", "loss_sum", "loss_n"))
    net = data_parallel(model, ddp)  # DDP broadcasts rank 0's parameters when built (identical by construction)
    group = bn_group(bool(rt["sync_bn"]))

    deferred = defers(accel.device)  # off the CPU nothing is read back per step (D29)
    log = LossLog(E - 1, every_step=not deferred)

    def save() -> None:
        log.settle(acc)
        now = time.perf_counter()
        acc["seconds"] += now - acc["t0"]
        acc["t0"] = now
        if ddp.main:
            save_resume({"run_id": rid, "model": model.state_dict(), "optimizer": opt.state_dict(),
                         "epoch": pos.epoch, "step": pos.step, "seconds": acc["seconds"], "loss_sum": acc["loss_sum"],
                         "loss_n": acc["loss_n"], **({} if scaler is None else {"scaler": scaler.state_dict()})}, ckpt)

    def start_epoch(epoch: int) -> None:
        net.train()
        acc["t0"] = time.perf_counter()

    def step(x: torch.Tensor, y: torch.Tensor) -> dict[str, str]:
        epoch, k = pos.epoch, pos.step
        for g in opt.param_groups:
            g["lr"] = learning_rate(epoch * steps + k, total, warmup, rt["lr"])
        opt.zero_grad(set_to_none=True)
        kept = kept_buffers(model) if deferred or scaler is not None else []  # a step that may be skipped
        chunks = micro_batches(len(y), rt.get("micro_batch"))
        losses = []
        for j, (a, b) in enumerate(chunks):
            last = j == len(chunks) - 1
            sync = contextlib.nullcontext() if last or ddp.world == 1 else net.no_sync()  # one all-reduce, at the last
            with sync, synchronised(model, group):  # every rank runs as many chunks
                with accel.autocast():
                    logits = net(x[a:b]).float()
                # the shard's mean loss, accumulated over its chunks
                loss = F.cross_entropy(logits, y[a:b], label_smoothing=rt["label_smoothing"]) * ((b - a) / len(y))
                (loss if scaler is None else scaler.scale(loss)).backward()  # under DDP: averaged over ranks
            losses.append(loss.detach().double())
        value = losses[0]
        for v in losses[1:]:  # in chunk order, in float64 (as the host's float sum)
            value = value + v
        value = mean_over_ranks_tensor(value, ddp)  # the global batch's loss: every rank stops together
        bad = ~torch.isfinite(value)
        if not deferred and scaler is None and bool(bad):
            raise FloatingPointError(f"non-finite loss at epoch {epoch} step {k}; lower retrain.lr")
        if scaler is None and deferred:
            step_unless(opt, bad)
        elif scaler is None:
            opt.step()
        else:  # fp16: scaled loss; a step whose gradients overflowed (or whose loss is not finite) is skipped
            scaler.unscale_(opt)
            step_unless(opt, scaler_skip(scaler, opt, bad))
            scaler.update()
        restore_where(bad, kept)
        average_buffers(model, ddp.world)  # BN running statistics of every rank's shard (D30)
        log.add(epoch, k, value, scaler is not None)
        return log.postfix(acc)

    bar = progress_bar(progress and ddp.main, total=total, initial=pos.epoch * steps + pos.step, desc=desc, unit="step")
    complete = run_epochs(pos, epochs=E, steps=steps,
                          batches=lambda e, s: accel.batches(splits.train_batches(e, start_step=s, rank=ddp.rank,
                                                                                  world_size=ddp.world)),
                          step=step, end_epoch=lambda e: None, save=save, checkpoint_every=int(rt["checkpoint_every"]),
                          stop_after=stop_after, bar=bar, start_epoch=start_epoch)
    log.settle(acc)
    return RetrainResult(complete, pos.epoch, pos.step, model, acc["seconds"], acc["loss_sum"], acc["loss_n"])
