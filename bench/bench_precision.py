"""Mixed precision on the CPU (docs/method.md D29): bf16 autocast against fp32, measured side by side in one run.

A. Step time: one sandwich step of the supernet (max on labels, sliced min, one per-sample masked random
   pass; backward and SGD step) and one plain step of the fixed-width max network, each in fp32 and under
   `torch.autocast("cpu", torch.bfloat16)` (`training.accelerator.Accelerator`). The four are interleaved
   (fp32, bf16, fp32, bf16, ...) so that a shared machine's load hits them alike; median and interquartile
   range over --reps repetitions after --warmup, and the bf16 ÷ fp32 ratio of each.
B. Loss after --steps steps from the same initialisation on the same Fashion-MNIST batches, fp32 and bf16,
   for the fixed network (cross-entropy) and the supernet (sandwich loss): the mean of the last 4 steps' loss
   and the relative difference. Beside it, fp32 from weights perturbed by 2^-8 (bf16's rounding): the
   spread a deep network's trajectory shows without any change of precision, the yardstick for bf16's.

    PYTHONPATH=. python bench/bench_precision.py [--config config.yaml] [--batch 128] [--threads 1] [--reps 5] [--steps 40]
    PYTHONPATH=. python bench/bench_precision.py --quick      # tiny space and batches: checks that it runs
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F

from aows_core.config import data_spec, load, space_from_config, validate
from aows_core.data import first_images, load_splits
from aows_core.nets.network import Network
from aows_core.nets.sandwich import sandwich_step
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import widths_tensor
from aows_core.search.sampler import uniform_layer_indices
from aows_core.training.accelerator import Accelerator

PRECISIONS = ("fp32", "bf16")


def stats(ts: list[float]) -> dict:
    """Median, interquartile range and extremes of step times (seconds)."""
    a = np.asarray(ts)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_s": float(med), "iqr_s": float(q3 - q1), "min_s": float(a.min()), "max_s": float(a.max()), "n": len(a)}


class Trainer:
    """A supernet or the fixed max network with its optimiser, stepping in one precision."""

    def __init__(self, space, kind: str, precision: str, seed: int, perturb: float = 0.0):
        torch.manual_seed(seed)
        net = Supernet(space, channels_last=True) if kind == "supernet" else Network(space, space.max_config)
        self.net = net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if perturb:
            g = torch.Generator().manual_seed(seed + 1)
            with torch.no_grad():
                for p in self.net.parameters():
                    p.mul_(1 + perturb * torch.randn(p.shape, generator=g))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5)
        self.space, self.kind = space, kind
        self.accel = Accelerator(torch.device("cpu"), precision)
        self.rng = np.random.default_rng(seed)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One training step; its loss."""
        if self.kind == "supernet":
            w = widths_tensor(self.space, uniform_layer_indices(self.space, len(y), self.rng))
            return sandwich_step(self.net, x, y, w[None], self.opt, 1, autocast=self.accel.autocast).loss
        self.net.train()
        with self.accel.autocast():
            logits = self.net(x.contiguous(memory_format=torch.channels_last)).float()
        loss = F.cross_entropy(logits, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()


def section_a(space, x, y, reps: int, warmup: int, seed: int) -> dict:
    """Step times of both networks in both precisions, interleaved; bf16 ÷ fp32 ratios."""
    trainers = {(k, p): Trainer(space, k, p, seed) for k in ("supernet", "fixed") for p in PRECISIONS}
    for _ in range(warmup):
        for t in trainers.values():
            t.step(x, y)
    times: dict = {key: [] for key in trainers}
    for _ in range(reps):
        for key, t in trainers.items():
            t0 = time.perf_counter()
            t.step(x, y)
            times[key].append(time.perf_counter() - t0)
    out = {}
    for kind in ("supernet", "fixed"):
        s = {p: stats(times[(kind, p)]) for p in PRECISIONS}
        out[kind] = {**s, "bf16_over_fp32": s["bf16"]["median_s"] / s["fp32"]["median_s"],
                     "bf16_over_fp32_pairs": float(np.median(np.divide(times[(kind, "bf16")], times[(kind, "fp32")])))}
    return out


def section_b(space, x, y, batch: int, steps: int, seed: int) -> dict:
    """Loss after `steps` steps on the same batches: fp32, bf16, and fp32 from weights perturbed by 2^-8."""
    n_batches = len(y) // batch
    out = {}
    for kind in ("supernet", "fixed"):
        final = {}
        for name, precision, perturb in (("fp32", "fp32", 0.0), ("bf16", "bf16", 0.0), ("fp32_perturbed", "fp32", 2**-8)):
            t = Trainer(space, kind, precision, seed, perturb)
            losses = [t.step(x[b * batch:(b + 1) * batch], y[b * batch:(b + 1) * batch])
                      for b in (k % n_batches for k in range(steps))]
            assert np.all(np.isfinite(losses)), (kind, name)
            final[name] = {"first": losses[0], "last4_mean": float(np.mean(losses[-4:]))}
        ref = final["fp32"]["last4_mean"]
        out[kind] = {**final, "bf16_rel_diff": final["bf16"]["last4_mean"] / ref - 1,
                     "fp32_perturbed_rel_diff": final["fp32_perturbed"]["last4_mean"] / ref - 1}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="config.yaml", help="space and data of this config")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40, help="steps of section B")
    ap.add_argument("--images", type=int, default=1024, help="training images section B cycles over")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny space, batch 32, 2 repetitions, 8 steps")
    args = ap.parse_args()
    cfg = load(args.config)
    if args.quick:
        cfg = validate({**cfg, "space": {**cfg["space"], "width_mult": 0.25, "n_choices": 3},
                        "data": {**cfg["data"], "train_subset": 256}})
        args.batch, args.reps, args.warmup, args.steps, args.images = 32, 2, 1, 8, 128
    torch.set_num_threads(args.threads)
    space = space_from_config(cfg)
    x, y = first_images(load_splits(data_spec(cfg)).train_batches(0), max(args.images, args.batch))
    result = {
        "space": space.name, "batch": args.batch, "threads": args.threads, "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "A_step_time": section_a(space, x[:args.batch], y[:args.batch], args.reps, args.warmup, args.seed),
        "B_loss_after_steps": {"steps": args.steps, **section_b(space, x, y, args.batch, args.steps, args.seed)},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
