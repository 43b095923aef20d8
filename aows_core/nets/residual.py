"""Residual networks of any space built from its blocks (MobileNet-v2, ResNet; §3, §5, §7; docs/method.md D44, D10).

`ResidualNet(space, channels)` is the fixed-width network of a configuration: one module per edge,
``layers.{e}`` (the classifier edge is ``classifier``), run block by block: y = main(x), then, where the block
has a residual add, y + shortcut(x) (the identity without a projection), ReLU'd after the sum in a "relu" space
(ResNet), not in a "relu6" one (MobileNet-v2). An edge is a `Unit` (``conv``, ``bn``, ``act``, ``pool``):
`conv` k×k conv + BN + act; `convpool` the same and a 3×3/2 max-pool; `dw` depthwise k×k conv + BN + act on one
width; `pconv` k×k conv + BN without activation (a projection); `dwsep` two units ``layers.{e}.0`` (depthwise)
and ``layers.{e}.1`` (pointwise); `add` the parameter-free `Add`. At `space.base_config` of the imagenet presets
it is torchvision's `mobilenet_v2()`, `resnet18()`, `resnet50()` layer for layer (tests/nets/test_residual.py);
MobileNet-v2's Dropout(0.2) before the classifier is kept (it changes no eval output), the supernet has none.
`bn=False` is the deployment form, BN folded into conv biases (`folded_state`, `fold_bn`).

`SlimmableResidualNet` holds the max-width weights with `SlimmableMobileNetV1`'s interface: ONE mask per node,
so every layer writing or reading a tied stream uses that node's per-sample width and the residual add sums
tensors that are zero beyond it; every BN is masked (the projection's too, without the activation) and the
depthwise unit is masked with its node's width (D10). `ResidualTimingFactory` builds deployment-form networks
cheaply for profiling, as `nets.mobilenet.TimingFactory` does for MobileNet-v1.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..space import SearchSpace, Theta
from . import check_blocks
from .batchnorm import SyncBatchNorm2d, at_least_float32, group_batch_norm
from .mobilenet import MobileNetV1, TimingFactory, _conv, fold_conv_bn
from .slimmable import WidthsMixin

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "relu6": nn.ReLU6}
# (BN-less pre-activation z, the BN module, the node whose width z has, apply the activation) → normalised z
Norm = Callable[[torch.Tensor, nn.BatchNorm2d, int, bool], torch.Tensor]


class Unit(nn.Module):
    """k×k conv (+ BN) (+ activation) (+ 3×3/2 max-pool): one convolutional unit of an edge (§7)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, groups: int, bn: bool, act: str | None,
                 pool: bool = False, device=None):
        super().__init__()
        self.conv = _conv(c_in, c_out, k, stride, groups, bias=not bn, device=device)
        self.bn = SyncBatchNorm2d(c_out, device=device) if bn else None  # over every rank's batch on request (D30)
        self.act = ACTIVATIONS[act](inplace=True) if act else None
        self.pool = nn.MaxPool2d(3, 2, 1) if pool else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        if self.act is not None:
            x = self.act(x)
        return x if self.pool is None else self.pool(x)


class Add(nn.Module):
    """The residual add of a block, ReLU'd after the sum in a "relu" space (ResNet; D44)."""

    def __init__(self, relu: bool):
        super().__init__()
        self.relu = bool(relu)

    def forward(self, y: torch.Tensor, shortcut: torch.Tensor) -> torch.Tensor:
        y = y + shortcut
        return F.relu(y) if self.relu else y


def edge_module(t: Theta, c_in: int, c_out: int, bn: bool, act: str, device=None) -> nn.Module:
    """The module of one non-classifier edge for widths c_in → c_out (c_in = c_out for `dw` and `add`)."""
    k, s = t.kernel, t.stride
    if t.kind in ("conv", "convpool"):
        return Unit(c_in, c_out, k, s, 1, bn, act, pool=t.kind == "convpool", device=device)
    if t.kind == "pconv":
        return Unit(c_in, c_out, k, s, 1, bn, None, device=device)
    if t.kind == "dw":
        return Unit(c_in, c_in, k, s, c_in, bn, act, device=device)
    if t.kind == "dwsep":
        return nn.Sequential(Unit(c_in, c_in, k, s, c_in, bn, act, device=device),
                             Unit(c_in, c_out, 1, 1, 1, bn, act, device=device))
    if t.kind == "add":
        return Add(act == "relu")
    raise ValueError(f"edge kind {t.kind!r} has no module here (the classifier is `classifier`)")


def run_blocks(space: SearchSpace, layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """The activations entering the classifier: every block of `space` with the edge modules `layers` (D44)."""
    for b in space.blocks[:-1]:
        y = x
        for e in b.edges:
            y = layers[e](y)
        if b.add >= 0:
            y = layers[b.add](y, layers[b.shortcut](x) if b.shortcut >= 0 else x)
        x = y
    return x


def classifier_width(space: SearchSpace, channels: Sequence[int]) -> int:
    """The classifier's input width: the node its edge reads."""
    return space.full(channels)[space.edges[-1][0]]


def dropout(space: SearchSpace) -> nn.Module:
    """torchvision's MobileNet-v2 Dropout(0.2) before the classifier in a "relu6" space; nothing in ResNet."""
    return nn.Dropout(0.2) if space.act == "relu6" else nn.Identity()


class ResidualNet(nn.Module):
    """Fixed-width network of a configuration of a residual space (§7, D44); `bn=False` gives the deployment form."""

    def __init__(self, space: SearchSpace, channels: Sequence[int], bn: bool = True, init: bool = True, device=None):
        super().__init__()
        check_blocks(space)
        space.indices(channels)  # a clear error naming the layer for widths outside the space
        self.space = space
        self.channels = [int(c) for c in channels]
        self.bn = bool(bn)
        full = space.full(channels)
        self.layers = nn.ModuleList([edge_module(t, full[s], full[d], bn, space.act, device)
                                     for (s, d), t in zip(space.edges[:-1], space.thetas[:-1])])
        self.dropout = dropout(space)
        self.classifier = nn.Linear(classifier_width(space, channels), space.num_classes, device=device)
        if init:
            self.reset_parameters()

    @classmethod
    def assemble(cls, space: SearchSpace, channels: Sequence[int], bn: bool, layers: Sequence[nn.Module],
                 classifier: nn.Linear) -> "ResidualNet":
        """A network from ready-made edge modules (no construction, no initialisation)."""
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self.space, self.channels, self.bn = space, [int(c) for c in channels], bool(bn)
        self.layers = nn.ModuleList(layers)
        self.dropout = dropout(space)
        self.classifier = classifier
        return self

    reset_parameters = MobileNetV1.reset_parameters  # He-normal (fan-out) convs, unit BN, N(0, 0.01) classifier

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The activations entering the classifier."""
        return run_blocks(self.space, self.layers, x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits: blocks, global average pool, (dropout,) classifier."""
        return self.classifier(self.dropout(self.features(x).mean((2, 3))))


@torch.no_grad()
def folded_state(model: ResidualNet) -> dict[str, torch.Tensor]:
    """State dict of the deployment form: every unit's BN (running statistics) folded into its conv."""
    state: dict[str, torch.Tensor] = {}
    for name, m in model.named_modules():
        if isinstance(m, Unit):
            state[f"{name}.conv.weight"], state[f"{name}.conv.bias"] = fold_conv_bn(m.conv, m.bn)
    state["classifier.weight"] = model.classifier.weight.detach().float().clone()
    state["classifier.bias"] = model.classifier.bias.detach().float().clone()
    return state


@torch.no_grad()
def fold_bn(model: ResidualNet) -> ResidualNet:
    """The deployment form of `model` (BN folded into the convolutions), in eval mode, same outputs as model.eval()."""
    out = ResidualNet(model.space, model.channels, bn=False, init=False, device="meta")
    out = out.to_empty(device=model.classifier.weight.device)
    out.load_state_dict(folded_state(model))
    return out.eval()


class SlimmableResidualNet(WidthsMixin, nn.Module):
    """Max-width residual network whose configurations are front slices (§3), masked per sample (§5) or sliced.

    The interface of `nets.slimmable.SlimmableMobileNetV1`; parameter names are those of
    `ResidualNet(space, space.max_config)`. Masks are per node (D44: a tied stream has one), applied after every
    BN (D10). `bn_group` (set by `nets.batchnorm.synchronised`): train-mode BN over that group's batch (D30)."""

    bn_group: Any = None

    def __init__(self, space: SearchSpace, channels_last: bool = False, device=None):
        super().__init__()
        check_blocks(space)
        self.space = space
        self.channels_last = bool(channels_last)
        full = space.full(space.max_config)
        self.layers = nn.ModuleList([edge_module(t, full[s], full[d], True, space.act, device)
                                     for (s, d), t in zip(space.edges[:-1], space.thetas[:-1])])
        self.classifier = nn.Linear(classifier_width(space, space.max_config), space.num_classes, device=device)
        MobileNetV1.reset_parameters(self)  # the same initialisation as the fixed networks
        if self.channels_last:
            self.to(memory_format=torch.channels_last)
        self._max = [int(c) for c in space.max_config]
        self._min = [int(c) for c in space.min_config]
        self._ar: dict[tuple, torch.Tensor] = {}

    # ---- one pass over the blocks with a given normalisation -------------------------------------
    def _act(self, y: torch.Tensor, act: bool) -> torch.Tensor:
        if not act:
            return y
        return F.relu(y) if self.space.act == "relu" else F.relu6(y)

    def _unit(self, u: Unit, x: torch.Tensor, c_out: int, groups: int, node: int, norm: Norm) -> torch.Tensor:
        """Unit u on x up to c_out output channels (depthwise: groups = c_out), normalised by `norm` as node `node`."""
        c = u.conv
        w = c.weight[:c_out] if groups > 1 else c.weight[:c_out, : x.shape[1]]
        z = norm(F.conv2d(x, w, None, c.stride, c.padding, c.dilation, groups), u.bn, node, u.act is not None)
        return z if u.pool is None else u.pool(z)

    def _edge(self, e: int, x: torch.Tensor, full: Sequence[int], norm: Norm) -> torch.Tensor:
        """Edge e at node widths `full` (the depthwise unit at its own node's width, D10)."""
        (s, d), kind, mod = self.space.edges[e], self.space.thetas[e].kind, self.layers[e]
        if kind == "dwsep":
            x = self._unit(mod[0], x, full[s], full[s], s, norm)
            return self._unit(mod[1], x, full[d], 1, d, norm)
        if kind == "dw":
            return self._unit(mod, x, full[s], full[s], s, norm)
        return self._unit(mod, x, full[d], 1, d, norm)

    def _block(self, j: int, x: torch.Tensor, full: Sequence[int], norm: Norm) -> torch.Tensor:
        """Block j (a feature block: not the classifier's) on x at node widths `full`, every BN by `norm`."""
        b = self.space.blocks[j]
        y = x
        for e in b.edges:
            y = self._edge(e, y, full, norm)
        if b.add >= 0:  # both terms are zero beyond the node's width, so is their sum (and its ReLU)
            y = y + (self._edge(b.shortcut, x, full, norm) if b.shortcut >= 0 else x)
            y = F.relu(y) if self.space.act == "relu" else y
        return y

    def _features(self, x: torch.Tensor, full: Sequence[int], norm: Norm) -> torch.Tensor:
        """The activations entering the classifier at node widths `full` (nodes 0..n), every BN by `norm`."""
        for j in range(len(self.space.blocks) - 1):
            x = self._block(j, x, full, norm)
        return x

    def _logits(self, h: torch.Tensor, full: Sequence[int]) -> torch.Tensor:
        """Global average pool and the classifier's first columns."""
        c = full[self.space.edges[-1][0]]
        return F.linear(h.mean((2, 3)), self.classifier.weight[:, :c], self.classifier.bias)

    # ---- masked per-sample forward (§5) ----------------------------------------------------------
    def _masked(self, z: torch.Tensor, bn: nn.BatchNorm2d, m: torch.Tensor, act: bool) -> torch.Tensor:
        """BN (masked batch statistics in train mode, running ones in eval), activation, channels above m zeroed;
        in float32 under autocast (D29)."""
        B, C = z.shape[:2]
        if self.training:
            y = group_batch_norm(z, m, bn, self.bn_group, relu=act, update_stats=False)
            return y.clamp_max(6.0) if act and self.space.act == "relu6" else y
        scale = bn.weight[:C] * torch.rsqrt(bn.running_var[:C] + bn.eps)
        shift = bn.bias[:C] - bn.running_mean[:C] * scale
        return self._act(z * (scale * m).view(B, C, 1, 1) + (shift * m).view(B, C, 1, 1), act)

    def forward(self, x: torch.Tensor, widths: torch.Tensor | None = None, truncate: bool = True, *,
                channels: Sequence[int] | None = None) -> torch.Tensor:
        """Logits. widths=None: the max configuration; else per-sample masked widths (B, n_layers) channel counts
        (a tensor or `DeviceWidths`); `truncate` and `channels` as in `SlimmableMobileNetV1.forward`."""
        if channels is not None:
            if widths is not None:
                raise ValueError("give per-sample widths or one configuration's channels, not both")
            return self.forward_sliced(x, channels)
        x = self._input(x)
        if widths is None:
            return self.classifier(run_blocks(self.space, self.layers, x).mean((2, 3)))
        widths, hi = self._check_widths(widths, x.shape[0])
        widths = widths.to(x.device)
        if not truncate:
            hi = list(self._max)
        elif self.bn_group is not None:  # BN over every rank's batch: every rank computes the global batch's widest
            h = torch.tensor(hi, dtype=torch.int64, device=x.device)
            torch.distributed.all_reduce(h, op=torch.distributed.ReduceOp.MAX, group=self.bn_group)
            hi = h.tolist()
        dtype = x.dtype if x.dtype.is_floating_point else torch.float32
        full = self.space.full(hi)
        masks = {i: (self._arange(full[i], x.device)[None, :] < widths[:, i - 1 : i]).to(dtype)
                 for i in range(1, self.space.n_nodes - 1)}  # one mask per node, tied streams included (D44)
        h = self._features(x, full, lambda z, bn, node, act: self._masked(z, bn, masks[node], act))
        return self._logits(h, full)

    # ---- one configuration as a sliced network ---------------------------------------------------
    def _sliced(self, z: torch.Tensor, bn: nn.BatchNorm2d, act: bool, update_stats: bool) -> torch.Tensor:
        """BN of z's channels with the first ones of `bn` (train: batch statistics, running ones updated if asked;
        eval: running ones), then the activation; float32 under autocast (D29)."""
        o = z.shape[1]
        if self.training and self.bn_group is not None:  # statistics of every rank's batch (D30)
            ones = torch.ones((z.shape[0], o), dtype=torch.float32, device=z.device)
            y = group_batch_norm(z, ones, bn, self.bn_group, relu=act, update_stats=update_stats)
            return y.clamp_max(6.0) if act and self.space.act == "relu6" else y
        if self.training:
            if update_stats and bn.track_running_stats:
                with torch.no_grad():
                    bn.num_batches_tracked.add_(1)
                rm, rv = bn.running_mean[:o], bn.running_var[:o]
            else:
                rm = rv = None
            y = F.batch_norm(at_least_float32(z), rm, rv, bn.weight[:o], bn.bias[:o], True, bn.momentum, bn.eps)
        else:
            y = F.batch_norm(at_least_float32(z), bn.running_mean[:o], bn.running_var[:o], bn.weight[:o], bn.bias[:o],
                             False, 0.0, bn.eps)
        return self._act(y, act)

    def forward_sliced(self, x: torch.Tensor, channels: Sequence[int],
                       update_stats: bool | None = None) -> torch.Tensor:
        """Logits of one configuration computed by a genuinely sliced small network (train or eval mode BN, §3).

        update_stats (train mode only): update the running statistics' slices; default only for the max
        configuration."""
        self.space.indices(channels)
        full = self.space.full(channels)
        if update_stats is None:
            update_stats = [int(c) for c in channels] == self._max
        h = self._features(self._input(x), full, lambda z, bn, node, act: self._sliced(z, bn, act, bool(update_stats)))
        return self._logits(h, full)

    # ---- export ----------------------------------------------------------------------------------
    @torch.no_grad()
    def subnet_state_dict(self, channels: Sequence[int]) -> dict[str, torch.Tensor]:
        """State dict of the fixed-width `ResidualNet(space, channels)`: front slices of weights and BN statistics."""
        ref = ResidualNet(self.space, channels, init=False, device="meta").state_dict()
        own = self.state_dict()
        return {k: own[k][tuple(slice(0, s) for s in v.shape)].clone().contiguous() for k, v in ref.items()}

    def subnet(self, channels: Sequence[int]) -> ResidualNet:
        """A fixed-width ResidualNet holding this supernet's sliced weights (same device and dtype)."""
        w = self.classifier.weight
        net = ResidualNet(self.space, channels, init=False, device="meta").to_empty(device=w.device).to(w.dtype)
        net.load_state_dict(self.subnet_state_dict(channels))
        return net.train(self.training)


class ResidualTimingFactory(TimingFactory):
    """Deployment-form `ResidualNet`s of one space for timing (§4), assembled from cached edge modules whose weights
    are views of one pool of N(0, TIMING_WEIGHT_STD²) values, edge e always at its own offset
    (`nets.mobilenet.TimingFactory`'s rule)."""

    def _reference(self) -> nn.Module:
        check_blocks(self.space)
        return ResidualNet(self.space, self.space.max_config, bn=False, init=False, device="meta")

    def edge(self, e: int, c_in: int, c_out: int) -> nn.Module:
        """Cached deployment-form module of edge e for widths c_in → c_out."""
        key = (e, c_in, c_out)
        mod = self._edges.get(key)
        if mod is None:
            mod = edge_module(self.space.thetas[e], c_in, c_out, bn=False, act=self.space.act, device="meta")
            for name, p in list(mod.named_parameters()):
                path, _, leaf = name.rpartition(".")
                setattr(mod.get_submodule(path), leaf, self._view(f"layers.{e}.{name}", tuple(p.shape)))
            self._edges[key] = mod
        return mod

    def prebuild(self) -> "ResidualTimingFactory":
        """Build every edge (e, c_src, c_dst) of the space now (one width on a `dw` or `add` edge)."""
        for e, (s, d) in enumerate(self.space.edges[:-1]):
            for c_in in self.space.choices[s]:
                for c_out in self.space.choices[d] if s != d else (c_in,):
                    self.edge(e, c_in, c_out)
        for c_in in self.space.choices[self.space.edges[-1][0]]:
            self.classifier(c_in)
        return self

    def __call__(self, channels: Sequence[int]) -> ResidualNet:
        """The deployment-form network of `channels`, in eval mode."""
        self.space.indices(channels)
        full = self.space.full(channels)
        layers = [self.edge(e, full[s], full[d]) for e, (s, d) in enumerate(self.space.edges[:-1])]
        classifier = self.classifier(full[self.space.edges[-1][0]])
        return ResidualNet.assemble(self.space, channels, False, layers, classifier).eval()
