"""The fixed-width network of a configuration of any space (§2, §7; docs/method.md D44, D45), its deployment form
and cheap timing copies.

`Network(space, channels)` holds one module per edge, built by the edge's layer kind (`aows_core.kinds`):
``layers.{e}`` for every edge but the last, ``classifier`` for the last (global average pool and a linear layer).
It runs block by block (`BlockPlan`): y = main(x), then, where the block has a residual add, add(y, shortcut(x))
(the identity without a projection). The classifier's dropout (its kind's `d<p>`, D57: MobileNet-v2's 0.2) runs
before it while training (it changes no eval output); the supernet has none. At `space.base_config` of the imagenet presets the network is
torchvision's `mobilenet_v2()`, `resnet18()`, `resnet50()` layer for layer (tests/nets/test_network.py).
`bn=False` is the deployment form, BN folded into conv biases (`folded_state`, `fold`): what is timed and
exported. `TimingFactory` builds deployment-form networks cheaply for profiling: weights are non-overlapping views
of one pool of N(0, TIMING_WEIGHT_STD²) values and per-edge modules are cached. Parameter names are shared with the
ONNX graphs of `nets.onnx`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from ..kinds import kind_of
from ..kinds.units import Unit
from ..space import SearchSpace, check_blocks
from . import TIMING_WEIGHT_STD, WEIGHT_ALIGN
from .batchnorm import SyncBatchNorm2d


def edge_module(space: SearchSpace, e: int, c_in: int, c_out: int, bn: bool, device=None) -> nn.Module:
    """The module of edge e for widths c_in → c_out (its kind's), trainable (BN, synchronised on request, D30) or
    in deployment form (`bn=False`)."""
    t = space.thetas[e]
    norm = (lambda c: SyncBatchNorm2d(c, device=device)) if bn else None
    return kind_of(t.kind).module(t, c_in, c_out, norm=norm, act=space.act, device=device)


def edge_modules(space: SearchSpace, full: Sequence[int], bn: bool, device=None) -> list[nn.Module]:
    """The modules of every edge but the classifier at node widths `full` (nodes 0..n)."""
    return [edge_module(space, e, full[s], full[d], bn, device) for e, (s, d) in enumerate(space.edges[:-1])]


def classifier_width(space: SearchSpace, channels: Sequence[int]) -> int:
    """The classifier's input width: the node its edge reads."""
    return space.full(channels)[space.edges[-1][0]]


def dropout(space: SearchSpace) -> nn.Module:
    """The Dropout before the classifier its kind names (`linear:…:d<p>`, D57); nothing without one."""
    p = kind_of(space.thetas[-1].kind).dropout
    return nn.Dropout(p) if p else nn.Identity()


def without_dropout(m: nn.Module) -> nn.Module:
    """m with every Dropout its kinds built replaced by the identity, in place: the supernet has none (D57)."""
    for name, child in m.named_children():
        if isinstance(child, nn.Dropout):
            setattr(m, name, nn.Identity())
        else:
            without_dropout(child)
    return m


def leaves(m: nn.Module) -> list[nn.Module]:
    """m's computation as the modules it calls in order: a sequence's children, recursively (a `Unit` is one)."""
    return [leaf for c in m for leaf in leaves(c)] if isinstance(m, nn.Sequential) else [m]


class BlockPlan:
    """The feature blocks of a space over its edge modules (D44), each main branch one flat list of the modules it
    calls — the same function as calling the edges' containers, with fewer calls (a fixed cost every timed network
    pays, bench/bench_network_path.py)."""

    def __init__(self, space: SearchSpace, layers: Sequence[nn.Module]):
        self.steps = [(tuple(leaf for e in b.edges for leaf in leaves(layers[e])),
                       layers[b.shortcut] if b.shortcut >= 0 else None, layers[b.add] if b.add >= 0 else None)
                      for b in space.blocks[:-1]]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The activations entering the classifier."""
        for main, shortcut, add in self.steps:
            y = x
            for m in main:
                y = m(y)
            x = y if add is None else add(y, x if shortcut is None else shortcut(x))
        return x


def reset_parameters(net: nn.Module) -> None:
    """MobileNet's initialisation: He-normal (fan-out) convs, unit BN, N(0, 0.01) linear layers."""
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)


class Network(nn.Module):
    """Fixed-width network of a configuration (§7); `bn=False` gives the deployment form."""

    def __init__(self, space: SearchSpace, channels: Sequence[int], bn: bool = True, init: bool = True, device=None):
        super().__init__()
        check_blocks(space)
        space.indices(channels)  # a clear error naming the layer for widths outside the space
        self.space, self.channels, self.bn = space, [int(c) for c in channels], bool(bn)
        full = space.full(channels)
        self.layers = nn.ModuleList(edge_modules(space, full, bn, device))
        self.dropout = dropout(space)
        self.classifier = edge_module(space, space.n_edges - 1, full[space.edges[-1][0]], full[-1], bn, device)
        self.blocks = BlockPlan(space, self.layers)
        self.pooled = kind_of(space.thetas[-1].kind).pooled
        if init:
            reset_parameters(self)

    @classmethod
    def assemble(cls, space: SearchSpace, channels: Sequence[int], bn: bool, layers: Sequence[nn.Module],
                 classifier: nn.Module) -> "Network":
        """A network from ready-made edge modules (no construction, no initialisation)."""
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self.space, self.channels, self.bn = space, [int(c) for c in channels], bool(bn)
        self.layers = nn.ModuleList(layers)
        self.dropout = dropout(space)
        self.classifier = classifier
        self.blocks = BlockPlan(space, self.layers)
        self.pooled = kind_of(space.thetas[-1].kind).pooled
        return self

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The activations entering the classifier."""
        return self.blocks(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits: blocks, the classifier's pooling (global average, or to k×k and flattened), (dropout,) classifier."""
        return self.classifier(self.dropout(self.pooled(self.features(x))))


@torch.no_grad()
def fold_conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm2d | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) in float32 of conv followed by bn (running statistics), as one conv with bias."""
    w = conv.weight.detach().float()
    b = conv.bias.detach().float() if conv.bias is not None else torch.zeros(w.shape[0], device=w.device)
    if bn is not None:
        scale = bn.weight.float() / torch.sqrt(bn.running_var.float() + bn.eps)
        w = w * scale.reshape(-1, 1, 1, 1)
        b = (b - bn.running_mean.float()) * scale + bn.bias.float()
    return w.contiguous().clone(), b.contiguous().clone()


@torch.no_grad()
def folded_state(model: Network) -> dict[str, torch.Tensor]:
    """State dict of the deployment form: every unit's BN (running statistics) folded into its conv; every other
    parameter (the classifier's, a registered kind's own) as it is, in float32."""
    state: dict[str, torch.Tensor] = {}
    units = {name: m for name, m in model.named_modules() if isinstance(m, Unit)}
    for name, p in model.named_parameters():  # in the module's order, which is the graph's
        unit = name.rpartition(".")[0].rpartition(".")[0]
        if unit not in units:
            state[name] = p.detach().float().clone()
        elif f"{unit}.conv.weight" not in state:
            state[f"{unit}.conv.weight"], state[f"{unit}.conv.bias"] = fold_conv_bn(units[unit].conv, units[unit].bn)
    return state


@torch.no_grad()
def fold(model: Network) -> Network:
    """The deployment form of `model` (BN folded into the convolutions), in eval mode, same outputs as model.eval()."""
    out = Network(model.space, model.channels, bn=False, init=False, device="meta")
    out = out.to_empty(device=next(model.classifier.parameters()).device)
    out.load_state_dict(folded_state(model))
    return out.eval()


class TimingFactory:
    """Deployment-form networks of one space for timing, assembled in a fraction of a millisecond (§4 profiles
    thousands).

    Each edge (e, c_src, c_dst) is built once and cached; its weights are views of one pool of
    N(0, TIMING_WEIGHT_STD²) values, edge e always at its own offset, so the layers of a network never share memory
    (the same working set as freshly allocated weights) and nothing is uninitialised."""

    def __init__(self, space: SearchSpace, seed: int = 0, device: str | torch.device = "cpu",
                 channels_last: bool = False):
        check_blocks(space)
        self.space = space
        self.device = torch.device(device)
        self.channels_last = bool(channels_last)
        # Region of the pool for every parameter of the max-width deployment-form network.
        ref = Network(space, space.max_config, bn=False, init=False, device="meta")
        self._offsets: dict[str, int] = {}
        off = 0
        for name, p in ref.named_parameters():
            self._offsets[name] = off
            off += math.ceil(p.numel() / WEIGHT_ALIGN) * WEIGHT_ALIGN
        gen = torch.Generator().manual_seed(int(seed))
        self.pool = (torch.randn(off, generator=gen) * TIMING_WEIGHT_STD).to(self.device)
        self.pool_numel = off
        self._edges: dict[tuple[int, int, int], nn.Module] = {}

    def _view(self, name: str, shape: tuple[int, ...]) -> nn.Parameter:
        """The pool region of parameter `name`, viewed with `shape` (channels_last strides for 4-d when asked)."""
        start = self._offsets[name]
        flat = self.pool[start : start + math.prod(shape)]
        if self.channels_last and len(shape) == 4:
            co, ci, kh, kw = shape
            t = flat.view(co, kh, kw, ci).permute(0, 3, 1, 2)
        else:
            t = flat.view(shape)
        return nn.Parameter(t, requires_grad=False)

    def edge(self, e: int, c_in: int, c_out: int) -> nn.Module:
        """Cached deployment-form module of edge e for widths c_in → c_out."""
        key = (e, c_in, c_out)
        mod = self._edges.get(key)
        if mod is None:
            mod = edge_module(self.space, e, c_in, c_out, bn=False, device="meta")
            prefix = self.space.module_path(e)
            for name, p in list(mod.named_parameters()):
                path, _, leaf = name.rpartition(".")
                setattr(mod.get_submodule(path), leaf, self._view(f"{prefix}.{name}", tuple(p.shape)))
            self._edges[key] = mod
        return mod

    def prebuild(self) -> "TimingFactory":
        """Build every edge (e, c_src, c_dst) of the space now (one width on a one-width layer), so that no network
        pays for construction later."""
        for e, (s, d) in enumerate(self.space.edges):
            for c_in in self.space.choices[s]:
                for c_out in self.space.choices[d] if s != d else (c_in,):
                    self.edge(e, c_in, c_out)
        return self

    def __call__(self, channels: Sequence[int]) -> Network:
        """The deployment-form network of `channels`, in eval mode."""
        self.space.indices(channels)
        full = self.space.full(channels)
        mods = [self.edge(e, full[s], full[d]) for e, (s, d) in enumerate(self.space.edges)]
        return Network.assemble(self.space, channels, False, mods[:-1], mods[-1]).eval()
