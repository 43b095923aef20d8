"""The sandwich rule with in-place distillation (§3) and per-sample random configurations (§5).

`sandwich_step` trains the max configuration on labels, the min configuration (sliced) and
`n_random` per-sample random configurations (masked) on the max's detached soft targets, with one
optimizer step on the sum. It returns the per-sample hard-label cross-entropies of the random passes
and of the max pass from the same step's logits (the terms of eq. average_error, `search.unaries`; D11).

Off the CPU the step does not wait for the device (docs/method.md D29): the widths go to the device in one
non-blocking copy (`nets.slimmable.place_widths`), losses, accuracy and per-sample CEs stay there, and a
non-finite loss is caught by a device-side flag that undoes the optimizer step on the device (as torch.amp's
GradScaler skips a step, without its host read). `StepRecord` copies a step's outputs to the host without
waiting; whoever reads them (the epoch's metrics, the training-time unaries) raises `NonFiniteLoss` there with
the step's number. On the CPU, where nothing runs ahead of the host, the losses are checked before the step.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import Callable, ContextManager, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .supernet import Supernet
from .widths import place_widths


class NonFiniteLoss(FloatingPointError):
    """A training loss became NaN or infinite; the step was not applied."""


def defers(device: torch.device | str) -> bool:
    """Whether a step on `device` checks finiteness on the device and is read later (D29): every device but the CPU."""
    return torch.device(device).type != "cpu"


def nonfinite_message(losses: Sequence[float], step: int | None) -> str:
    """The `NonFiniteLoss` text: which of the step's losses (max, min, random passes) were not finite, and the fix."""
    names = ["max (labels)", "min (distillation)"] + [f"random {r} (distillation)" for r in range(len(losses) - 2)]
    bad = [f"{n}={v}" for n, v in zip(names, losses) if not np.isfinite(v)]
    where = f" at step {step}" if step is not None else ""
    return (f"non-finite training loss{where}: {', '.join(bad)}; the step was not applied "
            f"(lower the learning rate, check the data for NaN/inf, or enable gradient clipping)")


@dataclass
class SandwichResult:
    """Outputs of one sandwich step, on the step's device; per-sample CEs are hard-label, from train-mode logits
    before the update. The float properties read the device (a host wait): `record()` copies without one."""

    ce_max: torch.Tensor  # (B,) per-sample CE of the max configuration
    ce_random: torch.Tensor  # (R, B) per-sample CE of each random pass
    losses: torch.Tensor  # (2 + R,) float64: max pass (labels, with smoothing), min pass, each random pass
    acc: torch.Tensor  # () float64 top-1 accuracy of the max pass on this batch
    nonfinite: torch.Tensor  # () bool: a loss was not finite and the step was not applied
    step: int | None = None
    skipped_by_scaler: bool = False  # fp16: a non-finite step is skipped (the scaler's rule), not raised
    extra: dict = field(default_factory=dict)

    @property
    def loss_max(self) -> float:
        return float(self.losses[0])

    @property
    def loss_min(self) -> float:
        return float(self.losses[1])

    @property
    def loss_random(self) -> list[float]:
        return self.losses[2:].tolist()

    @property
    def loss(self) -> float:
        """The sum of the passes' losses (what was minimised)."""
        return float(sum(self.losses.tolist()))

    @property
    def acc_max(self) -> float:
        return float(self.acc)

    def diffs_tensor(self) -> torch.Tensor:
        """(R, B) float64 ℓ(x, c) − ℓ(x, M) per sample, on the device (the terms of eq. average_error)."""
        return self.ce_random.double() - self.ce_max.double()[None]

    def diffs(self) -> np.ndarray:
        """(R, B) float64 ℓ(x, c) − ℓ(x, M) per sample, on the host."""
        return self.diffs_tensor().cpu().numpy()

    def record(self) -> "StepRecord":
        """The step's outputs on their way to the host (`StepRecord`), without waiting for the device."""
        return StepRecord(self)


class StepRecord:
    """One step's losses, accuracy, finiteness flag and per-sample differences, copied to the host in one
    non-blocking copy into page-locked memory (CUDA) and read on first use (D29); immediate on the CPU."""

    def __init__(self, res: SandwichResult):
        R, B = res.ce_random.shape
        self.step, self.shape, self.n_losses = res.step, (R, B), res.losses.numel()
        self.skip = res.skipped_by_scaler
        packed = torch.cat([res.losses.reshape(-1), res.acc.reshape(1).double(), res.nonfinite.reshape(1).double(),
                            res.diffs_tensor().reshape(-1)]).detach()
        self._event = None
        if packed.device.type == "cuda":
            host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True)
            host.copy_(packed, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
            packed = host
        elif packed.device.type != "cpu":
            packed = packed.cpu()
        self._packed = packed
        self._summary: tuple[float, float, float, float] | None = None

    def _array(self) -> np.ndarray:
        """The host values (waits for this step's copy once)."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._packed.numpy()

    @property
    def losses(self) -> list[float]:
        """The step's losses: max pass, min pass, each random pass (float64 on the host)."""
        return self._array()[: self.n_losses].tolist()

    @property
    def nonfinite(self) -> bool:
        """A loss was not finite: the step was not applied."""
        return bool(self._array()[self.n_losses + 1] != 0)

    @property
    def diffs(self) -> np.ndarray:
        """(R, B) float64 per-sample differences of the step."""
        return self._array()[self.n_losses + 2 :].reshape(self.shape)

    @property
    def loss(self) -> float:
        """The sum of the passes' losses."""
        return float(sum(self.losses))

    def summary(self) -> tuple[float, float, float, float]:
        """(max loss, min loss, mean random loss, max accuracy) of the step (or as set by `with_summary`)."""
        if self._summary is None:
            v = self._array()
            lr = v[2 : self.n_losses].tolist()
            self._summary = (float(v[0]), float(v[1]), float(np.mean(lr)), float(v[self.n_losses]))
        return self._summary

    def with_summary(self, values: Sequence[float]) -> "StepRecord":
        """This record with its summary replaced (the means over data-parallel ranks, D30)."""
        self._summary = tuple(float(v) for v in values)  # type: ignore[assignment]
        return self

    def check(self) -> bool:
        """True if the step counts; False if the scaler skipped it (fp16); raises `NonFiniteLoss` otherwise."""
        if not self.nonfinite:
            return True
        if self.skip:
            return False
        raise NonFiniteLoss(nonfinite_message(self.losses, self.step))


def _as_width_list(sample_widths, n_random: int, batch: int) -> list[torch.Tensor]:
    if callable(sample_widths) and not isinstance(sample_widths, torch.Tensor):
        ws = [sample_widths(r) for r in range(n_random)]
    elif isinstance(sample_widths, torch.Tensor):
        if sample_widths.dim() == 2:
            ws = [sample_widths]
        elif sample_widths.dim() == 3:
            ws = list(sample_widths.unbind(0))
        else:
            raise ValueError(f"sample_widths must be (B, n_layers) or (R, B, n_layers), got {tuple(sample_widths.shape)}")
    else:
        ws = list(sample_widths)
    if len(ws) != n_random:
        raise ValueError(f"n_random={n_random} but {len(ws)} width tensors were given")
    return ws


def _placed(ws: list, device: torch.device) -> list:
    """Host width tensors of a step off the CPU → `DeviceWidths`, in one copy (§5, D29); a CPU step takes them as given."""
    if device.type == "cpu" or not ws or any(not isinstance(w, torch.Tensor) or w.device.type != "cpu" for w in ws):
        return ws  # on the CPU, already placed, or already on a device (their range is read there)
    return place_widths(torch.stack(ws), device)


def _kl(logq: torch.Tensor, soft_targets: torch.Tensor) -> torch.Tensor:
    return F.kl_div(logq, soft_targets, reduction="batchmean")


def _soft_ce(logq: torch.Tensor, soft_targets: torch.Tensor) -> torch.Tensor:
    return -(soft_targets * logq).sum(1).mean()


# In-place distillation losses (§3) of log-probabilities against teacher probabilities, by name: KL(p‖q), or the soft
# cross-entropy (same gradient).
DISTILL_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"kl": _kl, "soft_ce": _soft_ce}


def distill_loss(logits: torch.Tensor, soft_targets: torch.Tensor, kind: str = "kl") -> torch.Tensor:
    """In-place distillation loss (§3) against detached teacher probabilities: one of `DISTILL_LOSSES`."""
    loss = DISTILL_LOSSES.get(kind)
    if loss is None:
        raise ValueError(f"unknown distillation loss {kind!r}; valid: {', '.join(map(repr, DISTILL_LOSSES))}")
    return loss(F.log_softmax(logits, dim=1), soft_targets)


def _updated_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The parameters a step changes (those with a gradient)."""
    return [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]


def step_unless(optimizer: torch.optim.Optimizer, bad: torch.Tensor) -> None:
    """`optimizer.step()`, undone on the device where the 0-d bool `bad` holds (GradScaler's skip without its host
    read, D29): parameters and tensor state are restored, state the step created is zeroed (a first momentum
    buffer of zeros continues exactly as none)."""
    params = _updated_tensors(optimizer)
    kept = [p.detach().clone() for p in params]
    state = [{k: v.detach().clone() for k, v in optimizer.state.get(p, {}).items()
              if isinstance(v, torch.Tensor) and v.device == p.device} for p in params]
    optimizer.step()
    with torch.no_grad():
        for p, old, before in zip(params, kept, state):
            p.copy_(torch.where(bad, old, p))
            for k, v in optimizer.state.get(p, {}).items():
                if not isinstance(v, torch.Tensor) or v.device != p.device:
                    continue
                if k in before:
                    v.copy_(torch.where(bad, before[k], v))
                else:
                    v.masked_fill_(bad, 0)


def kept_buffers(net: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(buffer, copy) of every buffer (BatchNorm running statistics and counts), to restore after a skipped step."""
    return [(b, b.detach().clone()) for b in net.buffers()]


def restore_where(bad: torch.Tensor, kept: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Put the kept values back where `bad` holds, on the device (a skipped step leaves no running statistics)."""
    with torch.no_grad():
        for b, old in kept:
            b.copy_(torch.where(bad, old, b))


def _any_rank(flag: torch.Tensor, model) -> torch.Tensor:
    """A flag set on any data-parallel rank (D30), all-reduced on the device; the flag itself with one process."""
    import torch.distributed as dist

    if getattr(model, "no_sync", None) is None or not (dist.is_available() and dist.is_initialized()):
        return flag
    f = flag.to(torch.int32)
    dist.all_reduce(f, op=dist.ReduceOp.MAX)
    return f.bool()


def scaler_skip(scaler, optimizer, bad: torch.Tensor) -> torch.Tensor:
    """`bad` or the fp16 scaler's own inf/nan check of the unscaled gradients (GradScaler's skip rule), on the device."""
    skip = bad.clone()
    for f in scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values():
        skip |= f.to(skip.device) != 0
    return skip


def _apply(optimizer, model, losses: torch.Tensor, scaler, grad_clip: float | None, deferred: bool,
           step: int | None) -> torch.Tensor:
    """Clip and take the optimizer step unless a loss is non-finite (§3); returns the non-finite flag.

    Checked now (the CPU): `NonFiniteLoss` before the step, or with an fp16 scaler the step skipped. Deferred
    (D29): the step is undone on the device, nothing is read."""
    bad = ~torch.isfinite(losses).all()
    skip_now = False
    if deferred:
        bad = _any_rank(bad, model)
    else:
        vals = losses.tolist()  # one read of all losses
        skip_now = not all(np.isfinite(vals))
        if skip_now and scaler is None:
            optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss(nonfinite_message(vals, step))
    if scaler is not None:
        scaler.unscale_(optimizer)  # records the gradients' own inf/nan check, on the device
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if scaler is None:
        if deferred:
            step_unless(optimizer, bad)
        else:
            optimizer.step()
        return bad
    if deferred:
        step_unless(optimizer, scaler_skip(scaler, optimizer, bad))
    elif not skip_now:
        scaler.step(optimizer)  # skips a step whose gradients overflowed
    scaler.update()
    return bad


@dataclass(frozen=True)
class SandwichOptions:
    """How the sandwich steps of a run train (§3, D29): label smoothing of the max pass, the distillation loss
    (`DISTILL_LOSSES`), the min configuration (None: the supernet's), gradient clipping, the forwards' autocast
    context, the fp16 gradient scaler, and whether a step defers its finiteness check to the device (None: off the
    CPU, `defers`)."""

    label_smoothing: float = 0.0
    distill: str = "kl"
    min_channels: Sequence[int] | None = None
    grad_clip: float | None = None
    autocast: Callable[[], ContextManager] = contextlib.nullcontext
    scaler: torch.amp.GradScaler | None = None
    defer: bool | None = None


class _Passes:
    """The passes of one sandwich step, each forward under autocast and its own backward (so each graph is freed
    early); under DDP the passes before the last run under `no_sync()`, so gradients are all-reduced once per step."""

    def __init__(self, model, x: torch.Tensor, y: torch.Tensor, opts: SandwichOptions, n_pass: int):
        self.model, self.x, self.y, self.opts, self.n_pass = model, x, y, opts, n_pass
        self.no_sync = getattr(model, "no_sync", None)
        self.state: dict = {}

    def run(self, k: int, fn):
        ctx = self.no_sync() if (self.no_sync is not None and k < self.n_pass - 1) else contextlib.nullcontext()
        with ctx:
            with self.opts.autocast():
                loss, out = fn()
            (loss if self.opts.scaler is None else self.opts.scaler.scale(loss)).backward()
        return loss.detach(), out

    def max_pass(self):
        """The max configuration on labels; keeps its per-sample hard-label CE, soft targets and accuracy."""
        logits = self.model(self.x).float()
        loss = F.cross_entropy(logits, self.y, label_smoothing=self.opts.label_smoothing)
        with torch.no_grad():
            self.state["ce_max"] = F.cross_entropy(logits, self.y, reduction="none")  # hard labels, whatever the smoothing
            self.state["soft"] = F.softmax(logits, dim=1)
            self.state["acc"] = (logits.argmax(1) == self.y).float().mean()
        return loss, None

    def min_pass(self, min_config: Sequence[int]):
        """The min configuration (sliced) on the max's soft targets."""
        logits = self.model(self.x, channels=self.opts.min_channels or min_config).float()
        return distill_loss(logits, self.state["soft"], self.opts.distill), None

    def random_pass(self, w):
        """A per-sample random configuration (masked) on the max's soft targets, with its per-sample hard-label CE."""
        def fn():
            lg = self.model(self.x, w).float()
            with torch.no_grad():
                ce = F.cross_entropy(lg, self.y, reduction="none")
            return distill_loss(lg, self.state["soft"], self.opts.distill), ce

        return fn


def _options(options: dict) -> SandwichOptions:
    """`sandwich_step`'s options: `opts` (a SandwichOptions, default all defaults) with any field given by keyword."""
    opts = options.pop("opts", None) or SandwichOptions()
    return replace(opts, **options) if options else opts


def sandwich_step(model: Supernet, x: torch.Tensor, y: torch.Tensor, sample_widths, optimizer: torch.optim.Optimizer,
                  n_random: int = 1, *, step: int | None = None, **options) -> SandwichResult:
    """One sandwich-rule step with in-place distillation (§3) and per-sample random configurations (§5).

    sample_widths: per-sample channel counts of the random passes: a (B, n_layers) tensor
    (n_random = 1), an (R, B, n_layers) tensor, a sequence of R (B, n_layers) tensors or `DeviceWidths`, or a
    callable r ↦ (B, n_layers) tensor. The max configuration is trained on labels (hard CE, optional label
    smoothing), the min configuration (sliced) and the random passes (masked) on the max's detached
    probabilities; gradients of the passes are accumulated and ONE optimizer step is taken on their sum.
    `options`: the run's `SandwichOptions`, as one object (`opts=`) and/or field by field (`label_smoothing=0.1`).
    A non-finite loss is never applied: `defer` False (default on the CPU) raises `NonFiniteLoss` (with `step`'s
    number) before the optimizer step (gradients zeroed); True (default on other devices, D29) undoes the step on the
    device and sets `nonfinite`, read later through `record()`. Host widths are moved to the device once per step
    (`place_widths`). `model` may be a DistributedDataParallel wrapper (`_Passes`). Mixed precision (D29): each
    forward runs under `autocast()`, losses are computed on float32 logits, backward runs outside it; with a `scaler`
    (fp16) the losses are scaled and a step whose gradients (or losses) are not finite is skipped by the scaler's rule,
    not raised.
    """
    opts = _options(options)
    net = getattr(model, "module", model)  # a DistributedDataParallel wrapper routes forward to .module
    model.train()
    deferred = defers(x.device) if opts.defer is None else bool(opts.defer)
    B = x.shape[0]
    ws = _placed(_as_width_list(sample_widths, n_random, B), x.device)
    optimizer.zero_grad(set_to_none=True)
    kept = kept_buffers(net) if deferred or opts.scaler is not None else []  # a step that may be skipped, not raised
    passes = _Passes(model, x, y, opts, 2 + len(ws))
    losses = [passes.run(0, passes.max_pass)[0], passes.run(1, lambda: passes.min_pass(net.min_config))[0]]
    ce_rand = []
    for r, w in enumerate(ws):
        loss, ce = passes.run(2 + r, passes.random_pass(w))
        losses.append(loss)
        ce_rand.append(ce)
    ce_max = passes.state["ce_max"]
    vals = torch.stack(losses).double()
    bad = _apply(optimizer, model, vals, opts.scaler, opts.grad_clip, deferred, step)
    restore_where(bad, kept)
    return SandwichResult(ce_max=ce_max, ce_random=torch.stack(ce_rand) if ce_rand else ce_max.new_zeros((0, B)),
                          losses=vals, acc=passes.state["acc"].double(), nonfinite=bad, step=step,
                          skipped_by_scaler=opts.scaler is not None)
