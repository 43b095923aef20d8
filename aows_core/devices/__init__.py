"""Devices by name (timm-style registry): the latency oracles the profiler times networks on (§4, §7).

`config.yaml` picks a backend by string; `get_device(spec, space, seed)` builds it:

    spec = {"backend": "torch-cpu", "batch_size": 1, "threads": 1, ...}

| backend       | unit | what one sample is                                                  |
|---------------|------|---------------------------------------------------------------------|
| `torch-cpu`   | ms   | eager PyTorch forward of the BN-folded network (perf_counter_ns)     |
| `torch-cuda`  | ms   | the same on a GPU: a CUDA graph replay per pass (CUDA events)        |
| `onnxruntime` | ms   | ONNX Runtime CPU session run of the same network (perf_counter_ns)   |
| `flops`       | MMAC | exact multiply-accumulates (analytic: one sample, no drift)          |
| `synthetic`   | ms   | a hidden ground-truth table + non-additive term, drift and noise     |

Importing this package imports numpy only; torch and onnxruntime load when a backend is built.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..space import SearchSpace
from .base import SPEC_DEFAULTS, Device, Measurement
from .flops import Flops, edge_macs, network_macs, variable_macs
from .onnxruntime import OnnxRuntime
from .synthetic import Synthetic
from .torch_cpu import TorchCPU
from .torch_cuda import TorchCUDA

DEVICES: dict[str, type[Device]] = {cls.name: cls for cls in (TorchCPU, OnnxRuntime, TorchCUDA, Flops, Synthetic)}


def get_device(spec: Mapping[str, Any], space: SearchSpace, seed: int = 0) -> Device:
    """The device a spec names ({"backend": NAME, ...}); an unknown backend lists the valid names."""
    backend = spec.get("backend")
    if backend not in DEVICES:
        raise ValueError(f"unknown device backend {backend!r}; valid backends: {sorted(DEVICES)}")
    return DEVICES[backend](spec, space, seed)


__all__ = [
    "DEVICES",
    "SPEC_DEFAULTS",
    "Device",
    "Measurement",
    "get_device",
    "edge_macs",
    "network_macs",
    "variable_macs",
]
