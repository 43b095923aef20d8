"""Torch modules the built-in kinds are made of (§7): a conv unit and the residual add; imported by kinds' methods.

`Unit` is k×k conv (+ BN) (+ activation) (+ max-pool); `unit_forward` runs a unit inside the slimmable
supernet: its weight sliced to the pass's widths (depthwise: `groups` = its width), normalised as its node.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .base import ConvShape, Pass, PoolShape

ACTIVATION_MODULES: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish,
                                                  "silu": nn.SiLU, "sigmoid": nn.Sigmoid,
                                                  "hardsigmoid": nn.Hardsigmoid}


class Unit(nn.Sequential):
    """k×k conv (+ BN) (+ activation) (+ max-pool): one convolutional unit (§7), a sequence of the children it has
    (`bn`, `act`, `pool` are None when absent). The conv has a bias where there is no BN (`norm` None: the deployment
    form, or a unit without BatchNorm) or where `bias` asks (a conv with its own bias before its BN, VGG's)."""

    def __init__(self, shape: ConvShape, norm: Callable[[int], nn.Module] | None, act: str | None,
                 pool: PoolShape | None = None, device=None, bias: bool = False):
        super().__init__()
        s = shape
        parts = {"conv": nn.Conv2d(s.c_in, s.c_out, s.k, s.stride, s.padding, groups=s.groups,
                                   bias=norm is None or bias, device=device),
                 "bn": norm(s.c_out) if norm is not None else None,
                 "act": ACTIVATION_MODULES[act](inplace=True) if act else None,
                 "pool": nn.MaxPool2d(pool.k, pool.s, pool.p, ceil_mode=pool.ceil) if pool else None}
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
    b = c.bias[:c_out] if c.bias is not None else None
    fused = u.act is not None and own_act is None
    z = p.norm(F.conv2d(x, w, b, c.stride, c.padding, c.dilation, groups), u.bn, node, fused)
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


class Dense(nn.Linear):
    """A hidden linear layer with bias on the features pooled by `pooled` (Dropout(`dropout`) on them while training,
    D57), then its activation (`kinds.classifier`'s `fc`, D56)."""

    def __init__(self, c: int, out: int, pooled: Callable[[torch.Tensor], torch.Tensor], act: str,
                 dropout: float = 0.0, device=None):
        super().__init__(c, out, device=device)
        self.pooled, self.act = pooled, ACTIVATION_FUNCTIONS[act]
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(super().forward(self.drop(self.pooled(x))))


class ConvHead(nn.Module):
    """A convolutional classifier: global average pool of act(`conv`(x)), `conv` a 1×1 convolution with bias to the
    classes (SqueezeNet's; `kinds.classifier`, D55)."""

    def __init__(self, c: int, classes: int, act: str, device=None):
        super().__init__()
        self.conv = nn.Conv2d(c, classes, 1, device=device)
        self.act = ACTIVATION_FUNCTIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x)).mean((2, 3))


class Add(nn.Module):
    """The residual add of a block, ReLU'd after the sum in a "relu" space (ResNet; D44)."""

    def __init__(self, relu: bool):
        super().__init__()
        self.relu = bool(relu)

    def forward(self, y: torch.Tensor, shortcut: torch.Tensor) -> torch.Tensor:
        y = y + shortcut
        return F.relu(y) if self.relu else y


class Concatenation(nn.Module):
    """The channels of a block's main branch, then its shortcut's (`reverse`: the other way round; `kinds.concat`)."""

    def __init__(self, reverse: bool):
        super().__init__()
        self.reverse = bool(reverse)

    def forward(self, y: torch.Tensor, shortcut: torch.Tensor) -> torch.Tensor:
        return torch.cat([shortcut, y] if self.reverse else [y, shortcut], 1)
