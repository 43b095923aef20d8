"""Layer kinds as classes in one registry (§4's Θ_i.kind; docs/method.md D45; docs/extending.md "A layer kind").

`kind_of(t.kind)` answers for a layer: its latency variable, output size, MACs, parameters, memory traffic, its
torch module, its supernet forward and its ONNX nodes. Built in: conv, convpool, pconv, dw, dwsep, gconv (`conv`),
se (`excitation`), add, sum (`residual`), cat, maxpool (`concat`), linear (`classifier`); a kind's parameters follow its name (`conv:silu`,
`gconv:16`, `se:16:relu:sigmoid`; D49; `convpool:p2:nobn:mp3s2p0`, `linear:pool7`; D54; `fc:pool7:relu`; D56; `linear:flat:d0.5`; D57). A new kind is one class registered with `register`. Imports no torch.
"""

from __future__ import annotations

from . import classifier, concat, conv, excitation, residual  # noqa: F401  (registers the built-in kinds)
from .base import ACTIVATIONS, KINDS, LayerKind, Pass, kind_of, register, unregister

__all__ = ["ACTIVATIONS", "KINDS", "LayerKind", "Pass", "kind_of", "register", "unregister"]
