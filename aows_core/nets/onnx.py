"""ONNX graphs of MobileNet-v1 and residual networks, written directly with `onnx.helper` (no tracing, no torch).

Conv with bias, Relu, depthwise Conv (group = c), GlobalAveragePool, Flatten, Gemm; for residual spaces (D44)
also Clip (ReLU6, bounds from Constant nodes), MaxPool (ResNet's stem) and Add (+ Relu in a "relu" space). Tensor
and parameter names follow the torch module paths of `nets.mobilenet` (chains) and `nets.residual` (``layers.{e}``;
edge e's output tensor is ``layers.{e}``). `onnx_from_weights` builds the graph of a network from a folded state
dict (`nets.family.folded_state`), so ONNX and torch compute the same function; `devices.onnxruntime` times
graphs of `edge_graph`, the export stage writes `onnx_from_weights`. `onnx` is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..space import SearchSpace, check_mobilenet_chain
from . import check_blocks

OPSET = 17
IR_VERSION = 8  # readable by every ONNX Runtime since 1.10
INPUT, OUTPUT = "input", "logits"


class ExportMismatch(RuntimeError):
    """ONNX Runtime's outputs differ from PyTorch's beyond the tolerance."""


def edge_output(space: SearchSpace, i: int) -> str:
    """Name of the tensor edge i produces (its last ReLU's module path, ``layers.{i}`` in a residual space;
    `logits` for the classifier)."""
    t = space.thetas[i]
    if t.kind == "linear":
        return OUTPUT
    if not space.is_chain:
        return f"layers.{i}"
    return f"features.{i}.{1 if t.kind == 'conv' else 3}"


def edge_inputs(space: SearchSpace, i: int) -> list[str]:
    """Names of the tensors edge i reads in a residual space: its block's input or the previous main-branch edge's
    output; a residual add reads the main branch's output and the shortcut's (or the block's input)."""
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


def _classifier(x: str, c_in: int, c_out: int) -> tuple[list, list[tuple[str, tuple[int, ...]]]]:
    """Global average pool, Flatten and Gemm from tensor x: the classifier edge."""
    from onnx import helper

    params = [("classifier.weight", (c_out, c_in)), ("classifier.bias", (c_out,))]
    nodes = [helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"),
             helper.make_node("Flatten", ["pool"], ["flatten"], name="flatten", axis=1),
             helper.make_node("Gemm", ["flatten", "classifier.weight", "classifier.bias"], [OUTPUT], name="classifier",
                              transB=1)]
    return nodes, params


def _residual_edge_graph(space: SearchSpace, i: int, c_in: int,
                         c_out: int) -> tuple[list, list[tuple[str, tuple[int, ...]]]]:
    """`edge_graph` of a residual space (D44): the deployment form of `nets.residual.edge_module`."""
    from onnx import TensorProto, helper

    t, xs, out = space.thetas[i], edge_inputs(space, i), edge_output(space, i)
    if t.kind == "linear":
        return _classifier(xs[0], c_in, c_out)
    nodes: list = []
    params: list[tuple[str, tuple[int, ...]]] = []

    def act(z: str, y: str) -> None:
        if space.act == "relu":
            nodes.append(helper.make_node("Relu", [z], [y], name=y))
            return
        bounds = []
        for bound, v in (("min", 0.0), ("max", 6.0)):
            name = f"{y}.{bound}"
            nodes.append(helper.make_node("Constant", [], [name], name=name,
                                          value=helper.make_tensor(name, TensorProto.FLOAT, [], [v])))
            bounds.append(name)
        nodes.append(helper.make_node("Clip", [z, *bounds], [y], name=y))

    def unit(x: str, path: str, ci: int, co: int, k: int, s: int, g: int, relu: bool, y: str,
             pool: bool = False) -> str:
        w, b = f"{path}.conv.weight", f"{path}.conv.bias"
        params.extend([(w, (co, ci // g, k, k)), (b, (co,))])
        z = f"{path}.conv" if relu else y
        nodes.append(helper.make_node("Conv", [x, w, b], [z], name=z, kernel_shape=[k, k], strides=[s, s],
                                      pads=[k // 2] * 4, group=g, dilations=[1, 1]))
        if relu:
            a = f"{path}.act" if pool else y
            act(z, a)
            if pool:
                nodes.append(helper.make_node("MaxPool", [a], [y], name=y, kernel_shape=[3, 3], strides=[2, 2],
                                              pads=[1, 1, 1, 1]))
        return y

    path, k, s = f"layers.{i}", t.kernel, t.stride
    if t.kind in ("conv", "convpool", "pconv"):
        unit(xs[0], path, c_in, c_out, k, s, 1, t.kind != "pconv", out, pool=t.kind == "convpool")
    elif t.kind == "dw":
        unit(xs[0], path, c_in, c_in, k, s, c_in, True, out)
    elif t.kind == "dwsep":
        h = unit(xs[0], f"{path}.0", c_in, c_in, k, s, c_in, True, f"{path}.0")
        unit(h, f"{path}.1", c_in, c_out, 1, 1, 1, True, out)
    elif t.kind == "add":
        if space.act == "relu":
            nodes.append(helper.make_node("Add", xs, [f"{path}.sum"], name=f"{path}.sum"))
            nodes.append(helper.make_node("Relu", [f"{path}.sum"], [out], name=out))
        else:
            nodes.append(helper.make_node("Add", xs, [out], name=out))
    else:
        raise ValueError(f"unknown edge kind {t.kind!r}")
    return nodes, params


def edge_graph(space: SearchSpace, i: int, c_in: int, c_out: int) -> tuple[list, list[tuple[str, tuple[int, ...]]]]:
    """ONNX nodes of edge i for c_in → c_out (widths of its source and destination nodes) and its parameters
    [(name, shape)] in deployment form."""
    from onnx import helper

    if not space.is_chain:
        return _residual_edge_graph(space, i, c_in, c_out)
    t = space.thetas[i]
    x = INPUT if i == 0 else edge_output(space, i - 1)
    nodes: list = []
    params: list[tuple[str, tuple[int, ...]]] = []

    def conv(x: str, j: int, ci: int, co: int, k: int, s: int, g: int) -> str:
        w, b = f"features.{i}.{j}.weight", f"features.{i}.{j}.bias"
        params.extend([(w, (co, ci // g, k, k)), (b, (co,))])
        y, z = f"features.{i}.{j}", f"features.{i}.{j + 1}"
        nodes.append(
            helper.make_node(
                "Conv", [x, w, b], [y], name=y, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=g, dilations=[1, 1]
            )
        )
        nodes.append(helper.make_node("Relu", [y], [z], name=z))
        return z

    if t.kind == "conv":
        conv(x, 0, c_in, c_out, t.kernel, t.stride, 1)
    elif t.kind == "dwsep":
        h = conv(x, 0, c_in, c_in, t.kernel, t.stride, c_in)
        conv(h, 2, c_in, c_out, 1, 1, 1)
    elif t.kind == "linear":
        return _classifier(x, c_in, c_out)
    else:
        raise ValueError(f"unknown edge kind {t.kind!r}")
    return nodes, params


def param_shapes(space: SearchSpace, channels: Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
    """[(name, shape)] of every deployment-form parameter of a configuration, in graph order."""
    _check(space)
    space.indices(channels)
    full = space.full(channels)
    return [p for i, (s, d) in enumerate(space.edges) for p in edge_graph(space, i, full[s], full[d])[1]]


def _check(space: SearchSpace) -> None:
    """Refuse spaces the graphs cannot be built for."""
    (check_mobilenet_chain if space.is_chain else check_blocks)(space)


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
    """ONNX ModelProto of a network from its deployment-form weights (nets.family.folded_state); batch None = symbolic."""
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
