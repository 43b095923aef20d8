"""The frozen-weight estimation pass of the unaries (§5 eq. average_error; docs/method.md D26).

Each sampled configuration c is run on one batch of a fixed image pool, in train-mode BatchNorm over that batch
(the configuration's own statistics, as a recalibration on the batch would give, running statistics untouched),
and the batch's mean ℓ(x, c) − ℓ(x, M) is recorded, ℓ(x, M) being the max configuration's loss on the same
batch. `search.unaries.fit_additive` turns the differences into δ with standard errors.

Two equal ways to run it, chosen by the model's device in `estimate_differences`: on the CPU `frozen_differences` runs each configuration as a sliced network, one forward each; on CUDA
`batched_differences` stacks several configurations' batches into one forward (`nets.batched`: each group masked
to its widths, with its own BatchNorm statistics), where one forward per configuration would be launch-bound.
Both keep the results on the device and copy them to the host once.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .batched import TRAIN, DevicePlan, as_sources, chunks, configs_per_pass, grouped_logits, prefix_plan, runs_batched
from .supernet import Supernet


def _pool_batches(x: torch.Tensor, batch_size: int) -> int:
    """Whole batches of `batch_size` in the pool (at least one, else ValueError)."""
    n_batches = len(x) // int(batch_size)
    if n_batches < 1:
        raise ValueError(f"the estimation pool holds {len(x)} images, fewer than one batch of {batch_size}")
    return n_batches


def _max_losses(net: Supernet, xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> torch.Tensor:
    """(n_batches,) float64 mean ℓ(x, M) of the max configuration on each batch, train-mode BN, on the device."""
    return torch.stack([F.cross_entropy(net.forward_sliced(xb, net.max_config, update_stats=False).double(), yb)
                        for xb, yb in zip(xs, ys)])


@torch.no_grad()
def frozen_differences(model: Supernet, x: torch.Tensor, y: torch.Tensor,
                       configs: Sequence[Sequence[int]], batch_size: int) -> np.ndarray:
    """(len(configs),) float64 mean ℓ(x, c) − ℓ(x, M) of configuration k on batch k mod n_batches of (x, y),
    one sliced forward per configuration (D26)."""
    net = getattr(model, "module", model)
    n_batches = _pool_batches(x, batch_size)
    was_training = net.training
    net.train()
    try:
        xs = [net._input(x[b * batch_size:(b + 1) * batch_size]) for b in range(n_batches)]
        ys = [y[b * batch_size:(b + 1) * batch_size] for b in range(n_batches)]
        ce_max = _max_losses(net, xs, ys)
        ce = [F.cross_entropy(net.forward_sliced(xs[k % n_batches], channels, update_stats=False).double(),
                              ys[k % n_batches]) for k, channels in enumerate(configs)]
        if not ce:
            return np.empty(0, dtype=np.float64)
        src = torch.arange(len(ce), device=ce_max.device) % n_batches
        return (torch.stack(ce) - ce_max[src]).cpu().numpy()
    finally:
        net.train(was_training)


@torch.no_grad()
def batched_differences(model: Supernet, x: torch.Tensor, y: torch.Tensor,
                        configs: Sequence[Sequence[int]], batch_size: int,
                        per_pass: int | None = None) -> np.ndarray:
    """`frozen_differences` with `per_pass` configurations per forward (default: as many as `nets.batched`'s
    activation budget allows): each configuration's batch its own group, train-mode BN over the group (D26)."""
    net = getattr(model, "module", model)
    if net.bn_group is not None:
        raise ValueError("the batched estimation pass normalises each configuration over its own batch; "
                         "it does not run under synchronised BatchNorm")
    n_batches = _pool_batches(x, batch_size)
    b = int(batch_size)
    if not len(configs):
        return np.empty(0, dtype=np.float64)
    per_pass = configs_per_pass(net.space, b) if per_pass is None else int(per_pass)
    was_training = net.training
    net.train()
    try:
        src_x = as_sources(net, x[: n_batches * b], n_batches)
        src_y = y[: n_batches * b].view(n_batches, b)
        ce_max = _max_losses(net, list(src_x), list(src_y))
        out = []
        for part in chunks(len(configs), per_pass):
            src = np.arange(part.start, part.stop, dtype=np.int64) % n_batches
            dp = DevicePlan(prefix_plan(net.space, [configs[k] for k in part], src), src_x.device, extra=[src])
            logits = grouped_logits(net, dp, src_x, TRAIN, [])  # (K, b, classes)
            (src_d,) = dp.extra
            ce = F.cross_entropy(logits.flatten(0, 1).double(), src_y[src_d].flatten(), reduction="none")
            out.append(ce.view(len(part), b).mean(1) - ce_max[src_d])
        return torch.cat(out).cpu().numpy()
    finally:
        net.train(was_training)


def estimate_differences(model: Supernet, x: torch.Tensor, y: torch.Tensor,
                         configs: Sequence[Sequence[int]], batch_size: int, *,
                         batched: bool | None = None) -> np.ndarray:
    """The estimation pass's differences (D26) by the path that suits the model's device: batched on CUDA, sliced
    one at a time on the CPU, where the batched pass costs 4× as much per configuration (bench/bench_scoring.py);
    `batched` overrides the choice."""
    use = runs_batched(model, batched)
    return (batched_differences if use else frozen_differences)(model, x, y, configs, batch_size)
