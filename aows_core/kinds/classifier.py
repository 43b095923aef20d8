"""The classifier (§7): global average pool and a linear layer, the network's last edge (node n: the classes).

`linear:<h>:<act>` is a classifier of two linear layers, c_in → h, the activation, h → classes (MobileNet-v3's
head; D49): its hidden width h is kept as traced, as a squeeze-and-excitation's squeeze width is.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from .base import UNIT_ACTIVATIONS, LayerKind, Pass, register


@register
class Classifier(LayerKind):
    """Global average pool, then Linear(c_in, classes) (or Linear(c_in, h), activation, Linear(h, classes)); pooling
    is not counted in MACs."""

    name = "linear"
    classifier = True
    cost_family = "linear"
    hidden: int = 0
    act: str = ""

    def variant(self, args: Sequence[str]) -> LayerKind:
        if len(args) != 2 or not args[0].isdigit() or int(args[0]) < 1 or args[1] not in UNIT_ACTIVATIONS:
            raise ValueError(f"layer kind 'linear' takes a hidden width and its activation {UNIT_ACTIVATIONS} "
                             f"('linear:1024:hardswish'), got {':'.join(args)!r}")
        v = copy.copy(self)
        v.hidden, v.act = int(args[0]), args[1]
        return v

    def out_hw(self, t: Any) -> tuple[int, int]:
        return 1, 1

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        return (c_in + c_out) * self.hidden if self.hidden else c_in * c_out

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        if self.hidden:
            return (c_in + 1) * self.hidden + (self.hidden + 1) * c_out
        return c_in * c_out + c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * t.in_h * t.in_w + self.macs(t, c_in, c_out)

    def writes(self, prefix: str) -> tuple[str, ...]:
        return ()  # the classes: never reordered

    def reads(self, prefix: str) -> tuple[str, ...]:
        return (f"{prefix}.hidden.weight",) if self.hidden else (f"{prefix}.weight",)

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from torch import nn

        if self.hidden:
            from .units import Head

            return Head(c_in, self.hidden, c_out, self.act, device)
        return nn.Linear(c_in, c_out, device=device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        import torch.nn.functional as F

        from .units import ACTIVATION_FUNCTIONS

        x = xs[0].mean((2, 3))
        if not self.hidden:
            return F.linear(x, mod.weight[:, : p.width(src)], mod.bias)
        h = ACTIVATION_FUNCTIONS[self.act](F.linear(x, mod.hidden.weight[:, : p.width(src)], mod.hidden.bias))
        return mod.out(h)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        g.node("GlobalAveragePool", [xs[0]], ["pool"], name="pool")
        g.node("Flatten", ["pool"], ["flatten"], name="flatten", axis=1)
        if not self.hidden:
            w, b = g.param(f"{path}.weight", (c_out, c_in)), g.param(f"{path}.bias", (c_out,))
            g.node("Gemm", ["flatten", w, b], [out], name="classifier", transB=1)
            return
        w1, b1 = g.param(f"{path}.hidden.weight", (self.hidden, c_in)), g.param(f"{path}.hidden.bias", (self.hidden,))
        w2, b2 = g.param(f"{path}.out.weight", (c_out, self.hidden)), g.param(f"{path}.out.bias", (c_out,))
        g.node("Gemm", ["flatten", w1, b1], [f"{path}.hidden"], name=f"{path}.hidden", transB=1)
        g.activation(f"{path}.hidden", f"{path}.act", self.act)
        g.node("Gemm", [f"{path}.act", w2, b2], [out], name="classifier", transB=1)
