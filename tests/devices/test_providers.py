"""ONNX Runtime's execution providers as a device setting: what is refused on any machine, and (CUDA only, with
onnxruntime-gpu) TensorRT engines built once per network and a width-resolved timing (scripts/gpu_check.sh)."""

from __future__ import annotations

import numpy as np
import pytest
from test_remote import FMNIST, remote

from aows_core.config import device_backends, validate
from aows_core.devices import get_device
from aows_core.devices.remote import WorkerRefused


def test_an_unavailable_provider_is_refused_naming_the_available_ones():
    import onnxruntime as ort

    for spec in ({"backend": "onnxruntime"}, remote("onnxruntime")):
        with pytest.raises((ValueError, WorkerRefused)) as e:
            get_device({**spec, "providers": "TensorrtExecutionProvider,CUDAExecutionProvider"}, FMNIST, 0)
        assert "TensorrtExecutionProvider" in str(e.value) and str(ort.get_available_providers()) in str(e.value)
    with pytest.raises(ValueError, match="provider_options is not JSON"):
        get_device({"backend": "onnxruntime", "provider_options": "{trt_fp16_enable: 1}"}, FMNIST, 0)
    with pytest.raises(ValueError, match="not among providers"):
        get_device({"backend": "onnxruntime", "provider_options": '{"CUDAExecutionProvider": {}}'}, FMNIST, 0)


def test_gpu_placement_follows_where_the_device_times():
    cfg = validate({"devices": {"trt": {"backend": "onnxruntime", "providers": "TensorrtExecutionProvider"},
                                "jetson": {"backend": "torch-cuda", "remote": ""},
                                "edge": {"backend": "onnxruntime", "providers": "CUDAExecutionProvider",
                                         "remote": "ssh pi@jetson"},
                                "cpu": {"backend": "onnxruntime"}}})
    gpu = {d: b.gpu for d, b in device_backends(cfg).items()}
    assert gpu == {"trt": True, "jetson": True, "edge": False, "cpu": False}


def _gpu_providers(want):
    import onnxruntime as ort
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (bash scripts/gpu_check.sh runs it on one)")
    if want not in ort.get_available_providers():
        pytest.skip(f"this onnxruntime build lacks {want}: pip install onnxruntime-gpu (and tensorrt for TensorRT)")


@pytest.mark.cuda
@pytest.mark.parametrize("provider", ["CUDAExecutionProvider", "TensorrtExecutionProvider"])
def test_a_gpu_provider_times_widths_apart_and_builds_each_engine_once(provider, tmp_path):
    """On the GPU the provider resolves widths (the widest network slower than the narrowest by more than the
    repeats' spread) and a network's second timing reuses what its first built (TensorRT: the engine cache)."""
    _gpu_providers(provider)
    providers = provider if provider == "CUDAExecutionProvider" else f"{provider},CUDAExecutionProvider"
    options = {provider: {"trt_engine_cache_path": str(tmp_path)}} if "Tensorrt" in provider else {}
    import json

    dev = get_device({"backend": "onnxruntime", "batch_size": 16, "providers": providers,
                      "provider_options": json.dumps(options)}, FMNIST, 0)
    wide = dev.measure(FMNIST.max_config, 50, 10)
    narrow = dev.measure(FMNIST.min_config, 50, 10)
    assert np.median(wide.samples) > np.median(narrow.samples) + 3 * np.std(narrow.samples)
    again = dev.measure(FMNIST.max_config, 50, 10)
    if "Tensorrt" in provider:
        assert any(tmp_path.iterdir()), "no TensorRT engine was cached"
        assert again.overhead_s < 0.5 * wide.overhead_s  # the engine is read, not built again
    assert abs(np.median(again.samples) / np.median(wide.samples) - 1) < 0.2
