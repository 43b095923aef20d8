"""Supernet training: OWS (uniform sampling, §5) and AOWS (adaptive sampling, §6), resumable at any step.

Each step is a sandwich step (§3, `nets.sandwich`); the per-sample differences CE(sampled) − CE(max)
of the same step feed the training-time unaries of eq. average_error: OWS averages them per (layer,
width) over each epoch, AOWS keeps the mean of the most recent K samples. With `supernet.unaries:
frozen` (default, docs/method.md D26) the unaries that decide come from frozen-weight estimation
passes instead (`nets.estimation`, `search.unaries.fit_additive`): OWS at the end of training, AOWS
at its start and every `aows.refresh` steps, on configurations half uniform, half from its current
marginals. AOWS runs W warm-up epochs identical to OWS's first W under the same seed, so it starts
from the OWS checkpoint after W epochs (D21); then configurations come from the relaxed min-sum
marginals at the current γ and temperature T(u) (supplementary B).
Every random choice of step k of epoch e derives from (seed, e, k), so a killed run resumes exactly
(`training.loop`, `artifacts.resume`). Data parallel: `training.distributed`. Device and precision: the
`train:` settings (`training.accelerator`, docs/method.md D29); the fp16 gradient scaler is resumed too.

`train_supernet` returns a `SupernetResult`; the stage writes the artifacts and then clears the
resume state (only rank 0 writes). The `after_{n}.pt` epoch checkpoints are resume state until the run
completes (`resume_dir/epochs/`), then copied into `out_dir/checkpoints/`: Snakemake deletes a killed job's
outputs before it reruns it, and a resumed run does not redo the epochs it had finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ..artifacts import copy_file, current_names, read_epoch_checkpoint, save_torch
from ..artifacts.resume import load_resume, save_resume
from ..config import AowsSettings, Settings, SupernetSettings
from ..space import SearchSpace
from .accelerator import Accelerator, accelerator
from .distributed import Dist, average_buffers, bn_group, data_parallel, mean_metrics, process_group, update_unaries
from .loop import Hooks, Position, RunControl, Schedule, progress_bar, run_epochs

EPOCHS_DIR = "epochs"  # the folder of the epoch checkpoints in the resume folder, until the run completes
LOSS_DESCRIPTION = "hard-label CE(sampled configuration) - CE(max configuration), same sample and step, train-mode BN"
FROZEN_DESCRIPTION = ("frozen weights: mean CE(configuration) - CE(max configuration) on one batch of the estimation pool, "
                      "train-mode BN over that batch, least squares of the additive model (docs/method.md D26)")


def run_id(settings_key: str, method: str, device: str | None, target: str | None) -> str:
    """The id a resume checkpoint must carry: the stage's settings but the process count (a run resumes with
    another one, D30) — `settings_key`, the hash of `config.resume_settings` — the method, device and target."""
    blob = json.dumps({"settings": settings_key, "method": method, "device": device, "target": target}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SupernetJob:
    """What one supernet training trains (§5, §6): OWS, or AOWS for a device's target with its sampler (`make_sampler`)
    and the OWS checkpoint after the warm-up epochs it starts from (D21). `settings_key` — the hash of the stage's
    `config.resume_settings`, computed where the config is read — with the method, device and target identifies its
    resume checkpoint (`run_id`)."""

    settings_key: str
    method: str = "ows"
    device: str | None = None
    target: str | None = None
    sampler: Any = None
    init_from: str | os.PathLike | None = None
    target_value: float | None = None  # the target in the LUT's unit (AOWS; recorded with the unaries)

    @property
    def run_id(self) -> str:
        return run_id(self.settings_key, self.method, self.device, self.target)


def training_threads(supernet: SupernetSettings, aows: AowsSettings, method: str) -> int:
    """torch intra-op threads of a supernet run: supernet.threads for OWS, aows.threads for each AOWS run."""
    return int((supernet if method == "ows" else aows).threads)


def make_sampler(settings: Settings, x: np.ndarray, target_value: float):
    """AOWS's sampler (§6) for a latency target on the table x; refuses an infeasible target here.

    With frozen unaries γ and s are refreshed with every estimation pass (`aows.refresh` steps), else every step."""
    from ..search.sampler import AOWSSampler

    aw = settings.aows
    refresh = int(aw.refresh) if settings.supernet.unaries == "frozen" else 1
    return AOWSSampler(settings.space, x, target_value, aw, refresh=refresh, seed=settings.seed)


@dataclass
class EpochSums:
    """The running sums of one epoch's metrics row (a resume checkpoint's `acc`)."""

    steps: int = 0
    images: int = 0
    seconds: float = 0.0
    loss_max: float = 0.0
    loss_min: float = 0.0
    loss_random: float = 0.0
    acc: float = 0.0
    last: dict = field(default_factory=dict)  # the sampler's latest γ, temperature and scale
    entropy: float = 0.0
    sampled_latency: float = 0.0
    gamma_zero: int = 0
    adaptive_steps: int = 0
    skipped: int = 0  # fp16 steps the scaler skipped for a non-finite loss (not in the loss means)


class EpochAccumulator:
    """Running sums for one epoch's metrics row; the steps' `StepRecord`s are summed when read (the row, the
    checkpoint, the progress bar every `log_seconds`), not per step (docs/method.md D29)."""

    log_seconds = 2.0  # how often the progress bar's loss is read from the device

    def __init__(self, sums: EpochSums | None = None):
        self.sums = sums if sums is not None else EpochSums()
        self._pending: list = []
        self._loss_text: str | None = None
        self._logged = time.perf_counter()

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "EpochAccumulator":
        """The accumulator a resume checkpoint's `acc` (`state()`) describes."""
        return cls(EpochSums(**{**state, "last": state.get("last") or {}}))

    def add(self, record, n: int, seconds: float, sampler_last: dict | None) -> None:
        """Count one step now; its `StepRecord` is summed at the next read."""
        t = self.sums
        t.steps += 1
        t.images += n
        t.seconds += seconds
        self._pending.append(record)
        if sampler_last:
            t.last = {k: sampler_last.get(k) for k in ("gamma", "temperature", "scale")}
            t.adaptive_steps += 1
            t.entropy += sampler_last["entropy"]
            t.sampled_latency += sampler_last["sampled_latency"]
            t.gamma_zero += int(not sampler_last["binding"])

    def settle(self) -> None:
        """Sum the pending records in step order; a non-finite step raises `NonFiniteLoss` (its number in the text)."""
        pending, self._pending = self._pending, []
        t = self.sums
        for record in pending:
            if not record.check():
                t.skipped += 1
                continue
            a, b, c, d = record.summary()
            t.loss_max += a
            t.loss_min += b
            t.loss_random += c
            t.acc += d
            self._loss_text = f"{record.loss:.3f}"

    def postfix(self) -> dict[str, str]:
        """The progress bar's postfix: throughput every step, the latest loss read every `log_seconds`."""
        now = time.perf_counter()
        if self._loss_text is None or now - self._logged >= self.log_seconds:
            self.settle()
            self._logged = now
        out = {"img_s": f"{self.sums.images / max(self.sums.seconds, 1e-9):.0f}"}
        return {**out, "loss": self._loss_text} if self._loss_text is not None else out

    def state(self) -> dict:
        self.settle()
        return {f.name: getattr(self.sums, f.name) for f in fields(EpochSums)}

    def row(self, epoch: int, sampling: str, signal: Mapping[str, float] | None = None) -> dict:
        self.settle()
        t = self.sums
        s = max(t.steps - t.skipped, 1)
        a = t.adaptive_steps
        signal = signal or {}
        return {
            "epoch": epoch, "steps": t.steps, "images": t.images, "seconds": t.seconds,
            "images_per_s": t.images / max(t.seconds, 1e-9), "loss_max": t.loss_max / s,
            "loss_min": t.loss_min / s, "loss_random": t.loss_random / s, "train_acc_max": t.acc / s,
            "sampling": sampling, "gamma": t.last.get("gamma"), "temperature": t.last.get("temperature"),
            "scale": t.last.get("scale"),
            "entropy": t.entropy / a if a else None,
            "sampled_latency": t.sampled_latency / a if a else None,
            "gamma_zero_share": t.gamma_zero / a if a else None,
            "width_signal": signal.get("width_signal"), "width_signal_se": signal.get("width_signal_se"),
            "unaries_r2": signal.get("r2"),
        }


@dataclass
class _Run:
    """Everything one rank's training loop reads and updates."""

    space: SearchSpace
    method: str
    seed: int
    E: int
    W: int
    R: int
    B: int
    lo: int
    hi: int
    steps: int
    spec: Any
    splits: Any
    model: Any
    net: Any  # what the sandwich step trains through: the model, or its DistributedDataParallel wrapper
    opt: Any
    estimator: Any
    sampler: Any
    schedule: Any
    run_id: str
    ddp: Dist
    accel: Accelerator
    scaler: torch.amp.GradScaler | None
    sandwich: Any  # the sandwich steps' SandwichOptions (label smoothing, autocast, scaler, deferred checks)
    unaries: str = "frozen"
    est: Mapping[str, int] = field(default_factory=dict)
    fit: Any = None
    pool: tuple | None = None  # (epoch, images, labels) of the estimation passes of that epoch
    pos: Position = field(default_factory=Position)
    rows: list = field(default_factory=list)
    metrics: list = field(default_factory=list)
    acc: EpochAccumulator = field(default_factory=EpochAccumulator)
    adaptive: bool = False
    t_last: float = 0.0
    bn_group: Any = None  # the process group train-mode BN normalises over (supernet.sync_bn, D30), else None
    estimation_seconds: float = 0.0  # wall seconds of this run's frozen-weight estimation passes (D26)


@dataclass
class SupernetResult:
    """What one rank's training ends with; rank 0 (`main`) writes the artifacts from it when `complete`."""

    complete: bool
    epoch: int
    step: int
    rows: list
    metrics: list
    model_state: dict | None
    run_id: str
    sampler_scale: float | None
    world: int
    main: bool
    spec: Any
    train_device: str
    estimation_seconds: float = 0.0

    def summary(self, epochs: int) -> dict[str, Any]:
        """The stage's return value (as before the move)."""
        if not self.complete:
            return {"complete": False, "epoch": self.epoch, "step": self.step}
        return {"complete": True, "epochs": epochs, "metrics": self.metrics[-1]}


def checkpoint_state(run: _Run) -> dict[str, Any]:
    """The resume state of a run (dicts, tensors and numpy only)."""
    return {
        "run_id": run.run_id, "space_hash": run.space.hash, "epoch": run.pos.epoch, "step": run.pos.step,
        "model": run.model.state_dict(), "optimizer": run.opt.state_dict(), "unaries": run.estimator.state_dict(),
        "sampler": None if run.sampler is None else run.sampler.state_dict(), "rows": run.rows, "metrics": run.metrics,
        "acc": run.acc.state(), "fit": None if run.fit is None else run.fit.state_dict(),
        "estimation_seconds": run.estimation_seconds,
        **({} if run.scaler is None else {"scaler": run.scaler.state_dict()}),
    }


def _setup(settings: Settings, job: SupernetJob, ddp: Dist) -> _Run:
    """Data, model, optimiser, unaries estimator, run id and this rank's shard."""
    from ..data import check_dataset, load_splits, shard_bounds
    from ..nets.sandwich import SandwichOptions, defers
    from ..nets.supernet import Supernet
    from ..search.sampler import TemperatureSchedule
    from ..search.unaries import EpochUnaries, WindowUnaries

    space, sn, aw, seed = settings.space, settings.supernet, settings.aows, settings.seed
    E, W = int(sn.epochs), int(aw.warmup_epochs)
    spec = settings.data_spec()
    splits = load_splits(spec, device=ddp.device)  # an in-memory dataset is held and augmented there
    check_dataset(splits.info, space)
    R, B = int(sn.n_random), int(sn.batch_size)
    lo, hi = shard_bounds(B, ddp.rank, ddp.world)

    accel = accelerator(settings.train, ddp.device)  # fp16 with several processes is refused when the config is read
    torch.manual_seed(seed)
    model = Supernet(space, channels_last=bool(sn.channels_last))
    init = settings.initial_state()  # space.weights, its channels ordered by importance (D48)
    if init is not None:
        model.load_state_dict(init)
    model = model.to(accel.device)
    opt = torch.optim.SGD(model.parameters(), lr=sn.lr, momentum=sn.momentum, weight_decay=sn.weight_decay,
                          nesterov=sn.momentum > 0)
    estimator = EpochUnaries(space) if job.method == "ows" else WindowUnaries(space, int(aw.window))
    scaler = accel.grad_scaler()
    sandwich = SandwichOptions(label_smoothing=sn.label_smoothing, autocast=accel.autocast, scaler=scaler,
                               defer=defers(accel.device))
    return _Run(space=space, method=job.method, seed=seed, E=E, W=W, R=R, B=B, lo=lo, hi=hi,
                steps=splits.steps_per_epoch, spec=spec, splits=splits, model=model, net=model, opt=opt,
                estimator=estimator, sampler=job.sampler,
                schedule=TemperatureSchedule(W, E) if job.method == "aows" else None, run_id=job.run_id, ddp=ddp,
                accel=accel, scaler=scaler, sandwich=sandwich, unaries=sn.unaries,
                est=_estimation_settings(sn, aw, splits.steps_per_epoch * B), bn_group=bn_group(bool(sn.sync_bn)))


def _estimation_settings(sn: SupernetSettings, aw: AowsSettings, epoch_images: int) -> dict[str, int]:
    """Sizes of the estimation passes (D26): OWS's final pass, AOWS's refreshes and final pass; the pool is at most
    one epoch's images, a batch at most the pool."""
    images = min(int(sn.estimate_images), epoch_images)
    return {"configs": int(sn.estimate_configs), "aows_configs": int(aw.estimate_configs),
            "aows_final": int(aw.final_configs), "images": images, "batch": min(int(sn.estimate_batch), images)}


def _restore(run: _Run, state: dict) -> None:
    """Continue from a resume checkpoint of this run (one written before the one network path renamed, D45)."""
    run.model.load_state_dict(current_names(state["model"], run.space, "the resume checkpoint", "the supernet training"))
    run.opt.load_state_dict(state["optimizer"])
    run.estimator.load_state_dict(state["unaries"])
    if run.sampler is not None and state.get("sampler"):
        run.sampler.load_state_dict(state["sampler"])
    run.pos = Position(state["epoch"], state["step"])
    run.rows, run.metrics = state["rows"], state["metrics"]
    run.acc = EpochAccumulator.from_state(state["acc"])
    run.estimation_seconds = float(state.get("estimation_seconds", 0.0))
    if run.scaler is not None and "scaler" in state:
        run.scaler.load_state_dict(state["scaler"])
    if state.get("fit") is not None:
        from ..search.unaries import UnaryFit

        run.fit = UnaryFit.from_state(state["fit"])


def _warm_start(run: _Run, state: dict) -> None:
    """AOWS from the OWS checkpoint after W epochs: weights, optimiser, window seeded with epoch W's means."""
    from ..search.unaries import EpochUnaries

    run.model.load_state_dict(state["model"])
    run.opt.load_state_dict(state["optimizer"])
    ows = EpochUnaries(run.space)
    ows.load_state_dict(state["unaries_last_epoch"])
    run.estimator.seed_means(ows.delta(), ows.counts())
    run.pos = Position(run.W, 0)
    run.rows, run.metrics = list(state["rows"]), list(state["metrics"])


def _estimation_pool(run: _Run, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The estimation pass's images: the first `estimate_images` of the epoch's global training batches (D26),
    read once per epoch."""
    from ..data import first_images

    if run.pool is None or run.pool[0] != epoch:
        x, y = first_images(run.splits.train_batches(epoch), run.est["images"])
        run.pool = (epoch, x.to(run.accel.device), y.to(run.accel.device))
    return run.pool[1], run.pool[2]


def estimate_unaries(run: _Run, idx: np.ndarray, epoch: int):
    """A `UnaryFit` of the current weights on configurations idx (N, n_layers) (D26); ranks share the work."""
    from ..nets.estimation import estimate_differences
    from ..search.unaries import fit_additive
    from .distributed import torch_all_gather

    t0 = time.perf_counter()
    x, y = _estimation_pool(run, epoch)
    world, rank = run.ddp.world, run.ddp.rank
    chunk = -(-len(idx) // world)
    mine = [run.space.layer_channels(i) for i in idx[rank * chunk:(rank + 1) * chunk]]
    with run.accel.autocast():
        d = estimate_differences(run.model, x, y, mine, run.est["batch"])  # batched on CUDA, sliced on the CPU
    if world > 1:  # equal shapes for the gather, then the padding dropped
        d = np.concatenate(torch_all_gather()(np.pad(d, (0, chunk - len(d)), constant_values=np.nan)))[: len(idx)]
    run.estimation_seconds += time.perf_counter() - t0
    return fit_additive(run.space, idx, d)


def _estimation_configs(run: _Run, n: int, rng: np.random.Generator, temperature: float | None) -> np.ndarray:
    """(n, n_layers) configurations of an estimation pass: uniform, or for AOWS half uniform, half drawn from
    the sampler's current marginals (every cell stays estimable while the rest concentrates on the target)."""
    from ..search.sampler import uniform_layer_indices

    idx = uniform_layer_indices(run.space, n, rng)
    if run.sampler is not None and run.fit is not None and temperature is not None:
        mg = run.sampler.chain(run.fit).marginals(run.sampler.gamma, temperature * run.sampler.s)
        half = n // 2
        idx[half:] = mg.sample(n - half, rng, run.sampler.mode)[:, 1:-1]
    return idx


def _refresh_fit(run: _Run, epoch: int, step: int, n: int, temperature: float | None) -> None:
    rng = np.random.default_rng([run.seed, epoch, step, 0xE5])
    run.fit = estimate_unaries(run, _estimation_configs(run, n, rng, temperature), epoch)


def _step(run: _Run, x: torch.Tensor, y: torch.Tensor) -> dict[str, str]:
    """One sandwich step at run.pos (§3, §5/§6 sampling), unaries and metrics updated; the bar's postfix."""
    from ..nets.batchnorm import synchronised
    from ..nets.sandwich import sandwich_step
    from ..nets.widths import widths_tensor
    from ..search.sampler import uniform_layer_indices
    from .distributed import DeferredUnaries

    space, ddp, R, B, lo, hi = run.space, run.ddp, run.R, run.B, run.lo, run.hi
    epoch, step = run.pos.epoch, run.pos.step
    x, y = x.to(run.accel.device, non_blocking=True), y.to(run.accel.device, non_blocking=True)
    rng = np.random.default_rng([run.seed, epoch, step, 0xA0])
    if run.adaptive:
        T = run.schedule.at_step(epoch, step, run.steps)
        unaries = run.estimator
        if run.unaries == "frozen":
            if run.sampler.step % run.sampler.refresh == 0:  # new unaries, then γ and s with them
                _refresh_fit(run, epoch, step, run.est["aows_configs"], T if run.fit is not None else None)
            unaries = run.fit
        idx = run.sampler.sample(unaries, T, R * B, rng)[:, 1:-1]
    else:
        idx = uniform_layer_indices(space, R * B, rng)
    idx = idx.reshape(R, B, space.n_layers)[:, lo:hi]  # configurations of this rank's samples
    widths = widths_tensor(space, idx.reshape(-1, space.n_layers)).reshape(R, hi - lo, space.n_layers)
    deferred = run.sandwich.defer  # off the CPU nothing is read back per step (D29)
    with synchronised(run.model, run.bn_group):  # every rank runs the step's passes in lockstep
        res = sandwich_step(run.net, x, y, widths, run.opt, R, step=step, opts=run.sandwich)
    record = res.record()  # the step's outputs on their way to the host
    if deferred and ddp.world == 1:
        if not isinstance(run.estimator, DeferredUnaries):
            run.estimator = DeferredUnaries(run.estimator)
        run.estimator.defer(idx, record)  # applied in step order when read (§5, §6)
    else:  # the CPU, or ranks that exchange their samples (D30): read now
        if record.check():  # False: an fp16 step the scaler skipped (every rank agrees, the flag is all-reduced)
            update_unaries(run.estimator, idx, record.diffs, ddp.world)
    if ddp.world > 1:
        average_buffers(run.model, ddp.world)  # BN running statistics of every rank's shard (D30)
        record = mean_metrics(record, ddp)
    now = time.perf_counter()
    run.acc.add(record, len(y) * ddp.world, now - run.t_last, run.sampler.last if run.adaptive else None)
    run.t_last = now
    return run.acc.postfix()


def _end_epoch(run: _Run, epoch: int, epochs_dir: Path) -> None:
    """Unary rows and metrics of the epoch, the `after_{n}.pt` epoch checkpoint, estimator and sums reset.

    The last epoch of a frozen-unaries run ends with an estimation pass on the final weights (D26): OWS's of
    supernet.estimate_configs uniform configurations, AOWS's of aows.final_configs."""
    from ..search.unaries import width_signal

    run.rows.extend(run.estimator.rows(run.space, epoch))
    fit = None
    if run.unaries == "frozen" and epoch == run.E - 1:
        T = run.schedule.at_step(epoch, run.steps, run.steps) if run.adaptive else None
        _refresh_fit(run, epoch, run.steps, run.est["configs" if run.method == "ows" else "aows_final"], T)
        fit = run.fit
    elif run.unaries == "frozen" and run.adaptive:
        fit = run.fit
    if fit is not None:
        run.rows.extend(fit.rows(run.space, epoch))
    signal = {**width_signal(fit), "r2": fit.r2} if fit is not None else width_signal(run.estimator)
    run.metrics.append(run.acc.row(epoch, "aows" if run.adaptive else "uniform", signal))
    epoch_state = {
        "space_hash": run.space.hash, "completed_epochs": epoch + 1, "model": run.model.state_dict(),
        "optimizer": run.opt.state_dict(), "unaries_last_epoch": run.estimator.state_dict(), "rows": run.rows,
        "metrics": run.metrics,
    }
    if run.ddp.main:
        save_torch(epoch_state, epochs_dir / f"after_{epoch + 1}.pt")
    if run.method == "ows":
        run.estimator.reset()
    run.acc = EpochAccumulator()


def train(settings: Settings, out_dir: Path, job: SupernetJob, control: RunControl, ddp: Dist) -> SupernetResult:
    """The training loop of `train_supernet` on this rank (the sampler is AOWS's, None for OWS)."""
    torch.set_num_threads(training_threads(settings.supernet, settings.aows, job.method))
    run = _setup(settings, job, ddp)
    ckpt_path = control.resume_dir / "checkpoint.pt"
    epochs_dir = control.resume_dir / EPOCHS_DIR
    state = load_resume(ckpt_path, run.run_id)
    if state is not None:
        _restore(run, state)
    else:
        if ddp.main:
            shutil.rmtree(epochs_dir, ignore_errors=True)  # epoch checkpoints of a run started afresh
        if job.method == "aows":
            _warm_start(run, read_epoch_checkpoint(job.init_from, run.space, completed_epochs=run.W))
    run.net = data_parallel(run.model, ddp)  # DDP broadcasts rank 0's parameters when built (identical by construction)

    def save() -> None:
        if ddp.main:
            save_resume(checkpoint_state(run), ckpt_path)

    def start_epoch(epoch: int) -> None:
        run.adaptive = job.method == "aows" and epoch >= run.W

    bar = progress_bar(control.progress and ddp.main, total=run.E * run.steps,
                       initial=run.pos.epoch * run.steps + run.pos.step, desc=f"supernet {job.method}", unit="step")
    run.t_last = time.perf_counter()
    hooks = Hooks(batches=lambda e, s: run.splits.train_batches(e, start_step=s, rank=ddp.rank, world_size=ddp.world),
                  step=lambda x, y: _step(run, x, y), end_epoch=lambda e: _end_epoch(run, e, epochs_dir), save=save,
                  start_epoch=start_epoch)
    complete = run_epochs(run.pos, Schedule(run.E, run.steps, int(settings.supernet.checkpoint_every),
                                            control.stop_after), hooks, bar)
    if complete and ddp.main:  # every epoch's checkpoint, also those of epochs finished before a kill
        _publish_epochs(epochs_dir, out_dir / "checkpoints", run.E)
    return SupernetResult(complete=complete, epoch=run.pos.epoch, step=run.pos.step, rows=run.rows,
                          metrics=run.metrics, model_state=run.model.state_dict() if complete else None,
                          run_id=run.run_id, sampler_scale=None if job.sampler is None else job.sampler.s,
                          world=ddp.world, main=ddp.main, spec=run.spec, train_device=str(run.accel.device),
                          estimation_seconds=run.estimation_seconds)


def _publish_epochs(epochs_dir: Path, checkpoints: Path, epochs: int) -> None:
    """Copy the run's `after_{n}.pt` epoch checkpoints from the resume state into the outputs."""
    for n in range(1, epochs + 1):
        if (epochs_dir / f"after_{n}.pt").exists():
            copy_file(epochs_dir / f"after_{n}.pt", checkpoints / f"after_{n}.pt")


def train_supernet(settings: Settings, out_dir: str | os.PathLike, job: SupernetJob,
                   control: RunControl) -> SupernetResult:
    """Train an OWS or AOWS supernet (§5, §6) in this process's place of the data-parallel run."""
    with process_group(int(settings.supernet.processes), str(settings.train.device),
                       deterministic=bool(settings.train.deterministic)) as ddp:
        return train(settings, Path(out_dir), job, control, ddp)
