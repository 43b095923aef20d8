"""The classifier (§7) and the hidden linear layers before it (D49, D54, D56).

`linear` is the network's last edge (node n: the classes): the global average pool and a linear layer. Its
parameter names how it reads the features: `linear:pool7` average-pools to 7×7 and flattens them (c·49 features,
channel-major, so that the first c'·49 are a width c''s: VGG's; AlexNet's with pool6), `linear:flat` reads the flat
output of a hidden layer, `linear:conv:relu` is a 1×1 convolution with bias to the classes, the activation, then
the global average pool (SqueezeNet's; D55).

`fc` is a hidden linear layer with bias and its activation, c_in → c_out, its width a node of the space like any
other (D56): the first after the features pools them as `linear` does (`fc:gap:hardswish`, MobileNet-v3's;
`fc:pool7:relu`, VGG's), later ones read flat features (`fc:relu`).

Either takes `d<p>` last: Dropout(p) on its input while a fixed network trains (`linear:flat:d0.5`, VGG's; D57).
The supernet and every timed or exported network have none (it changes no eval output).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from .base import UNIT_ACTIVATIONS, LayerKind, Pass, register


def _dropout(args: Sequence[str]) -> tuple[float, list[str]]:
    """(p, the other tokens) of a kind's parameters ending in `d<p>`, 0 < p < 1 (Dropout(p) on the layer's input)."""
    args = list(args)
    if args and args[-1][:1] == "d" and args[-1] != "d":
        try:
            p = float(args[-1][1:])
        except ValueError:
            return 0.0, args
        if not 0 < p < 1:
            raise ValueError(f"a layer's dropout d<p> takes 0 < p < 1, got {args[-1]!r}")
        return p, args[:-1]
    return 0.0, args


def _pooling(token: str) -> int | None:
    """How a token pools the features: `gap` 0 (global), `pool<k>` k (to k×k, flattened), else None."""
    if token == "gap":
        return 0
    if token.startswith("pool") and token[4:].isdigit() and int(token[4:]) >= 1:
        return int(token[4:])
    return None


class _Pooling(LayerKind):
    """A linear layer on the features: pooled as `pool` says (None: already flat)."""

    cost_family = "linear"
    dropout = 0.0  # Dropout(p) on the layer's input while a fixed network trains (D57)
    pool: int | None = 0  # None: flat features; 0: global average pool; k: adaptive average pool to k×k, flattened

    def features(self, c: int) -> int:
        """The features of c channels the layer reads."""
        return c * self.pool ** 2 if self.pool else c

    def pooled(self, x: Any) -> Any:
        """Features pooled as this layer reads them: (B, C), or (B, C·pool²) channel-major; flat ones as they are."""
        if self.pool is None:
            return x
        if not self.pool:
            return super().pooled(x)
        import torch.nn.functional as F

        return F.adaptive_avg_pool2d(x, self.pool).flatten(1)

    def out_hw(self, t: Any) -> tuple[int, int]:
        return 1, 1

    def _read(self, t: Any, c_in: int) -> int:
        """Elements read: the feature map (or the flat features)."""
        return c_in * t.in_h * t.in_w if self.pool is not None else c_in

    def _onnx_pool(self, g: Any, t: Any, x: str, path: str) -> str:
        """The pooling's nodes: the flat features' tensor name."""
        if self.pool is None:
            return x
        if not self.pool:
            g.node("GlobalAveragePool", [x], [f"{path}.pool"], name=f"{path}.pool")
        else:
            g.adaptive_average_pool(x, f"{path}.pool", (t.in_h, t.in_w), self.pool)
        g.node("Flatten", [f"{path}.pool"], [f"{path}.flat"], name=f"{path}.flat", axis=1)
        return f"{path}.flat"


@register
class Classifier(_Pooling):
    """Pooling (global, to pool×pool and flattened, or none after a hidden layer), then Linear(·, classes) with bias;
    or a 1×1 convolution, its activation and the global pool. Pooling is not counted in MACs."""

    name = "linear"
    classifier = True
    conv_act: str = ""  # a 1×1 convolution to the classes with this activation, before the global pool (D55)

    def variant(self, args: Sequence[str]) -> LayerKind:
        v = copy.copy(self)
        v.dropout, args = _dropout(args)
        if len(args) == 2 and args[0] == "conv" and args[1] in UNIT_ACTIVATIONS:
            v.conv_act, v.pool = args[1], 0
        elif args == ["flat"]:
            v.pool = None
        elif len(args) == 1 and _pooling(args[0]):
            v.pool = _pooling(args[0])
        elif args:
            raise ValueError(f"layer kind 'linear' takes one of: flat, pool<k>, conv:<activation> "
                             f"{UNIT_ACTIVATIONS}, then optionally d<p> (dropout); got {':'.join(args)!r}")
        return v

    def pooled(self, x: Any) -> Any:
        return x if self.conv_act else super().pooled(x)  # a convolutional classifier pools after its convolution

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * c_out * t.in_h * t.in_w if self.conv_act else self.features(c_in) * c_out

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return (self.features(c_in) + 1) * c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        if self.conv_act:
            return (c_in + c_out) * t.in_h * t.in_w + c_in * c_out
        return self._read(t, c_in) + self.macs(t, c_in, c_out)

    def writes(self, prefix: str) -> tuple[str, ...]:
        return ()  # the classes: never reordered

    def reads(self, prefix: str) -> tuple[str, ...]:
        return (f"{prefix}.conv.weight",) if self.conv_act else (f"{prefix}.weight",)

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from torch import nn

        if self.conv_act:
            from .units import ConvHead

            return ConvHead(c_in, c_out, self.conv_act, device)
        return nn.Linear(self.features(c_in), c_out, device=device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        import torch.nn.functional as F

        from .units import ACTIVATION_FUNCTIONS

        if self.conv_act:
            z = F.conv2d(xs[0], mod.conv.weight[:, : p.width(src)], mod.conv.bias)
            return ACTIVATION_FUNCTIONS[self.conv_act](z).mean((2, 3))
        # the pass's first channels' features (masked ones are zero)
        return F.linear(self.pooled(xs[0]), mod.weight[:, : self.features(p.width(src))], mod.bias)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        if self.conv_act:
            w, b = g.param(f"{path}.conv.weight", (c_out, c_in, 1, 1)), g.param(f"{path}.conv.bias", (c_out,))
            g.node("Conv", [xs[0], w, b], [f"{path}.conv"], name=f"{path}.conv", kernel_shape=[1, 1])
            g.activation(f"{path}.conv", f"{path}.act", self.conv_act)
            g.node("GlobalAveragePool", [f"{path}.act"], [f"{path}.pool"], name=f"{path}.pool")
            g.node("Flatten", [f"{path}.pool"], [out], name="classifier", axis=1)
            return
        x = self._onnx_pool(g, t, xs[0], path)
        w, b = g.param(f"{path}.weight", (c_out, self.features(c_in))), g.param(f"{path}.bias", (c_out,))
        g.node("Gemm", [x, w, b], [out], name="classifier", transB=1)


@register
class FullyConnected(_Pooling):
    """A hidden Linear layer with bias and its activation on the (pooled) features: `fc:[gap|pool<k>:]<activation>`
    (D56)."""

    name = "fc"
    act = "relu"

    def variant(self, args: Sequence[str]) -> LayerKind:
        v = copy.copy(self)
        v.dropout, args = _dropout(args)
        v.pool = _pooling(args[0]) if len(args) == 2 else None
        if len(args) not in (1, 2) or args[-1] not in UNIT_ACTIVATIONS or (len(args) == 2 and v.pool is None):
            raise ValueError(f"layer kind 'fc' takes how it pools (gap or pool<k>; none: flat features), its "
                             f"activation {UNIT_ACTIVATIONS} and optionally d<p> (dropout) ('fc:gap:hardswish', "
                             f"'fc:relu:d0.5'), got {':'.join(args)!r}")
        v.act = args[-1]
        return v

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        return self.features(c_in) * c_out

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return (self.features(c_in) + 1) * c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        return self._read(t, c_in) + self.macs(t, c_in, c_out) + c_out

    def writes(self, prefix: str) -> tuple[str, ...]:
        return (f"{prefix}.weight", f"{prefix}.bias")

    def reads(self, prefix: str) -> tuple[str, ...]:
        return (f"{prefix}.weight",)

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from .units import Dense

        return Dense(self.features(c_in), c_out, self.pooled, self.act, self.dropout, device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        import torch.nn.functional as F

        from .units import ACTIVATION_FUNCTIONS

        c = p.width(dst)
        z = F.linear(self.pooled(xs[0]), mod.weight[:c, : self.features(p.width(src))], mod.bias[:c])
        return ACTIVATION_FUNCTIONS[self.act](p.norm(z, None, dst, False))  # masked, then its own activation

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        x = self._onnx_pool(g, t, xs[0], path)
        w, b = g.param(f"{path}.weight", (c_out, self.features(c_in))), g.param(f"{path}.bias", (c_out,))
        g.node("Gemm", [x, w, b], [f"{path}.linear"], name=f"{path}.linear", transB=1)
        g.activation(f"{path}.linear", out, self.act)
