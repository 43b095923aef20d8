"""`flops`: analytic multiply-accumulates, the FLOPs target of §7.2.

FLOPs decompose exactly over pairs of successive widths, so they are the special case of the
latency model (eq. lat, §4) whose table is known in closed form (§7.2: "written analytically as a
special case of our latency model"). Each layer kind counts its own (`LayerKind.macs`, `aows_core.kinds`); per
image, with (H_out, W_out) the layer's output size, the built-in kinds count:

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

from ..kinds import kind_of
from ..space import SearchSpace, Theta
from .base import Device, Timer, register


def theta_macs(t: Theta, c_in: int, c_out: int) -> int:
    """MACs per image of a layer with descriptor Θ mapping c_in → c_out (its kind's count)."""
    return int(kind_of(t.kind).macs(t, int(c_in), int(c_out)))


def theta_params(t: Theta, c_in: int, c_out: int) -> int:
    """Trainable parameters of a layer (weights, BatchNorm scale and shift, the classifier's bias; its kind's)."""
    return int(kind_of(t.kind).params(t, int(c_in), int(c_out)))


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
