"""Data-parallel supernet training (`supernet.processes` = N > 1, relaunched under torchrun).

With RANK / WORLD_SIZE set the process group is initialised by the device rule of `train.device`
(`training.accelerator`, docs/method.md D29): nccl on cuda:LOCAL_RANK, else gloo on the CPU. Every rank draws the configurations of the whole global batch from the same
(seed, epoch, step) RNG and uses the rows of its own shard (`data.shard_bounds`), so the sample
stream is that of one process. Gradients are averaged by a MANUAL flat all-reduce before the optimiser
step (`AveragingOptimizer`), not DistributedDataParallel: one fixed flat layout keeps the reduction
deterministic for any world size and across resumes, and the sandwich step's several forwards per
backward need no reducer care. BatchNorm uses per-rank batch statistics (masked per configuration;
SyncBatchNorm does not apply to `MaskedBNReLU`), so an N-process run is not numerically a 1-process
run, but its configuration stream (hence unary counts) is. Unaries (eq. average_error): OWS sums and
counts are all-reduced; AOWS window samples are gathered in rank order (`update_unaries`, passing
the torch collectives into the numpy estimators of `search.unaries`). Metrics are averaged over ranks.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch


def bn_description(world: int) -> str:
    """How train-mode BN normalised a training batch (artifact metadata)."""
    if world == 1:
        return "batch statistics (masked per configuration)"
    return (f"per-rank batch statistics (no SyncBatchNorm): each of {world} processes normalises its 1/{world} of "
            "the batch; running statistics averaged over ranks every step")


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


def init_distributed(processes: int, device: str = "auto") -> Dist:
    """Join (or initialise from RANK / WORLD_SIZE) the process group on the device `train.device` names for this
    process (`accelerator.resolve_device`): nccl on cuda:LOCAL_RANK, gloo on the CPU; world 1: no group."""
    import torch.distributed as dist

    from .accelerator import resolve_device

    initialised = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if initialised else int(os.environ.get("WORLD_SIZE", "1"))
    if world != processes:
        raise ValueError(f"supernet.processes = {processes} but {world} process(es) run: launch it through "
                         "`aows train-supernet` (which starts torchrun) or set supernet.processes to the world size")
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


def flat_collective(tensors: list[torch.Tensor], op: str, world: int) -> None:
    """In place over ranks, through one flat buffer: op "mean" (all-reduce / world) or "broadcast" (from rank 0)."""
    import torch.distributed as dist

    if not tensors:
        return
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    if op == "mean":
        dist.all_reduce(flat)
        flat.div_(world)
    else:
        dist.broadcast(flat, 0)
    off = 0
    for t in tensors:
        n = t.numel()
        t.detach().copy_(flat[off : off + n].view(t.shape))
        off += n


class AveragingOptimizer:
    """Wraps the optimiser: gradients and BN running statistics are averaged over ranks before each step."""

    def __init__(self, opt: torch.optim.Optimizer, model: torch.nn.Module, world: int):
        self.opt, self.model, self.world = opt, model, world

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """One flat all-reduce (mean) of every gradient and floating buffer, then the wrapped step."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]  # same set on every rank
        flat_collective(grads + [b for b in self.model.buffers() if b.is_floating_point()], "mean", self.world)
        self.opt.step()


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


def mean_metrics(res, ddp: Dist):
    """The sandwich result with its scalar losses and accuracy averaged over ranks."""
    import torch.distributed as dist

    v = torch.tensor([res.loss_max, res.loss_min, float(np.mean(res.loss_random)), res.acc_max], dtype=torch.float64,
                     device=ddp.device)
    dist.all_reduce(v)
    a, b, c, d = (v / ddp.world).tolist()
    return dataclasses.replace(res, loss_max=a, loss_min=b, loss_random=[c], acc_max=d)


def broadcast_parameters(model: torch.nn.Module, world: int) -> None:
    """Make every rank's parameters and floating buffers rank 0's (identical by construction; made certain)."""
    flat_collective(list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()], "broadcast", world)
