"""ONNX graphs of MobileNet-v1 networks, written directly with `onnx.helper` (no tracing, no torch).

Conv with bias, Relu, depthwise Conv (group = c), GlobalAveragePool, Flatten, Gemm; tensor and
parameter names follow the torch module paths of `nets.mobilenet`. `onnx_from_weights` builds the
graph of a network from a folded state dict (`nets.mobilenet.folded_state`), so ONNX and torch
compute the same function; `devices.onnxruntime` times graphs of `edge_graph`, the export stage
writes `onnx_from_weights`. `onnx` is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..space import SearchSpace, check_mobilenet_chain

OPSET = 17
IR_VERSION = 8  # readable by every ONNX Runtime since 1.10
INPUT, OUTPUT = "input", "logits"


class ExportMismatch(RuntimeError):
    """ONNX Runtime's outputs differ from PyTorch's beyond the tolerance."""


def edge_output(space: SearchSpace, i: int) -> str:
    """Name of the tensor edge i produces (its last ReLU's module path; `logits` for the classifier)."""
    t = space.thetas[i]
    if t.kind == "linear":
        return OUTPUT
    return f"features.{i}.{1 if t.kind == 'conv' else 3}"


def edge_graph(space: SearchSpace, i: int, c_in: int, c_out: int) -> tuple[list, list[tuple[str, tuple[int, ...]]]]:
    """ONNX nodes of edge i for c_in → c_out and its parameters [(name, shape)] in deployment form."""
    from onnx import helper

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
        params.extend([("classifier.weight", (c_out, c_in)), ("classifier.bias", (c_out,))])
        nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
        nodes.append(helper.make_node("Flatten", ["pool"], ["flatten"], name="flatten", axis=1))
        nodes.append(helper.make_node("Gemm", ["flatten", "classifier.weight", "classifier.bias"], [OUTPUT], name="classifier", transB=1))
    else:
        raise ValueError(f"unknown edge kind {t.kind!r}")
    return nodes, params


def param_shapes(space: SearchSpace, channels: Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
    """[(name, shape)] of every deployment-form parameter of a configuration, in graph order."""
    check_mobilenet_chain(space)
    space.indices(channels)
    full = space.full(channels)
    return [p for i in range(space.n_edges) for p in edge_graph(space, i, full[i], full[i + 1])[1]]


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
    """ONNX ModelProto of a network from its deployment-form weights (e.g. nets.mobilenet.folded_state); batch None = symbolic."""
    from onnx import helper, numpy_helper

    check_mobilenet_chain(space)
    space.indices(channels)
    full = space.full(channels)
    nodes, inits = [], []
    for i in range(space.n_edges):
        n, params = edge_graph(space, i, full[i], full[i + 1])
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
