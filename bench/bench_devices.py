"""Measurement overhead of the timing backends, side by side in one run (§4 profiles thousands of networks).

For each backend (default: torch-cpu, onnxruntime at the "all" and "basic" graph optimisation
levels) on the default space at batch 1 and 1 thread, and for each of ≥ 3 repetitions (a fresh
device each time, so construction caches start cold):

- pass A: `measure()` of ~50 random configurations with the profiling protocol (30 repeats after
  2 warm-up passes): wall time per network, timed fraction Σ timed / Σ wall, networks per minute;
- pass B (a second fresh device, the same configurations): construction alone — torch: the
  cached-edge timing model; ONNX Runtime: graph build + InferenceSession creation;
- the minimum- and maximum-width networks' median latency and their ratio.

Prints the median over repetitions with its spread [min, max], and checks the targets:
timed fraction ≥ 0.90, ≥ 300 networks/min, and slowest ≥ 3× fastest on torch-cpu.

    PYTHONPATH=. python bench/bench_devices.py [--reps 3] [--configs 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from aows_core.devices import get_device
from aows_core.space import DEFAULT_PRESET, get_space

VARIANTS = {
    "torch-cpu": {"backend": "torch-cpu"},
    "onnxruntime": {"backend": "onnxruntime", "graph_optimization": "all"},
    "onnxruntime-basic": {"backend": "onnxruntime", "graph_optimization": "basic"},
}


def construct_only(dev, channels) -> float:
    """Seconds to build what `measure` times (timing model or ORT session), without running it."""
    t0 = time.perf_counter()
    if hasattr(dev, "factory"):
        dev.factory(channels)
    else:
        sess = dev.session(channels)
        del sess
    return time.perf_counter() - t0


def one_rep(space, spec: dict, configs, repeats: int, warmup: int, seed: int) -> dict:
    """Pass A, pass B and the extreme networks of one repetition."""
    dev = get_device(spec, space, seed)
    walls, timed, overhead = [], [], []
    t_pass = time.perf_counter()
    for k, cfg in enumerate(configs):
        t0 = time.perf_counter()
        m = dev.measure(cfg, repeats, warmup, k)
        walls.append(time.perf_counter() - t0)
        timed.append(m.timed_s)
        overhead.append(m.overhead_s)
    pass_wall = time.perf_counter() - t_pass
    lo = float(np.median(dev.measure(space.min_config, repeats, warmup, 0).samples))
    hi = float(np.median(dev.measure(space.max_config, repeats, warmup, 0).samples))
    dev_b = get_device(spec, space, seed)
    build = [construct_only(dev_b, cfg) for cfg in configs]
    return {
        "timed_fraction": float(np.sum(timed) / np.sum(walls)),
        "networks_per_min": 60.0 * len(configs) / pass_wall,
        "wall_ms_per_network": 1e3 * float(np.mean(walls)),
        "overhead_ms_per_network": 1e3 * float(np.mean(overhead)),
        "construction_ms_median": 1e3 * float(np.median(build)),
        "construction_ms_mean": 1e3 * float(np.mean(build)),
        "warmup_and_rest_ms_per_network": 1e3 * float(np.mean(overhead) - np.mean(build)),
        "min_config_ms": lo,
        "max_config_ms": hi,
        "max_over_min": hi / lo,
    }


def summarise(reps: list[dict]) -> dict:
    """Median and [min, max] over repetitions of every number."""
    return {
        k: {"median": float(np.median([r[k] for r in reps])), "min": float(min(r[k] for r in reps)), "max": float(max(r[k] for r in reps))}
        for k in reps[0]
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--space", default=DEFAULT_PRESET)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--reps", type=int, default=3, help="repetitions (≥ 3 for a spread)")
    p.add_argument("--configs", type=int, default=50, help="random configurations per repetition")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)

    space = get_space(a.space)
    results: dict[str, dict] = {}
    for name in a.variants:
        spec = {**VARIANTS[name], "batch_size": a.batch_size, "threads": a.threads, "inter_op_threads": 1}
        reps = []
        for r in range(a.reps):
            rng = np.random.default_rng([a.seed, r])
            configs = [[int(rng.choice(c)) for c in space.layer_choices] for _ in range(a.configs)]
            reps.append(one_rep(space, spec, configs, a.repeats, a.warmup, a.seed))
            print(f"  {name} rep {r}: " + ", ".join(f"{k}={v:.3g}" for k, v in reps[-1].items()), flush=True)
        results[name] = {"spec": spec, "reps": reps, "summary": summarise(reps)}

    print(f"\nspace {space.name}, batch {a.batch_size}, {a.threads} thread(s), {a.repeats} repeats + {a.warmup} warm-up, "
          f"{a.reps} reps × {a.configs} random configurations; median [min, max] over reps")
    keys = list(next(iter(results.values()))["summary"])
    width = max(len(k) for k in keys)
    print(" " * width + "".join(f"  {n:>28}" for n in results))
    for k in keys:
        cells = []
        for n in results:
            s = results[n]["summary"][k]
            cells.append(f"{s['median']:.3g} [{s['min']:.3g}, {s['max']:.3g}]")
        print(f"{k:<{width}}" + "".join(f"  {c:>28}" for c in cells))

    checks = []
    for n, res in results.items():
        s = res["summary"]
        checks.append((f"{n}: timed fraction ≥ 0.90", s["timed_fraction"]["median"] >= 0.90, s["timed_fraction"]["median"]))
        checks.append((f"{n}: ≥ 300 networks/min", s["networks_per_min"]["median"] >= 300, s["networks_per_min"]["median"]))
    if "torch-cpu" in results:
        ratio = results["torch-cpu"]["summary"]["max_over_min"]["median"]
        checks.append(("torch-cpu: slowest ≥ 3× fastest", ratio >= 3.0, ratio))
    print()
    for label, ok, value in checks:
        print(f"{'PASS' if ok else 'MISS'}  {label}  ({value:.3g})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": results, "checks": [list(c) for c in checks]}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
