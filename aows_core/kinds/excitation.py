"""Squeeze-and-excitation (D49): x · gate(fc2(act(fc1(pool(x))))) on one width c, `se:<s>:<activation>:<gate>`.

fc1 and fc2 are 1×1 convolutions with biases (torchvision's `SqueezeExcitation`); the squeeze width `s` is the
traced one at every c (not searched: the product costs c·s MACs twice, a small part of its block). A masked channel
of x is zero, pools to zero and is multiplied by its gate: zero again, so the masked supernet equals the reduced
network exactly (§5). Its latency is a variable (Θ, c, c) of its own kind string.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from .base import GATES, UNIT_ACTIVATIONS, LayerKind, Pass, register


@register
class SqueezeExcite(LayerKind):
    """x · gate(fc2(act(fc1(global average pool of x)))) on one width; `se:<s>:<activation>:<gate>`."""

    name = "se"
    one_width = True
    cost_family = "linear"
    s: int = 0
    act: str = "relu"
    gate: str = "sigmoid"

    def variant(self, args: Sequence[str]) -> LayerKind:
        if len(args) != 3 or not args[0].isdigit() or int(args[0]) < 1 or args[1] not in UNIT_ACTIVATIONS \
                or args[2] not in GATES:
            raise ValueError(f"layer kind 'se' takes the squeeze width, its activation {UNIT_ACTIVATIONS} and its "
                             f"gate {GATES} ('se:16:relu:sigmoid'), got {':'.join(args)!r}")
        v = copy.copy(self)
        v.s, v.act, v.gate = int(args[0]), args[1], args[2]
        return v

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        return 2 * c_out * self.s

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return 2 * c_out * self.s + self.s + c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        return 3 * c_out * t.in_h * t.in_w + 2 * c_out * self.s  # x read twice (pool, product), written once

    def writes(self, prefix: str) -> tuple[str, ...]:
        return (f"{prefix}.fc2.weight", f"{prefix}.fc2.bias")

    def reads(self, prefix: str) -> tuple[str, ...]:
        return (f"{prefix}.fc1.weight",)

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Excitation

        return Excitation(c_in, self.s, self.act, self.gate, device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        import torch.nn.functional as F

        from .units import ACTIVATION_FUNCTIONS

        x = xs[0]
        c = x.shape[1]
        h = ACTIVATION_FUNCTIONS[self.act](F.conv2d(x.mean((2, 3), keepdim=True), mod.fc1.weight[:, :c], mod.fc1.bias))
        return x * ACTIVATION_FUNCTIONS[self.gate](F.conv2d(h, mod.fc2.weight[:c], mod.fc2.bias[:c]))

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        x = xs[0]
        w1, b1 = g.param(f"{path}.fc1.weight", (self.s, c_in, 1, 1)), g.param(f"{path}.fc1.bias", (self.s,))
        w2, b2 = g.param(f"{path}.fc2.weight", (c_in, self.s, 1, 1)), g.param(f"{path}.fc2.bias", (c_in,))
        g.node("GlobalAveragePool", [x], [f"{path}.pool"], name=f"{path}.pool")
        g.node("Conv", [f"{path}.pool", w1, b1], [f"{path}.fc1"], name=f"{path}.fc1", kernel_shape=[1, 1])
        g.activation(f"{path}.fc1", f"{path}.act", self.act)
        g.node("Conv", [f"{path}.act", w2, b2], [f"{path}.fc2"], name=f"{path}.fc2", kernel_shape=[1, 1])
        g.activation(f"{path}.fc2", f"{path}.gate", self.gate)
        g.node("Mul", [x, f"{path}.gate"], [out], name=out)
