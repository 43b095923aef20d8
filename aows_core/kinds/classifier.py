"""The classifier (§7): pooling and linear layers, the network's last edge (node n: the classes).

`linear` is the global average pool and one linear layer. Parameters after the name give the pooling and hidden
layers (D49, D54): `linear:1024:hardswish` is c_in → 1024, Hardswish, 1024 → classes (MobileNet-v3's head);
`linear:pool7:4096:relu:4096:relu` average-pools to 7×7 and flattens (c_in·49 features, channel-major, so that the
first c·49 are a width c's) before three linear layers (VGG's; AlexNet's with pool6). Hidden widths are kept as
traced, as a squeeze-and-excitation's squeeze width is. `linear:conv:relu` is a 1×1 convolution with bias to the
classes, the activation, then the global average pool (SqueezeNet's; D55).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from .base import UNIT_ACTIVATIONS, LayerKind, Pass, register


@register
class Classifier(LayerKind):
    """Average pool (global, or to pool×pool and flattened), then Linear layers with biases: hidden ones activated,
    the last to the classes; pooling is not counted in MACs."""

    name = "linear"
    classifier = True
    cost_family = "linear"
    hidden: tuple[int, ...] = ()
    acts: tuple[str, ...] = ()
    pool: int = 0  # 0: global average pool; k: adaptive average pool to k×k, flattened
    conv_act: str = ""  # a 1×1 convolution to the classes with this activation, before the global pool (D55)

    def variant(self, args: Sequence[str]) -> LayerKind:
        args = list(args)
        if args[:1] == ["conv"]:
            if len(args) != 2 or args[1] not in UNIT_ACTIVATIONS:
                raise ValueError(f"layer kind 'linear:conv' takes the activation after its convolution "
                                 f"{UNIT_ACTIVATIONS} ('linear:conv:relu'), got {':'.join(args)!r}")
            v = copy.copy(self)
            v.conv_act = args[1]
            return v
        pool = 0
        if args and args[0].startswith("pool") and args[0][4:].isdigit() and int(args[0][4:]) >= 1:
            pool = int(args.pop(0)[4:])
        pairs = list(zip(args[::2], args[1::2]))
        if len(args) % 2 or any(not h.isdigit() or int(h) < 1 or a not in UNIT_ACTIVATIONS for h, a in pairs) \
                or not (pool or pairs):
            raise ValueError(f"layer kind 'linear' takes an optional pooled size pool<k> and hidden widths, each with "
                             f"its activation {UNIT_ACTIVATIONS} ('linear:1024:hardswish', "
                             f"'linear:pool7:4096:relu:4096:relu'), got {':'.join(args)!r}")
        v = copy.copy(self)
        v.pool, v.hidden, v.acts = pool, tuple(int(h) for h, _ in pairs), tuple(a for _, a in pairs)
        return v

    def features(self, c: int) -> int:
        """Pooled features of c channels: what the first linear layer reads."""
        return c * max(1, self.pool) ** 2

    def pooled(self, x: Any) -> Any:
        """Features (B, C, H, W) pooled as this classifier reads them: (B, C), or (B, C·pool²) channel-major; a
        convolutional classifier reads them unpooled."""
        if self.conv_act:
            return x
        if not self.pool:
            return x.mean((2, 3))
        import torch.nn.functional as F

        return F.adaptive_avg_pool2d(x, self.pool).flatten(1)

    def out_hw(self, t: Any) -> tuple[int, int]:
        return 1, 1

    def _widths(self, c_in: int, c_out: int) -> list[int]:
        return [self.features(c_in), *self.hidden, c_out]

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        if self.conv_act:
            return c_in * c_out * t.in_h * t.in_w
        w = self._widths(c_in, c_out)
        return sum(a * b for a, b in zip(w, w[1:]))

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        if self.conv_act:
            return (c_in + 1) * c_out
        w = self._widths(c_in, c_out)
        return sum((a + 1) * b for a, b in zip(w, w[1:]))

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        if self.conv_act:
            return (c_in + c_out) * t.in_h * t.in_w + c_in * c_out
        return c_in * t.in_h * t.in_w + self.macs(t, c_in, c_out)

    def writes(self, prefix: str) -> tuple[str, ...]:
        return ()  # the classes: never reordered

    def reads(self, prefix: str) -> tuple[str, ...]:
        first = "conv" if self.conv_act else "hidden" if self.hidden else ""
        return (f"{prefix}.{first}.weight" if first else f"{prefix}.weight",)

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from torch import nn

        if self.conv_act:
            from .units import ConvHead

            return ConvHead(c_in, c_out, self.conv_act, device)
        if self.hidden:
            from .units import Head

            return Head(self.features(c_in), self.hidden, c_out, self.acts, device)
        return nn.Linear(self.features(c_in), c_out, device=device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        import torch.nn.functional as F

        from .units import ACTIVATION_FUNCTIONS, hidden_name

        if self.conv_act:
            w, b = mod.conv.weight, mod.conv.bias
            z = F.conv2d(xs[0], w[:, : p.width(src)], b)
            return ACTIVATION_FUNCTIONS[self.conv_act](z).mean((2, 3))
        x = self.pooled(xs[0])
        n = self.features(p.width(src))  # the pass's first channels' features (masked ones are zero)
        first = mod.hidden if self.hidden else mod
        x = F.linear(x, first.weight[:, :n], first.bias)
        if not self.hidden:
            return x
        x = ACTIVATION_FUNCTIONS[self.acts[0]](x)
        for i, a in enumerate(self.acts[1:], 1):
            x = ACTIVATION_FUNCTIONS[a](getattr(mod, hidden_name(i))(x))
        return mod.out(x)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        from .units import hidden_name

        if self.conv_act:
            w, b = g.param(f"{path}.conv.weight", (c_out, c_in, 1, 1)), g.param(f"{path}.conv.bias", (c_out,))
            g.node("Conv", [xs[0], w, b], [f"{path}.conv"], name=f"{path}.conv", kernel_shape=[1, 1])
            g.activation(f"{path}.conv", f"{path}.act", self.conv_act)
            g.node("GlobalAveragePool", [f"{path}.act"], ["pool"], name="pool")
            g.node("Flatten", ["pool"], [out], name="classifier", axis=1)
            return
        if not self.pool:
            g.node("GlobalAveragePool", [xs[0]], ["pool"], name="pool")
        else:
            g.adaptive_average_pool(xs[0], "pool", (t.in_h, t.in_w), self.pool)
        g.node("Flatten", ["pool"], ["flatten"], name="flatten", axis=1)
        widths, x = self._widths(c_in, c_out), "flatten"
        for i, a in enumerate(self.acts):
            name = f"{path}.{hidden_name(i)}"
            w, b = g.param(f"{name}.weight", (widths[i + 1], widths[i])), g.param(f"{name}.bias", (widths[i + 1],))
            g.node("Gemm", [x, w, b], [name], name=name, transB=1)
            x = f"{name}.act"
            g.activation(name, x, a)
        last = f"{path}.out" if self.hidden else path
        w, b = g.param(f"{last}.weight", (c_out, widths[-2])), g.param(f"{last}.bias", (c_out,))
        g.node("Gemm", [x, w, b], [out], name="classifier", transB=1)
