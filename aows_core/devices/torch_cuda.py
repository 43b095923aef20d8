"""`torch-cuda`: eager PyTorch on an NVIDIA GPU, the paper's GPU target (§7, V100, PyTorch).

Same networks and input as `torch-cpu`, on the GPU named by `cuda_device` (default "cuda:0").
One sample is the CUDA-event time of one forward pass, with the device synchronised before
each repeat and after its end event; `timed_s` is the host wall time of those passes. Without a
usable GPU, constructing the device raises (never a silent CPU fallback).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .base import MAX_REPEAT_FACTOR
from .torch_cpu import TorchCPU


class TorchCUDA(TorchCPU):
    """Eager PyTorch on a CUDA GPU; ms per forward of a batch (CUDA events)."""

    name = "torch-cuda"
    unit = "ms"
    keys = ("batch_size", "threads", "inter_op_threads", "channels_last", "cuda_device")

    @classmethod
    def is_available(cls) -> bool:
        """Whether torch sees a CUDA GPU."""
        try:
            import torch
        except ImportError:
            return False
        return bool(torch.cuda.is_available())

    def _resolve_device(self):
        """The configured GPU; a clear error when there is none."""
        import torch

        name = str(self.spec["cuda_device"])
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"device backend 'torch-cuda' needs a CUDA GPU, but torch {torch.__version__} sees none "
                f"(torch.cuda.is_available() is False); time on a GPU node or use backend 'torch-cpu'"
            )
        dev = torch.device(name)
        if dev.type != "cuda":
            raise ValueError(f"torch-cuda: cuda_device must name a CUDA device such as 'cuda:0', got {name!r}")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"torch-cuda: {name!r} does not exist; this machine has {torch.cuda.device_count()} GPU(s)")
        torch.cuda.set_device(index)
        return torch.device("cuda", index)

    def fingerprint(self) -> dict[str, Any]:
        """The CPU fingerprint plus the GPU, CUDA and cuDNN versions."""
        import torch

        props = torch.cuda.get_device_properties(self._device)
        return {
            **super().fingerprint(),
            "gpu": props.name,
            "gpu_capability": f"{props.major}.{props.minor}",
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        }

    def _run(self, model, repeats: int, warmup: int, min_time_s: float) -> tuple[np.ndarray, float]:
        """Per-repeat CUDA-event times in ns (the caller's unit), extended like `timed_loop`, and the wall seconds
        of the timed passes (launch + synchronisation included)."""
        import torch

        x = self.x
        for _ in range(warmup):
            model(x)
        torch.cuda.synchronize(self._device)
        cap = repeats * MAX_REPEAT_FACTOR if min_time_s > 0 else repeats
        out: list[float] = []
        total_ns = 0.0
        wall_ns = 0
        while len(out) < cap and (len(out) < repeats or total_ns < min_time_s * 1e9):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a = time.perf_counter_ns()
            start.record()
            model(x)
            end.record()
            end.synchronize()
            wall_ns += time.perf_counter_ns() - a
            out.append(start.elapsed_time(end) * 1e6)
            total_ns += out[-1]
        return np.asarray(out, dtype=np.float64), wall_ns / 1e9
