"""ONNX graphs of the networks of any space, written directly with `onnx.helper` (no tracing, no torch).

Each edge's nodes come from its layer kind (`LayerKind.onnx`, through a `GraphBuilder`): Conv with bias, Relu or
Clip (ReLU6), depthwise Conv (group = c), MaxPool, Add, GlobalAveragePool, Flatten, Gemm for the built-in kinds.
Tensor and parameter names follow the torch module paths of `nets.network` (``layers.{e}``, ``classifier``; edge
e's output tensor is ``layers.{e}``). `onnx_from_weights` builds the graph of a network from a folded state dict
(`nets.network.folded_state`), so ONNX and torch compute the same function; `devices.onnxruntime` times graphs of
`edge_graph`, the export stage writes `onnx_from_weights`. `onnx` is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..kinds import kind_of
from ..kinds.base import ConvShape, PoolShape
from ..space import SearchSpace, check_blocks

OPSET = 17
IR_VERSION = 8  # readable by every ONNX Runtime since 1.10
INPUT, OUTPUT = "input", "logits"


class ExportMismatch(RuntimeError):
    """ONNX Runtime's outputs differ from PyTorch's beyond the tolerance."""


def edge_output(space: SearchSpace, i: int) -> str:
    """Name of the tensor edge i produces: its module path ``layers.{i}`` (`logits` for the classifier)."""
    return OUTPUT if i == space.n_edges - 1 else f"layers.{i}"


def edge_inputs(space: SearchSpace, i: int) -> list[str]:
    """Names of the tensors edge i reads: its block's input or the previous main-branch edge's output; a residual
    add reads the main branch's output and the shortcut's (or the block's input)."""
    x = INPUT
    for b in space.blocks:
        y = x
        for e in b.edges:
            if e == i:
                return [y]
            y = edge_output(space, e)
        if i == b.shortcut:
            return [x]
        if i == b.add:
            return [y, edge_output(space, b.shortcut) if b.shortcut >= 0 else x]
        x = edge_output(space, b.add) if b.add >= 0 else y
    raise ValueError(f"edge {i} is in no block of space {space.name!r}")


class GraphBuilder:
    """ONNX nodes and parameters [(name, shape)] of a deployment-form network, appended by the layer kinds
    (`LayerKind.onnx`); `act` is the space's activation."""

    def __init__(self, act: str):
        self.act = act
        self.nodes: list = []
        self.params: list[tuple[str, tuple[int, ...]]] = []

    def node(self, op: str, inputs: list[str], outputs: list[str], **attrs) -> None:
        """One node (`onnx.helper.make_node`)."""
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, outputs, **attrs))

    def param(self, name: str, shape: tuple[int, ...]) -> str:
        """A parameter the graph reads (its value comes from the state dict)."""
        self.params.append((name, tuple(int(s) for s in shape)))
        return name

    def activation(self, z: str, y: str, act: str | None = None) -> None:
        """y = activation `act` (the space's if None) of z: Relu, Clip to [0, 6] (bounds from Constant nodes),
        HardSwish, x·Sigmoid(x) (SiLU), Sigmoid or HardSigmoid (torch's slope 1/6)."""
        from onnx import TensorProto, helper

        act = act or self.act
        if act == "relu":
            self.node("Relu", [z], [y], name=y)
            return
        if act in ("hardswish", "sigmoid"):
            self.node({"hardswish": "HardSwish", "sigmoid": "Sigmoid"}[act], [z], [y], name=y)
            return
        if act == "hardsigmoid":
            self.node("HardSigmoid", [z], [y], name=y, alpha=1.0 / 6.0, beta=0.5)
            return
        if act == "silu":
            self.node("Sigmoid", [z], [f"{y}.gate"], name=f"{y}.gate")
            self.node("Mul", [z, f"{y}.gate"], [y], name=y)
            return
        bounds = []
        for bound, v in (("min", 0.0), ("max", 6.0)):
            name = f"{y}.{bound}"
            self.node("Constant", [], [name], name=name, value=helper.make_tensor(name, TensorProto.FLOAT, [], [v]))
            bounds.append(name)
        self.node("Clip", [z, *bounds], [y], name=y)

    def conv_unit(self, x: str, y: str, path: str, shape: ConvShape, *, act: bool | str = True,
                  pool: PoolShape | None = None) -> str:
        """A `kinds.units.Unit` in deployment form (conv with bias, activation: the space's if True, or the one
        named, max-pool) from x to y."""
        k, s, g = shape.k, shape.stride, shape.groups
        w = self.param(f"{path}.conv.weight", (shape.c_out, shape.c_in // g, k, k))
        b = self.param(f"{path}.conv.bias", (shape.c_out,))
        z = f"{path}.conv" if act else y
        self.node("Conv", [x, w, b], [z], name=z, kernel_shape=[k, k], strides=[s, s], pads=[shape.padding] * 4,
                  group=g, dilations=[1, 1])
        if act:
            a = f"{path}.act" if pool else y
            self.activation(z, a, act if isinstance(act, str) else None)
            if pool:
                self.node("MaxPool", [a], [y], name=y, kernel_shape=[pool.k] * 2, strides=[pool.s] * 2,
                          pads=[pool.p] * 4, ceil_mode=int(pool.ceil))
        return y

    def adaptive_average_pool(self, x: str, y: str, hw: tuple[int, int], k: int) -> None:
        """y = torch's adaptive average pool of x (spatial size `hw`) to k×k: output i of an axis of size n averages
        inputs ⌊i·n/k⌋ … ⌈(i+1)·n/k⌉ − 1, as two MatMuls with constant averaging matrices (the identity when n = k)."""
        from onnx import TensorProto, helper

        if tuple(hw) == (k, k):
            self.node("Identity", [x], [y], name=y)
            return
        mats = []
        for axis, n in (("h", hw[0]), ("w", hw[1])):
            m = np.zeros((k, n), dtype=np.float32)
            for i in range(k):
                lo, hi = (i * n) // k, -(-(i + 1) * n // k)
                m[i, lo:hi] = 1.0 / (hi - lo)
            m = m if axis == "h" else m.T
            name = f"{y}.{axis}"
            self.node("Constant", [], [name], name=name,
                      value=helper.make_tensor(name, TensorProto.FLOAT, m.shape, m.flatten().tolist()))
            mats.append(name)
        self.node("MatMul", [x, mats[1]], [f"{y}.rows"], name=f"{y}.rows")  # (N, C, H, k)
        self.node("MatMul", [mats[0], f"{y}.rows"], [y], name=y)  # (N, C, k, k)

def edge_graph(space: SearchSpace, i: int, c_in: int, c_out: int) -> tuple[list, list[tuple[str, tuple[int, ...]]]]:
    """ONNX nodes of edge i for c_in → c_out (widths of its source and destination nodes) and its parameters
    [(name, shape)] in deployment form, as its layer kind writes them."""
    t = space.thetas[i]
    g = GraphBuilder(space.act)
    path = space.module_path(i)
    kind_of(t.kind).onnx(g, t, edge_inputs(space, i), edge_output(space, i), path, c_in, c_out)
    return g.nodes, g.params


def param_shapes(space: SearchSpace, channels: Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
    """[(name, shape)] of every deployment-form parameter of a configuration, in graph order."""
    _check(space)
    space.indices(channels)
    full = space.full(channels)
    return [p for i, (s, d) in enumerate(space.edges) for p in edge_graph(space, i, full[s], full[d])[1]]


def _check(space: SearchSpace) -> None:
    """Refuse spaces the graphs cannot be built for."""
    check_blocks(space)


def _io(space: SearchSpace, batch: int | str | None):
    """Input and output value infos (batch may be symbolic)."""
    from onnx import TensorProto, helper

    b = "batch" if batch is None else batch
    h, w = space.resolution
    return (
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [b, space.in_channels, h, w])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [b, space.num_classes])],
    )


def _model(graph):
    """A ModelProto around `graph` at the module's opset and IR version."""
    from onnx import helper

    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="aows")
    m.ir_version = IR_VERSION
    return m


def onnx_from_weights(space: SearchSpace, channels: Sequence[int], state: Mapping[str, Any], batch: int | None = None):
    """ONNX ModelProto of a network from its deployment-form weights (nets.network.folded_state); batch None =
    symbolic."""
    from onnx import helper, numpy_helper

    _check(space)
    space.indices(channels)
    full = space.full(channels)
    nodes, inits = [], []
    for i, (s, d) in enumerate(space.edges):
        n, params = edge_graph(space, i, full[s], full[d])
        nodes.extend(n)
        for name, shape in params:
            if name not in state:
                raise KeyError(f"weights for {name!r} (shape {shape}) are missing from the state dict")
            v = state[name]
            if hasattr(v, "detach"):
                v = v.detach().cpu().numpy()
            a = np.ascontiguousarray(np.asarray(v, dtype=np.float32))
            if a.shape != shape:
                raise ValueError(f"{name}: expected shape {shape} for configuration {list(channels)}, got {a.shape}")
            inits.append(numpy_helper.from_array(a, name))
    inputs, outputs = _io(space, batch)
    return _model(helper.make_graph(nodes, f"{space.name}", inputs, outputs, inits))


def check_agreement(proto: Any, net: Any, x: Any, rtol: float, atol: float) -> tuple[Any, float]:
    """ONNX Runtime vs PyTorch logits of an exported network on the test images `x` (the export check).

    Returns (|Δlogit| per logit, top-1 agreement); `ExportMismatch` beyond atol + rtol·|logit|.
    """
    import numpy as np
    import onnxruntime as ort
    import torch

    with torch.no_grad():
        ref = net(x).numpy()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    err = np.abs(got - ref)
    bound = atol + rtol * np.abs(ref)
    if not (err <= bound).all():
        raise ExportMismatch(f"ONNX Runtime and PyTorch logits differ by up to {err.max():.3g} "
                             f"(tolerance {atol} + {rtol}·|logit|) on {len(x)} test images; not exported")
    return err, float((got.argmax(1) == ref.argmax(1)).mean())
