"""Scoring sized to the device: sliced one-at-a-time against batched passes, side by side in one run.

A. The estimation pass (docs/method.md D26): K random configurations of the default space, each on one batch of
   the pool with train-mode BatchNorm over it — `frozen_differences` (one sliced forward per configuration)
   against `batched_differences` (`nets.batched`: the configurations' batches stacked, per-group masks and
   statistics).
B. A greedy step (§3, D22): the candidates of one trimming step from a random configuration, BatchNorm recalibrated
   per candidate — `SubnetScorer.score` with greedy's cached prefixes against one `score_many` call (shared
   prefixes run once).

Both sides of a comparison run interleaved (A sliced, A batched, A sliced, ...), so the load of a shared machine
hits both alike; the figures are milliseconds per configuration, median and standard deviation σ over --reps
repetitions after one warm-up, on every available device (the CPU, and CUDA when torch sees a GPU). The ratio is
batched ÷ sliced of the medians: below 1 the batched path pays. Weights are randomly initialised (timing does not
depend on them) unless --model names a supernet's model.pt.

    PYTHONPATH=. python bench/bench_scoring.py [--reps 5] [--configs 16] [--threads 2] [--quick] [--model M]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import numpy as np
import torch

from aows_core.nets.estimation import batched_differences, frozen_differences
from aows_core.nets.scoring import SubnetScorer
from aows_core.nets.supernet import Supernet
from aows_core.space import DEFAULT_PRESET, get_space


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of fn(), the device's queue drained before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def interleaved(fns: dict[str, Callable[[], object]], reps: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds of each function over `reps` interleaved repetitions, after one warm-up of each."""
    for f in fns.values():
        timed(f, device)
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            out[k].append(timed(f, device))
    return out


def model_on(space, device: torch.device, path: str | None) -> Supernet:
    """The default space's supernet (random or loaded from `path`), in channels_last as the default trains it."""
    net = Supernet(space, channels_last=True)
    if path:
        from aows_core.artifacts import read_supernet_state

        net.load_state_dict(read_supernet_state(path, space))
    return net.to(device)


def random_configs(space, k: int, rng: np.random.Generator) -> list[list[int]]:
    return [[int(rng.choice(c)) for c in space.layer_choices] for _ in range(k)]


def section_a(space, net, device, args, rng) -> dict[str, list[float]]:
    """Estimation pass: seconds per configuration, sliced and batched."""
    b = args.batch
    x = torch.randn(2 * b, space.in_channels, *space.resolution, device=device)
    y = torch.randint(0, space.num_classes, (2 * b,), device=device)
    cfgs = random_configs(space, args.configs, rng)
    times = interleaved({"sliced": lambda: frozen_differences(net, x, y, cfgs, b),
                         "batched": lambda: batched_differences(net, x, y, cfgs, b)}, args.reps, device)
    return {k: [t / len(cfgs) for t in v] for k, v in times.items()}


def greedy_candidates(space, rng) -> tuple[list[list[int]], list[int]]:
    """The candidates of one greedy step from a random configuration (no layer at its lowest): channels, layer."""
    idx = [int(rng.integers(1, len(c))) for c in space.layer_choices]
    cands, layers = [], []
    for i in range(len(idx)):
        low = list(idx)
        low[i] -= 1
        cands.append(space.layer_channels(low))
        layers.append(i)
    return cands, layers


def section_b(space, net, device, args, rng) -> dict[str, list[float]]:
    """A greedy step: seconds per candidate, one at a time with cached prefixes and in one batched call."""
    cal = torch.randn(args.n_cal, space.in_channels, *space.resolution, device=device)
    x = torch.randn(args.n_eval, space.in_channels, *space.resolution, device=device)
    y = torch.randint(0, space.num_classes, (args.n_eval,), device=device)
    one = SubnetScorer(net, cal, x, y, args.eval_batch, batched=False)
    many = SubnetScorer(net, cal, x, y, args.eval_batch, batched=True)
    cands, layers = greedy_candidates(space, rng)

    def sliced() -> list:
        return [one.score(c, start_edge=i) for c, i in zip(cands, layers)]

    times = interleaved({"sliced": sliced, "batched": lambda: many.score_many(cands)}, args.reps, device)
    return {k: [t / len(cands) for t in v] for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--configs", type=int, default=16, help="configurations of the estimation section")
    ap.add_argument("--batch", type=int, default=128, help="estimation batch (supernet.estimate_batch)")
    ap.add_argument("--n-cal", type=int, default=128, help="calibration images (greedy.n_cal)")
    ap.add_argument("--n-eval", type=int, default=500, help="evaluation images (greedy.n_eval)")
    ap.add_argument("--eval-batch", type=int, default=250, help="evaluation batch (greedy.batch_size)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=None, help="a default-space supernet's model.pt (default: random weights)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions, 8 configurations, halved images")
    ap.add_argument("--json", default=None, help="write the raw seconds here")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.configs, args.batch = 3, 8, args.batch // 2
        args.n_cal, args.n_eval, args.eval_batch = args.n_cal // 2, args.n_eval // 2, args.eval_batch // 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    space = get_space(DEFAULT_PRESET)
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    print(f"{DEFAULT_PRESET}, {args.threads} threads, {args.reps} repetitions; estimation: {args.configs} "
          f"configurations × batch {args.batch}; greedy step: {space.n_layers} candidates, {args.n_cal} calibration + {args.n_eval} "
          f"evaluation images (batch {args.eval_batch})\n")
    print("| device | section | sliced ms/config | batched ms/config | batched ÷ sliced |")
    print("|---|---|---|---|---|")
    raw = {}
    for device in devices:
        net = model_on(space, device, args.model)
        for name, section in (("estimation pass", section_a), ("greedy step", section_b)):
            t = section(space, net, device, args, np.random.default_rng(1))
            raw[f"{device.type} {name}"] = t
            med = {k: 1e3 * float(np.median(v)) for k, v in t.items()}
            sd = {k: 1e3 * float(np.std(v)) for k, v in t.items()}
            print(f"| {device.type} | {name} | {med['sliced']:.1f} ± {sd['sliced']:.1f} | {med['batched']:.1f} ± "
                  f"{sd['batched']:.1f} | {med['batched'] / med['sliced']:.2f} |", flush=True)
    print("\nmedian ± σ over the repetitions")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
