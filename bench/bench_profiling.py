"""Profiling throughput: share of wall time inside timed forward passes, and networks per minute.

Runs the real protocol (`aows_core.stages.profile.profile_session`: plan, journal, references, retests) on the
default space for each backend, several times, and prints median and spread.

    python bench/bench_profiling.py --networks 150 --reps 3
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from aows_core import artifacts as io
from aows_core.config import ProfilingSettings, validate
from aows_core.space import get_space
from aows_core.stages.profile import ProfileJob
from aows_core.stages.profile import profile_session as profile
from aows_core.training.loop import RunControl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", type=int, default=150)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backends", nargs="+", default=["torch-cpu", "onnxruntime"])
    args = ap.parse_args()
    cfg = validate({})
    space = get_space("mobilenet_v1_fmnist")
    rng = np.random.default_rng(0)
    print(f"protocol: {cfg['profiling']}")
    print(f"{'backend':<12} {'networks/min':>22} {'timed fraction':>22} {'jobs':>6}")
    for backend in args.backends:
        rates, fracs = [], []
        for rep in range(args.reps):
            with tempfile.TemporaryDirectory() as d:
                d = Path(d)
                rows = [
                    {"config_id": i, "channels": [int(rng.choice(c)) for c in space.layer_choices],
                     "set": "test", "sampler": "uniform"}
                    for i in range(args.networks)
                ]
                io.write_records(rows, d / "c.parquet", "configs", io.provenance(space_hash=space.hash))
                spec = {"backend": backend, "batch_size": 1, "threads": 1, "inter_op_threads": 1,
                        "graph_optimization": "all", "channels_last": False}
                t = time.perf_counter()
                job = ProfileJob(space, backend, spec, ProfilingSettings.from_mapping(cfg["profiling"]), seed=rep)
                res = profile(job, d / "c.parquet", d / "o.parquet", RunControl(d / "r", progress=False))
                wall = time.perf_counter() - t
                _, meta = io.read_table(d / "o.parquet", "latency")
                rates.append(res["done"] / wall * 60)
                fracs.append(meta["timed_s"] / wall)
        q = lambda v: f"{np.median(v):7.1f} [{min(v):.1f}–{max(v):.1f}]"
        f = lambda v: f"{100*np.median(v):6.1f}% [{100*min(v):.1f}–{100*max(v):.1f}]"
        print(f"{backend:<12} {q(rates):>22} {f(fracs):>22} {res['done']:>6}")


if __name__ == "__main__":
    main()
