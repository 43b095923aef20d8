"""The layer-kind interface (Θ_i's `kind`, §4 eq. lat; docs/method.md D45): one class per kind, one registry.

A kind knows, for a layer with descriptor Θ mapping c_in → c_out channels: its latency variable's key, its output
size, MACs, parameters and memory traffic (numpy-free arithmetic), its fixed torch module, its forward inside the
slimmable supernet (weights sliced to the pass's widths, every BatchNorm through the pass's normalisation) and its
ONNX nodes. Devices, the ONNX builder, the networks, the scorer and the batched pass ask the kind; nothing else
switches on `kind`. Importing this package imports no torch: the torch and onnx parts are imported by the methods
that need them (`units`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

# Activations a space may name (`SearchSpace.act`): the one its units' normalisation fuses.
ACTIVATIONS = ("relu", "relu6")
# Activations a unit may name as its kind's parameter (`conv:hardswish`, D49): each maps 0 to 0, so that a masked
# channel stays zero (§5).
UNIT_ACTIVATIONS = ("relu", "relu6", "hardswish", "silu")
# Gates of a squeeze-and-excitation product (`se`).
GATES = ("sigmoid", "hardsigmoid")


@dataclass(frozen=True)
class ConvShape:
    """A k×k convolution: c_in → c_out channels, its stride, groups (depthwise: groups = c) and zero padding (None:
    k // 2)."""

    c_in: int
    c_out: int
    k: int = 1
    stride: int = 1
    groups: int = 1
    pad: int | None = None

    @property
    def padding(self) -> int:
        return self.k // 2 if self.pad is None else self.pad


@dataclass(frozen=True)
class PoolShape:
    """A k×k max-pool of stride s, padding p, its output size rounded up when `ceil` (torch's `ceil_mode`)."""

    k: int = 3
    s: int = 2
    p: int = 1
    ceil: bool = False

    @property
    def token(self) -> str:
        """The pool as a kind's parameter names it: `mp<k>s<s>p<p>`, `c` in ceil mode (D54)."""
        return f"mp{self.k}s{self.s}p{self.p}{'c' * self.ceil}"

    @classmethod
    def parse(cls, token: str) -> "PoolShape | None":
        """The pool `token` names, or None."""
        m = re.fullmatch(r"mp(\d+)s(\d+)p(\d+)(c?)", token)
        if m is None or int(m[1]) < 1 or int(m[2]) < 1:
            return None
        return cls(int(m[1]), int(m[2]), int(m[3]), m[4] == "c")

    def out(self, n: int) -> int:
        """Output size of an input of size n, as torch's MaxPool2d computes it."""
        num = n + 2 * self.p - self.k
        o = (-(-num // self.s) if self.ceil else num // self.s) + 1
        return o - 1 if self.ceil and (o - 1) * self.s >= n + self.p else o


@dataclass(frozen=True)
class Pass:
    """One supernet pass as a kind's `forward` sees it: the width computed at every node (nodes 0..n) and the
    normalisation `norm(z, bn, node, act)` → BN of z as node `node`'s channels, activated if `act` (masked per
    sample, sliced, recalibrated or grouped: `nets.supernet`, `nets.scoring`, `nets.batched`); `bn` None: a unit
    without BatchNorm (its conv's bias already added), z only masked and activated."""

    full: Sequence[int]
    norm: Callable[[Any, Any, int, bool], Any]

    def width(self, node: int) -> int:
        return int(self.full[node])


class LayerKind:
    """A kind of layer. Subclasses set `name` and implement the arithmetic, `module`, `forward` and `onnx`."""

    name: ClassVar[str] = ""
    # The layer reads and writes one node (a depthwise conv, a residual add): its variables are (Θ, c, c).
    one_width: ClassVar[bool] = False
    # The network's last layer: global pooling and the classifier (held as the network's `classifier`).
    classifier: ClassVar[bool] = False
    # A join whose operands and result keep one width (a concatenation, D55): `space.check_blocks` refuses a searched one.
    keeps_widths: ClassVar[bool] = False
    # The synthetic device's cost family (ms per MMAC and per layer), one of devices.synthetic.COST_FAMILIES.
    cost_family: ClassVar[str] = "conv"

    # ---- parameters (D49) -------------------------------------------------------------------------
    def variant(self, args: Sequence[str]) -> "LayerKind":
        """The kind `name:arg1:arg2…` (a unit's own activation, a group width, …): a kind taking parameters
        overrides this and returns a configured copy."""
        raise ValueError(f"layer kind {self.name!r} takes no parameters, got {':'.join(args)!r}")

    # ---- trained weights (D48) ----------------------------------------------------------------------
    def writes(self, prefix: str) -> tuple[str, ...]:
        """State keys of the edge's module (at `prefix`) whose first dimension indexes its output node's channels."""
        return tuple(f"{prefix}.{k}" for k in ("conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                                                "bn.running_var"))

    def reads(self, prefix: str) -> tuple[str, ...]:
        """State keys whose second dimension indexes its input node's channels."""
        return () if self.one_width else (f"{prefix}.conv.weight",)

    def group_width(self) -> int:
        """Channels that move together: a width of the layer's node is a multiple of it (grouped convolutions)."""
        return 1

    # ---- arithmetic (no torch) --------------------------------------------------------------------
    def variable(self, t: Any, c_in: int, c_out: int) -> tuple:
        """The key of the latency variable of Θ at widths c_in → c_out (eq. lat): layers with equal keys share it."""
        return (t, int(c_in), int(c_out))

    def out_hw(self, t: Any) -> tuple[int, int]:
        """Spatial output size: a k×k conv padded by k // 2 with Θ's stride."""
        pad = t.kernel // 2
        return (t.in_h + 2 * pad - t.kernel) // t.stride + 1, (t.in_w + 2 * pad - t.kernel) // t.stride + 1

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        """Multiply-accumulates per image (the count forward hooks on Conv2d and Linear give)."""
        raise NotImplementedError

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        """Trainable parameters (weights, BatchNorm scale and shift, biases)."""
        raise NotImplementedError

    def moved(self, t: Any, c_in: int, c_out: int) -> int:
        """Elements read and written per image (activations in and out, weights): the synthetic device's memory term."""
        raise NotImplementedError

    # ---- torch --------------------------------------------------------------------------------------
    def pooled(self, x: Any) -> Any:
        """A classifier kind's pooling of the features (B, C, H, W) it reads: the global average, (B, C)."""
        return x.mean((2, 3))

    def module(self, t: Any, c_in: int, c_out: int, *, norm: Callable[[int], Any] | None, act: str,
               device: Any = None) -> Any:
        """The fixed torch module for c_in → c_out; `norm(c)` makes a BatchNorm of c channels (None: the deployment
        form, convolutions with biases); `act` the space's activation."""
        raise NotImplementedError

    def forward(self, mod: Any, xs: Sequence[Any], src: int, dst: int, p: Pass) -> Any:
        """The supernet's forward of `mod` (built at the max widths) on inputs `xs` at the pass's widths."""
        raise NotImplementedError

    # ---- onnx ---------------------------------------------------------------------------------------
    def onnx(self, g: Any, t: Any, xs: Sequence[str], out: str, path: str, c_in: int, c_out: int) -> None:
        """Append the deployment form's nodes and parameters to the graph builder `g` (`nets.onnx.GraphBuilder`):
        inputs `xs`, output tensor `out`, parameters named after the module path `path`."""
        raise NotImplementedError


class Parameterless(LayerKind):
    """A kind without parameters or MACs (a sum, a concatenation, a max-pool): nothing to count, slice or reorder."""

    cost_family = "linear"

    def macs(self, t: Any, c_in: int, c_out: int) -> int:
        return 0

    def params(self, t: Any, c_in: int, c_out: int) -> int:
        return 0

    def writes(self, prefix: str) -> tuple[str, ...]:
        return ()

    def reads(self, prefix: str) -> tuple[str, ...]:
        return ()


KINDS: dict[str, LayerKind] = {}


def register(cls: type[LayerKind], *, replace: bool = False) -> type[LayerKind]:
    """Add a kind to the registry (a class decorator); another class under a taken name needs `replace=True`."""
    if not cls.name:
        raise ValueError(f"layer kind {cls.__name__} has no name")
    old = KINDS.get(cls.name)
    if old is not None and type(old) is not cls and not replace:
        raise ValueError(f"layer kind {cls.name!r} is already registered ({type(old).__name__}); "
                         f"pass replace=True to override it")
    KINDS[cls.name] = cls()
    for v in [v for v in _VARIANTS if v.split(":")[0] == cls.name]:
        del _VARIANTS[v]
    return cls


def unregister(name: str) -> None:
    """Remove a kind (tests that register their own)."""
    KINDS.pop(name, None)
    for v in [v for v in _VARIANTS if v.split(":")[0] == name]:
        del _VARIANTS[v]


_VARIANTS: dict[str, LayerKind] = {}


def kind_of(name: str) -> LayerKind:
    """The registered kind `name`, or its variant `name:args` (`LayerKind.variant`); an error naming the registered
    ones and how to add one."""
    k = KINDS.get(name) or _VARIANTS.get(name)
    if k is not None:
        return k
    base, *args = name.split(":")
    k = KINDS.get(base)
    if k is None:
        raise ValueError(f"unknown layer kind {name!r}; registered kinds: {sorted(KINDS)} (add one with "
                         f"aows_core.kinds.register, docs/extending.md)")
    v = k.variant(args)
    v.name = name
    _VARIANTS[name] = v
    return v
