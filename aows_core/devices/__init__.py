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

A device is one file in this package: a `Device` subclass decorated with `@register`, declaring its name, unit,
whether it needs a GPU and its settings. Importing the package imports each of its modules, so every such file
registers itself; a device defined elsewhere registers the same way when its module is imported. The schema's
`devices` section is generated from the built-in declarations (`python3 scripts/device_schema.py`; a test checks it).

Importing this package imports numpy only; torch and onnxruntime load when a backend is built.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module
from typing import Any, Mapping

from ..config import device_schema
from ..space import SearchSpace
from .base import DEVICES, SPEC_DEFAULTS, Device, Measurement, Setting, register, unregister
from .flops import edge_macs, network_macs, variable_macs

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    import_module(f"{__name__}.{_module}")  # each device file registers its class (@register)


def get_device(spec: Mapping[str, Any], space: SearchSpace, seed: int = 0) -> Device:
    """The device a spec names ({"backend": NAME, ...}); an unknown backend lists the valid names."""
    backend = spec.get("backend")
    if backend not in DEVICES:
        raise ValueError(f"unknown device backend {backend!r}; valid backends: {sorted(DEVICES)}")
    return DEVICES[backend](spec, space, seed)


def builtin() -> dict[str, type[Device]]:
    """The registered classes defined in this package (those the schema file declares), by name."""
    return {n: c for n, c in DEVICES.items() if c.__module__.startswith(f"{__name__}.")}


def builtin_schema() -> dict:
    """The schema of one `devices` entry that the built-in classes declare (what config.schema.yaml must hold)."""
    classes = list(builtin().values())
    settings = {k: s.schema() for c in classes for k, s in c.settings.items()}
    return device_schema([c.declaration() for c in classes], settings)


__all__ = [
    "DEVICES",
    "SPEC_DEFAULTS",
    "Device",
    "Measurement",
    "Setting",
    "builtin",
    "builtin_schema",
    "get_device",
    "register",
    "unregister",
    "edge_macs",
    "network_macs",
    "variable_macs",
]
