"""Coverage-biased sampling (supplementary A): speed, and networks needed for full coverage.

Prints, measured side by side in one run:
  1. time to generate N coverage-biased configurations on the ImageNet preset (median, spread);
  2. networks needed until every latency variable is seen once on the ImageNet preset, biased vs
     uniform (uniform averaged over several seeds), and their ratio;
  3. networks for coverage R = 1..5 on the default space (and ImageNet) against the lower bound,
     with the paper's plain Iverson energy beside the lexicographic one;
  4. (--grid) the same ratio over a grid of custom MobileNet-v1 spaces.

    PYTHONPATH=. python bench/bench_sampling.py --reps 7 --uniform-seeds 5 [--grid]
"""

import argparse
import time

import numpy as np

from aows_core.latency.sampling import (
    biased_configs,
    coverage_lower_bound,
    networks_to_cover,
    uniform_configs,
)
from aows_core.space import DEFAULT_PRESET, get_space, mobilenet_v1_space


def uniform_to_cover(space, coverage: int, seed: int, chunk: int = 4000) -> int:
    """Networks a uniform stream (seeded) needs until every variable is seen ≥ coverage times."""
    rng = np.random.default_rng(seed)
    idx = uniform_configs(space, chunk, rng)
    while (n := networks_to_cover(space, idx, coverage)) is None:
        idx = np.concatenate([idx, uniform_configs(space, chunk, rng)])
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", type=int, default=1000, help="configurations per timed run")
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions (≥ 5 recommended)")
    ap.add_argument("--uniform-seeds", type=int, default=5, help="seeds averaged for uniform sampling")
    ap.add_argument("--max-coverage", type=int, default=5)
    ap.add_argument("--grid", action="store_true", help="also run a grid of custom spaces (~1 min)")
    args = ap.parse_args()

    imagenet = get_space("mobilenet_v1_imagenet")
    default = get_space(DEFAULT_PRESET)

    # 1. speed
    biased_configs(imagenet, n=50)  # warm-up
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        idx = biased_configs(imagenet, n=args.networks)
        times.append(time.perf_counter() - t0)
    t = np.array(times)
    print(f"[speed] {args.networks} biased configurations, ImageNet preset ({imagenet.n_nodes} nodes, "
          f"{imagenet.n_variables} variables), {args.reps} reps:")
    print(f"  median {np.median(t):.3f} s  (min {t.min():.3f}, max {t.max():.3f}, IQR "
          f"{np.percentile(t, 75) - np.percentile(t, 25):.3f})  = {1e3 * np.median(t) / args.networks:.3f} ms/config;"
          f" min coverage reached {np.bincount(imagenet.variable_ids(idx).ravel()).min()}")

    # 2. full coverage on ImageNet, biased vs uniform
    b = len(biased_configs(imagenet, 1))
    u = [uniform_to_cover(imagenet, 1, s) for s in range(args.uniform_seeds)]
    lb = coverage_lower_bound(imagenet, 1)
    print(f"[coverage R=1, ImageNet] lower bound {lb}; biased {b}; uniform {np.mean(u):.0f} "
          f"(seeds 0..{args.uniform_seeds - 1}: {u}); uniform / biased = {np.mean(u) / b:.2f}x")

    # 3. R = 1..max against the lower bound (plain = the paper's Iverson energy alone)
    for name, space in ((DEFAULT_PRESET, default), ("mobilenet_v1_imagenet", imagenet)):
        print(f"[coverage vs bound, {name}]  R  networks  bound  ratio  plain  uniform(seed 0)  time")
        for R in range(1, args.max_coverage + 1):
            t0 = time.perf_counter()
            n = len(biased_configs(space, R))
            dt = time.perf_counter() - t0
            plain = len(biased_configs(space, R, secondary=False))
            lb = coverage_lower_bound(space, R)
            un = uniform_to_cover(space, R, 0)
            print(f"  {R:>2} {n:>9} {lb:>6} {n / lb:>6.3f} {plain:>6} {un:>16} {dt:>6.3f}s")

    # 4. a grid of custom MobileNet-v1 spaces (heavy Θ sharing at small resolutions)
    if args.grid:
        ratios = {True: [], False: []}
        for nc in (2, 3, 4, 5, 6, 8, 10, 12, 14, 16):
            for res in (8, 16, 28, 224):
                for wm in (0.25, 0.5, 1.0):
                    space = mobilenet_v1_space("grid", resolution=res, in_channels=1, num_classes=4,
                                               width_mult=wm, n_choices=nc)
                    for R in (1, 2, 4):
                        lb = coverage_lower_bound(space, R)
                        for sec in (True, False):
                            ratios[sec].append(len(biased_configs(space, R, secondary=sec)) / lb)
        for sec, name in ((True, "lexicographic energy"), (False, "plain Iverson energy")):
            r = np.array(ratios[sec])
            print(f"[grid, {len(r)} (space, R) cases] {name}: networks / bound mean {r.mean():.4f}, "
                  f"max {r.max():.4f}, at the bound {np.mean(r == 1):.0%}")


if __name__ == "__main__":
    main()
