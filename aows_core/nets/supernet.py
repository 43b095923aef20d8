"""The slimmable supernet of any space (§3, §5; docs/method.md D10, D29, D30, D44, D45): one set of max-width
weights serves every configuration.

A configuration uses the first c channels of every node; parameter names and shapes are those of
`Network(space, space.max_config)`. `forward(x)` runs the max configuration; `forward(x, widths)` runs per-sample
widths (a (B, n_layers) tensor of channel counts, `nets.widths.widths_tensor`) with ONE mask per node — so every
layer writing or reading a tied stream uses that node's per-sample width, and a residual add sums tensors that are
zero beyond it — applied after every BatchNorm, the depthwise unit's too (D10), with train-mode BatchNorm on masked
batch statistics (`nets.batchnorm`); `forward_sliced(x, channels)` runs one configuration as a genuinely small
network. Each edge runs as its layer kind says (`aows_core.kinds`), given a `Pass`: the widths computed at every
node and the normalisation of this pass (masked, sliced; the scorer's recalibration and the batched groups bring
their own). Only the max configuration updates the BN running statistics unless `update_stats=True`. Under
autocast (D29) the convolutions run in reduced precision while BatchNorm statistics and running buffers stay float32.
`channels_last=True` keeps 4-d weights in channels_last (bench/bench_supernet.py). `bn_group` (set by
`nets.batchnorm.synchronised`): train-mode BN statistics over that process group's global batch (D30).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..kinds import Pass, kind_of
from ..space import SearchSpace, check_blocks
from .batchnorm import at_least_float32, group_batch_norm
from .network import BlockPlan, Network, edge_module, edge_modules, reset_parameters, without_dropout
from .widths import DeviceWidths


class Supernet(nn.Module):
    """Max-width network whose configurations are front slices (§3), masked per sample (§5) or sliced."""

    bn_group: Any = None

    def __init__(self, space: SearchSpace, channels_last: bool = False, device=None):
        super().__init__()
        check_blocks(space)
        self.space = space
        self.channels_last = bool(channels_last)
        full = space.full(space.max_config)
        self.layers = without_dropout(nn.ModuleList(edge_modules(space, full, True, device)))
        self.classifier = edge_module(space, space.n_edges - 1, full[space.edges[-1][0]], full[-1], True, device)
        self.blocks = BlockPlan(space, self.layers)
        reset_parameters(self)  # the same initialisation as the fixed networks
        if self.channels_last:
            self.to(memory_format=torch.channels_last)
        self._max = [int(c) for c in space.max_config]
        self._min = [int(c) for c in space.min_config]
        self._ar: dict[tuple, torch.Tensor] = {}
        self._kinds = [kind_of(t.kind) for t in space.thetas]

    @property
    def max_config(self) -> list[int]:
        return list(self._max)

    @property
    def min_config(self) -> list[int]:
        return list(self._min)

    # ---- one pass over the blocks ----------------------------------------------------------------
    def _input(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.space.in_channels:
            raise ValueError(f"input must be (B, {self.space.in_channels}, H, W), got {tuple(x.shape)}")
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def _act(self, y: torch.Tensor, act: bool) -> torch.Tensor:
        """The space's activation of y when `act`."""
        if not act:
            return y
        return F.relu(y) if self.space.act == "relu" else F.relu6(y)

    def _edge(self, e: int, xs: Sequence[torch.Tensor], p: Pass) -> torch.Tensor:
        """Edge e on its inputs at the pass's widths, as its kind runs it."""
        s, d = self.space.edges[e]
        mod = self.layers[e] if e < len(self.layers) else self.classifier
        return self._kinds[e].forward(mod, xs, s, d, p)

    def _block(self, j: int, x: torch.Tensor, p: Pass) -> torch.Tensor:
        """Feature block j (not the classifier's) on x: its main edges, then its residual add (D44)."""
        b = self.space.blocks[j]
        y = x
        for e in b.edges:
            y = self._edge(e, [y], p)
        if b.add >= 0:
            y = self._edge(b.add, [y, self._edge(b.shortcut, [x], p) if b.shortcut >= 0 else x], p)
        return y

    def _features(self, x: torch.Tensor, p: Pass) -> torch.Tensor:
        """The activations entering the classifier."""
        for j in range(len(self.space.blocks) - 1):
            x = self._block(j, x, p)
        return x

    def _logits(self, h: torch.Tensor, p: Pass) -> torch.Tensor:
        """The classifier edge on the features h (global average pool, the classifier's first columns)."""
        return self._edge(self.space.n_edges - 1, [h], p)

    # ---- masked per-sample forward (§5) ----------------------------------------------------------
    def _masked(self, z: torch.Tensor, bn: nn.BatchNorm2d, m: torch.Tensor, act: bool) -> torch.Tensor:
        """BN (masked batch statistics in train mode, running ones in eval), activation, channels above m zeroed;
        in float32 under autocast (D29)."""
        B, C = z.shape[:2]
        if bn is None:  # a unit without BatchNorm: its conv's bias added, only masked
            return self._act(z * m.to(z.dtype).view(B, C, *(1,) * (z.dim() - 2)), act)  # 4-d, or a hidden fc's 2-d
        if self.training:
            y = group_batch_norm(z, m, bn, self.bn_group, relu=act, update_stats=False)
            return y.clamp_max(6.0) if act and self.space.act == "relu6" else y
        scale = bn.weight[:C] * torch.rsqrt(bn.running_var[:C] + bn.eps)
        shift = bn.bias[:C] - bn.running_mean[:C] * scale
        # z first, so that the result keeps z's memory format; the mask is folded into scale and shift
        return self._act(z * (scale * m).view(B, C, 1, 1) + (shift * m).view(B, C, 1, 1), act)

    def forward(self, x: torch.Tensor, widths: torch.Tensor | DeviceWidths | None = None, truncate: bool = True, *,
                channels: Sequence[int] | None = None) -> torch.Tensor:
        """Logits. widths=None: the max configuration; else per-sample masked widths (B, n_layers) channel counts
        (a tensor or `DeviceWidths`).

        truncate: compute each node only up to the batch's largest width there (exact: the channels beyond it are
        zero for every sample); under AOWS's concentrated sampling it saves real work. With `bn_group` set, the
        largest width of every rank's batch (so that all ranks reduce equal shapes). channels: run that one
        configuration sliced (= `forward_sliced(x, channels)`), so that a DistributedDataParallel wrapper, which
        only routes `forward`, can run every pass."""
        if channels is not None:
            if widths is not None:
                raise ValueError("give per-sample widths or one configuration's channels, not both")
            return self.forward_sliced(x, channels)
        x = self._input(x)
        if widths is None:
            return self.classifier(self._kinds[-1].pooled(self.blocks(x)))
        widths, hi = self._check_widths(widths, x.shape[0])
        widths = widths.to(x.device)
        if not truncate:
            hi = list(self._max)
        elif self.bn_group is not None:  # BN over every rank's batch: every rank computes the global batch's widest
            h = torch.tensor(hi, dtype=torch.int64, device=x.device)
            torch.distributed.all_reduce(h, op=torch.distributed.ReduceOp.MAX, group=self.bn_group)
            hi = h.tolist()
        dtype = x.dtype if x.dtype.is_floating_point else torch.float32
        full = self.space.full(hi)
        masks = {i: (self._arange(full[i], x.device)[None, :] < widths[:, i - 1 : i]).to(dtype)
                 for i in range(1, self.space.n_nodes - 1)}  # one mask per node, tied streams included (D44)
        masks[0] = x.new_ones((x.shape[0], self.space.in_channels), dtype=dtype)  # the fixed input channels
        p = Pass(full, lambda z, bn, node, act: self._masked(z, bn, masks[node], act))
        return self._logits(self._features(x, p), p)

    def _arange(self, n: int, device) -> torch.Tensor:
        key = (n, str(device))
        a = self._ar.get(key)
        if a is None:
            a = self._ar[key] = torch.arange(n, device=device)
        return a

    def _check_widths(self, widths: torch.Tensor | DeviceWidths, batch: int) -> tuple[torch.Tensor, list[int]]:
        """Validated widths and the batch's largest width of every layer."""
        L = self.space.n_layers
        if isinstance(widths, DeviceWidths):  # placed by `place_widths`: validated from its host-side range
            if widths.shape != (batch, L):
                raise ValueError(f"widths must be a (B={batch}, n_layers={L}) tensor of channel counts, "
                                 f"got {tuple(widths.shape)}")
            self._check_range(widths.lowest, widths.widest)
            return widths.values, [int(h) for h in widths.widest]
        if not isinstance(widths, torch.Tensor):
            widths = torch.as_tensor(np.asarray(widths), dtype=torch.long)
        if widths.shape != (batch, L):
            raise ValueError(f"widths must be a (B={batch}, n_layers={L}) tensor of channel counts, "
                             f"got {tuple(widths.shape)}")
        if widths.dtype.is_floating_point:
            raise ValueError("widths must be an integer tensor of channel counts")
        lo, hi = (v.tolist() for v in torch.aminmax(widths, dim=0))
        self._check_range(lo, hi)
        return widths, [int(h) for h in hi]

    def _check_range(self, lo: Sequence[int], hi: Sequence[int]) -> None:
        """Refuse per-layer widths outside 1..max."""
        for i, (a, b) in enumerate(zip(lo, hi)):
            if a < 1 or b > self._max[i]:
                raise ValueError(f"widths at layer {i} must lie in 1..{self._max[i]}, got {a}..{b}")

    # ---- one configuration as a sliced network ---------------------------------------------------
    def _sliced(self, z: torch.Tensor, bn: nn.BatchNorm2d, act: bool, update_stats: bool) -> torch.Tensor:
        """BN of z's channels with the first ones of `bn` (train: batch statistics, running ones updated if asked;
        eval: running ones), then the activation; float32 under autocast (D29)."""
        o = z.shape[1]
        if bn is None:  # a unit without BatchNorm
            return self._act(z, act)
        if self.training and self.bn_group is not None:  # statistics of every rank's batch (D30)
            ones = torch.ones((z.shape[0], o), dtype=torch.float32, device=z.device)
            y = group_batch_norm(z, ones, bn, self.bn_group, relu=act, update_stats=update_stats)
            return y.clamp_max(6.0) if act and self.space.act == "relu6" else y
        if self.training:
            if update_stats and bn.track_running_stats:
                with torch.no_grad():
                    bn.num_batches_tracked.add_(1)
                rm, rv = bn.running_mean[:o], bn.running_var[:o]
            else:
                rm = rv = None
            y = F.batch_norm(at_least_float32(z), rm, rv, bn.weight[:o], bn.bias[:o], True, bn.momentum, bn.eps)
        else:
            y = F.batch_norm(at_least_float32(z), bn.running_mean[:o], bn.running_var[:o], bn.weight[:o],
                             bn.bias[:o], False, 0.0, bn.eps)
        return self._act(y, act)

    def forward_sliced(self, x: torch.Tensor, channels: Sequence[int],
                       update_stats: bool | None = None) -> torch.Tensor:
        """Logits of one configuration computed by a genuinely sliced small network (train or eval mode BN, §3).

        update_stats (train mode only): update the running statistics' slices; default only for the max
        configuration."""
        self.space.indices(channels)
        full = self.space.full(channels)
        if update_stats is None:
            update_stats = [int(c) for c in channels] == self._max
        p = Pass(full, lambda z, bn, node, act: self._sliced(z, bn, act, bool(update_stats)))
        return self._logits(self._features(self._input(x), p), p)

    # ---- export ----------------------------------------------------------------------------------
    @torch.no_grad()
    def subnet_state_dict(self, channels: Sequence[int]) -> dict[str, torch.Tensor]:
        """State dict of the fixed-width `Network(space, channels)`: front slices of weights and BN statistics."""
        ref = Network(self.space, channels, init=False, device="meta").state_dict()
        own = self.state_dict()
        return {k: own[k][tuple(slice(0, s) for s in v.shape)].clone().contiguous() for k, v in ref.items()}

    def subnet(self, channels: Sequence[int]) -> Network:
        """A fixed-width Network holding this supernet's sliced weights (same device and dtype)."""
        w = next(self.classifier.parameters())
        net = Network(self.space, channels, init=False, device="meta").to_empty(device=w.device).to(w.dtype)
        net.load_state_dict(self.subnet_state_dict(channels))
        return net.train(self.training)
