"""Concatenation and a max-pool of its own (D55): the parallel branches of a block joined along channels (SqueezeNet's
Fire modules), and a max-pool that follows such a join.

`cat` joins a block's main branch and its shortcut branch, in that order (`cat:r`: the shortcut's first). Its
operands and its result keep their traced widths: a masked channel inside a concatenation would sit between the
operands' kept ones, so the tracer fixes every node a concatenation touches (`aows_core.tracing`) and the space
refuses a searched one (`aows_core.space:check_blocks`). `maxpool` is a max-pool on one width (`maxpool:mp3s2p0c`,
the pool as `convpool` names it, D54): a masked channel is zero and its max too. Neither has parameters or MACs;
each latency is a variable of its own (eq. lat).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from .base import LayerKind, Parameterless, Pass, PoolShape, register


@register
class Concat(Parameterless):
    """cat(main, shortcut) along channels (`cat:r`: cat(shortcut, main)), every width fixed."""

    name = "cat"
    keeps_widths = True
    reverse = False

    def variant(self, args: Sequence[str]) -> LayerKind:
        if list(args) != ["r"]:
            raise ValueError(f"layer kind 'cat' takes one parameter, r (the shortcut's branch first), got "
                             f"{':'.join(args)!r}")
        v = copy.copy(self)
        v.reverse = True
        return v

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        return 2 * c_out * t.in_h * t.in_w  # every operand read, the result written

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Concatenation

        return Concatenation(self.reverse)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        return mod(xs[0], xs[1])

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        g.node("Concat", list(reversed(xs)) if self.reverse else list(xs), [out], name=out, axis=1)


@register
class MaxPool(Parameterless):
    """A max-pool on one width: 3×3/2 padded by 1, or the one its parameter names (`maxpool:mp3s2p0c`)."""

    name = "maxpool"
    one_width = True
    pool = PoolShape()

    def variant(self, args: Sequence[str]) -> LayerKind:
        pool = PoolShape.parse(args[0]) if len(args) == 1 else None
        if pool is None:
            raise ValueError(f"layer kind 'maxpool' takes one parameter, the pool mp<k>s<s>p<p>[c] ('mp3s2p0c'), "
                             f"got {':'.join(args)!r}")
        v = copy.copy(self)
        v.pool = pool
        return v

    def out_hw(self, t: Any) -> tuple[int, int]:
        return self.pool.out(t.in_h), self.pool.out(t.in_w)

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_out * (t.in_h * t.in_w + ho * wo)

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from torch import nn

        p = self.pool
        return nn.MaxPool2d(p.k, p.s, p.p, ceil_mode=p.ceil)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        return mod(xs[0])

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        p = self.pool
        g.node("MaxPool", [xs[0]], [out], name=out, kernel_shape=[p.k] * 2, strides=[p.s] * 2, pads=[p.p] * 4,
               ceil_mode=int(p.ceil))
