"""Data-parallel training (`supernet.processes`, `retrain.processes` = N > 1, relaunched under torchrun).

With RANK / WORLD_SIZE set the process group is initialised by the device rule of `train.device`
(`training.accelerator`, docs/method.md D29): nccl on cuda:LOCAL_RANK, else gloo on the CPU. Every rank
takes its shard of every global batch (`data.shard_bounds`), so the sample stream is that of one process;
the supernet's ranks also draw the configurations of the whole global batch from the same (seed, epoch,
step) RNG. Gradients are averaged by torch's DistributedDataParallel (`data_parallel`, docs/method.md
D30): one bucketed all-reduce per optimiser step (the sandwich step's passes before the last run under
`no_sync()`). DDP's `forward_sync_buffers` (formerly `broadcast_buffers`) is off: floating buffers (BatchNorm
running statistics, taken on each rank's shard) are averaged over ranks after every step (`average_buffers`), as
before DDP.
BatchNorm uses per-rank batch statistics unless `sync_bn` (`bn_group`; `nets.batchnorm.synchronised` during the
training step: statistics of the global batch, torch's SyncBatchNorm rule for the masked BN and the CPU too), so
without it an N-process run is not numerically a 1-process run, but its sample and configuration streams (hence
unary counts) are. Unaries (eq. average_error): OWS sums and counts are
all-reduced; AOWS window samples are gathered in rank order (`update_unaries`, passing the torch
collectives into the numpy estimators of `search.unaries`). Metrics are averaged over ranks.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch


def bn_description(world: int, masked: bool = True, sync: bool = False) -> str:
    """How train-mode BN normalised a training batch (artifact metadata)."""
    if world == 1:
        return "batch statistics (masked per configuration)" if masked else "batch statistics"
    if sync:
        return (f"global-batch statistics: sums all-reduced over the {world} processes (sync_bn), "
                + ("masked per configuration, " if masked else "") + "as one process holding the batch")
    return (f"per-rank batch statistics (no sync_bn): each of {world} processes normalises its 1/{world} of "
            "the batch; running statistics averaged over ranks every step")


def bn_group(sync: bool) -> Any:
    """The process group whose global batch train-mode BN normalises over (`nets.batchnorm.synchronised`): the
    whole group with `sync` when one is initialised (several processes), else None (each rank's own shard)."""
    import torch.distributed as dist

    return dist.group.WORLD if sync and dist.is_available() and dist.is_initialized() else None


@dataclass
class Dist:
    """This process's place in the data-parallel run (world 1: no process group)."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(processes: int, device: str = "auto", key: str = "supernet.processes") -> Dist:
    """Join (or initialise from RANK / WORLD_SIZE) the process group on the device `train.device` names for this
    process (`accelerator.resolve_device`): nccl on cuda:LOCAL_RANK, gloo on the CPU; world 1: no group.

    `key` is the config key that asked for `processes` (named when the world differs)."""
    import torch.distributed as dist

    from .accelerator import resolve_device

    initialised = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if initialised else int(os.environ.get("WORLD_SIZE", "1"))
    if world != processes:
        command = {"supernet": "aows train-supernet", "retrain": "aows retrain"}.get(key.split(".")[0],
                                                                                    "aows greedy or aows proxy")
        raise ValueError(f"{key} = {processes} but {world} process(es) run: launch it through "
                         f"`{command}` (which starts torchrun) or set {key} to the world size")
    if world == 1:
        return Dist(device=resolve_device(device))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    cuda = dev.type == "cuda"
    if initialised and (dist.get_backend() == "nccl") != cuda:
        raise ValueError(f"the process group runs {dist.get_backend()}, but train.device = {device} resolves to "
                         f"{dev.type}: nccl needs cuda, gloo the CPU")
    if cuda:
        torch.cuda.set_device(dev)
    if not initialised:
        dist.init_process_group("nccl" if cuda else "gloo")
    return Dist(dist.get_rank(), world, dev, not initialised)


@contextlib.contextmanager
def process_group(processes: int, device: str = "auto", key: str = "supernet.processes", *,
                  deterministic: bool = False) -> Iterator[Dist]:
    """`init_distributed` for the duration of a block; a group this process initialised is destroyed after it.

    `deterministic` (`train.deterministic`, D29): cuBLAS's workspace setting goes into the environment first, before
    anything here initialises CUDA."""
    from .accelerator import deterministic_environment

    deterministic_environment(deterministic)
    ddp = init_distributed(processes, device, key)
    try:
        yield ddp
    finally:
        if ddp.owns_group:
            import torch.distributed as dist

            dist.destroy_process_group()


def data_parallel(model: torch.nn.Module, ddp: Dist) -> torch.nn.Module:
    """The model wrapped in DistributedDataParallel (world > 1; rank 0's parameters and buffers are broadcast
    when it is built), or the model itself (world 1). Buffers are not broadcast per forward: see `average_buffers`."""
    if ddp.world == 1:
        return model
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    ids = [ddp.device] if ddp.device.type == "cuda" else None
    # torch >= 2.13 calls it forward_sync_buffers; the deprecated broadcast_buffers of older versions (pyproject
    # allows 2.9) also skips the broadcast at build time, where the buffers are identical by construction anyway
    name = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
            else "broadcast_buffers")
    return DistributedDataParallel(model, device_ids=ids, **{name: False})


def average_buffers(model: torch.nn.Module, world: int) -> None:
    """Average every floating buffer (BatchNorm running statistics) over ranks in place, in one flat all-reduce."""
    import torch.distributed as dist

    bufs = [b for b in model.buffers() if b.is_floating_point()]
    if world == 1 or not bufs:
        return
    flat = torch.cat([b.detach().reshape(-1) for b in bufs])
    dist.all_reduce(flat)
    flat.div_(world)
    off = 0
    for b in bufs:
        b.detach().copy_(flat[off : off + b.numel()].view(b.shape))
        off += b.numel()


def mean_over_ranks(values: list[float], ddp: Dist) -> list[float]:
    """Scalars averaged over ranks (float64; unchanged with world 1)."""
    if ddp.world == 1:
        return list(values)
    import torch.distributed as dist

    v = torch.tensor(values, dtype=torch.float64, device=ddp.device)
    dist.all_reduce(v)
    return (v / ddp.world).tolist()


def mean_over_ranks_tensor(value: torch.Tensor, ddp: Dist) -> torch.Tensor:
    """A 0-d float64 tensor averaged over ranks on its device (as `mean_over_ranks`, without reading it)."""
    if ddp.world == 1:
        return value
    import torch.distributed as dist

    v = value.clone()
    dist.all_reduce(v)
    return v / ddp.world


def float_sum(ddp: Dist) -> Callable[[list[float]], list[float]] | None:
    """A sum over ranks of float64 scalars (exact for counts below 2**53), or None with world 1."""
    if ddp.world == 1:
        return None
    import torch.distributed as dist

    def reduce(values: list[float]) -> list[float]:
        v = torch.tensor(values, dtype=torch.float64, device=ddp.device)
        dist.all_reduce(v)
        return v.tolist()

    return reduce


def sum_over_ranks(counts: list[int], ddp: Dist) -> list[int]:
    """Integer counts summed over ranks (int64; unchanged with world 1)."""
    if ddp.world == 1:
        return list(counts)
    import torch.distributed as dist

    v = torch.tensor(counts, dtype=torch.int64, device=ddp.device)
    dist.all_reduce(v)
    return [int(c) for c in v.tolist()]


def torch_all_reduce() -> Callable[[np.ndarray], np.ndarray] | None:
    """A SUM all-reduce of numpy arrays through torch.distributed, or None without a process group."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None

    def fn(a: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(a))
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.cpu().numpy()

    return fn


def torch_all_gather() -> Callable[[np.ndarray], list[np.ndarray]] | None:
    """An all-gather of numpy arrays (in rank order) through torch.distributed, or None without a process group."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        dist = None
    if dist is not None and dist.is_available() and dist.is_initialized():

        def gather_fn(a: np.ndarray) -> list[np.ndarray]:
            out: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(out, a)
            return out

        return gather_fn
    return None


def update_unaries(estimator, idx: np.ndarray, diffs: np.ndarray, world: int) -> None:
    """Add this rank's samples (R, b, L) / (R, b); with several ranks every rank receives the global step."""
    from ..search.unaries import EpochUnaries, all_gather_update

    if world == 1:
        estimator.update(idx, diffs)
    elif isinstance(estimator, EpochUnaries):
        part = EpochUnaries(estimator.sizes)
        part.update(idx, diffs)
        estimator.merge(part.all_reduce(torch_all_reduce()))  # float64 sums, int64 counts, summed over ranks
    else:
        all_gather_update(estimator, idx, diffs, torch_all_gather())  # window means: the gathered batch in rank (= sample) order


class DeferredUnaries:
    """A training-time unaries estimator (`search.unaries`) fed the steps' `StepRecord`s, applied in step order when
    anything reads it (§5 eq. average_error, §6's window: the same updates as per step, D29); one process only.

    Every attribute but `defer` settles first, so epoch rows, checkpoints, the width signal and AOWS's sampler
    (which reads it every step under `supernet.unaries: training`) see every step; a non-finite step raises
    `NonFiniteLoss` there (an fp16 step the scaler skipped adds nothing)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self._pending: list[tuple[np.ndarray, Any]] = []

    def defer(self, idx: np.ndarray, record: Any) -> None:
        """Queue one step's choice indices (R, b, L) and its record (no host wait)."""
        self._pending.append((np.asarray(idx), record))

    def settle(self) -> None:
        """Apply the queued steps, in order."""
        pending, self._pending = self._pending, []
        for idx, record in pending:
            if record.check():
                self.inner.update(idx, record.diffs)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "_pending") or name.startswith("__"):
            raise AttributeError(name)
        self.settle()
        return getattr(self.inner, name)


def mean_metrics(record, ddp: Dist):
    """A step's `StepRecord` with its scalar losses and accuracy averaged over ranks (read now, D30)."""
    return record.with_summary(mean_over_ranks(list(record.summary()), ddp))
