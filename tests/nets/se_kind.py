"""A squeeze-and-excitation layer as a new layer kind: the ONE file a user writes to add a kind (docs/extending.md).

`my_se` gates a node's c channels by sigmoid(W₂ ReLU(W₁ avgpool(x) + b₁) + b₂), a fixed squeeze width of SQUEEZE
channels (Hu et al. 2018). It reads and writes one width (its variable is (Θ, c, c)); it has no BatchNorm. Inside
the supernet its squeeze reads the first c channels of the pooled input, so a sample masked to c channels (zeros
beyond) computes exactly the reduced network's gate.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from aows_core.kinds import LayerKind, register

SQUEEZE = 8


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, device=None):
        super().__init__()
        self.fc1 = nn.Conv2d(c, SQUEEZE, 1, device=device)
        self.fc2 = nn.Conv2d(SQUEEZE, c, 1, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean((2, 3), keepdim=True)))))


@register
class SqueezeExciteKind(LayerKind):
    name = "my_se"
    one_width = True
    cost_family = "linear"

    def macs(self, t, c_in, c_out):
        return 2 * c_out * SQUEEZE

    def params(self, t, c_in, c_out):
        return 2 * c_out * SQUEEZE + SQUEEZE + c_out

    def moved(self, t, c_in, c_out):
        return 2 * c_out * t.in_h * t.in_w + 2 * c_out * SQUEEZE

    def module(self, t, c_in, c_out, *, norm, act, device=None):
        return SqueezeExcite(c_out, device=device)

    def forward(self, mod, xs, src, dst, p):
        x, c = xs[0], p.width(src)
        h = F.relu(F.conv2d(x.mean((2, 3), keepdim=True), mod.fc1.weight[:, :c], mod.fc1.bias))
        return x * torch.sigmoid(F.conv2d(h, mod.fc2.weight[:c], mod.fc2.bias[:c]))

    def onnx(self, g, t, xs, out, path, c_in, c_out):
        w1, b1 = g.param(f"{path}.fc1.weight", (SQUEEZE, c_out, 1, 1)), g.param(f"{path}.fc1.bias", (SQUEEZE,))
        w2, b2 = g.param(f"{path}.fc2.weight", (c_out, SQUEEZE, 1, 1)), g.param(f"{path}.fc2.bias", (c_out,))
        g.node("GlobalAveragePool", [xs[0]], [f"{path}.pool"], name=f"{path}.pool")
        g.node("Conv", [f"{path}.pool", w1, b1], [f"{path}.fc1"], name=f"{path}.fc1", kernel_shape=[1, 1])
        g.node("Relu", [f"{path}.fc1"], [f"{path}.act"], name=f"{path}.act")
        g.node("Conv", [f"{path}.act", w2, b2], [f"{path}.fc2"], name=f"{path}.fc2", kernel_shape=[1, 1])
        g.node("Sigmoid", [f"{path}.fc2"], [f"{path}.gate"], name=f"{path}.gate")
        g.node("Mul", [xs[0], f"{path}.gate"], [out], name=out)
