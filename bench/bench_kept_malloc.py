"""malloc keeping what a pass frees, in the stages that train and score with torch (docs/method.md D51).

Each unit of work the plan's calibration times — a scoring of the middle network at the proxy's sizes
(`data.search_val` images, BN recalibrated on `data.calibration`, in batches of `greedy.batch_size`), a retraining
step of the middle network, a supernet sandwich step at one thread — runs in a fresh interpreter, once as glibc's
malloc comes and once told to keep freed memory (`aows_core.memory:keep_freed_memory`, what the stages now do), the
two alternating over --rounds rounds so that the machine's drift hits both alike. Each run is the unit's median over
its own repeats (`aows_core.plan.calibrate:timed`); printed: per config and unit, the median [min, max] of each mode
and the ratio as it comes ÷ kept, with the process's system (page-fault) seconds.

    PYTHONPATH=. python bench/bench_kept_malloc.py --rounds 3 --configfile configs/mobilenet_v2_fmnist.yaml
    PYTHONPATH=. python bench/bench_kept_malloc.py --rounds 3 --configfile config.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

UNIT = textwrap.dedent("""
    import json, resource, sys
    from aows_core.memory import keep_freed_memory
    if sys.argv[2] == "kept":
        assert keep_freed_memory()
    from aows_core.config import resolve, workflow_config
    from aows_core.plan import calibrate as cb
    from aows_core.plan.costs import _config
    s = resolve(workflow_config([sys.argv[3]] if sys.argv[3] != "config.yaml" else []))
    mid = _config(s.space, "mid")
    unit = sys.argv[1]
    if unit == "scoring":
        t = cb.score_call(s, mid, int(s.data.search_val), int(s.data.calibration))
    elif unit == "retrain_step":
        t = cb.retrain_step(s, mid, int(s.retrain.batch_size))
    else:
        t = cb.supernet_step(s, 1, int(s.supernet.batch_size))
    print(json.dumps({"s": t, "sys": resource.getrusage(resource.RUSAGE_SELF).ru_stime}))
""")
UNITS = ("scoring", "retrain_step", "supernet_step")


def run(unit: str, mode: str, configfile: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-c", UNIT, unit, mode, configfile], capture_output=True, text=True,
                       check=True, env=env)
    return json.loads(r.stdout.strip().splitlines()[-1])


def spread(values: list[float], fmt: str = ".3f") -> str:
    a = np.asarray(values)
    return f"{np.median(a):{fmt}} [{a.min():{fmt}}, {a.max():{fmt}}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configfile", default="config.yaml", help="config.yaml, or a file read over it (a preset)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS)
    args = ap.parse_args()
    rows = {(u, m): [] for u in args.units for m in ("as_it_comes", "kept")}
    for k in range(args.rounds):
        for u in args.units:
            for m in (("as_it_comes", "kept") if k % 2 == 0 else ("kept", "as_it_comes")):
                rows[u, m].append(run(u, m, args.configfile))
        print(f"  round {k + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"| unit ({args.configfile}) | as it comes [s] | kept [s] | as it comes ÷ kept | system s, as it comes / "
          f"kept |  ({args.rounds} rounds: median [min, max])")
    print("|---|---|---|---|---|")
    for u in args.units:
        a, b = rows[u, "as_it_comes"], rows[u, "kept"]
        ratio = [x["s"] / y["s"] for x, y in zip(a, b)]
        print(f"| {u} | {spread([x['s'] for x in a])} | {spread([x['s'] for x in b])} | {spread(ratio, '.2f')} | "
              f"{np.median([x['sys'] for x in a]):.1f} / {np.median([x['sys'] for x in b]):.1f} |")


if __name__ == "__main__":
    main()
