"""`onnxruntime`: ONNX Runtime's CPU execution provider, a deployment runtime target (§4 is framework-agnostic).

Graphs are written directly with `onnx.helper` (Conv with bias, Relu, depthwise Conv with
group = c, GlobalAveragePool, Flatten, Gemm): no tracing, no torch. The graphs themselves
(`edge_graph`, `onnx_from_weights`) live in `nets.onnx`, shared with the export stage; names follow
the torch module paths.

For timing (`OnnxRuntime`), thousands of graphs must be cheap (§4 profiles whole networks): the
nodes and initialiser headers of every edge (i, c_i, c_{i+1}) are serialised once and cached, and
weights are *external* initialisers — views of one pool of small normal values handed to ONNX
Runtime as OrtValues (`SessionOptions.add_external_initializers`), so no weight bytes are copied
or serialised per network. The session runs with a fixed input shape, intra-op threads = `threads`,
inter-op threads = `inter_op_threads`, sequential execution, the configured graph optimisation
level and denormals flushed; inputs and outputs are bound once (IOBinding), and one sample is
`time.perf_counter_ns` around one `run_with_iobinding`.
"""

from __future__ import annotations

import gc
import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..nets import TIMING_WEIGHT_STD, WEIGHT_ALIGN
from ..nets.onnx import INPUT, IR_VERSION, OPSET, OUTPUT, _io, _model, edge_graph, onnx_from_weights, param_shapes  # noqa: F401 (re-exported)
from ..space import SearchSpace
from .base import (
    INTER_OP_THREADS,
    THREADS,
    Device,
    Setting,
    Timer,
    host_fingerprint,
    register,
    timed_loop,
    usable_cores,
)

GRAPH_OPT_LEVELS = ("disable", "basic", "extended", "all")
TIMING_FORM = "deploy(bn-folded)/onnx-opset17/external-initializers/iobinding/v2"


class GraphFactory:
    """Serialized timing graphs of one space with external initialisers from a shared weight pool."""

    def __init__(self, space: SearchSpace, batch: int, seed: int = 0):
        from onnx import helper

        self.space = space
        self.batch = int(batch)
        self.offsets: dict[str, int] = {}
        off = 0
        for name, shape in param_shapes(space, space.max_config):
            self.offsets[name] = off
            off += math.ceil(math.prod(shape) / WEIGHT_ALIGN) * WEIGHT_ALIGN
        rng = np.random.default_rng([int(seed), 0x0A05])
        self.pool = rng.standard_normal(off, dtype=np.float32) * np.float32(TIMING_WEIGHT_STD)
        inputs, outputs = _io(space, self.batch)
        head = _model(helper.make_graph([], space.name, inputs, outputs))
        self._head = head
        self._edges: dict[tuple[int, int, int], tuple[bytes, list[str], list]] = {}

    def _edge(self, i: int, c_in: int, c_out: int) -> tuple[bytes, list[str], list]:
        """Cached (serialized GraphProto fragment, initializer names, OrtValues) of edge i."""
        key = (i, c_in, c_out)
        hit = self._edges.get(key)
        if hit is not None:
            return hit
        import onnxruntime as ort
        from onnx import GraphProto, TensorProto

        nodes, params = edge_graph(self.space, i, c_in, c_out)
        frag = GraphProto()
        frag.node.extend(nodes)
        names, values = [], []
        for name, shape in params:
            tp = frag.initializer.add()
            tp.name = name
            tp.data_type = TensorProto.FLOAT
            tp.dims.extend(shape)
            tp.data_location = TensorProto.EXTERNAL
            loc = tp.external_data.add()
            loc.key, loc.value = "location", "aows-timing-pool"
            start = self.offsets[name]
            view = self.pool[start : start + math.prod(shape)].reshape(shape)
            names.append(name)
            values.append(ort.OrtValue.ortvalue_from_numpy(view))
        hit = self._edges[key] = (frag.SerializeToString(), names, values)
        return hit

    def prebuild(self) -> "GraphFactory":
        """Serialise every edge (i, c_i, c_{i+1}) of the space now (one-time setup)."""
        for i, (s, d) in enumerate(self.space.edges):
            for c_in in self.space.choices[s]:
                for c_out in self.space.choices[d] if s != d else (c_in,):
                    self._edge(i, c_in, c_out)
        return self

    def __call__(self, channels: Sequence[int]) -> tuple[bytes, list[str], list]:
        """(model bytes, external initializer names, their OrtValues) of a configuration."""
        from onnx import ModelProto

        self.space.indices(channels)
        full = self.space.full(channels)
        parts = [self._edge(i, full[s], full[d]) for i, (s, d) in enumerate(self.space.edges)]
        model = ModelProto()
        model.CopyFrom(self._head)
        # Concatenated serialized messages merge: repeated fields (node, initializer) append in order.
        model.graph.MergeFromString(b"".join(p[0] for p in parts))
        return model.SerializeToString(), [n for p in parts for n in p[1]], [v for p in parts for v in p[2]]


@register
class OnnxRuntime(Device):
    """ONNX Runtime CPU execution provider; ms per forward of a batch."""

    name = "onnxruntime"
    unit = "ms"
    settings = {**Device.settings, "threads": THREADS, "inter_op_threads": INTER_OP_THREADS,
                "graph_optimization": Setting("all", "string", "Graph optimisation level of the session.",
                                              choices=GRAPH_OPT_LEVELS)}

    def __init__(self, spec: Mapping[str, Any], space: SearchSpace, seed: int = 0):
        super().__init__(spec, space, seed)
        import onnxruntime as ort

        self.threads = int(self.spec["threads"])
        self.inter_op_threads = int(self.spec["inter_op_threads"])
        if self.threads < 1 or self.inter_op_threads < 1:
            raise ValueError(f"device {self.name!r}: threads and inter_op_threads must be ≥ 1")
        level = str(self.spec["graph_optimization"])
        if level not in GRAPH_OPT_LEVELS:
            raise ValueError(f"onnxruntime: graph_optimization must be one of {list(GRAPH_OPT_LEVELS)}, got {level!r}")
        self.level = level
        self._level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
        if self.threads > usable_cores():
            import warnings

            warnings.warn(f"{self.name}: {self.threads} threads on {usable_cores()} usable cores", stacklevel=2)
        self.graphs = GraphFactory(space, self.batch_size, self.seed).prebuild()  # one-time, well under a second
        rng = np.random.default_rng([self.seed, 0x1A])
        self.x = rng.standard_normal(self.input_shape, dtype=np.float32)
        self._x_value = ort.OrtValue.ortvalue_from_numpy(self.x)
        self._y_value = ort.OrtValue.ortvalue_from_numpy(np.zeros((self.batch_size, space.num_classes), np.float32))

    def session_options(self):
        """SessionOptions of the timing protocol (threads, sequential, optimisation level, denormals flushed)."""
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = self.inter_op_threads
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = self._level
        so.log_severity_level = 3
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
        return so

    def session(self, channels: Sequence[int]):
        """An InferenceSession of the timing graph of `channels`."""
        import onnxruntime as ort

        blob, names, values = self.graphs(channels)
        so = self.session_options()
        so.add_external_initializers(names, values)
        return ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])

    def fingerprint(self) -> dict[str, Any]:
        """Backend settings, machine and ONNX Runtime build."""
        import onnxruntime as ort

        return {
            **super().fingerprint(),
            **host_fingerprint(),
            "onnxruntime": ort.__version__,
            "provider": "CPUExecutionProvider",
            "opset": OPSET,
            "form": TIMING_FORM,
        }

    def open(self, channels: Sequence[int], job: int = 0) -> Timer:
        """A session of the graph of `channels` with bound input and output, the collector paused while timing (ms)."""
        state = {"sess": self.session(channels)}
        binding = state["sess"].io_binding()
        binding.bind_ortvalue_input(INPUT, self._x_value)
        binding.bind_ortvalue_output(OUTPUT, self._y_value)
        state["binding"] = binding
        run_once = state["sess"].run_with_iobinding

        def run(repeats: int, warmup: int, min_time_s: float) -> tuple[np.ndarray, float]:
            gc_enabled = gc.isenabled()
            gc.disable()
            try:
                ns = timed_loop(lambda: run_once(binding), repeats, warmup, min_time_s)
            finally:
                if gc_enabled:
                    gc.enable()
            return ns / 1e6, float(ns.sum()) / 1e9

        return Timer(run, close=state.clear)
