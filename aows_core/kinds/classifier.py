"""The classifier (§7): global average pool and a linear layer, the network's last edge (node n: the classes)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .base import LayerKind, Pass, register


@register
class Classifier(LayerKind):
    """Global average pool, then Linear(c_in, classes); pooling is not counted in MACs."""

    name = "linear"
    classifier = True
    cost_family = "linear"

    def out_hw(self, t: Any) -> tuple[int, int]:
        return 1, 1

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * c_out

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * c_out + c_out

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        return c_in * t.in_h * t.in_w + c_in * c_out

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        from torch import nn

        return nn.Linear(c_in, c_out, device=device)

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        import torch.nn.functional as F

        return F.linear(xs[0].mean((2, 3)), mod.weight[:, : p.width(src)], mod.bias)

    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        w, b = f"{path}.weight", f"{path}.bias"
        g.param(w, (c_out, c_in))
        g.param(b, (c_out,))
        g.node("GlobalAveragePool", [xs[0]], ["pool"], name="pool")
        g.node("Flatten", ["pool"], ["flatten"], name="flatten", axis=1)
        g.node("Gemm", ["flatten", w, b], [out], name="classifier", transB=1)
