"""`torch-cuda`: PyTorch on an NVIDIA GPU, the paper's GPU target (§7, V100, PyTorch), timed as a deployment runs.

Same networks and input as `torch-cpu`, on the GPU named by `cuda_device` (default "cuda:0"), in the inference
`precision` (fp32, fp16 or bf16: the weights and the input are cast, as an exported half-precision engine is, not
autocast). Before anything is timed each network runs a few passes with cuDNN autotuning on
(`torch.backends.cudnn.benchmark`) on a side stream, then, with `timing: graph` (the default), it is captured once
as a CUDA graph (torch.cuda.graph) and every pass is one replay of that graph: the GPU's time with the per-kernel
launch cost gone, as under CUDA graphs or TensorRT. `timing: eager` launches the kernels one by one from Python
instead (the form profiled before these settings existed). One sample is the CUDA-event time of one pass, the
device synchronised before the repeats and after each end event; `timed_s` is the host wall time of those passes.
Without a usable GPU, constructing the device raises (never a silent CPU fallback).
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..space import SearchSpace
from .base import MAX_REPEAT_FACTOR, Setting, Timer, normalise_spec, register
from .torch_cpu import TorchCPU, set_torch_threads

TIMINGS = ("graph", "eager")
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# Untimed autotuning passes before capture (cuDNN benchmark picks each convolution's algorithm on its first call).
AUTOTUNE_PASSES = 3
# Bump when the timed form changes (module structure, input, capture, protocol inside `measure`).
_NET = "deploy(bn-folded, relu-inplace, mean-pool)/kind-units/cudnn-benchmark"
TIMING_FORMS = {
    "graph": f"{_NET}/cuda-graph-replay/cuda-events/v3",
    "eager": f"{_NET}/eager/inference_mode/cuda-events/v3",
}


def cuda_settings(spec: Mapping[str, Any]) -> tuple[str, str]:
    """The validated (timing, precision) of a torch-cuda spec; an unknown value names the valid ones."""
    spec = normalise_spec(spec, TorchCUDA.settings)
    timing, precision = str(spec["timing"]), str(spec["precision"])
    if timing not in TIMINGS:
        raise ValueError(f"torch-cuda: timing must be one of {list(TIMINGS)}, got {timing!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"torch-cuda: precision must be one of {list(PRECISIONS)}, got {precision!r}")
    return timing, precision


@contextlib.contextmanager
def timing_flags() -> Iterator[None]:
    """cuDNN autotuning on and PyTorch's default TF32 policy (cuDNN convolutions yes, matmuls no) while timing; the
    process's own flags are restored after."""
    import torch

    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32)
    cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = True, True, False
    try:
        yield
    finally:
        cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = saved


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The garbage collector paused (no collection inside a timed pass)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Forward:
    """One network ready to run on the GPU: calling it runs one pass (a graph replay or an eager forward) and returns
    the output; `close` releases the graph."""

    def __init__(self, call: Callable[[], Any], release: Callable[[], None] | None = None):
        self._call, self._release = call, release

    def __call__(self) -> Any:
        return self._call()

    def close(self) -> None:
        """Release the network, and the captured graph with its memory pool; the pass cannot run after."""
        release, self._release, self._call = self._release, None, _closed
        if release is not None:
            release()


def _closed() -> Any:
    raise RuntimeError("torch-cuda: this network was closed")


@register
class TorchCUDA(TorchCPU):
    """PyTorch on a CUDA GPU (CUDA-graph replay by default, or eager) in fp32/fp16/bf16; ms per forward of a batch."""

    name = "torch-cuda"
    unit = "ms"
    gpu = True
    settings = {
        **TorchCPU.settings,
        "cuda_device": Setting("cuda:0", "string", "Which GPU."),
        "timing": Setting("graph", "string", (
            "`graph`: each network is captured once as a CUDA graph (after cuDNN autotuning) and every timed pass is "
            "one replay, as a deployment under CUDA graphs or TensorRT runs it, with no per-kernel launch cost; "
            "`eager`: the kernels are launched one by one from Python (launch-bound for small inputs). Latency files "
            "of the other form are refused."), choices=TIMINGS),
        "precision": Setting("fp32", "string", (
            "Inference precision: the weights and the input are cast to it (not autocast), as an exported "
            "half-precision engine is. Latency files of another precision are refused."), choices=tuple(PRECISIONS)),
    }
    legacy = {"timing": "eager", "precision": "fp32"}

    def __init__(self, spec: Mapping[str, Any], space: SearchSpace, seed: int = 0):
        self.timing, self.precision = cuda_settings(spec)
        super().__init__(spec, space, seed)
        import torch

        self.dtype = getattr(torch, PRECISIONS[self.precision])
        if self.precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise RuntimeError(f"torch-cuda: {torch.cuda.get_device_name(self._device)} does not support bfloat16; "
                               f"use precision fp16 or fp32")
        if self.dtype != torch.float32:
            self.factory = self._cast_factory()
            self.x = self.x.to(self.dtype)

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

    def _cast_factory(self):
        """The timing factory with its weight pool (all weights are views of it) in the inference precision."""
        from ..nets.network import TimingFactory

        factory = TimingFactory(self.space, seed=self.seed, device=self._device, channels_last=self.channels_last)
        factory.pool = factory.pool.to(self.dtype)
        return factory.prebuild()

    def fingerprint(self) -> dict[str, Any]:
        """The CPU fingerprint plus the GPU, CUDA and cuDNN versions and the timed form (graph or eager)."""
        import torch

        props = torch.cuda.get_device_properties(self._device)
        return {
            **super().fingerprint(),
            "form": TIMING_FORMS[self.timing],
            "gpu": props.name,
            "gpu_capability": f"{props.major}.{props.minor}",
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "cudnn_benchmark": True,
            "tf32": "cudnn convolutions only (PyTorch's default)",
        }

    def forward(self, channels: Sequence[int]) -> Forward:
        """The network of `channels`, autotuned on a side stream and, with `timing: graph`, captured as a CUDA graph
        (torch.cuda.graph after the warm-up, as its documentation requires); construction and capture are overhead."""
        import torch

        model, x = self.factory(channels), self.x
        with timing_flags(), torch.no_grad():
            self._autotune(lambda: model(x))
            if self.timing == "eager":
                return Forward(lambda: model(x))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model(x)

        def replay() -> Any:
            graph.replay()
            return out

        return Forward(replay, graph.reset)

    def _autotune(self, call: Callable[[], Any]) -> None:
        """AUTOTUNE_PASSES untimed passes on a side stream (cuDNN picks its algorithms; nothing is left to tune in a
        capture), joined back to the current stream."""
        import torch

        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side):
            for _ in range(AUTOTUNE_PASSES):
                call()
        torch.cuda.current_stream(self._device).wait_stream(side)
        torch.cuda.synchronize(self._device)

    def open(self, channels: Sequence[int], job: int = 0) -> Timer:
        """The network of `channels` ready to time (ms per forward: graph replays, or eager passes, inference mode)."""
        import torch

        set_torch_threads(self.threads, self.inter_op_threads)
        fwd = self.forward(channels)

        def run(repeats: int, warmup: int, min_time_s: float) -> tuple[np.ndarray, float]:
            with timing_flags(), gc_paused(), torch.inference_mode():
                ns, timed = self._event_loop(fwd, repeats, warmup, min_time_s)
            return ns / 1e6, timed

        return Timer(run, fwd.close)

    def _event_loop(self, fwd: Forward, repeats: int, warmup: int, min_time_s: float) -> tuple[np.ndarray, float]:
        """Per-repeat CUDA-event times in ns, extended like `timed_loop`, and the wall seconds of the timed passes
        (launch + synchronisation included)."""
        import torch

        for _ in range(warmup):
            fwd()
        torch.cuda.synchronize(self._device)
        cap = repeats * MAX_REPEAT_FACTOR if min_time_s > 0 else repeats
        out: list[float] = []
        total_ns = 0.0
        wall_ns = 0
        while len(out) < cap and (len(out) < repeats or total_ns < min_time_s * 1e9):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a = time.perf_counter_ns()
            start.record()
            fwd()
            end.record()
            end.synchronize()
            wall_ns += time.perf_counter_ns() - a
            out.append(start.elapsed_time(end) * 1e6)
            total_ns += out[-1]
        return np.asarray(out, dtype=np.float64), wall_ns / 1e9
