"""Several configurations of the slimmable supernet in one forward, each with its own BatchNorm statistics (§3, §5).

The batch is G groups of n images stacked (G·n images); group g runs one configuration. Every conv+BN+ReLU unit
is computed up to the widest group's width; BatchNorm normalises each group's channels with that group's own
statistics, and the channels beyond the group's width are multiplied by an exact zero (the depthwise unit by its
input node's width, as the masked forward does, docs/method.md D10), so each group computes its sliced network up
to float rounding. The statistics come from three modes: `TRAIN` — train-mode BN over the group's own n images
(the estimation pass, D26); `CALIBRATE` — the same, recording the mean and unbiased variance of every unit; `APPLY`
— normalise with recorded statistics (BN recalibrated on calibration images, then the evaluation images, D22).

Configurations that share a prefix of widths and their images share its activations: a `PrefixPlan` runs each
distinct prefix once (a greedy step's candidates differ from the current configuration at one layer each, so the
activations before that layer are computed once for all of them). Batching pays where a forward is launch-bound
(CUDA); on a 2-core CPU the sliced one-at-a-time pass is cheaper (bench/README.md: 37 against 149 ms per configuration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..space import SearchSpace
from .batchnorm import at_least_float32
from .slimmable import host_to_device

TRAIN, CALIBRATE, APPLY = "train", "calibrate", "apply"
# Float elements of one activation tensor of a batched pass (512 MiB in float32): bounds configurations per pass.
ACTIVATION_BUDGET = 2**27


@dataclass(frozen=True)
class PrefixPlan:
    """Groups of a batched pass (§3): per conv edge e, the configurations' distinct prefixes (source, c_1 … c_{e+1}).

    parents[e][g]: the group at edge e−1 whose output enters group g (edge 0: the index of its image source);
    widths[e][g]: group g's output width c_{e+1}; last[k]: configuration k's group at the last conv edge."""

    parents: tuple[np.ndarray, ...]
    widths: tuple[np.ndarray, ...]
    last: np.ndarray

    @property
    def n_configs(self) -> int:
        return len(self.last)


def prefix_plan(configs: Sequence[Sequence[int]], sources: Sequence[int] | None = None) -> PrefixPlan:
    """The `PrefixPlan` of configurations (K, n_layers) channel counts, configuration k on image source sources[k]
    (default 0)."""
    cfg = np.asarray(configs, dtype=np.int64)
    if cfg.ndim != 2 or len(cfg) == 0:
        raise ValueError(f"configurations must be a non-empty (K, n_layers) list of channel counts, got {cfg.shape}")
    parent_of = np.zeros(len(cfg), dtype=np.int64) if sources is None else np.asarray(sources, dtype=np.int64)
    if parent_of.shape != (len(cfg),):
        raise ValueError(f"one image source per configuration: {len(cfg)} configurations, sources {parent_of.shape}")
    parents, widths = [], []
    for e in range(cfg.shape[1]):  # (parent prefix, width) identifies (source, c_1 … c_{e+1}) by induction
        keys, inv = np.unique(np.stack([parent_of, cfg[:, e]], 1), axis=0, return_inverse=True)
        parents.append(keys[:, 0].copy())
        widths.append(keys[:, 1].copy())
        parent_of = inv.reshape(-1)
    return PrefixPlan(tuple(parents), tuple(widths), parent_of)


def activation_elements(space: SearchSpace) -> int:
    """Largest activation of one image in the max configuration (elements), the input included."""
    full = space.full(space.max_config)
    h, w = space.resolution
    most = space.in_channels * h * w
    for i, t in enumerate(space.thetas[:-1]):
        oh, ow = t.out_hw()
        most = max(most, oh * ow * max(full[i], full[i + 1]))
    return int(most)


def configs_per_pass(space: SearchSpace, images_per_group: int, budget: int = ACTIVATION_BUDGET) -> int:
    """Configurations per batched pass: as many as keep one activation tensor within `budget` elements (at least 1)."""
    return max(1, int(budget) // (max(1, int(images_per_group)) * activation_elements(space)))


def device_indices(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """int64 host array on `device`; to CUDA through pinned memory without waiting for the stream."""
    return host_to_device(torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)), device)


class DevicePlan:
    """A `PrefixPlan`'s index arrays on the model's device, copied in one transfer (no per-edge host waits)."""

    def __init__(self, plan: PrefixPlan, device: torch.device, extra: Sequence[np.ndarray] = ()):
        """`extra`: further int64 arrays to carry in the same transfer (`self.extra`)."""
        arrays = [*plan.parents, *plan.widths, plan.last, *extra]
        sizes = [len(a) for a in arrays]
        flat = device_indices(np.concatenate(arrays), device)
        parts = list(flat.split(sizes))
        L = len(plan.parents)
        self.plan = plan
        self.parents, self.widths = parts[:L], parts[L:2 * L]
        self.last, self.extra = parts[2 * L], parts[2 * L + 1:]

    def gather(self, e: int, x5: torch.Tensor) -> torch.Tensor:
        """The input groups of edge e from the output groups of edge e−1 (or the image sources), format kept."""
        p = self.plan.parents[e]
        if len(p) == x5.shape[0] and (p == np.arange(len(p))).all():
            return x5
        return x5[self.parents[e]]

    def in_widths(self, e: int) -> torch.Tensor | None:
        """Input width of every group of edge e (None at edge 0: the fixed input channels)."""
        return None if e == 0 else self.widths[e - 1][self.parents[e]]


def _mask(widths: torch.Tensor | None, c: int, device: torch.device) -> torch.Tensor | None:
    """(G, c) float32 1/0 mask of channels below each group's width; None when no group is narrower than c."""
    if widths is None:
        return None
    return (torch.arange(c, device=device)[None, :] < widths[:, None]).to(torch.float32)


def group_bn_relu(z5: torch.Tensor, bn: nn.BatchNorm2d, mask: torch.Tensor | None, mode: str,
                  stats: list) -> torch.Tensor:
    """ReLU(BN(z5)) · mask of (G, n, C, H, W) with group g's own statistics (§3), in float32 (D29).

    TRAIN: biased statistics of the group's n images; CALIBRATE: the same, and (mean, unbiased variance) appended
    to `stats`, as one train-mode pass leaves BatchNorm's running statistics (D22); APPLY: the next recorded pair,
    popped from the front of `stats`."""
    z5 = at_least_float32(z5)
    G, n, C = z5.shape[:3]
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
    return out.relu_()


def _conv(x5: torch.Tensor, conv: nn.Conv2d, w: torch.Tensor, groups: int) -> torch.Tensor:
    """conv of the stacked groups (G, n, C, H, W) → (G, n, C', H', W')."""
    z = F.conv2d(x5.flatten(0, 1), w, None, conv.stride, conv.padding, conv.dilation, groups)
    return z.unflatten(0, x5.shape[:2])


def grouped_features(net, dp: DevicePlan, sources: torch.Tensor, mode: str, stats: list) -> torch.Tensor:
    """Activations (G_last, n, C, H, W) after the last conv edge of every group of `dp`, from image sources
    (S, n, C_in, H, W): each edge runs its groups' distinct prefixes once, truncated to their widest (§3, D10)."""
    if not net.space.is_chain:
        raise ValueError(f"space {net.space.name!r} is not a chain: its configurations take the sliced path "
                         f"(nets.batched.runs_batched)")
    x5 = sources
    for e, t in enumerate(net.space.thetas[:-1]):
        x5 = dp.gather(e, x5)
        ci, co = x5.shape[2], int(dp.plan.widths[e].max())
        m_in = _mask(dp.in_widths(e), ci, x5.device)
        m_out = _mask(dp.widths[e], co, x5.device)
        units = net._units(e)
        if t.kind == "dwsep":
            (dw, bn1), (pw, bn2) = units
            x5 = group_bn_relu(_conv(x5, dw, dw.weight[:ci], ci), bn1, m_in, mode, stats)
            x5 = group_bn_relu(_conv(x5, pw, pw.weight[:co, :ci], 1), bn2, m_out, mode, stats)
        else:
            (cv, bn), = units
            x5 = group_bn_relu(_conv(x5, cv, cv.weight[:co, :ci], 1), bn, m_out, mode, stats)
    return x5


def grouped_logits(net, dp: DevicePlan, sources: torch.Tensor, mode: str, stats: list) -> torch.Tensor:
    """(K, n, classes) logits of every configuration of `dp` on its image source (global average pool, classifier)."""
    x5 = grouped_features(net, dp, sources, mode, stats)
    clf = net.classifier
    logits = F.linear(x5.mean((3, 4)), clf.weight[:, : x5.shape[2]], clf.bias)
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
    """Whether scoring or estimation runs batched: as `batched` says, by default on CUDA; never for a space that is
    not a chain, whose configurations take the sliced path (the grouped passes here cover MobileNet-v1 only, D44)."""
    net = getattr(model, "module", model)
    return net.space.is_chain and (on_cuda(model) if batched is None else bool(batched))
