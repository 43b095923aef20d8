"""The sandwich step (§3, §5) old and new (host-wait-free), side by side in one run on the CPU (docs/method.md D29).

`baseline` is the step at 395a16b, copied here as the named baseline: widths copied to the model's device before
every masked pass, all losses and the accuracy read on the host before the optimizer step, a second (unread) copy
of the widths. `now` is today's step as the CPU runs it (losses checked on the host before the step, which costs
nothing on the CPU); `deferred` is the path CUDA runs (non-finite flag on the device, the optimizer step undone
there when set, outputs copied to the host without waiting), run here on the CPU to show what its device-side
guard costs. Each repetition runs one step of every variant in turn (interleaved, so a shared machine's drift
hits all alike), each variant training its own copy of the same supernet on the same batches and widths; each
also reads what the training loop reads per step (the per-sample differences and the metrics). After the run the
three copies' weights are compared bit for bit.

    PYTHONPATH=. python bench/bench_sandwich.py [--reps 15] [--warmup 2] [--batch 128] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import time
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from aows_core.config import space_from_config, validate
from aows_core.nets.sandwich import NonFiniteLoss, _as_width_list, distill_loss, sandwich_step
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import widths_tensor
from aows_core.search.sampler import uniform_layer_indices


@dataclass
class BaselineResult:
    """Outputs of the baseline step (floats read on the host every step)."""

    ce_max: torch.Tensor
    ce_random: torch.Tensor
    widths: torch.Tensor
    loss_max: float
    loss_min: float
    loss_random: list[float]
    loss: float
    acc_max: float = float("nan")
    extra: dict = field(default_factory=dict)

    def diffs(self) -> np.ndarray:
        """(R, B) float64 per-sample differences, on the host."""
        return (self.ce_random.double() - self.ce_max.double()[None]).cpu().numpy()


def baseline_sandwich_step(
    model: Supernet,
    x: torch.Tensor,
    y: torch.Tensor,
    sample_widths,
    optimizer: torch.optim.Optimizer,
    n_random: int = 1,
    *,
    label_smoothing: float = 0.0,
    distill: str = "kl",
    min_channels: Sequence[int] | None = None,
    grad_clip: float | None = None,
    step: int | None = None,
    autocast: Callable[[], ContextManager] = contextlib.nullcontext,
    scaler: torch.amp.GradScaler | None = None,
) -> BaselineResult:
    """The sandwich step at 395a16b (§3, §5): widths copied per pass, losses read on the host every step."""
    net = getattr(model, "module", model)  # a DistributedDataParallel wrapper routes forward to .module
    model.train()
    B = x.shape[0]
    ws = _as_width_list(sample_widths, n_random, B)
    optimizer.zero_grad(set_to_none=True)
    # Under DDP, gradients are accumulated locally and all-reduced once, by the last pass's backward.
    no_sync = getattr(model, "no_sync", None)
    n_pass = 2 + len(ws)

    def run(k: int, fn):
        ctx = no_sync() if (no_sync is not None and k < n_pass - 1) else contextlib.nullcontext()
        with ctx:
            with autocast():
                loss, out = fn()
            (loss if scaler is None else scaler.scale(loss)).backward()
        return loss.detach(), out

    state: dict = {}

    def max_pass():
        logits = model(x).float()
        loss = F.cross_entropy(logits, y, label_smoothing=label_smoothing)
        with torch.no_grad():
            state["ce_max"] = F.cross_entropy(logits, y, reduction="none")  # hard labels, whatever the smoothing
            state["soft"] = F.softmax(logits, dim=1)
            state["acc"] = (logits.argmax(1) == y).float().mean()
        return loss, None

    def min_pass():
        return distill_loss(model(x, channels=min_channels or net.min_config).float(), state["soft"], distill), None

    def random_pass(w):
        def fn():
            lg = model(x, w).float()
            with torch.no_grad():
                ce = F.cross_entropy(lg, y, reduction="none")
            return distill_loss(lg, state["soft"], distill), ce

        return fn

    losses = [run(0, max_pass)[0], run(1, min_pass)[0]]
    ce_rand = []
    for r, w in enumerate(ws):
        loss, ce = run(2 + r, random_pass(w))
        losses.append(loss)
        ce_rand.append(ce)
    ce_max, acc = state["ce_max"], state["acc"]

    vals = torch.stack(losses).double().cpu().tolist()  # one synchronisation for all losses
    if not all(np.isfinite(vals)):
        names = ["max (labels)", "min (distillation)"] + [f"random {r} (distillation)" for r in range(n_random)]
        bad = [f"{n}={v}" for n, v in zip(names, vals) if not np.isfinite(v)]
        optimizer.zero_grad(set_to_none=True)
        where = f" at step {step}" if step is not None else ""
        raise NonFiniteLoss(
            f"non-finite training loss{where}: {', '.join(bad)}; the step was not applied "
            f"(lower the learning rate, check the data for NaN/inf, or enable gradient clipping)"
        )
    if scaler is not None:
        if grad_clip is not None:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
    else:
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
    return BaselineResult(
        ce_max=ce_max,
        ce_random=torch.stack(ce_rand) if ce_rand else ce_max.new_zeros((0, B)),
        widths=torch.stack([w.to(ce_max.device) for w in ws]) if ws else torch.zeros((0, B, net.space.n_layers), dtype=torch.long),
        loss_max=vals[0],
        loss_min=vals[1],
        loss_random=vals[2:],
        loss=float(sum(vals)),
        acc_max=float(acc),
    )


def stats(ts: list[float]) -> dict:
    """Median, interquartile range, min and max of a variant's step times (seconds)."""
    a = np.asarray(ts)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_s": float(med), "iqr_s": float(q3 - q1), "min_s": float(a.min()), "max_s": float(a.max()), "n": len(a)}


def variants(model: Supernet, sn: dict) -> dict[str, tuple[Supernet, torch.optim.Optimizer]]:
    """Three copies of the supernet, each with its own SGD (the supernet stage's settings)."""
    out = {}
    for name in ("baseline", "now", "deferred"):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=sn["lr"], momentum=sn["momentum"], weight_decay=sn["weight_decay"],
                              nesterov=sn["momentum"] > 0)
        out[name] = (m, opt)
    return out


def one_step(name: str, model, opt, x, y, widths, R: int, smoothing: float, k: int) -> np.ndarray:
    """One step of a variant plus the per-step reads of the training loop; the per-sample differences."""
    if name == "baseline":
        res = baseline_sandwich_step(model, x, y, widths, opt, R, label_smoothing=smoothing, step=k)
        _ = (res.loss_max, res.loss_min, float(np.mean(res.loss_random)), res.acc_max, res.loss)
        return res.diffs()
    record = sandwich_step(model, x, y, widths, opt, R, label_smoothing=smoothing, step=k,
                           defer=name == "deferred").record()
    record.check()
    _ = record.summary()
    return record.diffs


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: supernet.threads)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions after 1 warm-up, batch 32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.warmup, args.batch = 3, 1, 32
    cfg = validate({})
    sn, space = cfg["supernet"], space_from_config(cfg)
    R, B = int(sn["n_random"]), args.batch
    torch.set_num_threads(args.threads or int(sn["threads"]))
    torch.manual_seed(args.seed)
    base = Supernet(space, channels_last=bool(sn["channels_last"]))
    runs = variants(base, sn)
    g = torch.Generator().manual_seed(args.seed)
    times: dict[str, list[float]] = {k: [] for k in runs}
    same_diffs = True
    for k in range(args.warmup + args.reps):
        x = torch.randn(B, space.in_channels, *space.resolution, generator=g)
        y = torch.randint(0, space.num_classes, (B,), generator=g)
        idx = uniform_layer_indices(space, R * B, np.random.default_rng([args.seed, k]))
        widths = widths_tensor(space, idx).reshape(R, B, space.n_layers)
        diffs = {}
        for name, (model, opt) in runs.items():
            t0 = time.perf_counter()
            diffs[name] = one_step(name, model, opt, x, y, widths, R, float(sn["label_smoothing"]), k)
            if k >= args.warmup:
                times[name].append(time.perf_counter() - t0)
        same_diffs &= all(np.array_equal(diffs["baseline"], d) for d in diffs.values())
    ref = runs["baseline"][0].state_dict()
    equal = {n: all(torch.equal(ref[k], m.state_dict()[k]) for k in ref) for n, (m, _) in runs.items()}
    out = {"space": space.name, "batch": B, "n_random": R, "threads": torch.get_num_threads(), "steps": args.reps,
           "torch": torch.__version__, "variants": {k: stats(v) for k, v in times.items()},
           "weights_equal_to_baseline": equal, "diffs_equal_to_baseline": bool(same_diffs)}
    med = {k: v["median_s"] for k, v in out["variants"].items()}
    print(f"space {space.name}, batch {B}, n_random {R}, threads {out['threads']}, {args.reps} steps after "
          f"{args.warmup} warm-up, torch {torch.__version__}")
    for k, v in out["variants"].items():
        print(f"  {k:9s} {v['median_s'] * 1e3:8.1f} ms/step (IQR {v['iqr_s'] * 1e3:6.1f}, range "
              f"{v['min_s'] * 1e3:.1f}–{v['max_s'] * 1e3:.1f}) | ÷ baseline {v['median_s'] / med['baseline']:.3f}")
    print(f"  weights after {args.warmup + args.reps} steps bit-identical to the baseline: {equal}; "
          f"per-sample differences identical every step: {same_diffs}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
