"""Convolutional kinds (§7; docs/method.md D44, D45): conv, convpool, pconv, dw, dwsep.

- `conv`: k×k conv + BN + activation (MobileNet's stem, ResNet's inner convs);
- `convpool`: the same followed by a 3×3/2 max-pool (ResNet's stem);
- `pconv`: k×k conv + BN without activation (a block's projection: the last layer before a residual add);
- `dw`: depthwise k×k conv + BN + activation on one width (MobileNet-v2's expansion);
- `dwsep`: depthwise k×k + BN + activation, then pointwise 1×1 + BN + activation (a MobileNet-v1 layer).
A depthwise unit is normalised (and masked) as its input node (D10).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .base import ConvShape, LayerKind, Pass, register


def _conv_hw(t: Any) -> tuple[int, int]:
    pad = t.kernel // 2
    return (t.in_h + 2 * pad - t.kernel) // t.stride + 1, (t.in_w + 2 * pad - t.kernel) // t.stride + 1


@register
class Conv(LayerKind):
    """k×k conv + BN + activation, c_in → c_out."""

    name = "conv"
    activated = True
    pooled = False

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = _conv_hw(t)  # a convpool's convolution, before its max-pool
        return c_in * c_out * t.kernel * t.kernel * ho * wo

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * c_out * t.kernel * t.kernel + 2 * c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        ho, wo = self.out_hw(t)
        return c_out * ho * wo + c_in * c_out * t.kernel * t.kernel

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Unit

        return Unit(ConvShape(c_in, c_out, t.kernel, t.stride), norm, act if self.activated else None, self.pooled,
                    device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        from .units import unit_forward

        return unit_forward(mod, xs[0], p.width(dst), 1, dst, p)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        g.conv_unit(xs[0], out, path, ConvShape(c_in, c_out, t.kernel, t.stride), act=self.activated,
                    pool=self.pooled)


@register
class ConvPool(Conv):
    """k×k conv + BN + activation + 3×3/2 max-pool (ResNet's stem)."""

    name = "convpool"
    pooled = True

    def out_hw(self, t: Any) -> tuple[int, int]:
        h, w = _conv_hw(t)
        return (h - 1) // 2 + 1, (w - 1) // 2 + 1


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

        return Unit(ConvShape(c_in, c_in, t.kernel, t.stride, c_in), norm, act, device=device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        from .units import unit_forward

        return unit_forward(mod, xs[0], p.width(src), p.width(src), src, p)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        g.conv_unit(xs[0], out, path, ConvShape(c_in, c_in, t.kernel, t.stride, c_in))


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
