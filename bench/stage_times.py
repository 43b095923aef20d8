"""Per-stage wall times of a workflow run, from Snakemake's benchmark files (results/benchmarks/*.tsv).

    python bench/stage_times.py [RESULTS_DIR] [--budget]

Prints, per rule: jobs, summed seconds, the longest job, and (with --budget) the default run's
budget beside it. Jobs of one rule may run side by side, so the sum is compute time, not wall time.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

# The embedded default's per-stage budget (seconds, 2 cores), for `snakemake --cores 2 results/pareto_cpu.pdf`.
BUDGET = {
    "sample_configs": 5,
    "profile": 300,  # paired timing and up to 3 rounds (docs/method.md D27, D28)
    "fit_lut": 10,
    "validate_lut": 5,
    "check_target": 5,
    "train_ows": 170,
    "greedy_trajectory": 90,
    "train_aows": 240,
    "decode": 10,
    "decide_baseline": 10,
    "retrain_net": 850,  # one training per distinct network and seed (1 thread, two side by side)
    "retrain": 30,  # each finalist's copy of its network's training
    "measure": 30,
    "proxy": 30,
    "pareto": 10,
}


def stage_times(results: Path) -> dict[str, list[float]]:
    """Seconds of every benchmarked job, grouped by rule (the file name's prefix up to the wildcards)."""
    out: dict[str, list[float]] = defaultdict(list)
    for f in sorted((results / "benchmarks").glob("*.tsv")):
        rule = next((r for r in sorted(BUDGET, key=len, reverse=True) if f.stem == r or f.stem.startswith(r + "_")), f.stem)
        with open(f) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        out[rule] += [float(r["s"]) for r in rows]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", default="results")
    ap.add_argument("--budget", action="store_true", help="show the default run's budget beside each stage")
    args = ap.parse_args()
    times = stage_times(Path(args.results))
    print("| stage | jobs | total s | longest job s |" + (" budget s |" if args.budget else ""))
    print("|---|---|---|---|" + ("---|" if args.budget else ""))
    order = [r for r in BUDGET if r in times] + sorted(set(times) - set(BUDGET))
    for rule in order:
        t = times[rule]
        line = f"| {rule} | {len(t)} | {sum(t):.1f} | {max(t):.1f} |"
        print(line + (f" {BUDGET.get(rule, '—')} |" if args.budget else ""))
    total = sum(sum(t) for t in times.values())
    print(f"| all | {sum(len(t) for t in times.values())} | {total:.1f} | |" + (f" {sum(BUDGET.values())} |" if args.budget else ""))


if __name__ == "__main__":
    main()
