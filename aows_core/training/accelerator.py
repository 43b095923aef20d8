"""Where and in what precision every training stage runs: the config's `train:` section (docs/method.md D29).

`train.device` (auto | cpu | cuda; auto = CUDA when `torch.cuda.is_available()`, else the CPU) and
`train.precision` (fp32 | bf16 | fp16) are resolved once per process by `accelerator`; the supernet,
greedy, proxy and retraining stages move their model and batches to `Accelerator.device` and run
their forward passes under `Accelerator.autocast()` (torch.autocast), with `torch.amp.GradScaler`
for fp16. BatchNorm statistics stay float32 (`nets.slimmable`, `nets.scoring`). Under torchrun every
process takes `cuda:LOCAL_RANK` (nccl) or the CPU (gloo) by the same rule (`training.distributed`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import ContextManager, Iterable, Iterator

import torch

from ..config import ConfigError, TrainSettings

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Accelerator:
    """A resolved `train:` section: the torch device and the autocast precision."""

    device: torch.device
    precision: str

    @property
    def dtype(self) -> torch.dtype:
        """The autocast dtype (float32: no autocast)."""
        return DTYPES[self.precision]

    def autocast(self) -> ContextManager:
        """torch.autocast on this device in this precision; a no-op context for fp32."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A GradScaler for fp16 (gradients underflow in float16), None otherwise."""
        return torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None

    def batches(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(x, y) batches moved to the device (unchanged on the CPU)."""
        for x, y in batches:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


def resolve_device(name: str, local_rank: int = 0, local_world: int = 1) -> torch.device:
    """The device `train.device` names for process `local_rank` of `local_world` on this node.

    auto: cuda:local_rank when CUDA is available with a GPU for every local process, else the CPU;
    cuda: the same GPU, or a ConfigError naming train.device and the fix."""
    if name == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    enough = available and torch.cuda.device_count() >= local_world
    if name == "auto":
        return torch.device("cuda", local_rank) if enough else torch.device("cpu")
    if name != "cuda":
        raise ConfigError(f"config key train.device: unknown device {name!r}; choose auto, cpu or cuda")
    if not available:
        raise ConfigError(f"config key train.device: cuda, but torch {torch.__version__} sees no CUDA GPU "
                          "(torch.cuda.is_available() is False); set train.device: auto (CUDA when present, else "
                          "the CPU) or cpu, or run on a GPU node")
    if not enough:
        raise ConfigError(f"config key train.device: cuda with {local_world} processes on this node, but it has "
                          f"{torch.cuda.device_count()} GPU(s); lower supernet.processes (retrain.processes) to the GPU count or set "
                          "train.device: auto or cpu")
    return torch.device("cuda", local_rank)


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse a precision the device cannot train in, naming train.precision and the fix."""
    if precision not in DTYPES:
        raise ConfigError(f"config key train.precision: unknown precision {precision!r}; choose one of {sorted(DTYPES)}")
    if precision == "fp16" and device.type == "cpu":
        raise ConfigError("config key train.precision: fp16 trains on CUDA only (float16 autocast with a gradient "
                          "scaler); on the CPU use train.precision: bf16 (or fp32), or set train.device to a GPU")


def deterministic_environment(deterministic: bool) -> None:
    """With `train.deterministic` (D29), cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8, a user's own value
    kept): set before CUDA initialises (`training.distributed.process_group`), as cuBLAS reads it once."""
    import os

    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def deterministic_cuda() -> None:
    """Deterministic CUDA kernels (`train.deterministic`, D29): exact resume on GPUs as on the CPU.

    CUBLAS_WORKSPACE_CONFIG must be set before cuBLAS's first use in the process (a user's own value is kept)."""
    deterministic_environment(True)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def accelerator(train: TrainSettings, device: torch.device | None = None) -> Accelerator:
    """The `train:` settings on `device` (a data-parallel process's, `Dist.device`), or resolved on this machine; the
    precision is checked against the device, CUDA made deterministic on request."""
    device = resolve_device(str(train.device)) if device is None else device
    check_precision(str(train.precision), device)
    if train.deterministic and device.type == "cuda":
        deterministic_cuda()
    return Accelerator(device, str(train.precision))
