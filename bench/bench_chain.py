"""Chain MRF decoders at paper scale (aows_core.search.chain): timings and the Lagrangian's misses.

The instance has the shape of the paper's ImageNet MobileNet-v1 space (`mobilenet_v1_imagenet`:
16 nodes, up to 14 widths) with a synthetic MAC-proportional latency model per edge Θ_i
(conv: k²·c·c'·H'·W'; dwsep: k²·c·H'·W' + c·c'·H'·W'; linear: c·c' + c·H·W; scaled so the
1.0× network takes ~20 ms, plus 0.05 ms per layer, times 1 ± 5% per entry) and unaries that fall
with width plus noise (δ_i(c) = s_i (1 − c/c_max)^1.5 + U(0, 0.05), s_i ~ U(0.1, 2) nats;
positive, as δ = ℓ(c) − ℓ(M) usually is).
Targets are `range:f` targets, L_min + f (L_max − L_min), f ~ U(0.02, 0.9).

    PYTHONPATH=. python bench/bench_chain.py --reps 30 --instances 50

Prints median [min–max] over repetitions for: a first decode in a fresh process (imports
included), a warm constrained decode, 100 targets through the hull, marginals at one T, 512 joint
(FFBS) and per-node samples, the exact mode; then how often and by how much the Lagrangian answer
missed the exact constrained optimum.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from aows_core.search.chain import Chain
from aows_core.space import get_space

TARGETS = {"decode_fresh_s": 0.5, "decode_warm_ms": 3.0, "hull_100_ms": 20.0, "marginals_ms": 0.5, "ffbs_512_ms": 2.0}


def paper_instance(seed: int = 0, ms_per_mmac: float = 20 / 569, const_ms: float = 0.05, jitter: float = 0.05):
    """(space, unaries, latency tables) with the paper's ImageNet shape; see the module docstring."""
    space = get_space("mobilenet_v1_imagenet")
    rng = np.random.default_rng(seed)
    lat = []
    for i, th in enumerate(space.thetas):
        ci = np.array(space.choices[i], float)[:, None]
        co = np.array(space.choices[i + 1], float)[None, :]
        oh, ow = th.out_hw()
        if th.kind == "conv":
            mac = th.kernel**2 * ci * co * oh * ow
        elif th.kind == "dwsep":
            mac = th.kernel**2 * ci * oh * ow + ci * co * oh * ow
        else:
            mac = ci * co + ci * th.in_h * th.in_w
        t = ms_per_mmac * mac / 1e6 + const_ms
        lat.append(t * (1 + jitter * rng.standard_normal(t.shape)))
    un = []
    for c in space.choices:
        w = np.array(c, float)
        if len(c) == 1:
            un.append(np.zeros(1))
            continue
        s = rng.uniform(0.1, 2.0)
        un.append(s * (1 - w / w.max()) ** 1.5 + 0.05 * rng.random(w.size))
    return space, un, lat


def timeit(fn, reps: int) -> np.ndarray:
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return np.array(ts)


def fmt(ts: np.ndarray, unit: float = 1e3) -> str:
    return f"{np.median(ts) * unit:9.3f} [{ts.min() * unit:.3f}–{ts.max() * unit:.3f}]"


FRESH = """
import time, sys
t0 = time.perf_counter()
import numpy as np
from aows_core.search.chain import Chain
d = np.load(sys.argv[1])
n = int(d['n'])
r = Chain([d[f'u{i}'] for i in range(n)], [d[f'l{i}'] for i in range(n - 1)]).decode(float(d['target']))
print(time.perf_counter() - t0, r.objective)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30, help="repetitions per timing")
    ap.add_argument("--fresh-reps", type=int, default=7, help="fresh-process repetitions")
    ap.add_argument("--instances", type=int, default=50, help="random instances for the miss statistics")
    ap.add_argument("--targets-per-instance", type=int, default=5)
    ap.add_argument("--temperature", type=float, default=0.1)
    args = ap.parse_args()

    space, u, L = paper_instance(0)
    ch = Chain(u, L)
    lmin, lmax = ch.latency(ch.min_latency()), ch.latency(ch.max_latency())
    ltop = ch.latency(ch.unconstrained())
    target = lmin + 0.3 * (lmax - lmin)
    print(f"instance: {space.name}, nodes {ch.n_nodes}, choices {ch.counts.tolist()}, size {space.size:.3g}")
    print(f"latency range [{lmin:.3f}, {lmax:.3f}] ms, unconstrained optimum at {ltop:.3f} ms; target range:0.3 = {target:.3f} ms")
    print(f"{'measure':<46} {'median [min–max]':>32}  target")
    rows = []

    # first decode in a fresh process (imports included)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "chain.npz"
        np.savez(f, n=len(u), target=target, **{f"u{i}": x for i, x in enumerate(u)}, **{f"l{i}": x for i, x in enumerate(L)})
        inner, outer = [], []
        for _ in range(args.fresh_reps):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", FRESH, str(f)], capture_output=True, text=True, check=True)
            outer.append(time.perf_counter() - t)
            inner.append(float(out.stdout.split()[0]))
    rows.append(("fresh process: imports + decode (s, in-process)", np.array(inner), 1.0, "≤ 0.5 s"))
    rows.append(("fresh process: whole interpreter run (s)", np.array(outer), 1.0, "≤ 0.5 s"))

    fr = [lmin + f * (lmax - lmin) for f in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7)]
    ts = np.concatenate([timeit(lambda t=t: ch.decode(t), args.reps) for t in fr])
    rows.append(("constrained decode, warm, 6 range targets (ms)", ts, 1e3, "≤ 3 ms"))
    ts = timeit(lambda: Chain(u, L).decode(target), args.reps)
    rows.append(("constrained decode, new Chain incl. setup (ms)", ts, 1e3, ""))
    targets = np.linspace(lmin, lmax, 100)
    ts = timeit(lambda: Chain(u, L).decode_many(targets), args.reps)
    rows.append(("100 targets via hull, new Chain (ms)", ts, 1e3, "≤ 20 ms"))
    ts = timeit(lambda: ch.decode_many(targets), args.reps)
    rows.append(("100 targets via hull, hull cached (ms)", ts, 1e3, ""))
    ts = timeit(lambda: ch.marginals(0.3, args.temperature), args.reps)
    rows.append((f"marginals at T={args.temperature} (ms)", ts, 1e3, "≤ 0.5 ms"))
    m = ch.marginals(0.3, args.temperature)
    rng = np.random.default_rng(0)
    ts = timeit(lambda: ch.marginals(0.3, args.temperature).sample_joint(512, rng), args.reps)
    rows.append(("marginals + 512 joint FFBS samples (ms)", ts, 1e3, ""))
    m.sample_joint(1, rng)
    ts = timeit(lambda: m.sample_joint(512, rng), args.reps)
    rows.append(("512 joint FFBS samples, tables cached (ms)", ts, 1e3, "≤ 2 ms"))
    ts = timeit(lambda: m.sample_per_node(512, rng), args.reps)
    rows.append(("512 per-node samples (ms)", ts, 1e3, ""))
    for name, t, unit, tgt in rows:
        print(f"{name:<46} {fmt(t, unit):>32}  {tgt}")
    h = ch.hull()
    print(f"hull: {h.latencies.size} vertices, {h.n_viterbi} Viterbi passes")

    # exact mode and the Lagrangian's misses on random instances / targets
    rng = np.random.default_rng(1)
    t_lag, t_exact, labels, rel, absd, certified = [], [], [], [], [], 0
    for s in range(args.instances):
        _, u, L = paper_instance(1000 + s)
        c = Chain(u, L)
        lo, hi = c.latency(c.min_latency()), c.latency(c.max_latency())
        for f in rng.uniform(0.02, 0.9, args.targets_per_instance):
            T = lo + f * (hi - lo)
            t = time.perf_counter()
            r = c.decode(T)
            t_lag.append(time.perf_counter() - t)
            t = time.perf_counter()
            e = c.decode(T, exact=True)
            t_exact.append(time.perf_counter() - t)
            labels.append(e.n_labels)
            certified += r.exact
            absd.append(r.objective - e.objective)
            rel.append((r.objective - e.objective) / max(abs(e.objective), 1e-12))
    t_exact, rel, absd = np.array(t_exact), np.array(rel), np.array(absd)
    n = len(rel)
    miss = absd > 1e-9 * np.maximum(1, np.abs(absd))
    print(f"\n{n} instance/target pairs ({args.instances} instances × {args.targets_per_instance} range targets)")
    print(f"{'Lagrangian decode (ms)':<46} {fmt(np.array(t_lag)):>32}")
    print(f"{'exact mode incl. its Lagrangian pass (ms)':<46} {fmt(t_exact):>32}  p90 {np.quantile(t_exact, 0.9) * 1e3:.2f}")
    print(f"exact mode labels: median {np.median(labels):.0f}, max {max(labels)}")
    print(f"Lagrangian certified optimal (gap 0): {certified}/{n}; missed the exact optimum: {miss.sum()}/{n} ({100 * miss.mean():.1f}%)")
    if miss.any():
        print(f"  relative objective miss among misses: median {100 * np.median(rel[miss]):.2f}%, "
              f"p90 {100 * np.quantile(rel[miss], 0.9):.2f}%, max {100 * rel[miss].max():.2f}%")
        print(f"  absolute miss (nats): median {np.median(absd[miss]):.4f}, max {absd[miss].max():.4f}")
    print(f"  relative miss over all pairs: mean {100 * rel.mean():.2f}%")


if __name__ == "__main__":
    main()
