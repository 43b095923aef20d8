"""The sandwich rule with in-place distillation (§3) and per-sample random configurations (§5).

`sandwich_step` trains the max configuration on labels, the min configuration (sliced) and
`n_random` per-sample random configurations (masked) on the max's detached soft targets, with one
optimizer step on the sum. It returns the per-sample hard-label cross-entropies of the random passes
and of the max pass from the same step's logits (the terms of eq. average_error, `search.unaries`; D11).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .slimmable import SlimmableMobileNetV1


class NonFiniteLoss(FloatingPointError):
    """A training loss became NaN or infinite; the step was not applied."""


@dataclass
class SandwichResult:
    """Outputs of one sandwich step; per-sample CEs are hard-label, from train-mode logits before the update."""

    ce_max: torch.Tensor  # (B,) per-sample CE of the max configuration
    ce_random: torch.Tensor  # (R, B) per-sample CE of each random pass
    widths: torch.Tensor  # (R, B, n_layers) channel counts used by the random passes
    loss_max: float  # label loss of the max pass (with label smoothing if any)
    loss_min: float  # distillation loss of the min pass
    loss_random: list[float]  # distillation loss of each random pass
    loss: float  # their sum (what was minimised)
    acc_max: float = float("nan")  # top-1 accuracy of the max pass on this batch
    extra: dict = field(default_factory=dict)

    def diffs(self) -> np.ndarray:
        """(R, B) float64 ℓ(x, c) − ℓ(x, M) per sample (the terms of eq. average_error)."""
        return (self.ce_random.double() - self.ce_max.double()[None]).cpu().numpy()


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


def distill_loss(logits: torch.Tensor, soft_targets: torch.Tensor, kind: str = "kl") -> torch.Tensor:
    """In-place distillation loss (§3) against detached teacher probabilities: KL(p‖q) or soft CE (same gradient)."""
    logq = F.log_softmax(logits, dim=1)
    if kind == "kl":
        return F.kl_div(logq, soft_targets, reduction="batchmean")
    if kind == "soft_ce":
        return -(soft_targets * logq).sum(1).mean()
    raise ValueError(f"unknown distillation loss {kind!r}; valid: 'kl', 'soft_ce'")


def sandwich_step(
    model: SlimmableMobileNetV1,
    x: torch.Tensor,
    y: torch.Tensor,
    sample_widths,
    optimizer: torch.optim.Optimizer,
    n_random: int = 1,
    *,
    label_smoothing: float = 0.0,
    distill: str = "kl",
    min_channels: Sequence[int] | None = None,
    grad_clip: float | None = None,
    step: int | None = None,
    autocast: Callable[[], ContextManager] = contextlib.nullcontext,
    scaler: torch.amp.GradScaler | None = None,
) -> SandwichResult:
    """One sandwich-rule step with in-place distillation (§3) and per-sample random configurations (§5).

    sample_widths: per-sample channel counts of the random passes: a (B, n_layers) tensor
    (n_random = 1), an (R, B, n_layers) tensor, a sequence of R (B, n_layers) tensors, or a callable
    r ↦ (B, n_layers) tensor. The max configuration is trained on labels (hard CE, optional label
    smoothing), the min configuration (sliced) and the random passes (masked) on the max's detached
    probabilities. Gradients of the passes are accumulated (backward per pass, so each graph is
    freed early) and ONE optimizer step is taken on their sum. A non-finite loss raises
    `NonFiniteLoss` before the optimizer step (gradients are zeroed).
    `model` may be a DistributedDataParallel wrapper: every pass goes through its forward, the passes
    before the last run under `no_sync()`, so gradients are all-reduced once per step.
    Mixed precision (docs/method.md D29): each forward runs under `autocast()` (a torch.autocast context),
    losses are computed on float32 logits, backward runs outside it; with a `scaler` (fp16) the losses are
    scaled and `scaler.step` skips a step whose gradients overflowed.
    """
    net = getattr(model, "module", model)  # a DistributedDataParallel wrapper routes forward to .module
    model.train()
    B = x.shape[0]
    ws = _as_width_list(sample_widths, n_random, B)
    optimizer.zero_grad(set_to_none=True)
    # Under DDP, gradients are accumulated locally and all-reduced once, by the last pass's backward.
    no_sync = getattr(model, "no_sync", None)
    n_pass = 2 + len(ws)

    def run(k: int, fn):
        ctx = no_sync() if (no_sync is not None and k < n_pass - 1) else contextlib.nullcontext()
        with ctx:
            with autocast():
                loss, out = fn()
            (loss if scaler is None else scaler.scale(loss)).backward()
        return loss.detach(), out

    state: dict = {}

    def max_pass():
        logits = model(x).float()
        loss = F.cross_entropy(logits, y, label_smoothing=label_smoothing)
        with torch.no_grad():
            state["ce_max"] = F.cross_entropy(logits, y, reduction="none")  # hard labels, whatever the smoothing
            state["soft"] = F.softmax(logits, dim=1)
            state["acc"] = (logits.argmax(1) == y).float().mean()
        return loss, None

    def min_pass():
        return distill_loss(model(x, channels=min_channels or net.min_config).float(), state["soft"], distill), None

    def random_pass(w):
        def fn():
            lg = model(x, w).float()
            with torch.no_grad():
                ce = F.cross_entropy(lg, y, reduction="none")
            return distill_loss(lg, state["soft"], distill), ce

        return fn

    losses = [run(0, max_pass)[0], run(1, min_pass)[0]]
    ce_rand = []
    for r, w in enumerate(ws):
        loss, ce = run(2 + r, random_pass(w))
        losses.append(loss)
        ce_rand.append(ce)
    ce_max, acc = state["ce_max"], state["acc"]

    vals = torch.stack(losses).double().cpu().tolist()  # one synchronisation for all losses
    if not all(np.isfinite(vals)):
        names = ["max (labels)", "min (distillation)"] + [f"random {r} (distillation)" for r in range(n_random)]
        bad = [f"{n}={v}" for n, v in zip(names, vals) if not np.isfinite(v)]
        optimizer.zero_grad(set_to_none=True)
        where = f" at step {step}" if step is not None else ""
        raise NonFiniteLoss(
            f"non-finite training loss{where}: {', '.join(bad)}; the step was not applied "
            f"(lower the learning rate, check the data for NaN/inf, or enable gradient clipping)"
        )
    if scaler is not None:
        if grad_clip is not None:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
    else:
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
    return SandwichResult(
        ce_max=ce_max,
        ce_random=torch.stack(ce_rand) if ce_rand else ce_max.new_zeros((0, B)),
        widths=torch.stack([w.to(ce_max.device) for w in ws]) if ws else torch.zeros((0, B, net.space.n_layers), dtype=torch.long),
        loss_max=vals[0],
        loss_min=vals[1],
        loss_random=vals[2:],
        loss=float(sum(vals)),
        acc_max=float(acc),
    )
