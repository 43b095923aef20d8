"""What a run cost: each job's seconds from Snakemake's benchmark files (results/benchmarks/*.tsv) and the run's
wall time from Snakemake's own log (.snakemake/log/*.snakemake.log)."""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Iterable

# A job's start in a Snakemake log, and the log header's date.
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]\s*$", re.M)
HEADER_DATE = re.compile(r"^\s*Date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$", re.M)


def rule_of(stem: str, rules: Iterable[str]) -> str:
    """The rule of a benchmark file: its name up to the wildcards (the longest rule name it starts with)."""
    return next((r for r in sorted(rules, key=len, reverse=True) if stem == r or stem.startswith(r + "_")), stem)


def stage_times(results: str | Path, rules: Iterable[str]) -> dict[str, list[float]]:
    """Seconds of every benchmarked job under `results`, grouped by rule."""
    out: dict[str, list[float]] = defaultdict(list)
    rules = list(rules)
    for f in sorted((Path(results) / "benchmarks").glob("*.tsv")):
        with open(f) as fh:
            out[rule_of(f.stem, rules)] += [float(r["s"]) for r in csv.DictReader(fh, delimiter="\t")]
    return dict(out)


def wall_time(text: str) -> tuple[datetime, datetime]:
    """First and last timestamps of a Snakemake log: the header's `Date:` (else the first job's) and the last job's."""
    stamps = [datetime.strptime(s, "%a %b %d %H:%M:%S %Y") for s in STAMP.findall(text)]
    if not stamps:
        raise ValueError("the Snakemake log has no job timestamps")
    head = HEADER_DATE.search(text)
    start = datetime.strptime(head.group(1), "%Y-%m-%d %H:%M:%S") if head else stamps[0]
    return min(start, stamps[0]), stamps[-1]


def finished_wall(workdir: str | Path) -> tuple[float, Path] | None:
    """Wall seconds of the newest Snakemake run in `workdir` that finished every job, and its log; None if none did."""
    for log in sorted((Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True):
        text = log.read_text(errors="replace")
        if re.search(r"steps \(100%\) done", text):
            start, end = wall_time(text)
            return (end - start).total_seconds(), log
    return None
