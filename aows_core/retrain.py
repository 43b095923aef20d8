"""Retraining a decided configuration from scratch (§7), evaluated once on the untouched test split.

A fixed-width MobileNet-v1 of the decision's channels is trained with SGD (Nesterov momentum),
a linear learning-rate warm-up then a cosine schedule per step, and label smoothing; top-1 on the
official test split is reported with its 95 % Wilson score interval. Data order and augmentation
derive from (seed, epoch, step), so a run killed at any step and resumed from its last atomic
checkpoint (kept outside the declared outputs) ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import torch
import torch.nn.functional as F

from . import io
from .config import settings_hash, space_from_config, stage_settings
from .train import _atomic_save, clear_resume, load_resume

io.SCHEMAS.setdefault(
    "retrain",
    pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("channels", io.CHANNELS),
            ("seed", pa.int64()),
            ("epochs", pa.int32()),
            ("train_seconds", pa.float64()),
            ("final_train_loss", pa.float64()),
            ("test_correct", pa.int64()),
            ("test_n", pa.int64()),
            ("test_acc", pa.float64()),
            ("test_acc_low", pa.float64()),
            ("test_acc_high", pa.float64()),
        ]
    ),
)


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (scipy's binomtest)."""
    from scipy.stats import binomtest

    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 ≤ k ≤ n and n > 0, got k={k}, n={n}")
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def learning_rate(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up over `warmup` steps to `base`, then cosine decay to 0 at `total` steps."""
    if step < warmup:
        return base * (step + 1) / warmup
    u = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1 + math.cos(math.pi * min(1.0, u)))


@torch.inference_mode()
def evaluate(model: torch.nn.Module, batches) -> tuple[int, int]:
    """(correct, n) of top-1 predictions over (x, y) batches, eval-mode BN."""
    model.eval()
    correct = n = 0
    for x, y in batches:
        correct += int((model(x).argmax(1) == y).sum())
        n += len(y)
    return correct, n


def retrain(config: Mapping[str, Any], decision: str | os.PathLike, out_dir: str | os.PathLike,
            resume_dir: str | os.PathLike, *, progress: bool = True, stop_after_steps: int | None = None) -> dict[str, Any]:
    """Stage: train a decision's network from scratch, evaluate top-1 on the test split; writes result.parquet, model.pt."""
    from .data import DataSpec, check_space, load, test_batches
    from .models import MobileNetV1

    space = space_from_config(config)
    rt, seed = config["retrain"], int(config["seed"])
    table, dmeta = io.read_table(decision, "decisions")
    if dmeta.get("space_hash") != space.hash:
        raise io.ArtifactError(f"{decision} was decided on space {dmeta.get('space_hash')}, not {space.hash}")
    (row,) = table.to_pylist()
    channels = [int(c) for c in row["channels"]]
    out_dir, resume_dir = Path(out_dir), Path(resume_dir)
    torch.set_num_threads(int(rt["threads"]))

    d = config["data"]
    spec = DataSpec(name=d["dataset"], root=d["root"], download=d["download"], search_val=d["search_val"],
                    calibration=d["calibration"], train_subset=d["train_subset"], batch_size=rt["batch_size"],
                    seed=seed, channels_last=rt["channels_last"], num_workers=d["num_workers"])
    splits = load(spec)
    check_space(splits.info, space)
    steps, E = splits.steps_per_epoch, int(rt["epochs"])
    total, warmup = E * steps, int(round(float(rt["warmup_epochs"]) * steps))

    torch.manual_seed(seed)
    model = MobileNetV1(space, channels)
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    opt = torch.optim.SGD(model.parameters(), lr=rt["lr"], momentum=rt["momentum"], weight_decay=rt["weight_decay"],
                          nesterov=rt["momentum"] > 0)
    run_id = settings_hash({"settings": stage_settings(config, "retrain"), "channels": channels})
    ckpt = resume_dir / "checkpoint.pt"
    epoch = step = 0
    seconds, loss_sum, loss_n = 0.0, 0.0, 0
    state = load_resume(ckpt, run_id)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        epoch, step, seconds, loss_sum, loss_n = (state[k] for k in ("epoch", "step", "seconds", "loss_sum", "loss_n"))

    def save() -> None:
        _atomic_save({"run_id": run_id, "model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                      "step": step, "seconds": seconds, "loss_sum": loss_sum, "loss_n": loss_n}, ckpt)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=epoch * steps + step, desc=f"retrain {row['method']} {row['target']}", unit="step")
    done = 0
    while epoch < E:
        model.train()
        t0 = time.perf_counter()
        for x, y in splits.train_batches(epoch, start_step=step):
            for g in opt.param_groups:
                g["lr"] = learning_rate(epoch * steps + step, total, warmup, rt["lr"])
            loss = F.cross_entropy(model(x), y, label_smoothing=rt["label_smoothing"])
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss at epoch {epoch} step {step}; lower retrain.lr")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step, done = step + 1, done + 1
            if epoch == E - 1:
                loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
            if (step % int(rt["checkpoint_every"]) == 0 and step < steps) or done == stop_after_steps:
                seconds += time.perf_counter() - t0
                t0 = time.perf_counter()
                save()
                if done == stop_after_steps:
                    if bar is not None:
                        bar.close()
                    return {"complete": False, "epoch": epoch, "step": step}
        seconds += time.perf_counter() - t0
        epoch, step = epoch + 1, 0
        save()
    if bar is not None:
        bar.close()

    correct, n = evaluate(model, test_batches(spec, batch_size=int(rt["eval_batch_size"])))
    lo, hi = wilson_interval(correct, n)
    result = {
        "method": row["method"], "device": row["device"], "target": row["target"], "channels": channels, "seed": seed,
        "epochs": E, "train_seconds": seconds, "final_train_loss": loss_sum / max(loss_n, 1), "test_correct": correct,
        "test_n": n, "test_acc": correct / n, "test_acc_low": lo, "test_acc_high": hi,
    }
    meta = io.provenance(space_name=space.name, space_hash=space.hash, retrain=dict(rt), data=spec.to_dict(),
                         decision=str(decision), interval="Wilson score, 95 %", schedule="linear warm-up, then cosine")
    io.write_records([result], out_dir / "result.parquet", "retrain", meta)
    _atomic_save({"space": space.to_dict(), "space_hash": space.hash, "channels": channels,
                  "model": model.state_dict()}, out_dir / "model.pt")
    clear_resume(ckpt)
    return {"complete": True, **result}
