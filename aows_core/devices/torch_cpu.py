"""`torch-cpu`: eager PyTorch on the CPU, the paper's CPU target (§7, Xeon, batch 1, PyTorch).

Each network is the deployment form of `nets.network.TimingFactory` (BN folded, the form finalists are
measured in), run under `torch.inference_mode()` on a fixed N(0, 1) input batch of shape
(B, C, H, W); one sample is `time.perf_counter_ns` around one forward pass. Threads are set here
(torch.set_num_threads / set_num_interop_threads), denormals are flushed and malloc keeps what a pass frees
(D51); the garbage collector is paused while timing.
"""

from __future__ import annotations

import gc
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from ..memory import keep_freed_memory
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

# Bump when the timed form changes (module structure, input, protocol inside `measure`).
TIMING_FORM = "deploy(bn-folded, relu-inplace, mean-pool)/kind-units/eager/inference_mode/v2/kept-malloc"


def set_torch_threads(threads: int, inter_op_threads: int) -> int:
    """Set torch's intra- and inter-op threads; returns the inter-op count actually in force."""
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != inter_op_threads:
        try:
            torch.set_num_interop_threads(inter_op_threads)
        except RuntimeError:  # only settable before the first inter-op parallel work
            warnings.warn(
                f"torch inter-op threads are already fixed at {torch.get_num_interop_threads()} in this process; "
                f"requested {inter_op_threads} (recorded in the fingerprint)",
                stacklevel=3,
            )
    torch.set_flush_denormal(True)
    return torch.get_num_interop_threads()


@register
class TorchCPU(Device):
    """Eager PyTorch on the CPU; ms per forward of a batch."""

    name = "torch-cpu"
    unit = "ms"
    settings = {**Device.settings, "threads": THREADS, "inter_op_threads": INTER_OP_THREADS,
                "channels_last": Setting(False, "boolean", "Run in channels_last memory format.")}
    torch_device = "cpu"

    def __init__(self, spec: Mapping[str, Any], space: SearchSpace, seed: int = 0):
        super().__init__(spec, space, seed)
        import torch

        from ..nets.network import TimingFactory

        self.threads = int(self.spec["threads"])
        self.inter_op_threads = int(self.spec["inter_op_threads"])
        self.channels_last = bool(self.spec["channels_last"])
        if self.threads < 1 or self.inter_op_threads < 1:
            raise ValueError(f"device {self.name!r}: threads and inter_op_threads must be ≥ 1")
        if self.threads > usable_cores():
            warnings.warn(f"{self.name}: {self.threads} threads on {usable_cores()} usable cores", stacklevel=2)
        self._inter_actual = set_torch_threads(self.threads, self.inter_op_threads)
        self._kept_malloc = keep_freed_memory()
        self._device = self._resolve_device()
        # One-time setup (well under a second per space): later networks cost only their assembly.
        self.factory = TimingFactory(space, seed=self.seed, device=self._device, channels_last=self.channels_last).prebuild()
        gen = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.input_shape, generator=gen).to(self._device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        self.x = x

    def _resolve_device(self):
        """The torch device networks run on."""
        import torch

        return torch.device("cpu")

    def fingerprint(self) -> dict[str, Any]:
        """Backend settings, machine and torch build."""
        import torch

        return {
            **super().fingerprint(),
            "inter_op_threads_actual": self._inter_actual,
            "kept_malloc": self._kept_malloc,
            **host_fingerprint(),
            "torch": torch.__version__,
            "mkldnn": bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled),
            "form": TIMING_FORM,
        }

    def _run(self, model, repeats: int, warmup: int, min_time_s: float) -> tuple[np.ndarray, float]:
        """Per-repeat forward times in ns and the seconds spent in timed passes."""
        x = self.x
        ns = timed_loop(lambda: model(x), repeats, warmup, min_time_s)
        return ns, float(ns.sum()) / 1e9

    def open(self, channels: Sequence[int], job: int = 0) -> Timer:
        """The deployment form of `channels`, timed under inference mode with the collector paused (ms per forward)."""
        import torch

        set_torch_threads(self.threads, self.inter_op_threads)
        model = self.factory(channels)

        def run(repeats: int, warmup: int, min_time_s: float) -> tuple[np.ndarray, float]:
            gc_enabled = gc.isenabled()
            gc.disable()
            try:
                with torch.inference_mode():
                    ns, timed = self._run(model, repeats, warmup, min_time_s)
            finally:
                if gc_enabled:
                    gc.enable()
            return ns / 1e6, timed

        return Timer(run)
