"""Supernet training cost (§3, §5), measured side by side in one run.

A. One sandwich step (max configuration on labels + sliced min configuration + one per-sample
   random pass, masked, on the max's soft targets; backward and optimizer step) against one plain
   training step of the fixed-width max network (same batch, threads, memory format, optimizer).
   Target: ratio ≤ 2.3×.
B. Per-sample masked forward+backward of a batch of B distinct configurations (§5) against running
   the sliced sub-networks grouped by configuration (here B groups of one sample). Target: masking
   ≥ 5× faster.
C. The AOWS sampler's cost per iteration (constrained decode for γ, scale, marginals, sampling) with
   γ refreshed every step and every 10 steps.

Repetitions of the two sides of a comparison are interleaved (A, B, A, B, ...) so that the load of a
shared machine hits both alike; medians and interquartile ranges over --reps repetitions after
--warmup ones. Both memory formats (contiguous, channels_last) and each --threads count.

    PYTHONPATH=. python bench/bench_supernet.py [--batch 128] [--threads 2 1] [--reps 5] [--sections A B C]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F

from aows_core.config import AowsSettings
from aows_core.nets.network import Network
from aows_core.nets.sandwich import sandwich_step
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import widths_tensor
from aows_core.space import get_space


def stats(ts: list[float]) -> dict:
    a = np.asarray(ts)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_s": float(med), "iqr_s": float(q3 - q1), "min_s": float(a.min()), "max_s": float(a.max()), "n": len(a)}


def interleaved(fns: dict, reps: int, warmup: int) -> dict:
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: stats(v) for k, v in times.items()}


def uniform_idx(space, B, rng):
    return np.stack([rng.integers(0, len(c), B) for c in space.layer_choices], 1)


def section_a(space, B, channels_last, reps, warmup, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = torch.randn(B, space.in_channels, *space.resolution)
    y = torch.randint(0, space.num_classes, (B,))
    sup = Supernet(space, channels_last=channels_last).train()
    opt_s = torch.optim.SGD(sup.parameters(), lr=1e-3, momentum=0.9, weight_decay=4e-5)
    net = Network(space, space.max_config).train()
    xx = x
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
        xx = x.contiguous(memory_format=torch.channels_last)
    opt_p = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, weight_decay=4e-5)

    def plain():
        opt_p.zero_grad(set_to_none=True)
        F.cross_entropy(net(xx), y).backward()
        opt_p.step()

    def sandwich():
        w = widths_tensor(space, uniform_idx(space, B, rng))
        sandwich_step(sup, x, y, w, opt_s, n_random=1)

    r = interleaved({"plain_max_step": plain, "sandwich_step": sandwich}, reps, warmup)
    r["ratio"] = r["sandwich_step"]["median_s"] / r["plain_max_step"]["median_s"]
    return r


def section_b(space, B, channels_last, reps, warmup, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = torch.randn(B, space.in_channels, *space.resolution)
    sup = Supernet(space, channels_last=channels_last).train()
    idx = uniform_idx(space, B, rng)
    n_distinct = len(np.unique(idx, axis=0))
    w = widths_tensor(space, idx)

    def masked():
        sup.zero_grad(set_to_none=True)
        sup(x, w).logsumexp(1).sum().backward()

    groups: dict[tuple, list[int]] = {}
    for b, row in enumerate(w.tolist()):
        groups.setdefault(tuple(row), []).append(b)

    def grouped():
        sup.zero_grad(set_to_none=True)
        for ch, rows in groups.items():
            sup.forward_sliced(x[rows], list(ch)).logsumexp(1).sum().backward()

    r = interleaved({"masked_fwd_bwd": masked, "grouped_sliced_fwd_bwd": grouped}, reps, warmup)
    r["speedup"] = r["grouped_sliced_fwd_bwd"]["median_s"] / r["masked_fwd_bwd"]["median_s"]
    r["distinct_configs"] = int(n_distinct)
    return r


def section_c(space, B, reps, seed):
    from aows_core.devices.flops import variable_macs
    from aows_core.search.sampler import AOWSSampler
    from aows_core.search.sampler import uniform_paths as uniform_configs
    from aows_core.search.targets import latency_range
    from aows_core.search.unaries import WindowUnaries

    rng = np.random.default_rng(seed)
    x = variable_macs(space) / 1e6  # an exact FLOPs LUT stands in for a device LUT
    lo, hi, _, _ = latency_range(space, x)
    u = WindowUnaries(space, window=2000)
    idx = uniform_configs(space, 20_000, rng)
    f = [np.linspace(1.0, 0.0, len(c)) * 0.05 for c in space.layer_choices]
    u.update(idx, sum(f[i][idx[:, i + 1]] for i in range(space.n_layers)) + rng.normal(0, 0.3, len(idx)))
    out = {}
    for refresh in (1, 10):
        for mode in ("per_node", "joint"):
            smp = AOWSSampler(space, x, lo + 0.5 * (hi - lo), AowsSettings(sampling=mode), refresh=refresh)
            smp.sample(u, 1.0, B, rng)
            ts = []
            for k in range(max(reps, 5) * 20):
                t0 = time.perf_counter()
                smp.sample(u, 10 ** (-k % 4), B, rng)
                ts.append(time.perf_counter() - t0)
            out[f"refresh={refresh},{mode}"] = stats(ts)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="mobilenet_v1_fmnist")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--formats", nargs="+", default=["contiguous", "channels_last"], choices=["contiguous", "channels_last"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--sections", nargs="+", default=["A", "B", "C"], choices=["A", "B", "C"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    space = get_space(args.space)
    B = args.batch
    results: dict = {"space": space.name, "batch": B, "torch": torch.__version__, "runs": []}
    print(f"space {space.name}, input {space.in_channels}×{space.resolution[0]}×{space.resolution[1]}, batch {B}, torch {torch.__version__}")
    for th in args.threads:
        torch.set_num_threads(th)
        for fmt in args.formats:
            cl = fmt == "channels_last"
            if "A" in args.sections:
                r = section_a(space, B, cl, args.reps, args.warmup, args.seed)
                results["runs"].append({"section": "A", "threads": th, "format": fmt, **r})
                p, s = r["plain_max_step"], r["sandwich_step"]
                print(
                    f"[A] threads={th} {fmt:13s} plain max step {p['median_s'] * 1e3:7.1f} ms (IQR {p['iqr_s'] * 1e3:5.1f}, "
                    f"{B / p['median_s']:6.1f} img/s) | sandwich step {s['median_s'] * 1e3:7.1f} ms (IQR {s['iqr_s'] * 1e3:5.1f}, "
                    f"{B / s['median_s']:6.1f} img/s) | ratio {r['ratio']:.2f}× (target ≤ 2.3×)",
                    flush=True,
                )
            if "B" in args.sections:
                r = section_b(space, B, cl, args.reps, args.warmup, args.seed)
                results["runs"].append({"section": "B", "threads": th, "format": fmt, **r})
                m, g = r["masked_fwd_bwd"], r["grouped_sliced_fwd_bwd"]
                print(
                    f"[B] threads={th} {fmt:13s} masked {m['median_s'] * 1e3:7.1f} ms (IQR {m['iqr_s'] * 1e3:5.1f}, "
                    f"{B / m['median_s']:6.1f} img/s) | grouped sliced ({r['distinct_configs']} configs) "
                    f"{g['median_s'] * 1e3:7.1f} ms (IQR {g['iqr_s'] * 1e3:5.1f}, {B / g['median_s']:6.1f} img/s) | "
                    f"masking {r['speedup']:.1f}× faster (target ≥ 5×)",
                    flush=True,
                )
    if "C" in args.sections:
        torch.set_num_threads(args.threads[0])
        r = section_c(space, B, args.reps, args.seed)
        results["sampler"] = r
        for k, v in r.items():
            print(f"[C] AOWS sampler {k:22s} {v['median_s'] * 1e3:6.2f} ms/iteration (IQR {v['iqr_s'] * 1e3:.2f})", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


if __name__ == "__main__":
    main()
