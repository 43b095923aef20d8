"""Retraining a decided configuration from scratch (§7): SGD (Nesterov), linear warm-up then cosine, label smoothing.

Initialisation derives from the run's seed, data order and augmentation from (seed, epoch, step) through
the splits' batch seed (`DataSpec.batch_seed`; the splits themselves always come from the config's
top-level seed, whatever the run's seed), so a run killed at any step and resumed
from its last checkpoint (`artifacts.resume`, outside the declared outputs) ends with the same
weights as an uninterrupted one. Device and precision: the `train:` settings
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from ..artifacts.resume import load_resume, save_resume
from ..artifacts.torchfiles import current_names
from ..config import RetrainSettings, settings_hash
from ..space import SearchSpace
from .accelerator import Accelerator
from .distributed import Dist, average_buffers, bn_group, data_parallel, mean_over_ranks_tensor
from .loop import Hooks, Position, RunControl, Schedule, progress_bar, run_epochs


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


def run_id(resume: Mapping[str, Any], channels: Sequence[int], seed: int | None = None) -> str:
    """The id a retraining's resume checkpoint must carry: `resume` — the settings but the process count (a run
    resumes with another one, D30), `config.resume_settings(config, "retrain")`, computed where the config is read —
    and the channels; a run seed other than the config's (`resume["seed"]`) is added (its splits are the config seed's)."""
    key: dict[str, Any] = {"settings": resume, "channels": list(channels)}
    if seed is not None and int(seed) != int(resume["seed"]):
        key["seed"] = int(seed)
    return settings_hash(key)


@dataclass(frozen=True)
class RetrainJob:
    """One retraining (§7): the network's widths, the run's seed (the initialisation; the batches are the splits'),
    its resume checkpoint's id (`run_id`) and the progress bar's label."""

    channels: tuple[int, ...]
    seed: int
    run_id: str
    desc: str = "retrain"


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


class _Retraining:
    """One rank's retraining: the fixed-width network, its optimiser (and fp16 scaler), the position and the sums of
    the last epoch's losses; its steps and resume checkpoints (`train_network`)."""

    def __init__(self, rt: RetrainSettings, space: SearchSpace, job: RetrainJob, splits: Any, accel: Accelerator,
                 ddp: Dist, init: Mapping[str, Any] | None = None):
        from ..nets.network import Network
        from ..nets.sandwich import defers

        self.rt, self.accel, self.ddp, self.job = rt, accel, ddp, job
        self.steps, self.E = splits.steps_per_epoch, int(rt.epochs)
        self.total, self.warmup = self.E * self.steps, int(round(float(rt.warmup_epochs) * self.steps))
        torch.manual_seed(job.seed)
        model = Network(space, list(job.channels))
        if init is not None:  # retrain.init: weights (D48)
            model.load_state_dict(init)
        model = model.to(accel.device)
        if splits.spec.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model, self.scaler = model, accel.grad_scaler()
        self.opt = torch.optim.SGD(model.parameters(), lr=rt.lr, momentum=rt.momentum, weight_decay=rt.weight_decay,
                                   nesterov=rt.momentum > 0)
        self.pos = Position()
        self.acc = {"seconds": 0.0, "loss_sum": 0.0, "loss_n": 0, "t0": 0.0}
        self.net: torch.nn.Module = model
        self.group = bn_group(bool(rt.sync_bn))
        self.deferred = defers(accel.device)  # off the CPU nothing is read back per step (D29)
        self.log = LossLog(self.E - 1, every_step=not self.deferred)

    def restore(self, state: Mapping[str, Any], space: SearchSpace, ckpt: Path) -> None:
        """Continue from a resume checkpoint of this run."""
        self.model.load_state_dict(current_names(state["model"], space, ckpt, "the retraining"))
        self.opt.load_state_dict(state["optimizer"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        self.pos = Position(state["epoch"], state["step"])
        self.acc["seconds"], self.acc["loss_sum"], self.acc["loss_n"] = (state[k] for k in ("seconds", "loss_sum",
                                                                                             "loss_n"))

    def save(self, ckpt: Path) -> None:
        """Settle the losses, add the time, and (rank 0) write the resume checkpoint."""
        acc = self.acc
        self.log.settle(acc)
        now = time.perf_counter()
        acc["seconds"] += now - acc["t0"]
        acc["t0"] = now
        if self.ddp.main:
            save_resume({"run_id": self.job.run_id, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                         "epoch": self.pos.epoch, "step": self.pos.step, "seconds": acc["seconds"],
                         "loss_sum": acc["loss_sum"], "loss_n": acc["loss_n"],
                         **({} if self.scaler is None else {"scaler": self.scaler.state_dict()})}, ckpt)

    def start_epoch(self, epoch: int) -> None:
        self.net.train()
        self.acc["t0"] = time.perf_counter()

    def step(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, str]:
        """One optimiser step on the global batch (this rank's shard in micro-batches); the bar's postfix."""
        from ..nets.sandwich import kept_buffers, restore_where

        epoch, k = self.pos.epoch, self.pos.step
        for g in self.opt.param_groups:
            g["lr"] = learning_rate(epoch * self.steps + k, self.total, self.warmup, self.rt.lr)
        self.opt.zero_grad(set_to_none=True)
        kept = kept_buffers(self.model) if self.deferred or self.scaler is not None else []  # a step that may be skipped
        value = mean_over_ranks_tensor(self._backward(x, y), self.ddp)  # the global batch's loss: every rank stops together
        bad = ~torch.isfinite(value)
        if not self.deferred and self.scaler is None and bool(bad):
            raise FloatingPointError(f"non-finite loss at epoch {epoch} step {k}; lower retrain.lr")
        self._apply(bad)
        restore_where(bad, kept)
        average_buffers(self.model, self.ddp.world)  # BN running statistics of every rank's shard (D30)
        self.log.add(epoch, k, value, self.scaler is not None)
        return self.log.postfix(self.acc)

    def _backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The gradients of the shard's mean loss, accumulated over its micro-batches; that loss (float64)."""
        from ..nets.batchnorm import synchronised

        chunks = micro_batches(len(y), self.rt.micro_batch)
        losses = []
        for j, (a, b) in enumerate(chunks):
            last = j == len(chunks) - 1
            sync = contextlib.nullcontext() if last or self.ddp.world == 1 else self.net.no_sync()  # one all-reduce
            with sync, synchronised(self.model, self.group):  # every rank runs as many chunks
                with self.accel.autocast():
                    logits = self.net(x[a:b]).float()
                # the shard's mean loss, accumulated over its chunks
                loss = F.cross_entropy(logits, y[a:b], label_smoothing=self.rt.label_smoothing) * ((b - a) / len(y))
                (loss if self.scaler is None else self.scaler.scale(loss)).backward()  # under DDP: averaged over ranks
            losses.append(loss.detach().double())
        value = losses[0]
        for v in losses[1:]:  # in chunk order, in float64 (as the host's float sum)
            value = value + v
        return value

    def _apply(self, bad: torch.Tensor) -> None:
        """The optimiser step, undone on the device where the loss was not finite (deferred, D29); in fp16 the
        scaler's step, skipped where the gradients overflowed or the loss is not finite."""
        from ..nets.sandwich import scaler_skip, step_unless

        if self.scaler is None and self.deferred:
            step_unless(self.opt, bad)
        elif self.scaler is None:
            self.opt.step()
        else:
            self.scaler.unscale_(self.opt)
            step_unless(self.opt, scaler_skip(self.scaler, self.opt, bad))
            self.scaler.update()


def train_network(rt: RetrainSettings, space: SearchSpace, job: RetrainJob, splits: Any, accel: Accelerator,
                  control: RunControl, ddp: Dist | None = None, init: Mapping[str, Any] | None = None) -> RetrainResult:
    """Train the fixed-width network of `job.channels` from scratch (or from the state `init`, D48) on `splits` (§7)
    under the `retrain:` settings on `accel`'s device and precision, resumable at any step (`control`); `ddp`: this
    process's place in a data-parallel run (default: alone). `job.seed` initialises the weights; the batches are the
    splits'."""
    if splits.spec.batch_seed != job.seed:
        raise ValueError(f"the splits' batches are seeded with {splits.spec.batch_seed}, this run with {job.seed}: "
                         f"load them with settings.data_spec('retrain', train_seed={job.seed})")
    ddp = ddp or Dist(device=accel.device)
    r = _Retraining(rt, space, job, splits, accel, ddp, init)
    ckpt = control.resume_dir / "checkpoint.pt"
    state = load_resume(ckpt, job.run_id)
    if state is not None:
        r.restore(state, space, ckpt)
    r.net = data_parallel(r.model, ddp)  # DDP broadcasts rank 0's parameters when built (identical by construction)
    pos = r.pos
    bar = progress_bar(control.progress and ddp.main, total=r.total, initial=pos.epoch * r.steps + pos.step,
                       desc=job.desc, unit="step")
    hooks = Hooks(batches=lambda e, s: accel.batches(splits.train_batches(e, start_step=s, rank=ddp.rank,
                                                                           world_size=ddp.world)),
                  step=r.step, end_epoch=lambda e: None, save=lambda: r.save(ckpt), start_epoch=r.start_epoch)
    complete = run_epochs(pos, Schedule(r.E, r.steps, int(rt.checkpoint_every), control.stop_after), hooks, bar)
    r.log.settle(r.acc)
    return RetrainResult(complete, pos.epoch, pos.step, r.model, r.acc["seconds"], r.acc["loss_sum"], r.acc["loss_n"])
