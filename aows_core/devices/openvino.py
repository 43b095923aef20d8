"""`openvino`: Intel's OpenVINO runtime (its CPU plugin, or another OpenVINO device), a deployment runtime target
(§4 is framework-agnostic), timed here or on the device it deploys on (`remote`, docs/devices.md).

The timed graph is the onnxruntime device's (devices.runtime.GraphFactory: BN folded, weights external in one pool);
OpenVINO reads it with its weights from the pool file, compiles it for `ov_device` with the `performance_hint`,
`threads` (INFERENCE_NUM_THREADS), one stream and the `inference_precision` (OpenVINO's own default on a CPU with
bf16 or f16 units is those: name it to time what you deploy), and one sample is `time.perf_counter_ns` around one
synchronous `infer()` of a request whose input tensor is set once (aows_worker.OpenVino).
"""

from __future__ import annotations

from typing import Any

from .base import THREADS, Setting, register
from .runtime import REMOTE, TIMEOUT, WORKER, RuntimeDevice


@register
class OpenVino(RuntimeDevice):
    """OpenVINO compiled model of the BN-folded network; ms per forward of a batch."""

    name = "openvino"
    runtime = "openvino"
    unit = "ms"
    settings = {**RuntimeDevice.settings, "threads": THREADS,
                "performance_hint": Setting("LATENCY", "string", "OpenVINO's performance hint.",
                                            choices=("LATENCY", "THROUGHPUT")),
                "inference_precision": Setting("f32", "string", "OpenVINO's INFERENCE_PRECISION_HINT (bf16 and f16 need the "
                                     "hardware's support).", choices=("f32", "bf16", "f16")),
                "ov_device": Setting("CPU", "string", "The OpenVINO device the network is compiled for (CPU, GPU, "
                                     "NPU, …: those the installed OpenVINO offers)."),
                "remote": REMOTE, "worker": WORKER, "timeout_s": TIMEOUT}

    @classmethod
    def is_available(cls) -> bool:
        """Whether OpenVINO is installed here (`pip install .[openvino]`)."""
        import importlib.util

        return importlib.util.find_spec("openvino") is not None

    def options(self) -> dict[str, Any]:
        """aows_worker.OpenVino's options from the settings."""
        return {k: self.spec[k] for k in ("threads", "performance_hint", "inference_precision", "ov_device")}
