"""Convolutional kinds (§7; docs/method.md D44, D45): conv, convpool, pconv, dw, dwsep.

- `conv`: k×k conv + BN + activation (MobileNet's stem, ResNet's inner convs);
- `convpool`: the same followed by a 3×3/2 max-pool (ResNet's stem);
- `pconv`: k×k conv + BN without activation (a block's projection: the last layer before a residual add);
- `dw`: depthwise k×k conv + BN + activation on one width (MobileNet-v2's expansion);
- `dwsep`: depthwise k×k + BN + activation, then pointwise 1×1 + BN + activation (a MobileNet-v1 layer);
- `gconv:<g>`: grouped k×k conv + BN + activation on one width c, in groups of g channels (c / g groups: a narrower
  width keeps the group width and runs fewer groups; ResNeXt, RegNet; D49).
A depthwise or grouped unit is normalised (and masked) as its input node (D10). An activated unit names its own
activation as a parameter, `conv:hardswish`, `dw:silu`, `gconv:16:relu6` (D49); without one it runs the space's.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from .base import UNIT_ACTIVATIONS, ConvShape, LayerKind, Pass, PoolShape, register


def _with_act(kind: LayerKind, args: Sequence[str]) -> LayerKind:
    """`kind` with its own activation `args[0]` (D49)."""
    if len(args) != 1 or args[0] not in UNIT_ACTIVATIONS:
        raise ValueError(f"layer kind {kind.name!r} takes one parameter, the unit's activation (one of "
                         f"{UNIT_ACTIVATIONS}), got {':'.join(args)!r}")
    v = copy.copy(kind)
    v.act = args[0]
    return v


@register
class Conv(LayerKind):
    """k×k conv + BN + activation, c_in → c_out. Parameters (D49, D54), in this order: the unit's own activation;
    `p<n>` a zero padding other than k // 2; `bias` a conv bias before the BN, or `nobn` a conv with bias and no BN;
    for `convpool`, `mp<k>s<s>p<p>[c]` a max-pool other than 3×3/2 padded by 1 (`c`: ceil mode). `conv:p2:nobn` is
    AlexNet's first layer (as `convpool:p2:nobn:mp3s2p0`), `convpool:bias:mp2s2p0` a VGG-BN layer before its pool."""

    name = "conv"
    activated = True
    pool: PoolShape | None = None
    act: str | None = None  # the unit's own activation (D49); None: the space's
    pad: int | None = None  # None: k // 2
    bias = False  # a conv bias before the BN
    norm = True  # False: no BatchNorm (the conv has a bias)

    def variant(self, args: Sequence[str]) -> LayerKind:
        v = copy.copy(self)
        for a in args:
            pool = PoolShape.parse(a)
            if a in UNIT_ACTIVATIONS and self.activated and v.act is None:
                v.act = a
            elif a[:1] == "p" and a[1:].isdigit() and v.pad is None:
                v.pad = int(a[1:])
            elif a in ("bias", "nobn") and v.bias == self.bias and v.norm == self.norm:
                v.bias, v.norm = a == "bias", a == "bias"
            elif pool and self.pool is not None and v.pool is self.pool:
                v.pool = pool
            else:
                raise ValueError(f"layer kind {self.name!r} takes, once each: the unit's activation "
                                 f"{UNIT_ACTIVATIONS if self.activated else '(none: it has no activation)'}, a padding "
                                 f"p<n>, bias or nobn{', a max-pool mp<k>s<s>p<p>[c]' if self.pool else ''}; got "
                                 f"{':'.join(args)!r}")
        return v

    def shape(self, t: Any, c_in: int, c_out: int) -> ConvShape:
        return ConvShape(c_in, c_out, t.kernel, t.stride, pad=self.pad)

    def _conv_hw(self, t: Any) -> tuple[int, int]:
        pad = self.shape(t, 1, 1).padding
        return (t.in_h + 2 * pad - t.kernel) // t.stride + 1, (t.in_w + 2 * pad - t.kernel) // t.stride + 1

    def out_hw(self, t: Any) -> tuple[int, int]:
        h, w = self._conv_hw(t)
        return (h, w) if self.pool is None else (self.pool.out(h), self.pool.out(w))

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self._conv_hw(t)  # a convpool's convolution, before its max-pool
        return c_in * c_out * t.kernel * t.kernel * ho * wo

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * c_out * t.kernel * t.kernel + (2 * c_out if self.norm else 0) + (c_out if self.has_bias else 0)

    @property
    def has_bias(self) -> bool:
        """The training form's conv has a bias (its own, or in place of a BN)."""
        return self.bias or not self.norm

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_out * ho * wo + c_in * c_out * t.kernel * t.kernel

    def writes(self, prefix: str) -> tuple[str, ...]:
        bn = super().writes(prefix)[1:] if self.norm else ()
        return (f"{prefix}.conv.weight", *((f"{prefix}.conv.bias",) if self.has_bias else ()), *bn)

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Unit

        return Unit(self.shape(t, c_in, c_out), norm if self.norm else None,
                    (self.act or act) if self.activated else None, self.pool, device, bias=self.bias)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        from .units import unit_forward

        return unit_forward(mod, xs[0], p.width(dst), 1, dst, p, self.act)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        g.conv_unit(xs[0], out, path, self.shape(t, c_in, c_out),
                    act=(self.act or True) if self.activated else False, pool=self.pool)


@register
class ConvPool(Conv):
    """k×k conv + BN + activation + 3×3/2 max-pool padded by 1 (ResNet's stem), or the max-pool its parameter
    names."""

    name = "convpool"
    pool = PoolShape()


@register
class Projection(Conv):
    """k×k conv + BN, no activation: the last layer of a residual branch, or its projection shortcut."""

    name = "pconv"
    activated = False


@register
class Depthwise(LayerKind):
    """Depthwise k×k conv + BN + activation on one width c (c_in = c_out)."""

    name = "dw"
    one_width = True
    cost_family = "dwsep"
    act: str | None = None

    def variant(self, args: Sequence[str]) -> LayerKind:
        return _with_act(self, args)

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_out * t.kernel * t.kernel * ho * wo

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return c_out * t.kernel * t.kernel + 2 * c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_in * t.in_h * t.in_w + c_out * ho * wo + c_out * t.kernel * t.kernel

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Unit

        return Unit(ConvShape(c_in, c_in, t.kernel, t.stride, c_in), norm, self.act or act, device=device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        from .units import unit_forward

        return unit_forward(mod, xs[0], p.width(src), p.width(src), src, p, self.act)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        g.conv_unit(xs[0], out, path, ConvShape(c_in, c_in, t.kernel, t.stride, c_in), act=self.act or True)


@register
class GroupedConv(LayerKind):
    """Grouped k×k conv + BN + activation on one width c, in groups of `g` channels: `gconv:<g>[:<activation>]`."""

    name = "gconv"
    one_width = True
    act: str | None = None
    g: int = 0

    def variant(self, args: Sequence[str]) -> LayerKind:
        if not args or not args[0].isdigit() or int(args[0]) < 1 or len(args) > 2:
            raise ValueError(f"layer kind 'gconv' takes the group width and optionally the unit's activation "
                             f"('gconv:16', 'gconv:16:silu'), got {':'.join(args)!r}")
        v = _with_act(self, args[1:]) if len(args) == 2 else copy.copy(self)
        v.g = int(args[0])
        return v

    def group_width(self) -> int:
        return self.g

    def _groups(self, c: int) -> int:
        if self.g < 1 or c % self.g:
            raise ValueError(f"layer kind {self.name!r}: width {c} is not a multiple of the group width {self.g}")
        return c // self.g

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_out * self.g * t.kernel * t.kernel * ho * wo

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return c_out * self.g * t.kernel * t.kernel + 2 * c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_in * t.in_h * t.in_w + c_out * ho * wo + c_out * self.g * t.kernel * t.kernel

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Unit

        return Unit(ConvShape(c_in, c_in, t.kernel, t.stride, self._groups(c_in)), norm, self.act or act,
                    device=device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        from .units import unit_forward

        c = p.width(src)
        return unit_forward(mod, xs[0], c, self._groups(c), src, p, self.act)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        g.conv_unit(xs[0], out, path, ConvShape(c_in, c_in, t.kernel, t.stride, self._groups(c_in)),
                    act=self.act or True)


@register
class DepthwiseSeparable(LayerKind):
    """Depthwise k×k + BN + activation on c_in, then pointwise 1×1 + BN + activation c_in → c_out (MobileNet-v1)."""

    name = "dwsep"
    cost_family = "dwsep"

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_in * t.kernel * t.kernel * ho * wo + c_in * c_out * ho * wo

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * t.kernel * t.kernel + 2 * c_in + c_in * c_out + 2 * c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_in * ho * wo + c_out * ho * wo + c_in * t.kernel * t.kernel + c_in * c_out

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from torch import nn

        from .units import Unit

        return nn.Sequential(Unit(ConvShape(c_in, c_in, t.kernel, t.stride, c_in), norm, act, device=device),
                             Unit(ConvShape(c_in, c_out), norm, act, device=device))

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        from .units import unit_forward

        x = unit_forward(mod[0], xs[0], p.width(src), p.width(src), src, p)  # the depthwise unit as its input (D10)
        return unit_forward(mod[1], x, p.width(dst), 1, dst, p)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        h = g.conv_unit(xs[0], f"{path}.0", f"{path}.0", ConvShape(c_in, c_in, t.kernel, t.stride, c_in))
        g.conv_unit(h, out, f"{path}.1", ConvShape(c_in, c_out))
