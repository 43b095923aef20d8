"""`onnxruntime`: ONNX Runtime with the execution providers its build offers, a deployment runtime target (§4 is
framework-agnostic), timed here or on the device it deploys on (`remote`, docs/devices.md).

Graphs are written directly with `onnx.helper` (nets.onnx, shared with the export stage): no tracing, no torch.
For timing, thousands of graphs must be cheap (§4 profiles whole networks): the nodes and initialiser headers of
every edge are serialised once, and weights are *external* initialisers — views of one pool of small normal values
handed to ONNX Runtime as OrtValues (`SessionOptions.add_external_initializers`), so no weight bytes are copied or
serialised per network (devices.runtime.GraphFactory). The session (aows_worker.OnnxRuntime) runs with a fixed input
shape, intra-op threads = `threads`, inter-op threads = `inter_op_threads`, sequential execution, the configured
graph optimisation level and denormals flushed; inputs and outputs are bound once (IOBinding), and one sample is
`time.perf_counter_ns` around one `run_with_iobinding`.

`providers` lists execution providers in order of preference (CPU, CUDA, TensorRT, OpenVINO, CoreML, QNN, …: those
of the installed build; another is refused naming them), `provider_options` their options as JSON. TensorRT goes
through ONNX Runtime's TensorRT provider, not Torch-TensorRT: the graph timed is the very ONNX file `aows export`
hands over, through the same session code as every other provider; its engine is built when a network's session is
created and reused for all of that network's timed passes.
"""

from __future__ import annotations

import json
from typing import Any

from ..nets.onnx import INPUT, IR_VERSION, OPSET, OUTPUT, onnx_from_weights  # noqa: F401 (re-exported)
from .base import INTER_OP_THREADS, THREADS, Setting, register
from .runtime import REMOTE, TIMEOUT, TIMING_FORM, WORKER, GraphFactory, RuntimeDevice  # noqa: F401 (re-exported)

GRAPH_OPT_LEVELS = ("disable", "basic", "extended", "all")


@register
class OnnxRuntime(RuntimeDevice):
    """ONNX Runtime session of the BN-folded network; ms per forward of a batch."""

    name = "onnxruntime"
    runtime = "onnxruntime"
    unit = "ms"
    settings = {**RuntimeDevice.settings, "threads": THREADS, "inter_op_threads": INTER_OP_THREADS,
                "graph_optimization": Setting("all", "string", "Graph optimisation level of the session.",
                                              choices=GRAPH_OPT_LEVELS),
                "providers": Setting("CPUExecutionProvider", "string", "ONNX Runtime execution providers, "
                                     "comma-separated in order of preference (CPUExecutionProvider, "
                                     "CUDAExecutionProvider, TensorrtExecutionProvider, OpenVINOExecutionProvider, "
                                     "CoreMLExecutionProvider, QNNExecutionProvider, …: those the installed build "
                                     "offers; another is refused naming them)."),
                "provider_options": Setting("", "string", "JSON object of each provider's options, e.g. "
                                            '{"TensorrtExecutionProvider": {"trt_fp16_enable": "True"}}.'),
                "remote": REMOTE, "worker": WORKER, "timeout_s": TIMEOUT}
    # The providers and their options enter the fingerprint as the runtime reports them (`provider`).
    untracked = (*RuntimeDevice.untracked, "providers", "provider_options")

    def options(self) -> dict[str, Any]:
        """aows_worker.OnnxRuntime's options from the settings, checked before the runtime starts (provider_options
        must be a JSON object by provider)."""
        inter_op, level = int(self.spec["inter_op_threads"]), self.spec["graph_optimization"]
        if inter_op < 1:
            raise ValueError(f"device {self.name!r}: inter_op_threads must be ≥ 1")
        if level not in GRAPH_OPT_LEVELS:
            raise ValueError(f"onnxruntime: graph_optimization must be one of {list(GRAPH_OPT_LEVELS)}, got {level!r}")
        providers = [p.strip() for p in str(self.spec["providers"]).split(",") if p.strip()]
        raw = str(self.spec["provider_options"]).strip()
        try:
            options = json.loads(raw) if raw else {}
        except ValueError as e:
            raise ValueError(f"device {self.name!r}: provider_options is not JSON ({e}): {raw!r}") from None
        if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
            raise ValueError(f"device {self.name!r}: provider_options maps each provider to an object of its "
                             f"options, got {raw!r}")
        unknown = sorted(set(options) - set(providers))
        if unknown:
            raise ValueError(f"device {self.name!r}: provider_options names {unknown}, not among providers {providers}")
        return {"threads": self.threads, "inter_op_threads": inter_op, "graph_optimization": level,
                "providers": providers, "provider_options": options}

    def session(self, channels):
        """An InferenceSession (in this process) of the timing graph of `channels`."""
        return self.backend.runtime.session(*self.graphs(channels))
