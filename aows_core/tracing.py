"""A user's PyTorch module traced into a search space (§2's nodes and layers Θ; docs/method.md D48).

One `torch.fx` trace of the module, with shapes propagated from an input of the dataset's shape, is read operator by
operator into the registry's layer kinds (`aows_core.kinds`): a convolution with its BatchNorm (or its bias alone),
activation and max-pool is one unit (`conv`, `convpool`, `pconv` without activation, `dw` when depthwise; D54 its
padding, bias and pool as parameters), a residual sum is `add`, the average pool and the linear layers after it the
classifier. Channels are coupled where the network ties them: a
depthwise convolution keeps its input's channels, a residual sum ties both of its operands. Every coupled group of
channels is one node of the space, its choices multipliers of the traced width (the largest the traced width itself);
`fixed` keeps named modules' output channels at full width. The layers then fall into blocks the networks run in
sequence (a chain of layers; a main branch, a shortcut of at most one layer and the sum), and the nodes are numbered
in order of first use. An operator the kinds cannot run stops the trace with an error naming the module, the operator
and the way out: never passed through as if element-wise.

`load_model` makes the module from `torchvision:<name>`, `timm:<name>` or `<module or file.py>:<function>`;
`trained_state` gives its weights (`read_weights`: a state-dict file checked against it) under the fixed network's
parameter names (`nets.network.Network`), so that the traced space's widest network is the user's network, trained,
and `ordered_state` orders each node's channels by importance, so that a narrow width keeps the strongest.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .kinds import kind_of
from .kinds.base import PoolShape
from .space import MAX_ENTRIES, MAX_STATES, Block, SearchSpace, Theta, check_blocks, frontier

# The multipliers of a traced width its node chooses among: evenly spaced in [TRACED_MIN_MULT, 1] (the traced width
# itself the largest, so that the widest network is the user's and its trained weights fit it).
TRACED_MIN_MULT = 0.25
TRACED_N_CHOICES = 6
TRACED_DIVISOR = 8


class TraceError(ValueError):
    """A module aows cannot trace into a search space; the message names the module, the operator and the way out."""


def load_model(spec: str, kwargs: Mapping[str, Any] | None = None) -> Any:
    """The `nn.Module` named by `spec`: `torchvision:<name>`, `timm:<name>` or `<module or file.py>:<function>`
    called with `kwargs` (e.g. `num_classes`)."""
    from torch import nn

    kwargs = dict(kwargs or {})
    source, sep, name = spec.rpartition(":")
    if not sep or not source or not name:
        raise TraceError(f"space.model {spec!r}: expected torchvision:<name>, timm:<name> or "
                         f"<module or file.py>:<function>")
    if source == "torchvision":
        import torchvision

        try:
            model = torchvision.models.get_model(name, **kwargs)
        except ValueError as e:
            raise TraceError(f"space.model {spec!r}: {e}") from None
    elif source == "timm":
        try:
            import timm
        except ImportError:
            raise TraceError(f"space.model {spec!r} needs timm: pip install timm") from None
        model = timm.create_model(name, **kwargs)
    else:
        model = _function(source, name, spec)(**kwargs)
    if not isinstance(model, nn.Module):
        raise TraceError(f"space.model {spec!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _function(source: str, name: str, spec: str) -> Any:
    """`name` from a Python file or an importable module."""
    if source.endswith(".py"):
        path = Path(source)
        if not path.is_file():
            raise TraceError(f"space.model {spec!r}: no file {path}")
        mod_spec = importlib.util.spec_from_file_location(f"aows_user_model_{path.stem}", path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(source)
        except ImportError as e:
            raise TraceError(f"space.model {spec!r}: cannot import {source!r} ({e})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise TraceError(f"space.model {spec!r}: {source} has no function {name!r}")
    return fn


@dataclass
class _Edge:
    """A layer found in the trace: its kind, the groups it reads and writes, Θ's fields, the tensors it reads (the
    producing edges' indices, −1 the input) and the module paths its parameters come from."""

    kind: str
    src: int
    dst: int
    hw: tuple[int, int]
    stride: int = 1
    kernel: int = 1
    inputs: tuple[int, ...] = ()
    modules: dict[str, str] = field(default_factory=dict)
    where: str = ""
    owner: str = ""  # the module the layer belongs to: its nearest ancestor that is not a plain sequence
    act: str | None = None  # the activation after it (its kind's name follows once the space's is known, D49)


@dataclass
class _Tensor:
    """A finished tensor: the group its channels belong to, its size, the edge that produced it (−1 the input)."""

    group: int
    hw: tuple[int, int]
    edge: int


@dataclass
class _Unit:
    """A convolution waiting for its BatchNorm, activation and max-pool."""

    x: _Tensor
    conv: str
    c_out: int
    kernel: int
    stride: int
    groups: int
    pad: int = 0
    bias: bool = False
    bn: str | None = None
    act: str | None = None
    pool: PoolShape | None = None
    where: str = ""


@dataclass
class _Sum:
    """A residual sum waiting for its activation."""

    xs: tuple[_Tensor, _Tensor]
    act: str | None = None
    where: str = ""


@dataclass
class _Pooled:
    """Average-pooled features of a tensor (the classifier's input, or a squeeze-and-excitation's): global, or to
    k×k (a flatten classifier's, VGG's)."""

    x: _Tensor
    k: int = 0


@dataclass
class _Squeeze:
    """A squeeze-and-excitation gate of tensor x being read: fc1, its activation, fc2, the gate (D49)."""

    x: _Tensor
    fc1: str
    s: int
    act: str | None = None
    fc2: str | None = None
    gate: str | None = None


@dataclass
class _Head:
    """The classifier's Linear layer's output, activated: the next Linear layer makes it a hidden one (D56)."""

    x: _Tensor
    act: str


@dataclass(frozen=True)
class TracedSpace:
    """A traced module's space and, per edge, the module paths its parameters come from (`trained_state`)."""

    space: SearchSpace
    modules: tuple[dict[str, str], ...]
    model: str = ""


_ACTIVATIONS = {"ReLU": "relu", "ReLU6": "relu6", "Hardswish": "hardswish", "SiLU": "silu"}
_GATES = {"Sigmoid": "sigmoid", "Hardsigmoid": "hardsigmoid"}


class _Reader:
    """Reads a traced graph node by node into edges and groups (see the module docstring)."""

    def __init__(self, gm: Any, model: Any, in_channels: int):
        self.gm = gm
        self.mods = dict(gm.named_modules())
        self.containers = dict(model.named_modules())  # the traced copy's containers lose their classes
        self.parent: list[int] = [0]  # union-find over channel groups; group 0 is the input's
        self.width: list[int] = [in_channels]
        self.edges: list[_Edge] = []
        self.vals: dict[Any, Any] = {}
        self.closed: dict[int, _Tensor] = {}  # an open unit or sum, by id, once its edge is made
        self.joined: set[int] = set()  # groups a concatenation reads or writes: kept at their traced width (D55)

    # ---- groups --------------------------------------------------------------------------------
    def group(self, c: int) -> int:
        self.parent.append(len(self.parent))
        self.width.append(int(c))
        return len(self.parent) - 1

    def root(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def tie(self, a: int, b: int) -> int:
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)
        return min(ra, rb)

    # ---- values --------------------------------------------------------------------------------
    def close(self, v: Any, n: Any) -> _Tensor:
        """The finished tensor of value v (an open unit or sum becomes its edge), as node n's input."""
        if isinstance(v, _Tensor):
            return v
        if id(v) in self.closed:
            return self.closed[id(v)]
        if isinstance(v, (_Unit, _Sum)):
            self.closed[id(v)] = self.close_unit(v) if isinstance(v, _Unit) else self.close_sum(v)
            return self.closed[id(v)]
        raise TraceError(f"{_where(n)}: {_op(n)} reads globally pooled features; only the classifier (a Linear "
                         f"layer) may follow the global average pool")

    def close_unit(self, u: _Unit) -> _Tensor:
        if u.bn is None and not u.bias:
            raise _no_norm(u)
        if u.groups > 1:
            what = "depthwise" if u.groups == u.c_out else "grouped"
            if u.pool:
                raise TraceError(f"{u.where}: a {what} convolution with a max-pool; register a kind "
                                 f"(docs/extending.md)")
            if u.act is None or u.bn is None:
                raise TraceError(f"{u.where}: a {what} convolution without {'an activation' if u.bn else 'a BatchNorm'}"
                                 f"; the registered kinds ('dw', 'gconv') are conv + BN + activation. Register a kind "
                                 f"(docs/extending.md)")
            if u.pad != u.kernel // 2:
                raise TraceError(f"{u.where}: a {what} convolution padded by {u.pad}; the registered kinds ('dw', "
                                 f"'gconv') pad by k // 2. Register a kind (docs/extending.md)")
            kind = "dw" if u.groups == u.c_out else f"gconv:{u.c_out // u.groups}"
            dst = u.x.group
        else:
            if u.pool and u.act is None:
                raise TraceError(f"{u.where}: a max-pool after a convolution without activation; register a kind "
                                 f"(docs/extending.md)")
            p = u.pool
            params = [f"p{u.pad}"] * (u.pad != u.kernel // 2) + (["nobn"] if u.bn is None else ["bias"] * u.bias)
            if p is not None and p != PoolShape():
                params.append(p.token)
            kind = ":".join(["convpool" if p else ("conv" if u.act else "pconv"), *params])
            dst = self.group(u.c_out)
        mods = {"conv": u.conv, "bn": u.bn} if u.bn else {"conv": u.conv}
        return self.edge(_Edge(kind, u.x.group, dst, u.x.hw, u.stride, u.kernel, (u.x.edge,), mods, u.where,
                               self.owner(u.conv), u.act))

    def owner(self, path: str) -> str:
        """The module a layer at `path` belongs to: its nearest ancestor that is not an `nn.Sequential` ("" the root)."""
        from torch import nn

        parts = path.split(".")[:-1]
        while parts and isinstance(self.containers[".".join(parts)], nn.Sequential):
            parts.pop()
        return ".".join(parts)

    def close_sum(self, s: _Sum) -> _Tensor:
        a, b = s.xs
        if a.hw != b.hw or self.width[self.root(a.group)] != self.width[self.root(b.group)]:
            raise TraceError(f"{s.where}: a sum of tensors of different shapes")
        g = self.tie(a.group, b.group)
        if g == self.root(0):
            raise TraceError(f"{s.where}: a residual sum with the network's input; the input's channels are fixed")
        return self.edge(_Edge("add", g, g, a.hw, 1, 1, (a.edge, b.edge), {}, s.where, act=s.act))

    def close_excitation(self, q: _Squeeze, x: Any, n: Any) -> _Tensor:
        """x · gate: the product that ends a squeeze-and-excitation of x."""
        t = self.close(x, n)
        if q.gate is None or t.edge != q.x.edge:
            raise TraceError(f"{_where(n)}: a channel-wise product other than a squeeze-and-excitation of its own "
                             f"input (pool, 1×1 conv, activation, 1×1 conv, sigmoid gate); register a kind for it "
                             f"(docs/extending.md)")
        return self.edge(_Edge(f"se:{q.s}:{q.act}:{q.gate}", t.group, t.group, t.hw, 1, 1, (t.edge,),
                               {"fc1": q.fc1, "fc2": q.fc2}, _where(n), self.owner(q.fc1)))

    def edge(self, e: _Edge) -> _Tensor:
        self.edges.append(e)
        hw = kind_of(e.kind).out_hw(Theta(e.hw[0], e.hw[1], e.stride, e.kernel, e.kind))
        return _Tensor(e.dst, hw, len(self.edges) - 1)

    # ---- operators -----------------------------------------------------------------------------
    def read(self) -> tuple[_Tensor, Any]:
        """Every node of the graph; returns the classifier's output and the graph's output node."""
        out = None
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                if self.vals:
                    raise TraceError(f"the module takes more than one input ({n.name}); aows searches networks of "
                                     f"one image input")
                shape = n.meta["tensor_meta"].shape
                self.vals[n] = _Tensor(0, (int(shape[2]), int(shape[3])), -1)
            elif n.op == "output":
                out = n
            elif n.op == "get_attr":
                raise TraceError(f"{_where(n)}: the module reads its own tensor {n.target!r} in forward; aows traces "
                                 f"networks of layers only")
            else:
                self.vals[n] = self.node(n)
        res = self.vals.get(out.args[0]) if out is not None and not isinstance(out.args[0], (tuple, list)) else None
        if isinstance(res, _Pooled) and not res.k and res.x.edge == len(self.edges) - 1:
            res = self.conv_classifier(res)
        if not isinstance(res, _Tensor) or res.edge < 0 or not self.edges[res.edge].kind.startswith("linear"):
            raise TraceError("the module's output is not the logits of a final Linear layer after a global average "
                             "pool; aows searches classifiers of one output")
        return res, out

    def conv_classifier(self, v: _Pooled) -> Any:
        """Globally pooled logits of a 1×1 convolution with bias and its activation, the network's last layer:
        the classifier `linear:conv:<act>` (SqueezeNet's, D55)."""
        e = self.edges[v.x.edge]
        if e.kind != "conv:nobn" or e.kernel != 1 or e.stride != 1 or e.act is None:
            return v
        conv = next(n for n in self.gm.graph.nodes if n.op == "call_module" and n.target == e.modules["conv"])
        e.kind = _with_dropout(f"linear:conv:{e.act}", self.dropout_into(conv))
        e.modules, e.act = {"conv": e.modules["conv"]}, None
        return _Tensor(e.dst, (1, 1), v.x.edge)

    def node(self, n: Any) -> Any:
        """What node n computes, from the values of its arguments."""
        from torch import nn

        if n.op == "call_module":
            m = self.mods[n.target]
            if isinstance(m, nn.Conv2d):
                return self.conv(n, m)
            if isinstance(m, nn.BatchNorm2d):
                return self.bn_act(n, m)
            if type(m) in (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU):
                return self.act_of(n, _ACTIVATIONS[type(m).__name__])
            if type(m) in (nn.Sigmoid, nn.Hardsigmoid):
                return self.gate(n, _GATES[type(m).__name__])
            if isinstance(m, nn.MaxPool2d):
                return self.pool(n, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
            if isinstance(m, nn.AdaptiveAvgPool2d):
                return self.global_pool(n, m.output_size)
            if isinstance(m, (nn.Dropout, nn.Identity)):
                return self.arg(n, 0, keep_open=True)
            if isinstance(m, nn.Flatten):
                return self.flatten(n, m.start_dim)
            if isinstance(m, nn.Linear):
                return self.linear(n, n.target, m)
            raise TraceError(f"{_where(n)}: {type(m).__name__} is not a registered layer kind; "
                             f"keep it out of the searched network, replace it, or register a kind for it "
                             f"(docs/extending.md)")
        if n.op in ("call_function", "call_method"):
            return self.function(n)
        raise TraceError(f"{_where(n)}: unsupported graph node {n.op} {n.target}")

    def function(self, n: Any) -> Any:
        import torch
        import torch.nn.functional as F

        f, args = n.target, n.args
        if f in (operator.add, operator.iadd, torch.add, "add", "add_"):
            if len(args) != 2 or n.kwargs:
                raise TraceError(f"{_where(n)}: an addition other than a sum of two tensors")
            a, b = (self.vals.get(x) for x in args)
            if a is None or b is None:
                raise TraceError(f"{_where(n)}: adds a constant to a tensor; aows's kinds add two tensors only")
            return _Sum((self.close(a, n), self.close(b, n)), where=_where(n))
        if f in (torch.cat, torch.concat):
            return self.concat(n)
        acts = {F.relu: "relu", torch.relu: "relu", "relu": "relu", "relu_": "relu", F.relu6: "relu6",
                F.hardswish: "hardswish", F.silu: "silu", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid",
                "sigmoid": "sigmoid", F.hardsigmoid: "hardsigmoid"}
        act = acts.get(f)
        if act is not None:
            return self.gate(n, act) if act in _GATES.values() else self.act_of(n, act)
        if f in (operator.mul, operator.imul, torch.mul, "mul", "mul_"):
            return self.product(n)
        if getattr(f, "__name__", "") == "stochastic_depth":  # torchvision's drop path: the identity in eval
            return self.arg(n, 0, keep_open=True)
        if f in (F.adaptive_avg_pool2d,):
            return self.global_pool(n, args[1] if len(args) > 1 else n.kwargs.get("output_size"))
        if f in (torch.mean, "mean"):
            dims = args[1] if len(args) > 1 else n.kwargs.get("dim")
            if tuple(sorted(int(d) % 4 for d in (dims if isinstance(dims, (tuple, list)) else [dims]))) == (2, 3):
                return _Pooled(self.close(self.vals[args[0]], n))
        if f in (torch.flatten, "flatten"):
            return self.flatten(n, args[1] if len(args) > 1 else n.kwargs.get("start_dim", 0))
        if f in ("view", "reshape", torch.reshape) and isinstance(self.vals.get(args[0]), _Pooled):
            return self.vals[args[0]]
        if f == "size" or f is getattr and isinstance(self.vals.get(args[0]), _Pooled):
            return None  # a shape read for a reshape of the pooled features
        if f in (F.dropout, torch.dropout, "contiguous"):
            return self.arg(n, 0, keep_open=True)
        if f is F.max_pool2d:
            k = args[1] if len(args) > 1 else n.kwargs.get("kernel_size")
            s = args[2] if len(args) > 2 else n.kwargs.get("stride", k)
            p = args[3] if len(args) > 3 else n.kwargs.get("padding", 0)
            return self.pool(n, k, s, p, n.kwargs.get("dilation", 1), n.kwargs.get("ceil_mode", False))
        name = getattr(f, "__name__", str(f))
        raise TraceError(f"{_where(n)}: operator {name!r} is not a registered layer kind; aows's kinds run conv + "
                         f"BatchNorm units, ReLU/ReLU6, a max-pool after a stem, residual sums, the global average pool "
                         f"and the classifier. Keep the module that calls it out of the searched network, or register "
                         f"a kind for it (docs/extending.md)")

    def concat(self, n: Any) -> _Tensor:
        """torch.cat of two branches along channels: a `cat` edge, every group it touches kept at its width (D55)."""
        xs = n.args[0] if n.args else n.kwargs.get("tensors")
        dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
        if isinstance(xs, (tuple, list)) and len(xs) == 1 and xs[0] in self.vals:  # the identity
            return self.vals[xs[0]]
        if not isinstance(xs, (tuple, list)) or len(xs) != 2 or int(dim) not in (1, -3):
            raise TraceError(f"{_where(n)}: a concatenation of {len(xs) if isinstance(xs, (tuple, list)) else '?'} "
                             f"tensors along dimension {dim}; aows's blocks join two branches along channels "
                             f"(register a kind for this block, docs/extending.md)")
        a, b = (self.close(self.vals[x], n) if x in self.vals else None for x in xs)
        if a is None or b is None or a.hw != b.hw:
            raise TraceError(f"{_where(n)}: a concatenation of tensors of different sizes, or not of traced tensors")
        g = self.group(self.width[self.root(a.group)] + self.width[self.root(b.group)])
        self.joined.update((a.group, b.group, g))
        return self.edge(_Edge("cat", a.group, g, a.hw, 1, 1, (a.edge, b.edge), {}, _where(n)))

    def product(self, n: Any) -> _Tensor:
        """x · gate, a squeeze-and-excitation's end; any other product is refused."""
        a, b = (self.vals.get(x) for x in n.args) if len(n.args) == 2 else (None, None)
        if n.kwargs or a is None or b is None:
            raise TraceError(f"{_where(n)}: a product other than of two traced tensors; register a kind for it "
                             f"(docs/extending.md)")
        q, x = (a, b) if isinstance(a, _Squeeze) else (b, a)
        if not isinstance(q, _Squeeze):
            raise TraceError(f"{_where(n)}: a product of two feature maps; aows's kinds multiply a tensor by its own "
                             f"squeeze-and-excitation gate only (register a kind, docs/extending.md)")
        return self.close_excitation(q, x, n)

    def arg(self, n: Any, i: int, keep_open: bool = False) -> Any:
        v = self.vals.get(n.args[i])
        if v is None:
            raise TraceError(f"{_where(n)}: reads a value that is not a traced tensor")
        return v if keep_open else self.close(v, n)

    def conv(self, n: Any, m: Any) -> Any:
        k, s, p, d = m.kernel_size, m.stride, m.padding, m.dilation
        where = _where(n)
        v = self.vals.get(n.args[0])
        if isinstance(v, (_Pooled, _Squeeze)):
            return self.squeeze(n, m, v)
        x = self.arg(n, 0)
        if p == "valid":
            p = (0, 0)
        if k[0] != k[1] or s[0] != s[1] or d != (1, 1) or isinstance(p, str) or p[0] != p[1] \
                or m.padding_mode != "zeros":
            raise TraceError(f"{where}: Conv2d(kernel {k}, stride {s}, padding {p}, dilation {d}, "
                             f"{m.padding_mode}); the registered kinds run square convolutions of one stride, padded "
                             f"alike on every side with zeros, dilation 1. Register a kind (docs/extending.md)")
        if m.groups > 1 and m.in_channels != m.out_channels:
            raise TraceError(f"{where}: a grouped convolution of {m.in_channels} → {m.out_channels} channels "
                             f"({m.groups} groups); the registered kinds run grouped convolutions of one width "
                             f"('dw', 'gconv'). Register a kind (docs/extending.md)")
        return _Unit(x, n.target, m.out_channels, k[0], s[0], m.groups, p[0], m.bias is not None, where=where)

    def squeeze(self, n: Any, m: Any, v: Any) -> _Squeeze:
        """A 1×1 convolution with bias on pooled features: a squeeze-and-excitation's fc1 or fc2."""
        ok = m.kernel_size == (1, 1) and m.groups == 1 and m.bias is not None
        if ok and isinstance(v, _Pooled):
            return _Squeeze(v.x, n.target, m.out_channels)
        if ok and v.act is not None and v.fc2 is None and m.out_channels == self.width[self.root(v.x.group)]:
            v.fc2 = n.target
            return v
        raise TraceError(f"{_where(n)}: a convolution of globally pooled features other than a squeeze-and-"
                         f"excitation's (1×1 with bias: pool, fc1, activation, fc2 back to the input's width, gate); "
                         f"register a kind for it (docs/extending.md)")

    def gate(self, n: Any, gate: str) -> _Squeeze:
        v = self.open_value(n)
        if not isinstance(v, _Squeeze) or v.fc2 is None or v.gate is not None:
            raise TraceError(f"{_where(n)}: a {gate} that does not gate a squeeze-and-excitation; register a kind "
                             f"for it (docs/extending.md)")
        v.gate = gate
        return v

    def open_value(self, n: Any) -> Any:
        """The value node n continues (a unit or a sum), refused once another operator has read it."""
        v = self.vals.get(n.args[0])
        if id(v) in self.closed:
            raise TraceError(f"{_where(n)}: continues a layer whose output another operator already read; aows's "
                             f"kinds read a unit's output after its BatchNorm, activation and pool")
        return v

    def bn(self, n: Any) -> _Unit:
        u = self.open_value(n)
        if not isinstance(u, _Unit) or u.bn is not None or u.act is not None or u.pool:
            raise TraceError(f"{_where(n)}: a BatchNorm2d that does not directly follow a convolution; register a "
                             f"kind for it (docs/extending.md)")
        u.bn = n.target
        return u

    def bn_act(self, n: Any, m: Any) -> _Unit:
        """A BatchNorm2d, and the activation a subclass of it runs after it (timm's `BatchNormAct2d`: `act`)."""
        from torch import nn

        u = self.bn(n)
        act = getattr(m, "act", None)
        if isinstance(act, nn.Module) and not isinstance(act, nn.Identity):
            if type(act) not in (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU):
                raise TraceError(f"{_where(n)}: a BatchNorm2d followed by {type(act).__name__}, which is not a "
                                 f"registered activation ({', '.join(_ACTIVATIONS)}); register a kind for it "
                                 f"(docs/extending.md)")
            u.act = _ACTIVATIONS[type(act).__name__]
        return u

    def act_of(self, n: Any, act: str) -> Any:
        v = self.open_value(n)
        if isinstance(v, _Unit) and v.bn is None and not v.bias:
            raise _no_norm(v)
        if isinstance(v, _Unit) and v.act is None and not v.pool:  # after its BN, or a conv with bias and no BN
            v.act = act
            return v
        if isinstance(v, _Sum) and v.act is None:
            v.act = act
            return v
        if isinstance(v, _Squeeze) and v.act is None and v.fc2 is None:
            v.act = act
            return v
        if isinstance(v, _Tensor) and v.edge >= 0 and self.edges[v.edge].kind.startswith("linear") \
                and v.group == self.edges[v.edge].dst:
            return _Head(v, act)
        raise TraceError(f"{_where(n)}: a {act} that follows neither a convolution with its BatchNorm nor a residual "
                         f"sum; register a kind for it (docs/extending.md)")

    def pool(self, n: Any, k: Any, s: Any, p: Any, d: Any, ceil: bool) -> Any:
        """A max-pool: part of the conv (+ BN) + activation unit it follows where nothing else reads that unit
        (`convpool`), else a layer of its own on one width (`maxpool`, D55)."""
        pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
        k, s, p, d = pair(k), pair(s if s is not None else k), pair(p), pair(d)
        if k[0] != k[1] or s[0] != s[1] or p[0] != p[1] or d != (1, 1):
            raise TraceError(f"{_where(n)}: a max-pool of kernel {k}, stride {s}, padding {p}, dilation {d}; the "
                             f"registered kinds pool square windows of one stride and dilation 1. Register a kind for "
                             f"it (docs/extending.md)")
        pool = PoolShape(int(k[0]), int(s[0]), int(p[0]), bool(ceil))
        v = self.vals.get(n.args[0])
        if isinstance(v, _Unit) and id(v) not in self.closed and v.act is not None and v.pool is None:
            v.pool = pool
            return v
        t = self.arg(n, 0)
        kind = "maxpool" if pool == PoolShape() else f"maxpool:{pool.token}"
        return self.edge(_Edge(kind, t.group, t.group, t.hw, pool.s, pool.k, (t.edge,), {}, _where(n)))

    def global_pool(self, n: Any, size: Any) -> _Pooled:
        x = self.arg(n, 0)
        k = size if isinstance(size, int) else size[0] if isinstance(size, (tuple, list)) and len(set(size)) == 1 \
            else None
        if not isinstance(k, int):
            raise TraceError(f"{_where(n)}: an adaptive average pool to {size}; the classifier kind pools to a square")
        return _Pooled(x, 0 if k == 1 else k)

    def flatten(self, n: Any, start: Any) -> _Pooled:
        v = self.vals.get(n.args[0])
        if not isinstance(v, _Pooled) or int(start) != 1:
            raise TraceError(f"{_where(n)}: a flatten that does not follow the global average pool; the classifier "
                             f"kind reads globally pooled features")
        return v

    def linear(self, n: Any, path: str, m: Any) -> _Tensor:
        v = self.vals.get(n.args[0])
        if isinstance(v, _Head) and m.bias is not None:
            return self.head(n, path, m, v)
        if not isinstance(v, _Pooled) or m.bias is None:
            raise TraceError(f"{_where(n)}: a Linear layer {'without a bias' if isinstance(v, _Pooled) else 'that does not read the globally pooled features'}; "
                             f"the classifier kind is global average pool, then Linear with bias")
        if any(e.kind.startswith(("linear", "fc")) for e in self.edges):
            raise TraceError(f"{_where(n)}: a Linear layer on pooled features after the classifier's; aows's "
                             f"classifiers are Linear layers in sequence, activated between them")
        x = v.x
        if m.in_features != self.width[self.root(x.group)] * max(1, v.k) ** 2:
            raise TraceError(f"{_where(n)}: a Linear layer of {m.in_features} inputs on pooled features of "
                             f"{self.width[self.root(x.group)] * max(1, v.k) ** 2}")
        kind = _with_dropout(f"linear:pool{v.k}" if v.k else "linear", self.dropout_into(n))
        return self.edge(_Edge(kind, x.group, self.group(m.out_features), x.hw, 1, 1, (x.edge,), {"linear": path},
                               _where(n)))

    def dropout_into(self, n: Any) -> float:
        """p of the Dropout (module or function) that writes node n's input; 0 if another node writes it (D57)."""
        import torch
        import torch.nn.functional as F
        from torch import nn

        x = n.args[0] if n.args else None
        if getattr(x, "op", None) == "call_module" and isinstance(self.mods.get(x.target), nn.Dropout):
            return float(self.mods[x.target].p)
        if getattr(x, "op", None) == "call_function" and x.target in (F.dropout, torch.dropout):
            p = x.args[1] if len(x.args) > 1 else x.kwargs.get("p", 0.5)
            return float(p)
        return 0.0

    def head(self, n: Any, path: str, m: Any, v: "_Head") -> _Tensor:
        """A Linear layer after the classifier's and an activation: that layer becomes a hidden one, `fc`, whose
        width is searched (D56), and this one the classifier, reading its flat output."""
        e = self.edges[v.x.edge]
        kind = kind_of(e.kind)
        how = "" if kind.pool is None else "gap:" if not kind.pool else f"pool{kind.pool}:"
        e.kind = _with_dropout(f"fc:{how}{v.act}", kind.dropout)
        return self.edge(_Edge(_with_dropout("linear:flat", self.dropout_into(n)), e.dst, self.group(m.out_features),
                               (1, 1), 1, 1, (v.x.edge,), {"linear": path}, _where(n)))


def _with_dropout(kind: str, p: float) -> str:
    """`kind` with the dropout on its input, `d<p>` last (D57)."""
    return f"{kind}:d{p:g}" if p else kind


def _no_norm(u: _Unit) -> TraceError:
    return TraceError(f"{u.where}: a convolution with neither a BatchNorm2d after it nor a bias; the registered kinds "
                      f"are conv + BN units or convolutions with a bias (docs/method.md D54). Register a kind for it "
                      f"(docs/extending.md)")


def _where(n: Any) -> str:
    """A graph node as the user knows it: its module path, or the function and the module that called it."""
    stack = n.meta.get("nn_module_stack") or {}
    owner = next(reversed(stack.values()), None) if stack else None
    path = n.target if n.op == "call_module" else (owner[0] if isinstance(owner, tuple) else owner)
    return f"module {path!r}" if path else f"graph node {n.name!r}"


def _op(n: Any) -> str:
    return getattr(n.target, "__name__", str(n.target))


def _blocks(edges: list[_Edge]) -> list[tuple[list[int], int, int]]:
    """The layers as blocks run in sequence: (main edges, shortcut edge or −1, add edge or −1), in trace order."""
    consumers: dict[int, int] = {}
    for e in edges:
        for t in e.inputs:
            consumers[t] = consumers.get(t, 0) + 1

    def branch(t: int, where: str) -> tuple[list[int], int]:
        """The layers back from tensor t to the tensor the branch split from."""
        path = []
        while t >= 0 and consumers.get(t, 0) == 1:
            e = edges[t]
            if len(e.inputs) != 1:
                raise TraceError(f"{where}: a residual branch that contains another sum; aows's blocks hold one "
                                 f"residual sum each (register a kind for this block, docs/extending.md)")
            path.insert(0, t)
            t = e.inputs[0]
        return path, t

    in_block: dict[int, int] = {}
    blocks: list[tuple[list[int], int, int]] = []
    for i, e in enumerate(edges):
        if len(e.inputs) != 2:  # a residual sum reads two tensors
            continue
        (pa, xa), (pb, xb) = (branch(t, e.where) for t in e.inputs)
        if xa != xb:
            raise TraceError(f"{e.where}: a residual sum whose branches do not split from one tensor; aows's blocks "
                             f"are a main branch and a shortcut from the block's input")
        main, short = (pa, pb) if len(pa) >= len(pb) else (pb, pa)
        if e.kind == "cat" and main is pb:  # the network joins (main, shortcut): the shortcut's channels come first
            e.kind = "cat:r"
        if len(short) > 1 or not main:
            raise TraceError(f"{e.where}: a residual sum of two branches with {len(main)} and {len(short)} layers; "
                             f"aows's blocks sum a main branch and a shortcut of at most one layer")
        block = (main, short[0] if short else -1, i)
        for j in (*main, *short, i):
            in_block[j] = len(blocks)
        blocks.append(block)
    out: list[tuple[list[int], int, int]] = []
    seen: set[int] = set()
    for i, e in enumerate(edges):
        if i in in_block:
            if in_block[i] not in seen:
                seen.add(in_block[i])
                out.append(blocks[in_block[i]])
            continue
        prev = out[-1][0] if out and out[-1][2] < 0 else None
        # layers of one module (MobileNet-v2's block without its sum) run as one block, and so does a depthwise layer
        # with the layer after it (its width is its input's: no block of its own writes it)
        joins = prev is not None and not e.kind.startswith("linear") and (
            edges[prev[-1]].owner == e.owner != "" or edges[prev[-1]].src == edges[prev[-1]].dst)
        if joins:
            prev.append(i)
        else:
            out.append(([i], -1, -1))
    return out


def trace_space(model: Any, input_shape: Sequence[int], name: str = "traced", *, fixed: Sequence[str] = (),
                n_choices: int = TRACED_N_CHOICES, min_mult: float = TRACED_MIN_MULT,
                divisor: int = TRACED_DIVISOR, model_name: str = "") -> TracedSpace:
    """The search space of `model` on inputs of `input_shape` (C, H, W): see the module docstring. `fixed` names
    modules (or module prefixes) whose output channels keep their traced width."""
    model = model.eval()
    reader = _Reader(_graph(model, input_shape), model, int(input_shape[0]))
    reader.read()
    edges = reader.edges
    act = _name_kinds(edges)
    blocks = _blocks(edges)
    order = [e for main, sc, add in blocks for e in (*main, *(x for x in (sc, add) if x >= 0))]
    renum = {old: new for new, old in enumerate(order)}
    roots = [reader.root(g) for g in range(len(reader.parent))]
    node_of = _nodes(edges, order, roots)
    fixed_groups = _fixed_groups(fixed, edges, roots) | {roots[g] for g in reader.joined}
    mults = np.linspace(min_mult, 1.0, n_choices)
    choices: list[tuple[int, ...]] = [()] * len(node_of)
    step = {g: divisor for g in node_of}
    for e in edges:  # a grouped convolution's node moves in whole groups
        step[roots[e.src]] = math.lcm(step[roots[e.src]], kind_of(e.kind).group_width())
    for g, i in node_of.items():
        b = reader.width[g]
        choices[i] = (b,) if i in (0, len(node_of) - 1) or g in fixed_groups else traced_choices(b, mults, step[g])
    space_edges = [(node_of[roots[edges[i].src]], node_of[roots[edges[i].dst]]) for i in order]
    space_blocks = []
    for main, sc, add in blocks:
        src, dst = space_edges[renum[main[0]]][0], space_edges[renum[add if add >= 0 else main[-1]]][1]
        inner = next((space_edges[renum[j]][1] for j in main[:-1] if space_edges[renum[j]][1] not in (src, dst)), -1)
        kind = "-".join(edges[j].kind for j in main) if add < 0 else \
            "concat" if edges[add].kind.startswith("cat") else "residual"
        space_blocks.append(Block("classifier" if kind.startswith("linear") else kind, src, dst, inner,
                                  math.prod(edges[j].stride for j in main), tuple(renum[j] for j in main),
                                  renum[sc] if sc >= 0 else -1, renum[add] if add >= 0 else -1))
    base = tuple(reader.width[g] for g, i in sorted(node_of.items(), key=lambda kv: kv[1]))[1:]
    thetas = tuple(Theta(edges[i].hw[0], edges[i].hw[1], edges[i].stride, edges[i].kernel, edges[i].kind)
                   for i in order)
    space = SearchSpace(name, tuple(choices), thetas, base, tuple(space_edges), tuple(space_blocks), act)
    try:
        check_blocks(space)
    except ValueError as e:
        raise TraceError(f"the traced layers do not run as blocks in sequence ({e}); aows's networks run each block "
                         f"on the previous block's output") from None
    modules = tuple(dict(edges[i].modules) for i in order)
    _check_decodable(space, modules)
    return TracedSpace(space, modules, model_name)


def _check_decodable(space: SearchSpace, modules: Sequence[Mapping[str, str]]) -> None:
    """Refuse a space whose decoders would hold more joint choices at one node than they can (MAX_STATES, or
    MAX_ENTRIES over the padded transitions; D44), naming the node and the modules whose widths `space.fixed` could
    keep."""
    active = frontier(space.n_nodes, space.edges)
    sizes = [math.prod(len(space.choices[u]) for u in act) for act in active]
    t = int(np.argmax(sizes))
    if sizes[t] <= MAX_STATES and space.n_nodes * sizes[t] ** 2 <= MAX_ENTRIES:
        return
    writers = sorted({next(iter(m.values())) for (s, d), m in zip(space.edges, modules)
                      if d in active[t] and s != d and 0 < d < space.n_nodes - 1})
    raise TraceError(f"the space is too wide for the decoders: at node {t} they would hold the widths of nodes "
                     f"{active[t]} at once, {sizes[t]} joint choices (at most {MAX_STATES}, and "
                     f"{space.n_nodes} × {sizes[t]}² transition entries at most {MAX_ENTRIES}); keep some of them at "
                     f"their traced width with space.fixed (the modules writing them: {', '.join(writers[:8])}"
                     f"{' …' if len(writers) > 8 else ''}), or lower space.n_choices")


def _name_kinds(edges: list[_Edge]) -> str:
    """The space's activation (the one most of its units run, ReLU or ReLU6) and each edge's kind name under it:
    a unit of another activation names it (`conv:hardswish`, D49); a sum is `add` where the space's activation
    follows it in a ReLU network or nothing does in a ReLU6 one (D44), `sum` where nothing does in a ReLU one (D48)."""
    acts = [e.act for e in edges if e.kind != "add"]
    act = "relu6" if acts.count("relu6") > acts.count("relu") else "relu"
    for e in edges:
        if e.kind != "add":
            if e.act is not None and e.act != act:
                e.kind = f"{e.kind}:{e.act}"
        elif e.act is None:
            e.kind = "add" if act == "relu6" else "sum"
        elif e.act != "relu" or act != "relu":
            raise TraceError(f"{e.where}: a residual sum with a {e.act} after it, in a network of {act} units; the "
                             f"registered sums are ReLU'd in a ReLU network ('add', ResNet) or not at all ('sum', "
                             f"MNASNet). Register a kind (docs/extending.md)")
    return act


def _graph(model: Any, input_shape: Sequence[int]) -> Any:
    """The module's `torch.fx` graph, every node's output shape propagated from one input of `input_shape`."""
    import torch
    from torch import fx, nn
    from torch.fx.passes.shape_prop import ShapeProp

    c, h, w = (int(v) for v in input_shape)

    class Tracer(fx.Tracer):  # a BatchNorm2d subclass (timm's BatchNormAct2d) is one operator
        def is_leaf_module(self, m: Any, qualname: str) -> bool:
            return isinstance(m, nn.BatchNorm2d) or super().is_leaf_module(m, qualname)

    try:
        gm = fx.GraphModule(model, Tracer().trace(model))
    except Exception as e:  # torch.fx raises many kinds; each means the forward is not traceable symbolically
        raise TraceError(f"torch.fx cannot trace the module ({type(e).__name__}: {e}); aows needs a forward without "
                         f"data-dependent control flow (wrap such code in a leaf module)") from None
    device = next((p.device for p in model.parameters()), torch.device("cpu"))  # "meta": shapes without compute
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(torch.zeros(1, c, h, w, device=device))
    except Exception as e:
        raise TraceError(f"the module does not run on an input of shape ({c}, {h}, {w}): {type(e).__name__}: "
                         f"{e}") from None
    return gm


def _nodes(edges: list[_Edge], order: list[int], roots: list[int]) -> dict[int, int]:
    """Each group's node: the input 0, then in order of first use by the layers in `order`, the classes last."""
    if not edges[order[-1]].kind.startswith("linear"):
        raise TraceError("the classifier is not the network's last layer")
    classes = roots[edges[order[-1]].dst]
    node_of: dict[int, int] = {roots[0]: 0}
    for i in order:
        for g in (roots[edges[i].src], roots[edges[i].dst]):
            if g not in node_of and g != classes:
                node_of[g] = len(node_of)
    node_of[classes] = len(node_of)
    return node_of


def traced_choices(base: int, mults: Sequence[float], divisor: int = TRACED_DIVISOR) -> tuple[int, ...]:
    """A traced width's choices: base·m rounded to a multiple of `divisor` (at least `divisor`, at most base), the
    multiplier 1 the traced width itself."""
    out = {base}
    for m in mults:
        if m < 1.0:
            out.add(min(base, max(divisor, int(math.floor(base * m / divisor + 0.5)) * divisor)))
    return tuple(sorted(out))


def _fixed_groups(fixed: Sequence[str], edges: list[_Edge], roots: list[int]) -> set[int]:
    """The groups written by the modules `fixed` names (a module path or a prefix of one)."""
    out: set[int] = set()
    for name in fixed:
        hit = [e for e in edges if any(p == name or p.startswith(name + ".") for p in e.modules.values())]
        if not hit:
            paths = [next(iter(e.modules.values())) for e in edges if e.modules]
            raise TraceError(f"space.fixed names {name!r}, which is no traced layer's module; traced modules: "
                             f"{', '.join(paths[:12])}{' …' if len(paths) > 12 else ''}")
        out.update(roots[e.dst] for e in hit)
    return out


def trained_state(traced: TracedSpace, model: Any) -> dict[str, Any]:
    """The model's weights under the fixed network's parameter names at the traced widths (`space.base_config`):
    each module an edge was read from under its role in the edge's module (`layers.{e}.conv.*`, `layers.{e}.bn.*`,
    `layers.{e}.fc1.*`, the classifier's Linear as `classifier.*`), a convolution's own bias folded into its BN's mean."""
    import torch

    mods = dict(model.named_modules())
    out: dict[str, Any] = {}
    for e, roles in enumerate(traced.modules):
        prefix = traced.space.module_path(e)
        for role, path in roles.items():
            for k, v in mods[path].state_dict().items():
                out[f"{_role_path(prefix, role)}.{k}"] = v.detach().clone()
        own = f"{prefix}.conv.bias" in kind_of(traced.space.thetas[e].kind).writes(prefix)
        if not own and f"{prefix}.conv.bias" in out and f"{prefix}.bn.running_mean" in out:
            bias = out.pop(f"{prefix}.conv.bias")
            out[f"{prefix}.bn.running_mean"] = out[f"{prefix}.bn.running_mean"] - bias.to(torch.float32)
    return out


def _role_path(prefix: str, role: str) -> str:
    """Where a traced module of `role` lives in its edge's module `prefix`: the classifier's Linear is the module."""
    return prefix if role == "linear" else f"{prefix}.{role}"


IMPORTANCE = ("bn", "none")


def read_weights(path: str | Path, model: Any) -> dict[str, Any]:
    """A state-dict file for `model` (a `torch.save`d state dict, or a checkpoint holding one under "state_dict" or
    "model"), refused unless every key and shape is the model's, naming the first that is not."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (OSError, RuntimeError, ValueError) as e:
        raise TraceError(f"space.weights {str(path)!r}: cannot read it as a torch state dict ({e})") from None
    if isinstance(state, dict) and not any(hasattr(v, "shape") for v in state.values()):
        state = state.get("state_dict") or state.get("model") or state
    want = model.state_dict()
    for k, v in want.items():
        if k not in state:
            raise TraceError(f"space.weights {str(path)!r} has no {k!r} (shape {tuple(v.shape)}) of the model; "
                             f"it holds {len(state)} tensors, first {next(iter(state), None)!r}: a file of another model")
        if tuple(state[k].shape) != tuple(v.shape):
            raise TraceError(f"space.weights {str(path)!r}: {k!r} has shape {tuple(state[k].shape)}, the model's is "
                             f"{tuple(v.shape)}")
    extra = sorted(set(state) - set(want))
    if extra:
        raise TraceError(f"space.weights {str(path)!r} holds {extra[0]!r}, which the model has not "
                         f"({len(extra)} such tensors): a file of another model")
    return state


def channel_importance(space: SearchSpace, state: Mapping[str, Any], node: int) -> Any:
    """Each channel of `node` scored by the layers that write it (the order a width's front slice keeps, §3's
    slimmable networks; docs/method.md D48): the summed |γ| of their BatchNorms, a writer without one (a unit without
    BN, D54; a hidden linear layer, D56) by the mean |w| of its filters or rows."""
    import torch

    score = torch.zeros(space.base[node - 1])
    for e, (s, d) in enumerate(space.edges):
        if d != node or e == space.n_edges - 1:
            continue
        if f"layers.{e}.bn.weight" in state:
            score += state[f"layers.{e}.bn.weight"].detach().abs().float()
            continue
        writes = kind_of(space.thetas[e].kind).writes(f"layers.{e}") if s != d else ()
        if writes and writes[0] in state:
            score += state[writes[0]].detach().abs().float().flatten(1).mean(1)
    return score


def node_group_width(space: SearchSpace, node: int) -> int:
    """The channels of `node` that move together: the least common multiple of its layers' group widths (D49)."""
    return math.lcm(1, *(kind_of(t.kind).group_width() for t, (s, d) in zip(space.thetas, space.edges)
                         if node in (s, d)))


def ordered_state(space: SearchSpace, state: Mapping[str, Any], importance: str = "bn") -> dict[str, Any]:
    """`state` (the widest network's, `trained_state`) with each node's channels ordered by `channel_importance`
    ("bn"; "none" keeps them), most important first, so that a width's front slice keeps the strongest channels
    (grouped convolutions' groups whole, by their summed score); the network computes the same function (every layer
    writing a node permutes its outputs, every layer reading it its inputs: the kind names the keys)."""
    import torch

    if importance not in IMPORTANCE:
        raise ValueError(f"space.importance {importance!r}: expected one of {IMPORTANCE}")
    out = {k: v.clone() for k, v in state.items()}
    if importance == "none":
        return out
    for node in range(1, space.n_nodes - 1):
        if len(space.choices[node]) == 1:  # always whole (a concatenation's operands keep their order, D55)
            continue
        g = node_group_width(space, node)
        score = channel_importance(space, state, node)
        groups = score.view(-1, g).sum(1).argsort(descending=True, stable=True)
        perm = (groups[:, None] * g + torch.arange(g)[None, :]).flatten()
        for e, (s, d) in enumerate(space.edges):
            kind = kind_of(space.thetas[e].kind)
            prefix = space.module_path(e)
            if d == node:
                for k in kind.writes(prefix):
                    if k in out:
                        out[k] = out[k][perm]
            if s == node:
                for k in kind.reads(prefix):
                    if k in out:  # a flatten classifier reads each channel's pool² features together
                        out[k] = out[k].unflatten(1, (len(perm), -1))[:, perm].flatten(1, 2)
    return out



def module_state(traced: TracedSpace, model: Any, state: Mapping[str, Any]) -> dict[str, Any]:
    """A fixed network's state dict (`nets.network.Network`'s names, at any widths) under the user's module's names
    (the inverse of `trained_state`, D49): a convolution's own bias zero (the network's BN mean holds it), a BatchNorm
    of another eps given the running variance that makes it compute the network's normalisation."""
    import torch
    from torch import nn

    mods = dict(model.named_modules())
    out: dict[str, Any] = {}
    for e, roles in enumerate(traced.modules):
        prefix = traced.space.module_path(e)
        for role, path in roles.items():
            src, m = _role_path(prefix, role), mods[path]
            for k in m.state_dict():
                if f"{src}.{k}" in state:
                    out[f"{path}.{k}"] = state[f"{src}.{k}"].detach().clone()
            if isinstance(m, nn.Conv2d) and m.bias is not None and role == "conv" and f"{path}.bias" not in out:
                out[f"{path}.bias"] = torch.zeros(out[f"{path}.weight"].shape[0])
            if isinstance(m, nn.BatchNorm2d) and m.eps != BN_EPS:
                out[f"{path}.running_var"] = (out[f"{path}.running_var"] + BN_EPS - m.eps).clamp_min(0.0)
    return out


BN_EPS = 1e-5  # the networks' BatchNorm eps (torch's default)


def narrowed(model: Any, state: Mapping[str, Any]) -> Any:
    """A copy of `model` whose Conv2d, BatchNorm2d and Linear layers (subclasses included, resized in place) take
    the shapes of `state` (a state dict under the module's own names: an exported finalist's `module_state_dict.pt`),
    loaded with it, in eval mode: the user's architecture with fewer channels, the same classes under the same names
    (D49). A grouped convolution keeps its group width."""
    import copy

    import torch
    from torch import nn

    out = copy.deepcopy(model).cpu()
    for path, m in out.named_modules():
        w = state.get(f"{path}.weight")
        if w is None or not isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear)) or w.shape == m.weight.shape:
            continue
        if isinstance(m, nn.Conv2d):
            m.out_channels = w.shape[0]
            m.in_channels = w.shape[0] if m.groups > 1 else w.shape[1]
            m.groups = m.in_channels // w.shape[1]
        elif isinstance(m, nn.BatchNorm2d):
            m.num_features = w.shape[0]
        else:
            m.out_features, m.in_features = w.shape
        for name, v in list(m.named_parameters(recurse=False)):
            setattr(m, name, nn.Parameter(torch.empty(state[f"{path}.{name}"].shape, dtype=v.dtype)))
        for name, v in list(m.named_buffers(recurse=False)):
            if v is not None and v.dim() > 0:
                m.register_buffer(name, torch.empty(state[f"{path}.{name}"].shape, dtype=v.dtype))
    out.load_state_dict(state)
    return out.eval()


def user_module(traced: TracedSpace, model: Any, state: Mapping[str, Any]) -> Any:
    """The user's own module holding a fixed network's state (a retrained finalist's, a supernet's slice): `narrowed`
    to its widths, computing its function."""
    return narrowed(model, module_state(traced, model, state))
