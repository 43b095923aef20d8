"""The network path of two checkouts side by side on the CPU: the sandwich step, the scorer's greedy step, the
estimation pass and the timed deployment network (docs/method.md D45: one network path for every space).

Two worker processes, one per checkout (its `aows_core` first on the path), each build the same supernet of the
default space (same seed: the same weights) on one thread and wait for orders; the parent asks them in turn, one
operation at a time, so that a shared machine's drift hits both alike and they never run at once. Operations:

- `sandwich`: one sandwich step (§3, §5) at the default's batch (128 images, one random pass, channels_last), SGD;
- `greedy`: one greedy step of the scorer (§3, D22): every one-node-lowered neighbour of a configuration scored on
  the default's evaluation and calibration images (500 and 128), one at a time with prefix reuse (the CPU path);
- `estimation`: the frozen-weight estimation pass (D26) of 20 configurations on batches of 128;
- `deploy`: one forward of the timed deployment network (the torch-cpu device's form, batch 1) of the middle
  configuration — what profiling times, so a slower module tree would shift every latency.

    git worktree add /tmp/aows-base <baseline commit>
    python3 bench/bench_network_path.py --baseline /tmp/aows-base [--rounds 15] [--json PATH]

Prints per operation the median and IQR of each checkout's seconds, and the median of the per-round ratios
current ÷ baseline with its IQR.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OPS = ("sandwich", "greedy", "estimation", "deploy")

WORKER = r'''
import json, sys, time
import numpy as np
import torch

torch.set_num_threads(1)
from aows_core.space import DEFAULT_PRESET, get_space
try:
    from aows_core.nets.supernet import Supernet
    from aows_core.nets.network import TimingFactory
except ImportError:  # the earlier layout
    from aows_core.nets.family import supernet as Supernet, timing_factory as TimingFactory
from aows_core.nets.sandwich import sandwich_step
from aows_core.nets.scoring import SubnetScorer
from aows_core.nets.estimation import frozen_differences

import os
SMALL = os.environ.get("AOWS_BENCH_SMALL") == "1"
space = get_space(DEFAULT_PRESET, **({"width_mult": 0.25, "n_choices": 3} if SMALL else {}))
B = 64 if SMALL else 128
torch.manual_seed(0)
net = Supernet(space, channels_last=True)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator().manual_seed(1)
x = torch.randn(B, 1, 28, 28, generator=g)
y = torch.randint(0, 10, (B,), generator=g)
rng = np.random.default_rng(2)
choices = [np.asarray(c) for c in space.layer_choices]
def widths():
    return torch.as_tensor(np.stack([rng.choice(c, B) for c in choices], 1))
cal = torch.randn(128, 1, 28, 28, generator=g)
xe = torch.randn(500, 1, 28, 28, generator=g)
ye = torch.randint(0, 10, (500,), generator=g)
configs = [[int(rng.choice(c)) for c in choices] for _ in range(20)]
middle = space.middle_config
factory = TimingFactory(space).prebuild()
deploy = factory(middle)
xd = torch.randn(1, 1, 28, 28, generator=g)

def greedy_step():
    scorer = SubnetScorer(net, cal, xe, ye, batch_size=250)
    cur = list(space.max_config)
    cands = []
    for i, c in enumerate(space.layer_choices):
        k = c.index(cur[i])
        if k > 0:
            cands.append(cur[:i] + [c[k - 1]] + cur[i + 1:])
    scorer.score_many(cands)

def run(op):
    if op == "sandwich":
        sandwich_step(net, x, y, widths(), opt, 1)
    elif op == "greedy":
        greedy_step()
    elif op == "estimation":
        frozen_differences(net, x, y, configs, B)
    elif op == "deploy":
        with torch.inference_mode():
            deploy(xd)

for op in ("sandwich", "greedy", "estimation", "deploy"):  # warm-up
    run(op)
print("ready", flush=True)
for line in sys.stdin:
    op, reps = line.split()
    out = []
    for _ in range(int(reps)):
        t = time.perf_counter()
        run(op)
        out.append(time.perf_counter() - t)
    print(json.dumps(out), flush=True)
'''

REPS = {"sandwich": 3, "greedy": 1, "estimation": 1, "deploy": 200}


def start(code: Path, small: bool) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "AOWS_BENCH_SMALL": str(int(small))}
    p = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env, cwd=str(code))
    assert p.stdout.readline().strip() == "ready", f"the worker of {code} did not start"
    return p


def ask(p: subprocess.Popen, op: str) -> float:
    """Median seconds of one operation over its repetitions in one request."""
    p.stdin.write(f"{op} {REPS[op]}\n")
    p.stdin.flush()
    return float(np.median(json.loads(p.stdout.readline())))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, type=Path, help="a checkout of the baseline commit")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--small", action="store_true",
                    help="the test suite's tiny run's sizes (width ×0.25, 3 choices, batch 64): module-call overhead")
    args = ap.parse_args(argv)
    workers = {"baseline": start(args.baseline.resolve(), args.small), "current": start(ROOT, args.small)}
    times: dict[str, dict[str, list[float]]] = {op: {w: [] for w in workers} for op in OPS}
    for r in range(args.rounds):
        order = list(workers) if r % 2 == 0 else list(workers)[::-1]
        for op in OPS:
            for w in order:
                times[op][w].append(ask(workers[w], op))
    for p in workers.values():
        p.stdin.close()
        p.wait()
    rows = {}
    print("| operation | baseline ms [IQR] | current ms [IQR] | current ÷ baseline [IQR of rounds] |\n|---|---|---|---|")
    for op in OPS:
        b, c = np.array(times[op]["baseline"]) * 1e3, np.array(times[op]["current"]) * 1e3
        ratio = c / b
        q = lambda a: (np.median(a), *np.percentile(a, [25, 75]))  # noqa: E731
        rows[op] = {"baseline_ms": q(b), "current_ms": q(c), "ratio": q(ratio)}
        print(f"| {op} | {q(b)[0]:.2f} [{q(b)[1]:.2f}, {q(b)[2]:.2f}] | {q(c)[0]:.2f} [{q(c)[1]:.2f}, {q(c)[2]:.2f}] "
              f"| {q(ratio)[0]:.3f} [{q(ratio)[1]:.3f}, {q(ratio)[2]:.3f}] |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
