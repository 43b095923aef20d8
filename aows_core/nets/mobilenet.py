"""Fixed-width MobileNet-v1 networks of a search space (§7), their deployment form and cheap timing copies.

A configuration (c_1, ..., c_{n-1}) defines one network of the chain (§2, eq. lat): edge i maps
c_i → c_{i+1} as Θ_i says (`conv`: k×k conv + BN + ReLU; `dwsep`: depthwise + BN + ReLU, pointwise
+ BN + ReLU; `linear`: global average pool + classifier, the last edge). `MobileNetV1` is the
trainable form; its deployment form (`bn=False`, BN folded into conv biases by `fold_bn`) is what is
timed and exported. `TimingFactory`/`timing_model` build deployment-form networks cheaply for
profiling: weights are non-overlapping views of one pool of N(0, TIMING_WEIGHT_STD²) values and
per-edge modules are cached. Parameter names (``features.{i}.{j}.weight/bias``,
``classifier.weight/bias``) are shared with the ONNX graphs of `nets.onnx`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from ..space import SearchSpace, Theta, check_mobilenet_chain
from . import TIMING_WEIGHT_STD, WEIGHT_ALIGN
from .batchnorm import SyncBatchNorm2d



def _conv(c_in: int, c_out: int, k: int, stride: int, groups: int, bias: bool, device=None) -> nn.Conv2d:
    """A k×k convolution padded by k//2 (Θ.out_hw's convention)."""
    return nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=bias, device=device)


def edge_layers(t: Theta, c_in: int, c_out: int, bn: bool, device=None) -> nn.Module:
    """The modules of one convolutional edge (conv or dwsep) as an nn.Sequential."""
    mods: list[nn.Module] = []

    def unit(ci: int, co: int, k: int, s: int, g: int) -> None:
        mods.append(_conv(ci, co, k, s, g, bias=not bn, device=device))
        if bn:
            mods.append(SyncBatchNorm2d(co, device=device))  # nn.BatchNorm2d, over every rank's batch on request (D30)
        mods.append(nn.ReLU(inplace=True))

    if t.kind == "conv":
        unit(c_in, c_out, t.kernel, t.stride, 1)
    elif t.kind == "dwsep":
        unit(c_in, c_in, t.kernel, t.stride, c_in)
        unit(c_in, c_out, 1, 1, 1)
    else:
        raise ValueError(f"edge kind {t.kind!r} is not a convolutional edge")
    return nn.Sequential(*mods)


class MobileNetV1(nn.Module):
    """Fixed-width MobileNet-v1 of a configuration (§7); `bn=False` gives the deployment form."""

    def __init__(self, space: SearchSpace, channels: Sequence[int], bn: bool = True, init: bool = True, device=None):
        super().__init__()
        check_mobilenet_chain(space)
        space.indices(channels)  # a clear error naming the layer for widths outside the space
        self.space = space
        self.channels = [int(c) for c in channels]
        self.bn = bool(bn)
        full = space.full(channels)
        self.features = nn.Sequential(
            *[edge_layers(t, full[i], full[i + 1], bn, device) for i, t in enumerate(space.thetas[:-1])]
        )
        self.classifier = nn.Linear(full[-2], full[-1], device=device)
        if init:
            self.reset_parameters()

    @classmethod
    def assemble(cls, space: SearchSpace, channels: Sequence[int], bn: bool, edges: Sequence[nn.Module], classifier: nn.Linear) -> "MobileNetV1":
        """A network from ready-made edge modules (no construction, no initialisation)."""
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self.space = space
        self.channels = [int(c) for c in channels]
        self.bn = bool(bn)
        self.features = nn.Sequential(*edges)
        self.classifier = classifier
        return self

    def reset_parameters(self) -> None:
        """MobileNet initialisation: He-normal (fan-out) convs, unit BN, N(0, 0.01) classifier."""
        for m in self.modules():
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits: features, global average pool, classifier."""
        return self.classifier(self.features(x).mean((2, 3)))


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
def folded_state(model: MobileNetV1) -> dict[str, torch.Tensor]:
    """State dict of the deployment form: BN (running statistics) folded into conv weight and bias."""
    state: dict[str, torch.Tensor] = {}
    # Deployment-form names: in every edge, BN modules vanish, so conv j keeps index j - (#BNs before it).
    for i, edge in enumerate(model.features):
        k = 0
        for j, m in enumerate(edge):
            if isinstance(m, nn.BatchNorm2d):
                continue
            if isinstance(m, nn.Conv2d):
                bn = edge[j + 1] if j + 1 < len(edge) and isinstance(edge[j + 1], nn.BatchNorm2d) else None
                state[f"features.{i}.{k}.weight"], state[f"features.{i}.{k}.bias"] = fold_conv_bn(m, bn)
            k += 1
    state["classifier.weight"] = model.classifier.weight.detach().float().clone()
    state["classifier.bias"] = model.classifier.bias.detach().float().clone()
    return state


@torch.no_grad()
def fold_bn(model: MobileNetV1) -> MobileNetV1:
    """The deployment form of `model` (BN folded into the convolutions), in eval mode, same outputs as model.eval()."""
    state = folded_state(model)
    device = model.classifier.weight.device
    out = MobileNetV1(model.space, model.channels, bn=False, init=False, device="meta")
    out = out.to_empty(device=device)
    out.load_state_dict(state)
    return out.eval()


class TimingFactory:
    """Deployment-form networks of one space for timing, assembled in a fraction of a millisecond (§4 profiles thousands).

    Each edge (i, c_i, c_{i+1}) is built once and cached; its weights are views of one pool of
    N(0, TIMING_WEIGHT_STD²) values, edge i always at its own offset, so the layers of a network never
    share memory (the same working set as freshly allocated weights) and nothing is uninitialised.
    """

    def __init__(self, space: SearchSpace, seed: int = 0, device: str | torch.device = "cpu", channels_last: bool = False):
        self.space = space
        self.device = torch.device(device)
        self.channels_last = bool(channels_last)
        # Region of the pool for every (edge, parameter index): sized by the widest choice.
        ref = self._reference()
        self._offsets: dict[str, int] = {}
        off = 0
        for name, p in ref.named_parameters():
            self._offsets[name] = off
            off += math.ceil(p.numel() / WEIGHT_ALIGN) * WEIGHT_ALIGN
        gen = torch.Generator().manual_seed(int(seed))
        pool = torch.randn(off, generator=gen) * TIMING_WEIGHT_STD
        self.pool = pool.to(self.device)
        self.pool_numel = off
        self._edges: dict[tuple[int, int, int], nn.Module] = {}
        self._classifiers: dict[int, nn.Linear] = {}

    def _reference(self) -> nn.Module:
        """The max-width deployment-form network (on meta) whose parameters lay out the pool."""
        check_mobilenet_chain(self.space)
        return MobileNetV1(self.space, self.space.max_config, bn=False, init=False, device="meta")

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

    def edge(self, i: int, c_in: int, c_out: int) -> nn.Module:
        """Cached deployment-form modules of edge i for widths c_in → c_out."""
        key = (i, c_in, c_out)
        mod = self._edges.get(key)
        if mod is None:
            mod = edge_layers(self.space.thetas[i], c_in, c_out, bn=False, device="meta")
            for j, m in enumerate(mod):
                if isinstance(m, nn.Conv2d):
                    m.weight = self._view(f"features.{i}.{j}.weight", tuple(m.weight.shape))
                    m.bias = self._view(f"features.{i}.{j}.bias", tuple(m.bias.shape))
            self._edges[key] = mod
        return mod

    def classifier(self, c_in: int) -> nn.Linear:
        """Cached classifier for c_in input features."""
        mod = self._classifiers.get(c_in)
        if mod is None:
            mod = nn.Linear(c_in, self.space.num_classes, device="meta")
            mod.weight = self._view("classifier.weight", tuple(mod.weight.shape))
            mod.bias = self._view("classifier.bias", tuple(mod.bias.shape))
            self._classifiers[c_in] = mod
        return mod

    def prebuild(self) -> "TimingFactory":
        """Build every edge (i, c_i, c_{i+1}) of the space now, so that no network pays for construction later."""
        for i in range(self.space.n_edges - 1):
            for c_in in self.space.choices[i]:
                for c_out in self.space.choices[i + 1]:
                    self.edge(i, c_in, c_out)
        for c_in in self.space.choices[-2]:
            self.classifier(c_in)
        return self

    def __call__(self, channels: Sequence[int]) -> MobileNetV1:
        """The deployment-form network of `channels`, in eval mode."""
        self.space.indices(channels)
        full = self.space.full(channels)
        edges = [self.edge(i, full[i], full[i + 1]) for i in range(self.space.n_edges - 1)]
        model = MobileNetV1.assemble(self.space, channels, False, edges, self.classifier(full[-2]))
        return model.eval()


_FACTORIES: dict[tuple, TimingFactory] = {}


def timing_model(space: SearchSpace, channels: Sequence[int], device: str = "cpu", channels_last: bool = False) -> MobileNetV1:
    """Deployment-form network of `channels` with small random weights, built cheaply (one factory per space is kept)."""
    key = (space.name, space.hash, str(device), bool(channels_last))
    fac = _FACTORIES.get(key)
    if fac is None:
        fac = _FACTORIES[key] = TimingFactory(space, device=device, channels_last=channels_last)
    return fac(channels)
