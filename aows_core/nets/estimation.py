"""The frozen-weight estimation pass of the unaries (§5 eq. average_error; docs/method.md D26).

Each sampled configuration c is run as a sliced network on one batch of a fixed image pool, in
train-mode BatchNorm over that batch (the configuration's own statistics, as a recalibration on the
batch would give, running statistics untouched), and the batch's mean ℓ(x, c) − ℓ(x, M) is recorded,
ℓ(x, M) being the max configuration's loss on the same batch. `search.unaries.fit_additive` turns the
differences into δ with standard errors.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .slimmable import SlimmableMobileNetV1


@torch.no_grad()
def frozen_differences(model: SlimmableMobileNetV1, x: torch.Tensor, y: torch.Tensor,
                       configs: Sequence[Sequence[int]], batch_size: int) -> np.ndarray:
    """(len(configs),) float64 mean ℓ(x, c) − ℓ(x, M) of configuration k on batch k mod n_batches of (x, y)."""
    net = getattr(model, "module", model)
    n_batches = len(x) // int(batch_size)
    if n_batches < 1:
        raise ValueError(f"the estimation pool holds {len(x)} images, fewer than one batch of {batch_size}")
    was_training = net.training
    net.train()
    try:
        xs = [net._input(x[b * batch_size:(b + 1) * batch_size]) for b in range(n_batches)]
        ys = [y[b * batch_size:(b + 1) * batch_size] for b in range(n_batches)]
        ce_max = [F.cross_entropy(net.forward_sliced(xb, net.max_config, update_stats=False).double(), yb).item()
                  for xb, yb in zip(xs, ys)]
        out = np.empty(len(configs), dtype=np.float64)
        for k, channels in enumerate(configs):
            b = k % n_batches
            logits = net.forward_sliced(xs[b], channels, update_stats=False)
            out[k] = F.cross_entropy(logits.double(), ys[b]).item() - ce_max[b]
        return out
    finally:
        net.train(was_training)
