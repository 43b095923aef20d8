"""Slimmable MobileNet-v1 supernet (§3, §5): one set of max-width weights serves every configuration.

A configuration uses the first c_i channels of every layer i; parameter names and shapes are those
of `nets.mobilenet.MobileNetV1(space, space.max_config)`. `forward(x)` runs the max configuration,
`forward(x, widths)` runs per-sample widths (a (B, n_layers) tensor of channel counts, see
`widths_tensor`) with every conv+BN+ReLU unit masked — the depthwise unit too (docs/method.md, D10) —
and train-mode BatchNorm on masked batch statistics (`nets.batchnorm`); `forward_sliced(x, channels)`
runs one configuration as a genuinely small network. Only the max configuration updates the BN
running statistics unless `update_stats=True`. Under autocast (docs/method.md D29) the convolutions run
in reduced precision while BatchNorm statistics and running buffers stay float32 (the masked and sliced
units normalise in float32). Memory format: `channels_last=True` keeps 4-d weights in channels_last
(bench/bench_supernet.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..space import SearchSpace, check_mobilenet_chain
from .batchnorm import at_least_float32, group_batch_norm
from .mobilenet import MobileNetV1, edge_layers


def widths_tensor(space: SearchSpace, idx, device=None) -> torch.Tensor:
    """(B, n_layers) int64 channel counts from choice indices of shape (B, n+1) (sampler output) or (B, n_layers)."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim != 2:
        raise ValueError(f"choice indices must be 2-d (B, n_layers) or (B, n+1), got shape {idx.shape}")
    idx = space.layer_columns(idx)  # (B, n+1) chain nodes → (B, n_layers)
    out = np.empty_like(idx)
    for i, ch in enumerate(space.layer_choices):
        col = idx[:, i]
        if col.size and (col.min() < 0 or col.max() >= len(ch)):
            raise ValueError(f"choice index out of range at layer {i}: allowed 0..{len(ch) - 1}")
        out[:, i] = np.asarray(ch, dtype=np.int64)[col]
    return torch.as_tensor(out, device=device)


class DeviceWidths(NamedTuple):
    """Per-sample widths on the training device with their per-layer range read on the host (§5): a masked pass
    then reads nothing back from the device (docs/method.md D29)."""

    values: torch.Tensor  # (B, n_layers) int64 channel counts, on the device of the batch
    lowest: tuple[int, ...]  # per layer, the batch's smallest width (validated on the host)
    widest: tuple[int, ...]  # per layer, the batch's largest width (what `truncate` computes up to)

    @property
    def shape(self) -> torch.Size:
        return self.values.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype


def host_to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host tensor on `device`; to CUDA through page-locked memory, so the copy does not wait for the stream (D29)."""
    device = torch.device(device)
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


def place_widths(widths: torch.Tensor, device: torch.device | str) -> list[DeviceWidths]:
    """(R, B, n_layers) host widths → R `DeviceWidths`: ranges read on the host, ONE non-blocking copy to the device."""
    if widths.dim() != 3:
        raise ValueError(f"widths must be (R, B, n_layers), got {tuple(widths.shape)}")
    host = widths.detach().to("cpu", torch.int64)
    lo, hi = (v.tolist() for v in torch.aminmax(host, dim=1)) if host.numel() else ([[]] * len(host), [[]] * len(host))
    on_device = host_to_device(host, device)
    return [DeviceWidths(on_device[r], tuple(lo[r]), tuple(hi[r])) for r in range(len(host))]


class WidthsMixin:
    """What every slimmable supernet shares (§5): its max and min configurations, input checks and per-sample widths
    validated against the max widths. Set `space`, `channels_last`, `_max`, `_min` and `_ar` (a dict) in __init__."""

    space: SearchSpace
    channels_last: bool

    @property
    def max_config(self) -> list[int]:
        return list(self._max)

    @property
    def min_config(self) -> list[int]:
        return list(self._min)

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.space.in_channels:
            raise ValueError(f"input must be (B, {self.space.in_channels}, H, W), got {tuple(x.shape)}")
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def _arange(self, n: int, device) -> torch.Tensor:
        key = (n, str(device))
        a = self._ar.get(key)
        if a is None:
            a = self._ar[key] = torch.arange(n, device=device)
        return a

    def _check_widths(self, widths: torch.Tensor, batch: int) -> tuple[torch.Tensor, list[int]]:
        """Validated widths and the batch's largest width of every layer."""
        L = self.space.n_layers
        if isinstance(widths, DeviceWidths):  # placed by `place_widths`: validated from its host-side range
            if widths.shape != (batch, L):
                raise ValueError(f"widths must be a (B={batch}, n_layers={L}) tensor of channel counts, got {tuple(widths.shape)}")
            self._check_range(widths.lowest, widths.widest)
            return widths.values, [int(h) for h in widths.widest]
        if not isinstance(widths, torch.Tensor):
            widths = torch.as_tensor(np.asarray(widths), dtype=torch.long)
        if widths.shape != (batch, L):
            raise ValueError(f"widths must be a (B={batch}, n_layers={L}) tensor of channel counts, got {tuple(widths.shape)}")
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


class SlimmableMobileNetV1(WidthsMixin, nn.Module):
    """Max-width MobileNet-v1 whose configurations are front slices (§3), masked per sample (§5) or sliced.

    `bn_group` (set by `nets.batchnorm.synchronised`): train-mode BN statistics over that process group's
    global batch (D30); None: this process's batch."""

    bn_group: Any = None

    def __init__(self, space: SearchSpace, channels_last: bool = False, device=None):
        super().__init__()
        check_mobilenet_chain(space)
        self.space = space
        self.channels_last = bool(channels_last)
        full = space.full(space.max_config)
        self.features = nn.Sequential(
            *[edge_layers(t, full[i], full[i + 1], True, device) for i, t in enumerate(space.thetas[:-1])]
        )
        self.classifier = nn.Linear(full[-2], full[-1], device=device)
        MobileNetV1.reset_parameters(self)  # the same initialisation as the fixed networks
        if self.channels_last:
            self.to(memory_format=torch.channels_last)
        self._max = [int(c) for c in space.max_config]
        self._min = [int(c) for c in space.min_config]
        self._ar: dict[tuple, torch.Tensor] = {}

    # ---- helpers --------------------------------------------------------------------------------
    def _units(self, i: int):
        """(conv, bn) pairs of edge i, in order."""
        edge = self.features[i]
        mods = list(edge)
        return [(mods[j], mods[j + 1]) for j in range(0, len(mods), 3)]

    # ---- masked per-sample forward (§5) ----------------------------------------------------------
    def _masked_bn_relu(self, z: torch.Tensor, bn: nn.BatchNorm2d, m: torch.Tensor) -> torch.Tensor:
        """BN (masked batch statistics in train mode, running ones in eval), ReLU, then zero masked channels.

        In float32 whatever the autocast precision (docs/method.md D29): a reduced-precision z is upcast,
        as torch.amp.custom_fwd(cast_inputs=torch.float32) would, so the statistics are float32."""
        B, C = z.shape[:2]
        if self.training:
            return group_batch_norm(z, m, bn, self.bn_group, relu=True, update_stats=False)
        weight, bias = bn.weight[:C], bn.bias[:C]
        scale = weight * torch.rsqrt(bn.running_var[:C] + bn.eps)
        shift = bias - bn.running_mean[:C] * scale
        # z first, so that the result keeps z's memory format; the mask is folded into scale and shift
        return torch.relu(z * (scale * m).view(B, C, 1, 1) + (shift * m).view(B, C, 1, 1))

    def forward(
        self,
        x: torch.Tensor,
        widths: torch.Tensor | None = None,
        truncate: bool = True,
        *,
        channels: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Logits. widths=None: the max configuration; else per-sample masked widths (B, n_layers) channel counts.

        truncate: compute each layer only up to the batch's largest width of that layer (exact: the
        channels beyond it are zero for every sample). Under uniform sampling the batch maximum is
        almost always the max width; under AOWS's concentrated sampling it saves real work. With
        `bn_group` set, the largest width of every rank's batch (so that all ranks reduce equal shapes).
        channels: run that one configuration sliced (= `forward_sliced(x, channels)`), so that a
        DistributedDataParallel wrapper, which only routes `forward`, can run every pass.
        """
        if channels is not None:
            if widths is not None:
                raise ValueError("give per-sample widths or one configuration's channels, not both")
            return self.forward_sliced(x, channels)
        x = self._input(x)
        if widths is None:
            return self.classifier(self.features(x).mean((2, 3)))
        widths, hi = self._check_widths(widths, x.shape[0])
        widths = widths.to(x.device)
        if not truncate:
            hi = list(self._max)
        elif self.bn_group is not None:  # BN over every rank's batch: every rank computes the global batch's widest
            h = torch.tensor(hi, dtype=torch.int64, device=x.device)
            torch.distributed.all_reduce(h, op=torch.distributed.ReduceOp.MAX, group=self.bn_group)
            hi = h.tolist()
        dtype = x.dtype if x.dtype.is_floating_point else torch.float32
        m_in = x.new_ones((x.shape[0], self.space.in_channels), dtype=dtype)  # node 0 (fixed input channels)
        full = [self.space.in_channels, *hi]
        for i, t in enumerate(self.space.thetas[:-1]):
            ci, co = full[i], full[i + 1]
            m_out = (self._arange(co, x.device)[None, :] < widths[:, i : i + 1]).to(dtype)
            units = self._units(i)
            if t.kind == "dwsep":
                (dw, bn1), (pw, bn2) = units
                # The depthwise unit keeps the input node's channels: mask it with that node's width (D10).
                z = F.conv2d(x, dw.weight[:ci], None, dw.stride, dw.padding, dw.dilation, ci)
                x = self._masked_bn_relu(z, bn1, m_in)
                z = F.conv2d(x, pw.weight[:co, :ci], None, pw.stride, pw.padding, pw.dilation, 1)
                x = self._masked_bn_relu(z, bn2, m_out)
            else:
                (cv, bn), = units
                z = F.conv2d(x, cv.weight[:co, :ci], None, cv.stride, cv.padding, cv.dilation, 1)
                x = self._masked_bn_relu(z, bn, m_out)
            m_in = m_out
        return F.linear(x.mean((2, 3)), self.classifier.weight[:, : full[-1]], self.classifier.bias)

    # ---- one configuration as a sliced network ---------------------------------------------------
    def forward_sliced(self, x: torch.Tensor, channels: Sequence[int], update_stats: bool | None = None) -> torch.Tensor:
        """Logits of one configuration computed by a genuinely sliced small network (train or eval mode BN).

        update_stats (train mode only): update the running statistics' slices; default only for the
        max configuration. BatchNorm runs in float32 under autocast (D29).
        """
        full = self.space.full(channels)
        self.space.indices(channels)
        x = self._input(x)
        if update_stats is None:
            update_stats = [int(c) for c in channels] == self._max
        train = self.training
        for i, t in enumerate(self.space.thetas[:-1]):
            ci, co = full[i], full[i + 1]
            if t.kind == "dwsep":
                shapes = [(ci, ci, ci), (co, ci, 1)]  # (out, in, groups) of the dw and pw units
            else:
                shapes = [(co, ci, 1)]
            for (conv, bn), (o, n_in, g) in zip(self._units(i), shapes):
                w = conv.weight[:o] if g > 1 else conv.weight[:o, :n_in]
                x = F.conv2d(x, w, None, conv.stride, conv.padding, conv.dilation, g)
                if train and self.bn_group is not None:  # statistics of every rank's batch (D30)
                    ones = torch.ones((x.shape[0], o), dtype=torch.float32, device=x.device)
                    x = group_batch_norm(x, ones, bn, self.bn_group, relu=True, update_stats=update_stats)
                    continue
                if train:
                    if update_stats and bn.track_running_stats:
                        with torch.no_grad():
                            bn.num_batches_tracked.add_(1)
                        rm, rv = bn.running_mean[:o], bn.running_var[:o]
                    else:
                        rm = rv = None
                    x = F.batch_norm(at_least_float32(x), rm, rv, bn.weight[:o], bn.bias[:o], True, bn.momentum, bn.eps)
                else:
                    x = F.batch_norm(at_least_float32(x), bn.running_mean[:o], bn.running_var[:o], bn.weight[:o], bn.bias[:o],
                                     False, 0.0, bn.eps)
                x = F.relu(x)
        return F.linear(x.mean((2, 3)), self.classifier.weight[:, : full[-2]], self.classifier.bias)

    # ---- export ----------------------------------------------------------------------------------
    @torch.no_grad()
    def subnet_state_dict(self, channels: Sequence[int]) -> dict[str, torch.Tensor]:
        """State dict of the fixed-width `MobileNetV1(space, channels)`: front slices of weights and BN statistics."""
        ref = MobileNetV1(self.space, channels, init=False, device="meta").state_dict()
        own = self.state_dict()
        out: dict[str, torch.Tensor] = {}
        for k, v in ref.items():
            src = own[k]
            sl = tuple(slice(0, s) for s in v.shape)
            out[k] = src[sl].clone().contiguous()
        return out

    def subnet(self, channels: Sequence[int]) -> MobileNetV1:
        """A fixed-width MobileNetV1 holding this supernet's sliced weights (same device and dtype)."""
        w = self.classifier.weight
        net = MobileNetV1(self.space, channels, init=False, device="meta").to_empty(device=w.device).to(w.dtype)
        net.load_state_dict(self.subnet_state_dict(channels))
        return net.train(self.training)
