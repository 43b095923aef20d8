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

ACTIVATION_MODULES: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish,
                                                  "silu": nn.SiLU, "sigmoid": nn.Sigmoid,
                                                  "hardsigmoid": nn.Hardsigmoid}


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


ACTIVATION_FUNCTIONS = {"relu": F.relu, "relu6": F.relu6, "hardswish": F.hardswish, "silu": F.silu,
                        "sigmoid": torch.sigmoid, "hardsigmoid": F.hardsigmoid}


def unit_forward(u: Unit, x: torch.Tensor, c_out: int, groups: int, node: int, p: Pass,
                 own_act: str | None = None) -> torch.Tensor:
    """Unit u on x up to c_out output channels (grouped: `groups` groups, depthwise: groups = c_out), normalised by
    the pass as node `node`; its activation the space's, fused into the normalisation, or `own_act` (a unit of its
    own activation, applied after the mask: it maps 0 to 0, D49)."""
    c = u.conv
    w = c.weight[:c_out] if groups > 1 else c.weight[:c_out, : x.shape[1]]
    fused = u.act is not None and own_act is None
    z = p.norm(F.conv2d(x, w, None, c.stride, c.padding, c.dilation, groups), u.bn, node, fused)
    if own_act is not None:
        z = ACTIVATION_FUNCTIONS[own_act](z)
    return z if u.pool is None else u.pool(z)


class Excitation(nn.Module):
    """Squeeze-and-excitation on c channels (`kinds.excitation`): x · gate(fc2(act(fc1(pool(x))))), fc1 and fc2
    1×1 convolutions with biases through s channels (torchvision's `SqueezeExcitation` names)."""

    def __init__(self, c: int, s: int, act: str, gate: str, device=None):
        super().__init__()
        self.fc1 = nn.Conv2d(c, s, 1, device=device)
        self.fc2 = nn.Conv2d(s, c, 1, device=device)
        self.act, self.gate = ACTIVATION_FUNCTIONS[act], ACTIVATION_FUNCTIONS[gate]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(x.mean((2, 3), keepdim=True)))))


class Head(nn.Module):
    """A classifier of two linear layers on pooled features: `out`(act(`hidden`(x))) (`kinds.classifier`, D49)."""

    def __init__(self, c: int, hidden: int, classes: int, act: str, device=None):
        super().__init__()
        self.hidden = nn.Linear(c, hidden, device=device)
        self.out = nn.Linear(hidden, classes, device=device)
        self.act = ACTIVATION_FUNCTIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.hidden(x)))


class Add(nn.Module):
    """The residual add of a block, ReLU'd after the sum in a "relu" space (ResNet; D44)."""

    def __init__(self, relu: bool):
        super().__init__()
        self.relu = bool(relu)

    def forward(self, y: torch.Tensor, shortcut: torch.Tensor) -> torch.Tensor:
        y = y + shortcut
        return F.relu(y) if self.relu else y
