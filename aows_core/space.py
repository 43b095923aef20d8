"""Search spaces: a chain of searchable widths, layer descriptors Θ and latency variables (§2, §4, §7).

A space has nodes 0..n holding channel choices C_i; node 0 is the fixed input channels and node
n the fixed class count. Edge i (i = 0..n-1) is the layer mapping c_i → c_{i+1}, described by
Θ_i = (in_h, in_w, stride, kernel, kind). A latency variable is keyed by (Θ, c_in, c_out); edges
with the same Θ share variables (eq. lat). A *configuration* is the list of searchable widths
(c_1, ..., c_{n-1}): it is what the `channels` column of every artifact holds.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import numpy as np

KINDS = ("conv", "dwsep", "linear")

# MobileNet-v1 (Howard et al. 2017): (kind, stride of the layer, base output width).
MOBILENET_V1_LAYERS: tuple[tuple[str, int, int], ...] = (
    ("conv", 2, 32),
    ("dwsep", 1, 64),
    ("dwsep", 2, 128),
    ("dwsep", 1, 128),
    ("dwsep", 2, 256),
    ("dwsep", 1, 256),
    ("dwsep", 2, 512),
    ("dwsep", 1, 512),
    ("dwsep", 1, 512),
    ("dwsep", 1, 512),
    ("dwsep", 1, 512),
    ("dwsep", 1, 512),
    ("dwsep", 2, 1024),
    ("dwsep", 1, 1024),
)


@dataclass(frozen=True, order=True)
class Theta:
    """Layer descriptor Θ_i = (in_h, in_w, stride, kernel, kind) of §4."""

    in_h: int
    in_w: int
    stride: int
    kernel: int
    kind: str

    def out_hw(self) -> tuple[int, int]:
        """Spatial output size (3×3 convs are padded by 1; the classifier pools to 1×1)."""
        if self.kind == "linear":
            return 1, 1
        pad = self.kernel // 2
        return (
            (self.in_h + 2 * pad - self.kernel) // self.stride + 1,
            (self.in_w + 2 * pad - self.kernel) // self.stride + 1,
        )


VarKey = tuple[Theta, int, int]


@dataclass(frozen=True)
class SearchSpace:
    """A chain of width choices with one Θ per edge; see the module docstring."""

    name: str
    choices: tuple[tuple[int, ...], ...]
    thetas: tuple[Theta, ...]
    base: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if len(self.thetas) != len(self.choices) - 1:
            raise ValueError("a space needs exactly one layer descriptor per edge (len(choices) - 1)")
        for i, c in enumerate(self.choices):
            if not c or list(c) != sorted(set(c)) or min(c) < 1:
                raise ValueError(f"node {i}: choices must be distinct positive integers in increasing order, got {c}")
        if len(self.choices[0]) != 1 or len(self.choices[-1]) != 1:
            raise ValueError("the first node (input channels) and the last (classes) must be fixed")
        for t in self.thetas:
            if t.kind not in KINDS:
                raise ValueError(f"unknown layer kind {t.kind!r}; expected one of {KINDS}")

    # ---- shape -------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.choices)

    @property
    def n_edges(self) -> int:
        return len(self.thetas)

    @property
    def n_layers(self) -> int:
        """Number of searchable layers (nodes 1..n-1)."""
        return len(self.choices) - 2

    @property
    def in_channels(self) -> int:
        return self.choices[0][0]

    @property
    def num_classes(self) -> int:
        return self.choices[-1][0]

    @property
    def resolution(self) -> tuple[int, int]:
        return self.thetas[0].in_h, self.thetas[0].in_w

    @property
    def layer_choices(self) -> tuple[tuple[int, ...], ...]:
        return self.choices[1:-1]

    @property
    def size(self) -> int:
        """Number of configurations in the space (eq. search_space)."""
        return math.prod(len(c) for c in self.choices)

    @property
    def n_slots(self) -> int:
        """Number of (edge, c_in, c_out) slots, shared or not."""
        return sum(len(a) * len(b) for a, b in zip(self.choices[:-1], self.choices[1:]))

    # ---- latency variables -------------------------------------------------------------
    @cached_property
    def _variables(self) -> tuple[tuple[VarKey, ...], tuple[np.ndarray, ...]]:
        index: dict[VarKey, int] = {}
        tables = []
        for i, t in enumerate(self.thetas):
            tab = np.empty((len(self.choices[i]), len(self.choices[i + 1])), dtype=np.int64)
            for a, ci in enumerate(self.choices[i]):
                for b, co in enumerate(self.choices[i + 1]):
                    tab[a, b] = index.setdefault((t, ci, co), len(index))
            tab.setflags(write=False)
            tables.append(tab)
        return tuple(index), tuple(tables)

    @property
    def variables(self) -> tuple[VarKey, ...]:
        """Unique latency variables (Θ, c_in, c_out), in order of first appearance along the chain."""
        return self._variables[0]

    @property
    def n_variables(self) -> int:
        return len(self._variables[0])

    @property
    def edge_tables(self) -> tuple[np.ndarray, ...]:
        """Per edge i, the |C_i|×|C_{i+1}| array of variable indices."""
        return self._variables[1]

    def edges_of_variable(self) -> np.ndarray:
        """How many edges share each variable's Θ (its multiplicity along the chain)."""
        mult = np.zeros(self.n_variables, dtype=np.int64)
        seen: dict[Theta, int] = {}
        for t in self.thetas:
            seen[t] = seen.get(t, 0) + 1
        for v, (t, _, _) in enumerate(self.variables):
            mult[v] = seen[t]
        return mult

    # ---- configurations ----------------------------------------------------------------
    def indices(self, channels: Sequence[int]) -> np.ndarray:
        """Choice indices of every node (0..n) for a configuration; a clear error if outside the space."""
        channels = [int(c) for c in channels]
        if len(channels) != self.n_layers:
            raise ValueError(
                f"space {self.name!r} has {self.n_layers} searchable layers; got a configuration of length {len(channels)}"
            )
        idx = np.zeros(self.n_nodes, dtype=np.int64)
        for layer, c in enumerate(channels):
            allowed = self.choices[layer + 1]
            try:
                idx[layer + 1] = allowed.index(c)
            except ValueError:
                raise ValueError(
                    f"width {c} is not allowed at layer {layer} of space {self.name!r}; allowed widths: {list(allowed)}"
                ) from None
        return idx

    def channels_of(self, idx: Sequence[int]) -> list[int]:
        """Searchable widths for node choice indices (0..n)."""
        return [self.choices[i][int(k)] for i, k in enumerate(idx)][1:-1]

    def full(self, channels: Sequence[int]) -> list[int]:
        """(c_0, ..., c_n): the configuration closed by input channels and classes."""
        return [self.in_channels, *[int(c) for c in channels], self.num_classes]

    def variable_ids(self, idx: np.ndarray) -> np.ndarray:
        """Latency variable of every edge for node choice indices; idx may be (n+1,) or (P, n+1)."""
        idx = np.asarray(idx)
        return np.stack([tab[idx[..., i], idx[..., i + 1]] for i, tab in enumerate(self.edge_tables)], axis=-1)

    def layer_channels(self, layer_idx: Sequence[int]) -> list[int]:
        """Searchable widths for per-layer choice indices (layers 1..n-1 only)."""
        return [c[j] for c, j in zip(self.layer_choices, layer_idx)]

    def layer_columns(self, idx, what: str = "choice indices") -> np.ndarray:
        """(…, n_layers) choice indices from (…, n+1) chain-node or (…, n_layers) layer columns."""
        return layer_columns(idx, self.n_layers, what)

    @property
    def max_config(self) -> list[int]:
        return [c[-1] for c in self.layer_choices]

    @property
    def middle_config(self) -> list[int]:
        """The middle width choice of every layer: the timing protocol's reference network (D27)."""
        return [c[(len(c) - 1) // 2] for c in self.layer_choices]

    @property
    def min_config(self) -> list[int]:
        return [c[0] for c in self.layer_choices]

    # ---- identity ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "choices": [list(c) for c in self.choices],
            "thetas": [[t.in_h, t.in_w, t.stride, t.kernel, t.kind] for t in self.thetas],
            "base": list(self.base),
        }

    @cached_property
    def hash(self) -> str:
        """Hash of what defines the space (choices and descriptors, not its name)."""
        d = self.to_dict()
        blob = json.dumps({"choices": d["choices"], "thetas": d["thetas"]}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def describe(self) -> dict:
        """The JSON printed by `aows space`."""
        layers = []
        for i, t in enumerate(self.thetas):
            layers.append(
                {
                    "edge": i,
                    "kind": t.kind,
                    "in_hw": [t.in_h, t.in_w],
                    "stride": t.stride,
                    "kernel": t.kernel,
                    "c_in": list(self.choices[i]),
                    "c_out": list(self.choices[i + 1]),
                    "base_out": self.base[i] if i < len(self.base) else None,
                }
            )
        return {
            "name": self.name,
            "hash": self.hash,
            "in_channels": self.in_channels,
            "num_classes": self.num_classes,
            "resolution": list(self.resolution),
            "layer_choices": [list(c) for c in self.layer_choices],
            "edges": layers,
            "n_layers": self.n_layers,
            "n_variables": self.n_variables,
            "n_slots": self.n_slots,
            "size": self.size,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SearchSpace":
        return cls(
            name=d["name"],
            choices=tuple(tuple(int(x) for x in c) for c in d["choices"]),
            thetas=tuple(Theta(int(a), int(b), int(s), int(k), str(kd)) for a, b, s, k, kd in d["thetas"]),
            base=tuple(int(x) for x in d.get("base", ())),
        )


def pad_nodes(per_layer: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per-node arrays of the chain (nodes 0..n): zeros on the fixed end nodes around the layers' arrays."""
    return [np.zeros(1)] + [np.asarray(d, dtype=np.float64) for d in per_layer] + [np.zeros(1)]


def layer_columns(idx, n_layers: int, what: str = "choice indices") -> np.ndarray:
    """Drop the fixed end-node columns: (…, n_layers + 2) → (…, n_layers); (…, n_layers) passes unchanged."""
    idx = np.asarray(idx)
    L = int(n_layers)
    if idx.ndim >= 1 and idx.shape[-1] == L + 2:
        return idx[..., 1:-1]
    if idx.ndim < 1 or idx.shape[-1] != L:
        got = idx.shape[-1] if idx.ndim else 0
        raise ValueError(f"{what} has {got} columns; expected {L} layers (or {L + 2} chain nodes)")
    return idx


def check_mobilenet_chain(space: SearchSpace) -> None:
    """Refuse spaces MobileNetV1 cannot build: the classifier (`linear`) must be the last edge, and only there."""
    for i, t in enumerate(space.thetas):
        last = i == space.n_edges - 1
        if (t.kind == "linear") != last:
            raise ValueError(
                f"space {space.name!r}: edge {i} is {t.kind!r}; a MobileNet-v1 chain needs the classifier "
                f"('linear') as its last edge and only there"
            )


def width_choices(base: int, multipliers: Sequence[float], divisor: int = 8, min_width: int = 8) -> tuple[int, ...]:
    """Widths base·m rounded to the nearest multiple of `divisor`, at least `min_width` (§7)."""
    out = {max(min_width, int(math.floor(base * m / divisor + 0.5)) * divisor) for m in multipliers}
    return tuple(sorted(out))


def mobilenet_v1_space(
    name: str = "mobilenet_v1",
    resolution: int | tuple[int, int] = 224,
    in_channels: int = 3,
    num_classes: int = 1000,
    width_mult: float = 1.0,
    first_stride: int = 2,
    n_choices: int = 14,
    min_mult: float = 0.2,
    max_mult: float = 1.5,
    divisor: int = 8,
) -> SearchSpace:
    """MobileNet-v1 family: `n_choices` multipliers evenly spaced in [min_mult, max_mult] of the base widths (§7)."""
    h, w = (resolution, resolution) if isinstance(resolution, int) else resolution
    mults = np.linspace(min_mult, max_mult, n_choices)
    choices: list[tuple[int, ...]] = [(in_channels,)]
    thetas: list[Theta] = []
    base: list[int] = []
    for j, (kind, stride, b) in enumerate(MOBILENET_V1_LAYERS):
        stride = first_stride if j == 0 else stride
        bw = max(divisor, int(math.floor(b * width_mult / divisor + 0.5)) * divisor)
        t = Theta(h, w, stride, 3, kind)
        thetas.append(t)
        h, w = t.out_hw()
        choices.append(width_choices(bw, mults, divisor))
        base.append(bw)
    thetas.append(Theta(h, w, 1, 1, "linear"))
    choices.append((num_classes,))
    base.append(num_classes)
    return SearchSpace(name, tuple(choices), tuple(thetas), tuple(base))


def multiplier_configs(space: SearchSpace) -> list[tuple[float, list[int]]]:
    """Every distinct uniform configuration: each layer at the choice nearest to m·base, m over the space's ratios."""
    if len(space.base) != space.n_edges:
        raise ValueError(f"space {space.name!r} records no base widths; uniform multipliers are undefined for it")
    base = space.base[:-1]
    ratios = sorted({w / b for c, b in zip(space.layer_choices, base) for w in c})
    out: list[tuple[float, list[int]]] = []
    for m in ratios:
        cfg = [min(c, key=lambda w: (abs(w - m * b), w)) for c, b in zip(space.layer_choices, base)]
        if not out or cfg != out[-1][1]:
            out.append((float(m), cfg))
    return out


PRESETS: dict[str, dict] = {
    # The paper's ImageNet setting (supplementary table): 224×224 RGB, 1000 classes.
    "mobilenet_v1_imagenet": dict(resolution=224, in_channels=3, num_classes=1000),
    # The embedded default: Fashion-MNIST 28×28 grey images, 10 classes; MobileNet-v1 widths with a
    # stride-2 stem and 6 width choices per layer (0.2×–1.5× the base): the smallest space whose
    # latency still spans > 3× on a CPU at batch 1 and whose supernet ranks widths within minutes.
    "mobilenet_v1_fmnist": dict(resolution=28, in_channels=1, num_classes=10, first_stride=2, n_choices=6),
}

DEFAULT_PRESET = "mobilenet_v1_fmnist"


def get_space(preset: str, **overrides) -> SearchSpace:
    """A preset by name, optionally with MobileNet-v1 family parameters overridden."""
    if preset not in PRESETS:
        raise ValueError(f"unknown search-space preset {preset!r}; valid presets: {sorted(PRESETS)}")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    params = {**PRESETS[preset], **overrides}
    return mobilenet_v1_space(preset if not overrides else f"{preset}+custom", **params)
