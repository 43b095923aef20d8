"""Torch modules the built-in kinds are made of (§7): a conv unit and the residual add; imported by kinds' methods.

`Unit` is k×k conv (+ BN) (+ activation) (+ 3×3/2 max-pool); `unit_forward` runs a unit inside the slimmable
supernet: its weight sliced to the pass's widths (depthwise: `groups` = its width), normalised as its node.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .base import ConvShape, Pass

ACTIVATION_MODULES: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "relu6": nn.ReLU6}


class Unit(nn.Sequential):
    """k×k conv padded by k // 2 (+ BN) (+ activation) (+ 3×3/2 max-pool): one convolutional unit (§7), a sequence of
    the children it has (`bn`, `act`, `pool` are None when absent)."""

    def __init__(self, shape: ConvShape, norm: Callable[[int], nn.Module] | None, act: str | None,
                 pool: bool = False, device=None):
        super().__init__()
        s = shape
        parts = {"conv": nn.Conv2d(s.c_in, s.c_out, s.k, s.stride, s.k // 2, groups=s.groups, bias=norm is None,
                                   device=device),
                 "bn": norm(s.c_out) if norm is not None else None,
                 "act": ACTIVATION_MODULES[act](inplace=True) if act else None,
                 "pool": nn.MaxPool2d(3, 2, 1) if pool else None}
        for name, m in parts.items():
            if m is None:
                object.__setattr__(self, name, None)
            else:
                self.add_module(name, m)


def unit_forward(u: Unit, x: torch.Tensor, c_out: int, groups: int, node: int, p: Pass) -> torch.Tensor:
    """Unit u on x up to c_out output channels (depthwise: groups = c_out), normalised by the pass as node `node`."""
    c = u.conv
    w = c.weight[:c_out] if groups > 1 else c.weight[:c_out, : x.shape[1]]
    z = p.norm(F.conv2d(x, w, None, c.stride, c.padding, c.dilation, groups), u.bn, node, u.act is not None)
    return z if u.pool is None else u.pool(z)


class Add(nn.Module):
    """The residual add of a block, ReLU'd after the sum in a "relu" space (ResNet; D44)."""

    def __init__(self, relu: bool):
        super().__init__()
        self.relu = bool(relu)

    def forward(self, y: torch.Tensor, shortcut: torch.Tensor) -> torch.Tensor:
        y = y + shortcut
        return F.relu(y) if self.relu else y
