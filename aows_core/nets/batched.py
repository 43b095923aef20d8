"""Several configurations of the slimmable supernet in one forward, each with its own BatchNorm statistics (§3, §5).

The batch is G groups of n images stacked (G·n images); group g runs one configuration. Every block runs as the
supernet runs it (`Supernet._block`, each edge as its kind says), computed up to the widest group's width of every
node; BatchNorm normalises each group's channels with that group's own statistics, and the channels beyond the
group's width of a node are multiplied by an exact zero (a depthwise unit by its input node's width, as the masked
forward does, docs/method.md D10), so each group computes its sliced network up to float rounding. The statistics
come from three modes: `TRAIN` — train-mode BN over the group's own n images (the estimation pass, D26);
`CALIBRATE` — the same, recording the mean and unbiased variance of every unit; `APPLY` — normalise with recorded
statistics (BN recalibrated on calibration images, then the evaluation images, D22).

Configurations that share their leading blocks' widths and their images share those blocks' activations: a
`PrefixPlan` runs each distinct prefix once (a greedy step's candidates differ from the current configuration at one
node each, so the activations of the blocks before it are computed once for all of them). Batching pays where a
forward is launch-bound (CUDA); on a 2-core CPU the sliced one-at-a-time pass is cheaper (bench/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..kinds import Pass
from ..space import SearchSpace
from .batchnorm import at_least_float32
from .widths import host_to_device

TRAIN, CALIBRATE, APPLY = "train", "calibrate", "apply"
# Float elements of one activation tensor of a batched pass (512 MiB in float32): bounds configurations per pass.
ACTIVATION_BUDGET = 2**27


def block_nodes(space: SearchSpace) -> list[tuple[int, ...]]:
    """Per feature block (the classifier's excluded), the searchable nodes its edges read or write, ascending."""
    out = []
    for b in space.blocks[:-1]:
        edges = (*b.edges, b.shortcut, b.add)
        out.append(tuple(sorted({n for e in edges if e >= 0 for n in space.edges[e]} - {0})))
    return out


@dataclass(frozen=True)
class PrefixPlan:
    """Groups of a batched pass (§3): per feature block j, the configurations' distinct prefixes (source and the
    widths of every node blocks 0..j touch).

    parents[j][g]: the group at block j−1 whose output enters group g (block 0: the index of its image source);
    widths[j][g, k]: group g's width of node nodes[j][k]; last[k]: configuration k's group at the last block."""

    nodes: tuple[tuple[int, ...], ...]
    parents: tuple[np.ndarray, ...]
    widths: tuple[np.ndarray, ...]
    last: np.ndarray

    @property
    def n_configs(self) -> int:
        return len(self.last)


def prefix_plan(space: SearchSpace, configs: Sequence[Sequence[int]],
                sources: Sequence[int] | None = None) -> PrefixPlan:
    """The `PrefixPlan` of configurations (K, n_layers) channel counts of `space`, configuration k on image source
    sources[k] (default 0)."""
    cfg = np.asarray(configs, dtype=np.int64)
    if cfg.ndim != 2 or len(cfg) == 0:
        raise ValueError(f"configurations must be a non-empty (K, n_layers) list of channel counts, got {cfg.shape}")
    parent_of = np.zeros(len(cfg), dtype=np.int64) if sources is None else np.asarray(sources, dtype=np.int64)
    if parent_of.shape != (len(cfg),):
        raise ValueError(f"one image source per configuration: {len(cfg)} configurations, sources {parent_of.shape}")
    full = np.concatenate([np.full((len(cfg), 1), space.in_channels), cfg], 1)  # nodes 0..n-1
    nodes = block_nodes(space)
    parents, widths = [], []
    for ns in nodes:  # (parent prefix, widths of the block's nodes) identifies the prefix by induction
        keys, inv = np.unique(np.concatenate([parent_of[:, None], full[:, list(ns)]], 1), axis=0,
                              return_inverse=True)
        parents.append(keys[:, 0].copy())
        widths.append(keys[:, 1:].copy())
        parent_of = inv.reshape(-1)
    return PrefixPlan(tuple(nodes), tuple(parents), tuple(widths), parent_of)


def activation_elements(space: SearchSpace) -> int:
    """Largest activation of one image in the max configuration (elements), the input included."""
    full = space.full(space.max_config)
    h, w = space.resolution
    most = space.in_channels * h * w
    for (s, d), t in zip(space.edges[:-1], space.thetas[:-1]):
        oh, ow = t.out_hw()
        most = max(most, oh * ow * max(full[s], full[d]))
    return int(most)


def configs_per_pass(space: SearchSpace, images_per_group: int, budget: int = ACTIVATION_BUDGET) -> int:
    """Configurations per batched pass: as many as keep one activation tensor within `budget` elements (at least 1)."""
    return max(1, int(budget) // (max(1, int(images_per_group)) * activation_elements(space)))


class DevicePlan:
    """A `PrefixPlan`'s index arrays on the model's device, copied in one transfer (no per-block host waits)."""

    def __init__(self, plan: PrefixPlan, device: torch.device, extra: Sequence[np.ndarray] = ()):
        """`extra`: further int64 arrays to carry in the same transfer (`self.extra`)."""
        arrays = [*plan.parents, *(w.reshape(-1) for w in plan.widths), plan.last, *extra]
        sizes = [len(a) for a in arrays]
        flat = host_to_device(torch.from_numpy(np.ascontiguousarray(np.concatenate(arrays), dtype=np.int64)), device)
        parts = list(flat.split(sizes))
        L = len(plan.parents)
        self.plan = plan
        self.parents = parts[:L]
        self.widths = [p.view(w.shape) for p, w in zip(parts[L:2 * L], plan.widths)]
        self.last, self.extra = parts[2 * L], parts[2 * L + 1:]

    def gather(self, j: int, x5: torch.Tensor) -> torch.Tensor:
        """The input groups of block j from the output groups of block j−1 (or the image sources), format kept."""
        p = self.plan.parents[j]
        if len(p) == x5.shape[0] and (p == np.arange(len(p))).all():
            return x5
        return x5[self.parents[j]]


def group_norm(z5: torch.Tensor, bn: nn.BatchNorm2d, mask: torch.Tensor | None, mode: str, stats: list,
               act: str | None) -> torch.Tensor:
    """act(BN(z5)) · mask of (G, n, C, H, W) with group g's own statistics (§3), in float32 (D29); `act` "relu",
    "relu6" or None; `bn` None (a unit without BatchNorm): act(z5) · mask.

    TRAIN: biased statistics of the group's n images; CALIBRATE: the same, and (mean, unbiased variance) appended
    to `stats`, as one train-mode pass leaves BatchNorm's running statistics (D22); APPLY: the next recorded pair,
    popped from the front of `stats`."""
    z5 = at_least_float32(z5)
    G, n, C = z5.shape[:3]
    if bn is None:  # a unit without BatchNorm: no statistics, only the mask (on 5-d maps, or a hidden fc's 3-d)
        out = z5 * mask.view(G, 1, C, *(1,) * (z5.dim() - 3)) if mask is not None else z5.clone()
    else:
        if mode == APPLY:
            mean, var = stats.pop(0)
        else:
            var, mean = torch.var_mean(z5, dim=(1, 3, 4), correction=0)
            if mode == CALIBRATE:
                k = n * z5.shape[3] * z5.shape[4]
                stats.append((mean, var * (k / (k - 1))))
        scale = bn.weight[:C] * torch.rsqrt(var + bn.eps)
        shift = bn.bias[:C] - mean * scale
        if mask is not None:  # 0·z + 0 = 0: masked channels are exact zeros
            scale, shift = scale * mask, shift * mask
        out = torch.empty_like(z5)  # keeps z5's strides (channels_last)
        torch.addcmul(shift.view(G, 1, C, 1, 1), z5, scale.view(G, 1, C, 1, 1), out=out)
    if act == "relu":
        out.relu_()
    elif act == "relu6":
        out.clamp_(0.0, 6.0)
    return out


def _block_pass(net, dp: DevicePlan, j: int, G: int, n: int, mode: str, stats: list) -> Pass:
    """The `Pass` of block j over G groups of n images: per node the widest group's width, group statistics and
    per-group masks."""
    plan = dp.plan
    full = [net.space.in_channels] * net.space.n_nodes
    masks: dict[int, torch.Tensor] = {}
    for k, node in enumerate(plan.nodes[j]):
        full[node] = int(plan.widths[j][:, k].max())
        masks[node] = (torch.arange(full[node], device=dp.widths[j].device)[None, :]
                       < dp.widths[j][:, k : k + 1]).to(torch.float32)
    act = net.space.act

    def norm(z: torch.Tensor, bn: nn.BatchNorm2d, node: int, activate: bool) -> torch.Tensor:
        out = group_norm(z.unflatten(0, (G, n)), bn, masks.get(node), mode, stats, act if activate else None)
        return out.flatten(0, 1)

    return Pass(full, norm)


def grouped_features(net, dp: DevicePlan, sources: torch.Tensor, mode: str, stats: list) -> torch.Tensor:
    """Activations (G_last, n, C, H, W) after the last feature block of every group of `dp`, from image sources
    (S, n, C_in, H, W): each block runs its groups' distinct prefixes once, truncated to their widest (§3, D10)."""
    x5 = sources
    for j in range(len(dp.plan.nodes)):
        x5 = dp.gather(j, x5)
        G, n = x5.shape[:2]
        x5 = net._block(j, x5.flatten(0, 1), _block_pass(net, dp, j, G, n, mode, stats)).unflatten(0, (G, n))
    return x5


def grouped_logits(net, dp: DevicePlan, sources: torch.Tensor, mode: str, stats: list) -> torch.Tensor:
    """(K, n, classes) logits of every configuration of `dp` on its image source (global average pool, classifier)."""
    x5 = grouped_features(net, dp, sources, mode, stats)
    G, n = x5.shape[:2]
    full = [0] * net.space.n_nodes
    full[net.space.edges[-1][0]] = x5.shape[2]
    logits = net._logits(x5.flatten(0, 1), Pass(full, None)).unflatten(0, (G, n))
    return logits[dp.last]


def as_sources(net, x: torch.Tensor, n_sources: int) -> torch.Tensor:
    """Images (S·n, C, H, W) in the model's memory format as S sources of n images (S, n, C, H, W)."""
    return net._input(x).unflatten(0, (n_sources, len(x) // n_sources))


def chunks(n: int, size: int) -> list[range]:
    """range(n) cut into consecutive ranges of at most `size`."""
    return [range(a, min(n, a + size)) for a in range(0, n, max(1, int(size)))]


def on_cuda(model: nn.Module) -> bool:
    """Is the model's first parameter on a CUDA device (the batched passes' choice)?"""
    p = next(getattr(model, "module", model).parameters(), None)
    return p is not None and p.device.type == "cuda"


def runs_batched(model: nn.Module, batched: bool | None = None) -> bool:
    """Whether scoring or estimation runs batched: as `batched` says, by default on CUDA."""
    return on_cuda(model) if batched is None else bool(batched)
