"""Search spaces as data: nodes of width choices, layers Θ between them, latency variables (§2, §4, §7; D44).

A space has nodes 0..n holding channel choices C_i; node 0 is the fixed input channels and node
n the fixed class count. An *edge* (layer) e maps node src_e → node dst_e (the same node for a
depthwise layer or a residual add, whose latency depends on one width) and is described by
Θ_e = (in_h, in_w, stride, kernel, kind). A latency variable is keyed by (Θ, c_in, c_out); edges with
the same Θ share variables (eq. lat). A *configuration* is the list of searchable widths (c_1, ...,
c_{n-1}): it is what the `channels` column of every artifact holds.

MobileNet-v1 is a chain (edge i maps node i → i+1). A residual space (MobileNet-v2, ResNet) ties the
stream width of a stage: all its blocks read and write one node, and each block's inner width (an
expansion, a bottleneck) is a node of its own (docs/method.md D44). Nodes are numbered in order of
first use, which is the elimination order the decoders use (`aows_core.search.graph`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from .kinds import ACTIVATIONS, kind_of

BLOCK_KINDS = ("conv", "dwsep", "inverted_residual", "basic", "bottleneck")

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
        """Spatial output size, as its kind computes it (`aows_core.kinds`)."""
        return kind_of(self.kind).out_hw(self)


VarKey = tuple[Theta, int, int]


@dataclass(frozen=True)
class Block:
    """A block of the network: reads node `src`, writes node `dst` (the same node: a residual block of a stage).

    `edges` are its main-branch layers in execution order (their inner node `inner`, −1 if none);
    `shortcut` is its 1×1 projection edge (−1: identity or none) and `add` its residual-add edge (−1: no residual).
    """

    kind: str
    src: int
    dst: int
    inner: int
    stride: int
    edges: tuple[int, ...]
    shortcut: int = -1
    add: int = -1

    def to_list(self) -> list:
        return [self.kind, self.src, self.dst, self.inner, self.stride, list(self.edges), self.shortcut, self.add]

    @classmethod
    def from_list(cls, b: Sequence) -> "Block":
        k, s, d, i, st, e, sc, a = b
        return cls(str(k), int(s), int(d), int(i), int(st), tuple(int(x) for x in e), int(sc), int(a))


@dataclass(frozen=True)
class SearchSpace:
    """Nodes of width choices and layers between them; see the module docstring."""

    name: str
    choices: tuple[tuple[int, ...], ...]
    thetas: tuple[Theta, ...]
    base: tuple[int, ...] = field(default=())
    edges: tuple[tuple[int, int], ...] = field(default=())
    blocks: tuple[Block, ...] = field(default=())
    act: str = "relu"

    def __post_init__(self) -> None:
        chain = tuple((i, i + 1) for i in range(len(self.thetas)))
        if not self.edges:
            if len(self.thetas) != len(self.choices) - 1:
                raise ValueError("a chain space needs exactly one layer descriptor per edge (len(choices) - 1)")
            object.__setattr__(self, "edges", chain)
        if len(self.edges) != len(self.thetas):
            raise ValueError(f"{len(self.thetas)} layer descriptors for {len(self.edges)} edges")
        for i, c in enumerate(self.choices):
            if not c or list(c) != sorted(set(c)) or min(c) < 1:
                raise ValueError(f"node {i}: choices must be distinct positive integers in increasing order, got {c}")
        if len(self.choices[0]) != 1 or len(self.choices[-1]) != 1:
            raise ValueError("the first node (input channels) and the last (classes) must be fixed")
        n = len(self.choices)
        for e, ((s, d), t) in enumerate(zip(self.edges, self.thetas)):
            kind = kind_of(t.kind)  # an unknown kind names the registered ones
            if not (0 <= s < n and 0 <= d < n):
                raise ValueError(f"edge {e} maps node {s} to node {d}; the space has nodes 0..{n - 1}")
            if kind.one_width and s != d:
                raise ValueError(f"edge {e} is a {t.kind!r} layer, which reads and writes one width; it maps node "
                                 f"{s} to node {d}")
        if {x for e in self.edges for x in e} != set(range(n)):
            raise ValueError("every node must be read or written by some edge")
        if self.act not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.act!r}")
        if not self.blocks:
            if self.edges != chain:
                raise ValueError("a space that is not a chain must list its blocks")
            object.__setattr__(self, "blocks", _chain_blocks(self.thetas))

    # ---- shape -------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.choices)

    @property
    def n_edges(self) -> int:
        return len(self.thetas)

    def module_path(self, e: int) -> str:
        """Edge e's module in the fixed network and the supernet: `layers.{e}`, the last edge's `classifier`."""
        return "classifier" if e == self.n_edges - 1 else f"layers.{e}"

    @property
    def n_layers(self) -> int:
        """Number of searchable widths (nodes 1..n-1)."""
        return len(self.choices) - 2

    @property
    def is_chain(self) -> bool:
        """Edge i maps node i → i+1 (MobileNet-v1): no tied or inner widths. Only the decoder asks (it decodes a
        chain as a chain, `aows_core.search.graph`)."""
        return self.edges == tuple((i, i + 1) for i in range(self.n_edges))

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
        """Number of (edge, c_in, c_out) slots, shared or not (one per width for a one-width layer)."""
        return sum(len(self.choices[s]) if s == d else len(self.choices[s]) * len(self.choices[d]) for s, d in self.edges)

    def roles(self) -> list[str]:
        """Per node: "input", "classes", "stream" (written by a block's last layer) or "inner"."""
        out = ["stream"] * self.n_nodes
        for b in self.blocks:
            if b.inner >= 0:
                out[b.inner] = "inner"
        out[0], out[-1] = "input", "classes"
        return out

    def tied(self) -> list[list[int]]:
        """Per node, the blocks that write it (more than one: a stream width tied across a residual stage)."""
        out: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for j, b in enumerate(self.blocks):
            out[b.dst].append(j)
        return out

    # ---- latency variables -------------------------------------------------------------
    @cached_property
    def _variables(self) -> tuple[tuple[VarKey, ...], tuple[np.ndarray, ...]]:
        index: dict[VarKey, int] = {}
        tables = []
        for (s, d), t in zip(self.edges, self.thetas):
            tab = np.full((len(self.choices[s]), len(self.choices[d])), -1, dtype=np.int64)
            for a, ci in enumerate(self.choices[s]):
                for b, co in enumerate(self.choices[d]):
                    if s != d or a == b:
                        tab[a, b] = index.setdefault(kind_of(t.kind).variable(t, ci, co), len(index))
            tab.setflags(write=False)
            tables.append(tab)
        return tuple(index), tuple(tables)

    @property
    def variables(self) -> tuple[VarKey, ...]:
        """Unique latency variables (Θ, c_in, c_out), in order of first appearance along the edges."""
        return self._variables[0]

    @property
    def n_variables(self) -> int:
        return len(self._variables[0])

    @property
    def edge_tables(self) -> tuple[np.ndarray, ...]:
        """Per edge e, the |C_src|×|C_dst| array of variable indices (−1 off the diagonal of a one-width layer)."""
        return self._variables[1]

    def edges_of_variable(self) -> np.ndarray:
        """How many edges share each variable's Θ (its multiplicity in the network)."""
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
        return np.stack([tab[idx[..., s], idx[..., d]] for (s, d), tab in zip(self.edges, self.edge_tables)], axis=-1)

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

    @property
    def base_config(self) -> list[int]:
        """Every searchable node at the choice nearest its base width: the multiplier-1.0 network."""
        if len(self.base) != self.n_nodes - 1:
            raise ValueError(f"space {self.name!r} records no base widths")
        return [min(c, key=lambda w: (abs(w - b), w)) for c, b in zip(self.layer_choices, self.base[:-1])]

    # ---- identity ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {
            "name": self.name,
            "choices": [list(c) for c in self.choices],
            "thetas": [[t.in_h, t.in_w, t.stride, t.kernel, t.kind] for t in self.thetas],
            "base": list(self.base),
        }
        # edges, blocks and activation are written unless they are what `from_dict` derives from the descriptors
        # alone (one edge per node pair in order, one block per edge, ReLU): a chain's dict and hash stay as they were
        derived = SearchSpace(self.name, self.choices, self.thetas, self.base) if _is_sequence(self) else None
        if derived is None or derived.blocks != self.blocks or self.act != "relu":
            d.update(edges=[list(e) for e in self.edges], blocks=[b.to_list() for b in self.blocks], act=self.act)
        return d

    @cached_property
    def hash(self) -> str:
        """Hash of what defines the space (choices, descriptors, edges and blocks; not its name)."""
        d = self.to_dict()
        d.pop("name")
        d.pop("base")
        blob = json.dumps(d, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def describe(self) -> dict:
        """The JSON printed by `aows space`."""
        layers = []
        for i, (t, (s, d)) in enumerate(zip(self.thetas, self.edges)):
            layers.append(
                {
                    "edge": i,
                    "kind": t.kind,
                    "src": s,
                    "dst": d,
                    "in_hw": [t.in_h, t.in_w],
                    "stride": t.stride,
                    "kernel": t.kernel,
                    "c_in": list(self.choices[s]),
                    "c_out": list(self.choices[d]),
                }
            )
        roles, tied = self.roles(), self.tied()
        nodes = [
            {"node": i, "role": roles[i], "choices": list(c), "base": self.base[i - 1] if 0 < i <= len(self.base) else c[0],
             "written_by_blocks": tied[i], "tied": len(tied[i]) > 1}
            for i, c in enumerate(self.choices)
        ]
        return {
            "name": self.name,
            "hash": self.hash,
            "in_channels": self.in_channels,
            "num_classes": self.num_classes,
            "resolution": list(self.resolution),
            "activation": self.act,
            "layer_choices": [list(c) for c in self.layer_choices],
            "nodes": nodes,
            "tied_nodes": [n["node"] for n in nodes if n["tied"]],
            "inner_nodes": [i for i, r in enumerate(roles) if r == "inner"],
            "blocks": [
                {"block": j, "kind": b.kind, "src": b.src, "dst": b.dst, "inner": None if b.inner < 0 else b.inner,
                 "stride": b.stride, "edges": list(b.edges), "shortcut": None if b.shortcut < 0 else b.shortcut,
                 "residual": "none" if b.add < 0 else ("projection" if b.shortcut >= 0 else "identity")}
                for j, b in enumerate(self.blocks)
            ],
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
            edges=tuple((int(s), int(t)) for s, t in d.get("edges", ())),
            blocks=tuple(Block.from_list(b) for b in d.get("blocks", ())),
            act=str(d.get("act", "relu")),
        )


# Joint choices one position of the decoders' compiled chain may hold, and entries of its padded (positions, K, K)
# transition arrays (`aows_core.search.graph`, D44).
MAX_STATES = 200_000
MAX_ENTRIES = 50_000_000


def frontier(n_nodes: int, edges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Per node t, the nodes the decoders' chain holds at position t of the elimination order (D44): the earlier ones
    an edge still joins to a later node, and t."""
    far = list(range(n_nodes))  # far[u]: the latest node u shares an edge with
    for s, d in edges:
        for u in (s, d):
            far[u] = max(far[u], s, d)
    return [[u for u in range(t) if far[u] > t] + [t] for t in range(n_nodes)]


def check_blocks(space: SearchSpace) -> None:
    """Refuse spaces the networks cannot build (D44): the classifier (`linear`) is the last edge and only there, the
    blocks run in sequence (each reads the node the previous one wrote), covering every edge once, and a
    concatenation's nodes keep one width (D55)."""
    last = space.n_edges - 1
    for i, t in enumerate(space.thetas):
        if kind_of(t.kind).classifier != (i == last):
            raise ValueError(f"space {space.name!r}: edge {i} is {t.kind!r}; a network needs a classifier kind "
                             f"('linear') as its last edge and only there")
    node, seen = 0, []
    for j, b in enumerate(space.blocks):
        if b.add >= 0 and kind_of(space.thetas[b.add].kind).keeps_widths:  # operands and result of one width
            ends = (space.edges[b.edges[-1]][1], space.edges[b.shortcut][1] if b.shortcut >= 0 else b.src, b.dst)
            searched = [d for d in ends if len(space.choices[d]) > 1]
            if searched:
                raise ValueError(f"space {space.name!r}: block {j} concatenates node {searched[0]}, whose width is "
                                 f"searched; a concatenation's operands and result keep one width (D55)")
        if b.src != node:
            raise ValueError(f"space {space.name!r}: block {j} reads node {b.src}, but the previous block wrote {node}")
        seen += [*b.edges, *(e for e in (b.shortcut, b.add) if e >= 0)]
        node = b.dst
    if sorted(seen) != list(range(space.n_edges)):
        raise ValueError(f"space {space.name!r}: its blocks must cover every edge exactly once")


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


def _chain_blocks(thetas: Sequence[Theta]) -> tuple[Block, ...]:
    """One block per edge of a sequence of layers (MobileNet-v1): named after its layer's kind."""
    return tuple(Block("classifier" if kind_of(t.kind).classifier else t.kind, i, i + 1, -1, t.stride, (i,))
                 for i, t in enumerate(thetas))


def _is_sequence(space: SearchSpace) -> bool:
    """Edge i maps node i → i + 1: the layers run in sequence, no widths shared between layers."""
    return space.edges == tuple((i, i + 1) for i in range(space.n_edges))


def width_choices(base: int, multipliers: Sequence[float], divisor: int = 8, min_width: int = 8) -> tuple[int, ...]:
    """Widths base·m rounded to the nearest multiple of `divisor`, at least `min_width` (§7)."""
    out = {max(min_width, int(math.floor(base * m / divisor + 0.5)) * divisor) for m in multipliers}
    return tuple(sorted(out))


def _round(width: float, divisor: int) -> int:
    return max(divisor, int(math.floor(width / divisor + 0.5)) * divisor)


@dataclass(frozen=True)
class Stage:
    """One stage of a space as data: `repeats` blocks of a kind, the first with `stride` (D44).

    conv / dwsep blocks write a new node each (MobileNet-v1's untied layers; `pool` adds ResNet's 3×3/2 max-pool
    after a conv). Residual kinds tie the stage's stream: every block writes one node; block 1 writes a new one,
    unless its stride is 1 and its base width equals its input's (then it adds to its input, as torchvision's
    blocks do). Each residual block has an inner width node: inverted_residual's expansion (`expand` × its input's
    base width; none at expand 1, where the depthwise conv reads the input), basic's first conv and bottleneck's
    1×1 / 3×3 width (`inner`, default the stream width for basic, a quarter of it for bottleneck).
    """

    block: str
    width: int
    repeats: int = 1
    stride: int = 1
    kernel: int = 3
    expand: float = 1.0
    inner: int = 0
    pool: bool = False

    def __post_init__(self) -> None:
        if self.block not in BLOCK_KINDS:
            raise ValueError(f"unknown block kind {self.block!r}; expected one of {BLOCK_KINDS}")
        if self.repeats < 1 or self.stride < 1 or self.width < 1 or self.kernel < 1 or self.expand <= 0:
            raise ValueError(f"stage {self}: repeats, stride, width, kernel and expand must be positive")


@dataclass(frozen=True)
class SpaceParams:
    """What a space's stages are built at (§7, D44): the input (resolution, channels) and classes, a multiplier of the
    base widths, the stem's stride (None: the first stage's own) and `n_choices` width multipliers evenly spaced in
    [min_mult, max_mult], rounded to multiples of `divisor`; `act` the activation; `dropout` the classifier's (D57)."""

    resolution: int | tuple[int, int] = 224
    in_channels: int = 3
    num_classes: int = 1000
    width_mult: float = 1.0
    first_stride: int | None = None
    n_choices: int = 14
    min_mult: float = 0.2
    max_mult: float = 1.5
    divisor: int = 8
    act: str = "relu"
    dropout: float = 0.0


class _SpaceBuilder:
    """The nodes, layers and blocks of a space, appended stage by stage (`build_space`); nodes in order of first use."""

    def __init__(self, p: SpaceParams):
        self.p = p
        self.hw = (p.resolution, p.resolution) if isinstance(p.resolution, int) else tuple(p.resolution)
        self.mults = np.linspace(p.min_mult, p.max_mult, p.n_choices)
        self.choices: list[tuple[int, ...]] = [(p.in_channels,)]
        self.base: list[int] = []
        self.thetas: list[Theta] = []
        self.edges: list[tuple[int, int]] = []
        self.blocks: list[Block] = []
        self.cur = 0  # the node the next block reads

    def node(self, b: int) -> int:
        """A new node of base width b, its choices the multipliers of b."""
        self.choices.append(width_choices(b, self.mults, self.p.divisor))
        self.base.append(b)
        return len(self.choices) - 1

    def edge(self, kind: str, k: int, s: int, src: int, dst: int, hw: tuple[int, int]) -> int:
        """A new layer Θ = (hw, s, k, kind) from node src to node dst."""
        self.thetas.append(Theta(hw[0], hw[1], s, k, kind))
        self.edges.append((src, dst))
        return len(self.thetas) - 1

    def out_hw(self, e: int) -> tuple[int, int]:
        return self.thetas[e].out_hw()

    def stage(self, first: bool, st: Stage) -> None:
        """The `repeats` blocks of a stage; the first with its stride (the stem's `first_stride` if it is the first)."""
        bw = _round(st.width * self.p.width_mult, self.p.divisor)
        for j in range(st.repeats):
            s = (self.p.first_stride if first and j == 0 and self.p.first_stride else st.stride) if j == 0 else 1
            if st.block in ("conv", "dwsep"):
                self.layer(st, s, bw)
            else:
                self.residual(st, s, bw)

    def layer(self, st: Stage, s: int, bw: int) -> None:
        """A conv or dwsep block: one layer to a new node (MobileNet-v1's untied widths)."""
        src, dst = self.cur, self.node(bw)
        e = self.edge("convpool" if st.block == "conv" and st.pool else st.block, st.kernel, s, src, dst, self.hw)
        self.blocks.append(Block(st.block, src, dst, -1, s, (e,)))
        self.hw, self.cur = self.out_hw(e), dst

    def residual(self, st: Stage, s: int, bw: int) -> None:
        """A residual block: its main path through an inner node, a shortcut where the stream changes, the add."""
        src, hw = self.cur, self.hw
        cur_base = self.base[src - 1] if src > 0 else self.p.in_channels
        new = not (s == 1 and bw == cur_base and src > 0)
        main, inner, dst = (self.inverted if st.block == "inverted_residual" else self.two_convs)(st, s, bw, new)
        shortcut = -1
        if st.block != "inverted_residual" and dst != src:
            shortcut = self.edge("pconv", 1, s, src, dst, hw)
        add = self.edge("add", 1, 1, dst, dst, self.hw) if (dst == src or shortcut >= 0) else -1
        self.blocks.append(Block(st.block, src, dst, inner, s, tuple(main), shortcut, add))
        self.cur = dst

    def inverted(self, st: Stage, s: int, bw: int, new: bool) -> tuple[list[int], int, int]:
        """MobileNet-v2's main path: 1×1 expansion (none at expand 1), depthwise, 1×1 projection."""
        src, hw, main, inner = self.cur, self.hw, [], -1
        cur_base = self.base[src - 1] if src > 0 else self.p.in_channels
        if st.expand != 1:
            inner = self.node(int(round(cur_base * st.expand)))
            main.append(self.edge("conv", 1, 1, src, inner, hw))
            main.append(self.edge("dw", st.kernel, s, inner, inner, hw))
        else:
            main.append(self.edge("dw", st.kernel, s, src, src, hw))
        self.hw = self.out_hw(main[-1])
        dst = self.node(bw) if new else src
        main.append(self.edge("pconv", 1, 1, inner if inner >= 0 else src, dst, self.hw))
        return main, inner, dst

    def two_convs(self, st: Stage, s: int, bw: int, new: bool) -> tuple[list[int], int, int]:
        """ResNet's main path: basic (k×k, k×k) or bottleneck (1×1, k×k, 1×1) through the inner width."""
        src, hw, main = self.cur, self.hw, []
        ib = st.inner or (bw if st.block == "basic" else bw // 4)
        inner = self.node(_round(ib * self.p.width_mult, self.p.divisor) if st.inner else ib)
        if st.block == "basic":
            main.append(self.edge("conv", st.kernel, s, src, inner, hw))
            self.hw = self.out_hw(main[-1])
            dst = self.node(bw) if new else src
            main.append(self.edge("pconv", st.kernel, 1, inner, dst, self.hw))
        else:
            main.append(self.edge("conv", 1, 1, src, inner, hw))
            main.append(self.edge("conv", st.kernel, s, inner, inner, hw))
            self.hw = self.out_hw(main[-1])
            dst = self.node(bw) if new else src
            main.append(self.edge("pconv", 1, 1, inner, dst, self.hw))
        return main, inner, dst

    def space(self, name: str) -> SearchSpace:
        """The classifier after the last stage, then the space (a chain records no edges or blocks)."""
        classes = len(self.choices)
        self.choices.append((self.p.num_classes,))
        self.base.append(self.p.num_classes)
        e = self.edge(f"linear:d{self.p.dropout:g}" if self.p.dropout else "linear", 1, 1, self.cur, classes, self.hw)
        self.blocks.append(Block("classifier", self.cur, classes, -1, 1, (e,)))
        chain = all(d == s + 1 for s, d in self.edges) and len(self.edges) == len(self.choices) - 1
        return SearchSpace(name, tuple(self.choices), tuple(self.thetas), tuple(self.base),
                           () if chain else tuple(self.edges), () if chain else tuple(self.blocks), self.p.act)


def build_space(name: str, stages: Sequence[Stage], params: SpaceParams | None = None, **overrides) -> SearchSpace:
    """A space from its stages (D44) at `params` (default `SpaceParams()`), any of its fields overridden by keyword:
    `n_choices` multipliers evenly spaced in [min_mult, max_mult] of every base width (§7)."""
    b = _SpaceBuilder(replace(params or SpaceParams(), **overrides))
    for si, st in enumerate(stages):
        b.stage(si == 0, st)
    return b.space(name)


MOBILENET_V1_PARAMS = SpaceParams(first_stride=2)


def mobilenet_v1_space(name: str = "mobilenet_v1", **params) -> SearchSpace:
    """MobileNet-v1 family: `n_choices` multipliers evenly spaced in [min_mult, max_mult] of the base widths (§7); any
    field of `SpaceParams` by keyword (its stem stride is 2)."""
    return build_space(name, MOBILENET_V1, MOBILENET_V1_PARAMS, **params)


def multiplier_configs(space: SearchSpace) -> list[tuple[float, list[int]]]:
    """Every distinct uniform configuration: each layer at the choice nearest to m·base, m over the space's ratios."""
    if len(space.base) != space.n_nodes - 1:
        raise ValueError(f"space {space.name!r} records no base widths; uniform multipliers are undefined for it")
    base = space.base[:-1]
    ratios = sorted({w / b for c, b in zip(space.layer_choices, base) for w in c})
    out: list[tuple[float, list[int]]] = []
    for m in ratios:
        cfg = [min(c, key=lambda w: (abs(w - m * b), w)) for c, b in zip(space.layer_choices, base)]
        if not out or cfg != out[-1][1]:
            out.append((float(m), cfg))
    return out


MOBILENET_V1 = tuple(Stage(kind, width, stride=stride) for kind, stride, width in MOBILENET_V1_LAYERS)

# MobileNet-v2 (Sandler et al. 2018; torchvision's mobilenet_v2): stem, (t, c, n, s) rows, the 1×1 head conv.
MOBILENET_V2 = (
    Stage("conv", 32, stride=2),
    Stage("inverted_residual", 16, 1, 1, expand=1),
    Stage("inverted_residual", 24, 2, 2, expand=6),
    Stage("inverted_residual", 32, 3, 2, expand=6),
    Stage("inverted_residual", 64, 4, 2, expand=6),
    Stage("inverted_residual", 96, 3, 1, expand=6),
    Stage("inverted_residual", 160, 3, 2, expand=6),
    Stage("inverted_residual", 320, 1, 1, expand=6),
    Stage("conv", 1280, kernel=1),
)


def _resnet(block: str, repeats: Sequence[int], widths: Sequence[int], stem_width: int = 64, stem_kernel: int = 7,
            pool: bool = True) -> tuple[Stage, ...]:
    """ResNet (He et al. 2016; torchvision's resnet18/resnet50): stem, then stages of basic or bottleneck blocks."""
    stem = Stage("conv", stem_width, stride=2, kernel=stem_kernel, pool=pool)
    return (stem, *(Stage(block, w, n, 1 if i == 0 else 2) for i, (n, w) in enumerate(zip(repeats, widths))))


RESNET18 = _resnet("basic", (2, 2, 2, 2), (64, 128, 256, 512))
RESNET50 = _resnet("bottleneck", (3, 4, 6, 3), (256, 512, 1024, 2048))

# The Fashion-MNIST presets: 28×28 grey images, 10 classes, 6 width choices per node (0.2×–1.5× the base), sized
# like the MobileNet-v1 default for a 2-core CPU (MMAC at 1.0×: MobileNet-v1 10.6, MobileNet-v2 6.0, ResNet 22.1).
MOBILENET_V2_FMNIST = (
    Stage("conv", 32, stride=2),
    Stage("inverted_residual", 16, 1, 1, expand=1),
    Stage("inverted_residual", 24, 2, 1, expand=6),
    Stage("inverted_residual", 32, 2, 2, expand=6),
    Stage("inverted_residual", 64, 2, 2, expand=6),
    Stage("conv", 256, kernel=1),
)
# The CIFAR-style ResNet (He et al. 2016, §4.2), two basic blocks per stage, twice as wide: a 3×3 stem, stages of 32,
# 64 and 128.
RESNET_FMNIST = _resnet("basic", (2, 2, 2), (32, 64, 128), stem_width=32, stem_kernel=3, pool=False)

PRESETS: dict[str, dict | Callable[..., SearchSpace]] = {
    # The paper's ImageNet setting (supplementary table): 224×224 RGB, 1000 classes.
    "mobilenet_v1_imagenet": dict(stages=MOBILENET_V1, resolution=224, in_channels=3, num_classes=1000, first_stride=2),
    # The embedded default: Fashion-MNIST 28×28 grey images, 10 classes; MobileNet-v1 widths with a
    # stride-2 stem and 6 width choices per layer (0.2×–1.5× the base): the smallest space whose
    # latency still spans > 3× on a CPU at batch 1 and whose supernet ranks widths within minutes.
    "mobilenet_v1_fmnist": dict(stages=MOBILENET_V1, resolution=28, in_channels=1, num_classes=10, first_stride=2,
                                n_choices=6),
    "mobilenet_v2_imagenet": dict(stages=MOBILENET_V2, resolution=224, in_channels=3, num_classes=1000, act="relu6",
                                  dropout=0.2),
    "mobilenet_v2_fmnist": dict(stages=MOBILENET_V2_FMNIST, resolution=28, in_channels=1, num_classes=10,
                                n_choices=6, act="relu6", dropout=0.2),
    "resnet18_imagenet": dict(stages=RESNET18, resolution=224, in_channels=3, num_classes=1000),
    "resnet50_imagenet": dict(stages=RESNET50, resolution=224, in_channels=3, num_classes=1000),
    "resnet_fmnist": dict(stages=RESNET_FMNIST, resolution=28, in_channels=1, num_classes=10, n_choices=6),
}

DEFAULT_PRESET = "mobilenet_v1_fmnist"


def register_preset(name: str, make: Callable[..., SearchSpace]) -> None:
    """A preset made by `make(**overrides)` (a space built by hand from nodes, edges and blocks): `space.preset: name`
    then names it in this process (the schema's preset list grows with it, `config.load_schema`)."""
    if name in PRESETS and PRESETS[name] is not make:
        raise ValueError(f"search-space preset {name!r} is already defined")
    PRESETS[name] = make


def get_space(preset: str, **overrides) -> SearchSpace:
    """A preset by name, optionally with its parameters (resolution, in_channels, num_classes, width_mult,
    first_stride, n_choices) overridden."""
    if preset not in PRESETS:
        raise ValueError(f"unknown search-space preset {preset!r}; valid presets: {sorted(PRESETS)}")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if callable(PRESETS[preset]):
        return PRESETS[preset](**overrides)
    params = {**PRESETS[preset], **overrides}
    stages = params.pop("stages")
    return build_space(preset if not overrides else f"{preset}+custom", stages, **params)
