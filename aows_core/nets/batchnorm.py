"""Train-mode BatchNorm over the active samples of each channel, optionally over every rank's batch (§5, D10, D30).

`MaskedBatchNorm` normalises channel c of a batch over the samples whose mask is 1 (the supernet's
per-sample widths, §5; an all-ones mask is plain BatchNorm). Given a process group it all-reduces its
per-channel sums, forward and backward, so that N processes normalise their shards with the statistics of the
whole global batch, exactly as one process holding that batch would: SyncBatchNorm's rule, which torch
implements for GPU tensors without masks only (docs/method.md D30). `SyncBatchNorm2d` is `nn.BatchNorm2d`
following that rule while its `bn_group` is set; `synchronised(model, group)` sets it on every module of a
model for the passes all ranks run in lockstep (a training step), and unsets it afterwards.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import nn


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """t upcast to float32 when it is float16 or bfloat16 (autocast output), else t itself: BatchNorm's input (D29)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _sum_over_ranks(t: torch.Tensor, group: Any) -> torch.Tensor:
    if group is not None:
        torch.distributed.all_reduce(t, group=group)
    return t


def masked_batch_stats(z: torch.Tensor, m: torch.Tensor, eps: float,
                       group: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-channel mean, 1/std, element count and (float64, biased) variance of z (B, C, H, W) over the samples
    whose mask m (B, C) is 1 — of every rank of `group` when given.

    Per-(sample, channel) sums of z and z² (fast inner reductions in either memory format; var_mean
    over (H, W) is an order of magnitude slower on CPU), combined over active samples in float64.
    """
    hw = z.shape[2] * z.shape[3]
    s1 = z.sum((2, 3)).double()
    s2 = (z * z).sum((2, 3)).double()
    md = m.to(torch.float64)
    sums = _sum_over_ranks(torch.stack([(s1 * md).sum(0), (s2 * md).sum(0), md.sum(0) * hw]), group)
    n = sums[2]
    nz = n.clamp_min(1.0)
    mean = sums[0] / nz
    var = (sums[1] / nz - mean * mean).clamp_min(0.0)  # biased, as BatchNorm normalises
    return mean.to(z.dtype), torch.rsqrt(var + eps).to(z.dtype), n.to(z.dtype), var


@dataclass(frozen=True)
class MaskedBNOptions:
    """How `MaskedBatchNorm` normalises: BatchNorm's eps, the process group whose samples it spans (None: this
    process's), a ReLU after it, and a list that receives (mean, biased float64 variance, count) when given."""

    eps: float = 1e-5
    group: Any = None
    relu: bool = True
    stats: list | None = None


class MaskedBatchNorm(torch.autograd.Function):
    """BN(z) · m, ReLU'd when `relu`, with batch statistics over the active samples of each channel (train mode,
    §5, D10), of every rank of `group` when given (D30).

    apply(z, m, weight, bias, options=MaskedBNOptions()). Channel c of sample b is active iff
    m[b, c] = 1. Mean and variance of channel c use only active samples, so an inactive sample influences
    nothing; its output is exactly 0 and its gradient 0. The mask is folded into per-(sample, channel) scale
    and shift (0·z + 0 = 0), so the forward is one fused multiply-add (and a ReLU). Analytic backward
    (BatchNorm's, restricted to active samples; with a group, the two per-channel sums of the input gradient
    are all-reduced, the weight and bias gradients stay this rank's, as SyncBatchNorm's), checked by
    gradcheck. A list `options.stats` receives (mean, biased float64 variance, count) for the running statistics.
    """

    @staticmethod
    def forward(ctx, z, m, weight, bias, options=MaskedBNOptions()):
        eps, group, relu, stats = options.eps, options.group, options.relu, options.stats
        B, C = z.shape[:2]
        mean, invstd, n, var = masked_batch_stats(z, m, eps, group)
        if stats is not None:
            stats.extend((mean, var, n))
        m2 = m.to(z.dtype)
        scale = weight * invstd
        shift = bias - mean * scale
        out = torch.empty_like(z)  # keeps z's memory format (a (B, C, 1, 1) first operand would not)
        torch.addcmul((shift * m2).view(B, C, 1, 1), z, (scale * m2).view(B, C, 1, 1), out=out)
        if relu:
            out.relu_()
        ctx.group, ctx.relu = group, relu
        # the ReLU'd output tells where the gradient passes; without the ReLU it is not needed (and a following
        # in-place ReLU module may overwrite it)
        ctx.save_for_backward(z, m2, out if relu else None, mean, invstd, weight, n)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        z, m2, out, mean, invstd, weight, n = ctx.saved_tensors
        B, C = z.shape[:2]
        if ctx.relu:  # through mask and ReLU: out > 0 iff active and y > 0
            g = torch.ops.aten.threshold_backward(grad_out, out, 0)
        else:
            g = grad_out * m2.view(B, C, 1, 1)
        # Σ g·x̂ and Σ g per channel in one fused pass (BatchNorm's own backward reduction); g = 0 on
        # inactive elements, so both sums run over active elements only.
        _, sum_gx, sum_g = torch.ops.aten.native_batch_norm_backward(
            g, z, weight, None, None, mean, invstd, True, 0.0, [False, True, True]
        )
        grad_z = None
        if ctx.needs_input_grad[0]:
            # dz = m · γ·invstd · (g − Σg/n − x̂ · Σgx̂/n)  =  A·g + m·(Bc·z + Dc), the sums over every rank's batch
            if ctx.group is not None:
                sum_g_all, sum_gx_all = _sum_over_ranks(torch.stack([sum_g, sum_gx]), ctx.group)
            else:
                sum_g_all, sum_gx_all = sum_g, sum_gx
            nz = n.clamp_min(1.0)
            A = weight * invstd
            a, b = sum_g_all / nz, sum_gx_all / nz
            Bc = -A * invstd * b
            Dc = A * (mean * invstd * b - a)
            grad_z = torch.empty_like(z)
            torch.addcmul((Dc * m2).view(B, C, 1, 1), z, (Bc * m2).view(B, C, 1, 1), out=grad_z)
            grad_z.addcmul_(g, A.view(1, C, 1, 1))
        gw = sum_gx if ctx.needs_input_grad[2] else None
        gb = sum_g if ctx.needs_input_grad[3] else None
        return grad_z, None, gw, gb, None


@torch.no_grad()
def update_running_stats(bn: nn.BatchNorm2d, c: int, stats: list) -> None:
    """nn.BatchNorm2d's running-statistics update on channels [0, c) from (mean, biased variance, count)."""
    mean, var, n = stats
    bn.num_batches_tracked.add_(1)
    f = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
    unbiased = var * (n.double() / (n.double() - 1.0).clamp_min(1.0))
    bn.running_mean[:c].mul_(1.0 - f).add_(mean.to(bn.running_mean.dtype), alpha=f)
    bn.running_var[:c].mul_(1.0 - f).add_(unbiased.to(bn.running_var.dtype), alpha=f)


def group_batch_norm(z: torch.Tensor, m: torch.Tensor, bn: nn.BatchNorm2d, group: Any, relu: bool,
                     update_stats: bool) -> torch.Tensor:
    """Train-mode BN of z (B, C, H, W) with the first C channels of `bn`, over the active samples of every rank of
    `group`, in float32 whatever the autocast precision (D29); updates `bn`'s running statistics if asked."""
    C = z.shape[1]
    stats: list = []
    with torch.autocast(z.device.type, enabled=False):
        out = MaskedBatchNorm.apply(at_least_float32(z), m, bn.weight[:C], bn.bias[:C],
                                    MaskedBNOptions(bn.eps, group, relu, stats))
    if update_stats and bn.track_running_stats:
        update_running_stats(bn, C, stats)
    return out


class SyncBatchNorm2d(nn.BatchNorm2d):
    """nn.BatchNorm2d whose train-mode statistics are those of every rank's batch while `bn_group` is set (D30)."""

    bn_group: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.bn_group is not None):
            return super().forward(x)
        ones = torch.ones(x.shape[:2], dtype=torch.float32, device=x.device)
        return group_batch_norm(x, ones, self, self.bn_group, relu=False, update_stats=True)


@contextlib.contextmanager
def synchronised(model: nn.Module, group: Any) -> Iterator[None]:
    """Train-mode BatchNorm of `model` (and of a DistributedDataParallel wrapper's module) over the global batch of
    `group` inside the block; `group` None: each rank's own batch. Only for passes every rank runs in lockstep."""
    mods = [m for m in model.modules() if hasattr(m, "bn_group")] if group is not None else []
    for m in mods:
        m.bn_group = group
    try:
        yield
    finally:
        for m in mods:
            m.bn_group = None
