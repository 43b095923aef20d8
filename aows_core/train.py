"""Supernet training: OWS (uniform sampling, §5) and AOWS (adaptive sampling, §6), resumable at any step.

Each step is a sandwich step (§3): the max configuration on labels, the sliced min configuration
and `n_random` per-sample random passes distilled from the max. The per-sample differences
CE(sampled) − CE(max) of the same step (train-mode BN, before the update) feed the unaries of
eq. average_error: OWS averages them per (layer, width) over each epoch; AOWS keeps the mean of the
most recent K samples per (layer, width).

AOWS runs W warm-up epochs of uniform sampling that are identical to OWS's first W epochs under the
same seed, so it starts from the OWS checkpoint written after W epochs; its window is seeded with
the OWS means of epoch W (each cell repeated min(count, K) times), so a width visited during warm-up
keeps its estimate. Then configurations come from the relaxed min-sum marginals at the current γ
(constrained decode at the current unaries) and temperature T(u) of supplementary B.

Determinism: every random choice of step k of epoch e derives from (seed, e, k) — data order and
augmentation (data.py), configurations (here) — so a run killed at any step and resumed from its
last checkpoint ends exactly where an uninterrupted run ends. Checkpoints are atomic and live in
`resume_dir`, outside Snakemake's declared outputs.

Data parallel (`supernet.processes` = N > 1; `aows train-supernet` relaunches itself under torchrun):
with RANK / WORLD_SIZE set, the process group is initialised (nccl with one GPU per local rank,
cuda:LOCAL_RANK, else gloo on the CPU; a single process trains on the CPU as before). Every rank
draws the configurations of the whole global batch from the same (seed, epoch, step) RNG and uses
the rows of its own shard of the batch (`Splits.train_batches(..., rank, world_size)`), so the
sample stream is that of one process. Gradients: a MANUAL all-reduce, not DistributedDataParallel:
the sandwich step's passes accumulate local gradients, then one flat all-reduce averages gradients
and BN running statistics over ranks before the optimiser step (`_AveragingOptimizer`); one fixed
flat layout keeps the reduction deterministic for any world size and across resumes, and needs no
care for DDP's reducer under several forwards per backward. BatchNorm: per-rank batch statistics
(each rank normalises its B/N samples, masked per configuration); SyncBatchNorm does not apply,
since the masked and sliced passes call `MaskedBNReLU` / `F.batch_norm` on the BN parameters
rather than the BN modules. So an N-process run is not numerically a 1-process run; its
configuration stream (hence unary counts) is. Unaries: OWS sums and counts of each step are
all-reduced (float64 / int64) and added on every rank; AOWS window means are not summable, so each
step's (configurations, differences) are gathered in rank order, which is the 1-process order.
Every rank thus holds the same estimator and the same AOWS sampler (γ, temperature). Metrics are
averaged over ranks. Only rank 0 writes artifacts and checkpoints; every rank loads the checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import torch

from . import io
from .config import settings_hash, space_from_config, stage_settings
from .space import SearchSpace

io.SCHEMAS.setdefault(
    "train_metrics",
    pa.schema(
        [
            ("epoch", pa.int32()),
            ("steps", pa.int64()),
            ("images", pa.int64()),
            ("seconds", pa.float64()),
            ("images_per_s", pa.float64()),
            ("loss_max", pa.float64()),
            ("loss_min", pa.float64()),
            ("loss_random", pa.float64()),
            ("train_acc_max", pa.float64()),
            ("sampling", pa.string()),
            ("gamma", pa.float64()),
            ("temperature", pa.float64()),
            ("scale", pa.float64()),
        ]
    ),
)

LOSS_DESCRIPTION = "hard-label CE(sampled configuration) - CE(max configuration), same sample and step, train-mode BN"


def bn_description(world: int) -> str:
    """How train-mode BN normalised a training batch (artifact metadata)."""
    if world == 1:
        return "batch statistics (masked per configuration)"
    return (f"per-rank batch statistics (no SyncBatchNorm): each of {world} processes normalises its 1/{world} of "
            "the batch; running statistics averaged over ranks every step")


class CheckpointError(ValueError):
    """A warm-start checkpoint (AOWS's --init-from) that is not the OWS checkpoint after the warm-up epochs."""


def data_spec(config: Mapping[str, Any]):
    """The DataSpec of a validated config (training batches of the supernet)."""
    from .data import DataSpec

    d, s = config["data"], config["supernet"]
    return DataSpec(
        name=d["dataset"], root=d["root"], download=d["download"], search_val=d["search_val"],
        calibration=d["calibration"], train_subset=d["train_subset"], batch_size=s["batch_size"],
        seed=config["seed"], channels_last=s["channels_last"], num_workers=d["num_workers"],
    )


def _to_cpu(obj: Any) -> Any:
    """obj with every tensor on the CPU (checkpoints written on a GPU load anywhere)."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        out = type(obj)((k, _to_cpu(v)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata  # state_dict versions
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _atomic_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(_to_cpu(obj), tmp)
    os.replace(tmp, path)


def load_resume(path: Path, run_id: str) -> dict | None:
    """The resume checkpoint at `path` if it belongs to this run; one from another run (other space, settings,
    method, target or channels) or an unreadable one is set aside as `<name>.stale` and the job starts afresh."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
        why = None if state.get("run_id") == run_id else "belongs to another run (the space, settings, method, target or channels differ)"
    except Exception as e:  # a checkpoint that does not load cannot be resumed from
        state, why = None, f"cannot be read ({e})"
    if why is None:
        return state
    stale = path.with_name(path.name + ".stale")
    try:
        os.replace(path, stale)
    except FileNotFoundError:  # another rank of this run set it aside first
        pass
    io.notice(f"the resume checkpoint {path} {why}: kept as {stale}, starting this run afresh")
    return None


def clear_resume(path: Path) -> None:
    """Remove a finished job's resume checkpoint (and a set-aside one), then its folder if that is left empty."""
    for p in (path, path.with_name(path.name + ".stale")):
        p.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # not empty, or already gone


@dataclass
class _Dist:
    """This process's place in the data-parallel run (world 1: no process group)."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_distributed(processes: int) -> _Dist:
    """Join (or initialise from RANK / WORLD_SIZE) the process group; nccl on one GPU per local rank, else gloo."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if initialised else int(os.environ.get("WORLD_SIZE", "1"))
    if world != processes:
        raise ValueError(f"supernet.processes = {processes} but {world} process(es) run: launch it through "
                         "`aows train-supernet` (which starts torchrun) or set supernet.processes to the world size")
    if world == 1:
        return _Dist()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if initialised:
        cuda = dist.get_backend() == "nccl"
    else:
        cuda = torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not initialised:
        dist.init_process_group("nccl" if cuda else "gloo")
    return _Dist(dist.get_rank(), world, device, not initialised)


def _flat_collective(tensors: list[torch.Tensor], op: str, world: int) -> None:
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


class _AveragingOptimizer:
    """Wraps the optimiser: gradients and BN running statistics are averaged over ranks before each step."""

    def __init__(self, opt: torch.optim.Optimizer, model: torch.nn.Module, world: int):
        self.opt, self.model, self.world = opt, model, world

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """One flat all-reduce (mean) of every gradient and floating buffer, then the wrapped step."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]  # same set on every rank
        _flat_collective(grads + [b for b in self.model.buffers() if b.is_floating_point()], "mean", self.world)
        self.opt.step()


def _update_unaries(estimator, idx: np.ndarray, diffs: np.ndarray, world: int) -> None:
    """Add this rank's samples (R, b, L) / (R, b); with several ranks every rank receives the global step."""
    from .unaries import EpochUnaries, all_gather_update

    if world == 1:
        estimator.update(idx, diffs)
    elif isinstance(estimator, EpochUnaries):
        part = EpochUnaries(estimator.sizes)
        part.update(idx, diffs)
        estimator.merge(part.all_reduce())  # float64 sums, int64 counts, summed over ranks
    else:
        all_gather_update(estimator, idx, diffs)  # window means: the gathered batch in rank (= sample) order


def _mean_metrics(res, ddp: _Dist):
    """The sandwich result with its scalar losses and accuracy averaged over ranks."""
    import torch.distributed as dist

    v = torch.tensor([res.loss_max, res.loss_min, float(np.mean(res.loss_random)), res.acc_max], dtype=torch.float64,
                     device=ddp.device)
    dist.all_reduce(v)
    a, b, c, d = (v / ddp.world).tolist()
    return dataclasses.replace(res, loss_max=a, loss_min=b, loss_random=[c], acc_max=d)


def uniform_indices(space: SearchSpace, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, n_layers) choice indices, each layer uniform over its widths (§5 per-sample sampling)."""
    return np.stack([rng.integers(0, len(c), size) for c in space.layer_choices], axis=1)


def _run_id(config: Mapping[str, Any], method: str, device: str | None, target: str | None) -> str:
    stage = "train_ows" if method == "ows" else "train_aows"
    blob = json.dumps({"settings": settings_hash(stage_settings(config, stage)), "method": method, "device": device,
                       "target": target}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def train_supernet(
    config: Mapping[str, Any],
    out_dir: str | os.PathLike,
    resume_dir: str | os.PathLike,
    *,
    method: str = "ows",
    lut_path: str | os.PathLike | None = None,
    device: str | None = None,
    target: str | None = None,
    init_from: str | os.PathLike | None = None,
    progress: bool = True,
    stop_after_steps: int | None = None,
) -> dict[str, Any]:
    """Train an OWS or AOWS supernet; writes unaries.parquet, metrics.parquet, model.pt and per-epoch checkpoints."""
    ddp = _init_distributed(int(config["supernet"].get("processes", 1)))
    try:
        return _train(config, Path(out_dir), Path(resume_dir), method, lut_path, device, target, init_from, progress,
                      stop_after_steps, ddp)
    finally:
        if ddp.owns_group:
            import torch.distributed as dist

            dist.destroy_process_group()


def _train(config: Mapping[str, Any], out_dir: Path, resume_dir: Path, method: str, lut_path, device: str | None,
           target: str | None, init_from, progress: bool, stop_after_steps: int | None, ddp: _Dist) -> dict[str, Any]:
    """The training loop of `train_supernet` on this rank."""
    from .aows import AOWSSampler, TemperatureSchedule
    from .data import _shard, check_space, load
    from .supernet import SlimmableMobileNetV1, sandwich_step, widths_tensor
    from .unaries import EpochUnaries, WindowUnaries

    if method not in ("ows", "aows"):
        raise ValueError(f"unknown method {method!r}; expected 'ows' or 'aows'")
    space = space_from_config(config)
    sn, aw, seed = config["supernet"], config["aows"], int(config["seed"])
    E, W = int(sn["epochs"]), int(aw["warmup_epochs"])
    torch.set_num_threads(int(sn["threads"]))

    sampler = schedule = None
    if method == "aows":
        if lut_path is None or target is None or init_from is None:
            raise ValueError("AOWS needs --lut, --target and --init-from (the OWS checkpoint after the warm-up epochs)")
        if not W < E:
            raise ValueError(f"aows.warmup_epochs ({W}) must be smaller than supernet.epochs ({E})")
        schedule = TemperatureSchedule(W, E)
        from .decode import resolve_target
        from .stages import read_lut

        x, tmeta = read_lut(lut_path, space, device)
        target_value = resolve_target(target, space, x, tmeta["unit_short"])
        sampler = AOWSSampler(space, x, target_value, policy=aw["unvisited"], mode=aw["sampling"],
                              scale=aw["temperature_scale"], seed=seed)  # refuses an infeasible target here

    spec = data_spec(config)
    splits = load(spec)
    check_space(splits.info, space)
    steps = splits.steps_per_epoch
    R, B = int(sn["n_random"]), int(sn["batch_size"])
    lo, hi = _shard(B, ddp.rank, ddp.world)

    torch.manual_seed(seed)
    model = SlimmableMobileNetV1(space, channels_last=bool(sn["channels_last"]))
    if ddp.device.type != "cpu":
        model.to(ddp.device)
    opt = torch.optim.SGD(model.parameters(), lr=sn["lr"], momentum=sn["momentum"], weight_decay=sn["weight_decay"],
                          nesterov=sn["momentum"] > 0)
    step_opt = opt if ddp.world == 1 else _AveragingOptimizer(opt, model, ddp.world)
    estimator = EpochUnaries(space) if method == "ows" else WindowUnaries(space, int(aw["window"]))
    run_id = _run_id(config, method, device, target)
    ckpt_path = resume_dir / "checkpoint.pt"
    epoch, step = 0, 0
    rows: list[dict] = []
    metrics: list[dict] = []
    acc = _EpochAccumulator()

    state = load_resume(ckpt_path, run_id)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        estimator.load_state_dict(state["unaries"])
        if sampler is not None and state.get("sampler"):
            sampler.load_state_dict(state["sampler"])
        epoch, step, rows, metrics = state["epoch"], state["step"], state["rows"], state["metrics"]
        acc = _EpochAccumulator(**state["acc"])
    elif method == "aows":
        state = torch.load(init_from, weights_only=False, map_location="cpu")
        if state.get("space_hash") != space.hash or state.get("completed_epochs") != W:
            raise CheckpointError(
                f"{init_from} is not the OWS checkpoint after {W} epochs of this space "
                f"(space {state.get('space_hash')}, after {state.get('completed_epochs')} epochs)"
            )
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        ows = EpochUnaries(space)
        ows.load_state_dict(state["unaries_last_epoch"])
        estimator.seed_means(ows.delta(), ows.counts())
        epoch, rows, metrics = W, list(state["rows"]), list(state["metrics"])

    if ddp.world > 1:  # identical by construction; made certain
        _flat_collective(list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()], "broadcast",
                         ddp.world)
    save = _save if ddp.main else (lambda *a: None)
    bar = None
    if progress and ddp.main:
        from tqdm import tqdm

        bar = tqdm(total=E * steps, initial=epoch * steps + step, desc=f"supernet {method}", unit="step")
    done_now = 0
    t_last = time.perf_counter()
    while epoch < E:
        adaptive = method == "aows" and epoch >= W
        for x, y in splits.train_batches(epoch, start_step=step, rank=ddp.rank, world_size=ddp.world):
            if ddp.device.type != "cpu":
                x, y = x.to(ddp.device, non_blocking=True), y.to(ddp.device, non_blocking=True)
            rng = np.random.default_rng([seed, epoch, step, 0xA0])
            if adaptive:
                T = schedule.at_step(epoch, step, steps)
                idx = sampler.sample(estimator, T, R * B, rng)[:, 1:-1]
            else:
                idx = uniform_indices(space, R * B, rng)
            idx = idx.reshape(R, B, space.n_layers)[:, lo:hi]  # configurations of this rank's samples
            widths = widths_tensor(space, idx.reshape(-1, space.n_layers)).reshape(R, hi - lo, space.n_layers)
            res = sandwich_step(model, x, y, widths, step_opt, R, label_smoothing=sn["label_smoothing"], step=step)
            _update_unaries(estimator, idx, res.diffs(), ddp.world)
            if ddp.world > 1:
                res = _mean_metrics(res, ddp)
            now = time.perf_counter()
            acc.add(res, len(y) * ddp.world, now - t_last, sampler.last if adaptive else None)
            t_last = now
            step += 1
            done_now += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(img_s=f"{acc.images / max(acc.seconds, 1e-9):.0f}", loss=f"{res.loss:.3f}")
            if step % sn["checkpoint_every"] == 0 and step < steps:
                save(ckpt_path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space)
            if stop_after_steps is not None and done_now >= stop_after_steps:
                save(ckpt_path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space)
                if bar is not None:
                    bar.close()
                return {"complete": False, "epoch": epoch, "step": step}
        # end of epoch
        rows.extend(estimator.rows(space, epoch))
        metrics.append(acc.row(epoch, "aows" if adaptive else "uniform"))
        epoch_state = {
            "space_hash": space.hash, "completed_epochs": epoch + 1, "model": model.state_dict(),
            "optimizer": opt.state_dict(), "unaries_last_epoch": estimator.state_dict(), "rows": rows, "metrics": metrics,
        }
        if ddp.main:
            _atomic_save(epoch_state, out_dir / "checkpoints" / f"after_{epoch + 1}.pt")
        if method == "ows":
            estimator.reset()
        epoch, step, acc = epoch + 1, 0, _EpochAccumulator()
        save(ckpt_path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space)
    if bar is not None:
        bar.close()
    if not ddp.main:  # rank 0 writes the artifacts
        return {"complete": True, "epochs": E, "metrics": metrics[-1]}

    meta = io.provenance(
        space_name=space.name, space_hash=space.hash, seed=seed, method=method, device=device, target=target,
        sampling=("uniform" if method == "ows" else f"uniform for {W} epochs, then {aw['sampling']} from the relaxed marginals"),
        window=None if method == "ows" else int(aw["window"]),
        averaging="per epoch" if method == "ows" else f"most recent {aw['window']} samples per (layer, width)",
        loss=LOSS_DESCRIPTION, temperature_scale=None if sampler is None else sampler.s,
        processes=ddp.world, bn=bn_description(ddp.world), supernet=dict(sn), data=spec.to_dict(),
    )
    io.write_records(rows, out_dir / "unaries.parquet", "unaries", meta)
    io.write_records(metrics, out_dir / "metrics.parquet", "train_metrics", meta)
    _atomic_save({"space": space.to_dict(), "space_hash": space.hash, "model": model.state_dict(), "run_id": run_id},
                 out_dir / "model.pt")
    clear_resume(ckpt_path)
    return {"complete": True, "epochs": E, "metrics": metrics[-1]}


class _EpochAccumulator:
    """Running sums for one epoch's metrics row."""

    def __init__(self, steps: int = 0, images: int = 0, seconds: float = 0.0, loss_max: float = 0.0,
                 loss_min: float = 0.0, loss_random: float = 0.0, acc: float = 0.0, last: dict | None = None):
        self.steps, self.images, self.seconds = steps, images, seconds
        self.loss_max, self.loss_min, self.loss_random, self.acc = loss_max, loss_min, loss_random, acc
        self.last = last or {}

    def add(self, res, n: int, seconds: float, sampler_last: dict | None) -> None:
        self.steps += 1
        self.images += n
        self.seconds += seconds
        self.loss_max += res.loss_max
        self.loss_min += res.loss_min
        self.loss_random += float(np.mean(res.loss_random))
        self.acc += res.acc_max
        if sampler_last:
            self.last = {k: sampler_last.get(k) for k in ("gamma", "temperature", "scale")}

    def state(self) -> dict:
        return {"steps": self.steps, "images": self.images, "seconds": self.seconds, "loss_max": self.loss_max,
                "loss_min": self.loss_min, "loss_random": self.loss_random, "acc": self.acc, "last": self.last}

    def row(self, epoch: int, sampling: str) -> dict:
        s = max(self.steps, 1)
        return {
            "epoch": epoch, "steps": self.steps, "images": self.images, "seconds": self.seconds,
            "images_per_s": self.images / max(self.seconds, 1e-9), "loss_max": self.loss_max / s,
            "loss_min": self.loss_min / s, "loss_random": self.loss_random / s, "train_acc_max": self.acc / s,
            "sampling": sampling, "gamma": self.last.get("gamma"), "temperature": self.last.get("temperature"),
            "scale": self.last.get("scale"),
        }


def _save(path: Path, model, opt, estimator, sampler, epoch, step, rows, metrics, acc, run_id, space) -> None:
    _atomic_save(
        {
            "run_id": run_id, "space_hash": space.hash, "epoch": epoch, "step": step, "model": model.state_dict(),
            "optimizer": opt.state_dict(), "unaries": estimator.state_dict(),
            "sampler": None if sampler is None else sampler.state_dict(), "rows": rows, "metrics": metrics,
            "acc": acc.state(),
        },
        path,
    )
