"""Per-stage wall times of a workflow run, from Snakemake's benchmark files (results/benchmarks/*.tsv).

    python bench/stage_times.py [RESULTS_DIR]

Prints, per rule: jobs, summed seconds and the longest job. Jobs of one rule may run side by side, so the sum is
compute time, not wall time.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

# The workflow's rules in pipeline order (a benchmark file is named after its rule, then its wildcards).
RULES = ("sample_configs", "profile", "fit_lut", "validate_lut", "check_target", "train_ows", "greedy_trajectory",
         "train_aows", "decode", "decide_baseline", "retrain_net", "retrain", "measure", "proxy", "pareto")


def stage_times(results: Path) -> dict[str, list[float]]:
    """Seconds of every benchmarked job, grouped by rule (the file name's prefix up to the wildcards)."""
    out: dict[str, list[float]] = defaultdict(list)
    for f in sorted((results / "benchmarks").glob("*.tsv")):
        rule = next((r for r in sorted(RULES, key=len, reverse=True) if f.stem == r or f.stem.startswith(r + "_")), f.stem)
        with open(f) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        out[rule] += [float(r["s"]) for r in rows]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", default="results")
    args = ap.parse_args()
    times = stage_times(Path(args.results))
    print("| stage | jobs | total s | longest job s |")
    print("|---|---|---|---|")
    order = [r for r in RULES if r in times] + sorted(set(times) - set(RULES))
    for rule in order:
        t = times[rule]
        print(f"| {rule} | {len(t)} | {sum(t):.1f} | {max(t):.1f} |")
    total = sum(sum(t) for t in times.values())
    print(f"| all | {sum(len(t) for t in times.values())} | {total:.1f} | |")


if __name__ == "__main__":
    main()
