"""`flops`: analytic multiply-accumulates, the FLOPs target of §7.2.

FLOPs decompose exactly over pairs of successive widths, so they are the special case of the
latency model (eq. lat, §4) whose table is known in closed form (§7.2: "written analytically as a
special case of our latency model"). Per image, with (H_out, W_out) the layer's output size:

- conv, pconv k×k: c_in · c_out · k² · H_out · W_out  (convpool: at the convolution's output, before its max-pool)
- dw k×k:         c · k² · H_out · W_out
- dwsep:          c_in · k² · H_out · W_out  (depthwise)  +  c_in · c_out · H_out · W_out  (pointwise)
- linear:         c_in · c_out  (the classifier; pooling is not counted)
- add:            0  (the residual add)

BN, ReLU, pooling, adds and biases are ignored: the count torchvision-style hooks on Conv2d and Linear give. The device reports batch_size × MACs / 10⁶ (MMAC), one
exact sample per network. Imports numpy only.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..space import SearchSpace, Theta
from .base import Device, Timer, register


def _conv_hw(t: Theta) -> tuple[int, int]:
    """Output size of Θ's convolution (a `convpool`'s before its max-pool)."""
    if t.kind != "convpool":
        return t.out_hw()
    pad = t.kernel // 2
    return (t.in_h + 2 * pad - t.kernel) // t.stride + 1, (t.in_w + 2 * pad - t.kernel) // t.stride + 1


def theta_macs(t: Theta, c_in: int, c_out: int) -> int:
    """MACs per image of a layer with descriptor Θ mapping c_in → c_out."""
    ho, wo = _conv_hw(t)
    k2 = t.kernel * t.kernel
    if t.kind in ("conv", "pconv", "convpool"):
        return c_in * c_out * k2 * ho * wo
    if t.kind == "dw":
        return c_out * k2 * ho * wo
    if t.kind == "dwsep":
        return c_in * k2 * ho * wo + c_in * c_out * ho * wo
    if t.kind == "linear":
        return c_in * c_out
    if t.kind == "add":
        return 0
    raise ValueError(f"unknown layer kind {t.kind!r}")


def theta_params(t: Theta, c_in: int, c_out: int) -> int:
    """Trainable parameters of a layer (weights, BatchNorm scale and shift, the classifier's bias)."""
    k2 = t.kernel * t.kernel
    if t.kind in ("conv", "pconv", "convpool"):
        return c_in * c_out * k2 + 2 * c_out
    if t.kind == "dw":
        return c_out * k2 + 2 * c_out
    if t.kind == "dwsep":
        return c_in * k2 + 2 * c_in + c_in * c_out + 2 * c_out
    if t.kind == "linear":
        return c_in * c_out + c_out
    if t.kind == "add":
        return 0
    raise ValueError(f"unknown layer kind {t.kind!r}")


def edge_macs(space: SearchSpace, c_in: int, c_out: int, edge: int) -> int:
    """MACs per image of edge `edge` for widths c_in → c_out."""
    return theta_macs(space.thetas[edge], int(c_in), int(c_out))


def network_macs(space: SearchSpace, channels: Sequence[int]) -> int:
    """MACs per image of the network of a configuration (the sum of its edges' MACs)."""
    space.indices(channels)
    full = space.full(channels)
    return sum(edge_macs(space, full[s], full[d], e) for e, (s, d) in enumerate(space.edges))


def network_params(space: SearchSpace, channels: Sequence[int]) -> int:
    """Trainable parameters of the network of a configuration (the sum over its edges)."""
    space.indices(channels)
    full = space.full(channels)
    return sum(theta_params(t, full[s], full[d]) for t, (s, d) in zip(space.thetas, space.edges))


def variable_macs(space: SearchSpace) -> np.ndarray:
    """MACs per image of every latency variable, aligned with `space.variables` (the exact FLOPs table)."""
    return np.array([theta_macs(t, ci, co) for t, ci, co in space.variables], dtype=np.int64)


@register
class Flops(Device):
    """Analytic MMAC of the whole network at the configured batch size (exact: one sample, no drift)."""

    name = "flops"
    unit = "MMAC"
    analytic = True

    def fingerprint(self) -> dict[str, Any]:
        """Only the counting convention matters (no machine)."""
        return {**super().fingerprint(), "convention": "MAC; conv, depthwise, pointwise, linear; no BN/ReLU/pool/bias"}

    def open(self, channels: Sequence[int], job: int = 0) -> Timer:
        """One exact sample per call: batch_size × MACs / 1e6."""
        value = self.batch_size * network_macs(self.space, channels) / 1e6
        return Timer(lambda repeats, warmup, min_time_s: (np.array([value]), 0.0))
