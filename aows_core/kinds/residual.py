"""The residual add (D44): sums a block's branch and its shortcut on one width, ReLU'd after the sum in a "relu"
space (ResNet), not in a "relu6" one (MobileNet-v2); `sum` never activates it (MNASNet's blocks in a ReLU network,
D48). No parameters, no MACs; its latency is a variable (Θ, c, c)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .base import Parameterless, Pass, register


@register
class ResidualAdd(Parameterless):
    """y + shortcut (+ ReLU in a "relu" space) on one width."""

    name = "add"
    one_width = True

    def activated(self, act: str) -> bool:
        """Whether the sum is ReLU'd in a space of activation `act`."""
        return act == "relu"

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return 3 * c_out * ho * wo  # two operands read, one written

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Add

        return Add(self.activated(act))

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        return mod(xs[0], xs[1])  # both terms are zero beyond the node's width, so is their sum (and its ReLU)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        if self.activated(g.act):
            g.node("Add", list(xs), [f"{path}.sum"], name=f"{path}.sum")
            g.node("Relu", [f"{path}.sum"], [out], name=out)
        else:
            g.node("Add", list(xs), [out], name=out)


@register
class PlainSum(ResidualAdd):
    """y + shortcut, never activated: a linear bottleneck's sum in a ReLU network (MNASNet)."""

    name = "sum"

    def activated(self, act: str) -> bool:
        return False
