"""The job graph Snakemake would run (`snakemake --dry-run --forceall`), as jobs with their threads and edges.

Decisions are checkpoints: a dry run lists each finalist's `retrain` (the relabelling) but not the retraining of the
network it will decide (`retrain_net`), whose name is known only once decided; the plan adds one `retrain_net` per
finalist (every seed in one job, retrain.seeds_in_one_job) or per `retrain` job (one per seed), an upper bound where
finalists decide the same widths (they then share one training).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

# A job block of the dry run: "rule NAME:" (or checkpoint, localrule, localcheckpoint), then indented "key: value".
_HEAD = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\s*$")
_FIELD = re.compile(r"^\s{4}(\w+): (.*)$")


@dataclass
class PlannedJob:
    """One job of the graph: its rule, wildcards, threads, files, benchmark file and priority."""

    jobid: int
    rule: str
    wildcards: dict[str, str] = field(default_factory=dict)
    threads: int = 1
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    benchmark: str | None = None
    priority: int = 0
    after: set[int] = field(default_factory=set)  # jobids this job waits for

    @property
    def label(self) -> str:
        """`rule` and its wildcards, as the tables print it."""
        return self.rule + "".join(f" {v}" for v in self.wildcards.values())


def parse_dry_run(text: str) -> list[PlannedJob]:
    """The jobs of a dry run's output, with their edges (a job waits for the jobs whose outputs it reads)."""
    jobs: list[PlannedJob] = []
    cur: dict | None = None
    for line in text.splitlines():
        m = _HEAD.match(line)
        if m:
            cur = {"rule": m.group(1)}
            jobs.append(cur)  # type: ignore[arg-type]
            continue
        f = _FIELD.match(line) if cur is not None else None
        if f:
            cur[f.group(1)] = f.group(2).strip()
        elif cur is not None and not line.startswith(" "):
            cur = None
    out = [_job(raw) for raw in jobs]
    if not out:
        raise RuntimeError("the dry run listed no jobs: is the target already a file Snakemake cannot make?")
    producer = {o: j.jobid for j in out for o in j.outputs}
    for j in out:
        j.after = {producer[i] for i in j.inputs if i in producer and producer[i] != j.jobid}
    return out


def _job(raw: dict) -> PlannedJob:
    def files(key: str) -> tuple[str, ...]:
        return tuple(s for s in (p.strip() for p in raw.get(key, "").split(", ")) if s and s != "<TBD>")

    wildcards = dict(kv.split("=", 1) for kv in raw.get("wildcards", "").split(", ") if "=" in kv)
    return PlannedJob(jobid=int(raw["jobid"]), rule=raw["rule"], wildcards=wildcards,
                      threads=int(raw.get("threads", 1)), inputs=files("input"), outputs=files("output"),
                      benchmark=raw.get("benchmark"), priority=int(raw.get("priority", 0)))


def with_retraining(jobs: list[PlannedJob], threads: int, seeds_together: bool = False) -> list[PlannedJob]:
    """The graph with the retraining a checkpoint hides: one `retrain_net` job (on `threads` CPUs) before each
    `retrain` job, after that finalist's decision; `seeds_together`: one before all of a finalist's seeds (D52)."""
    out = list(jobs)
    next_id = max(j.jobid for j in jobs) + 1
    nets: dict[tuple, PlannedJob] = {}
    for j in jobs:
        if j.rule != "retrain":
            continue
        wildcards = {k: v for k, v in j.wildcards.items() if k != "seed" or not seeds_together}
        key = tuple(sorted(wildcards.items()))
        net = nets.get(key)
        if net is None:
            net = nets[key] = PlannedJob(jobid=next_id, rule="retrain_net", wildcards=wildcards, threads=threads,
                                         after=set(j.after))
            next_id += 1
            out.append(net)
        j.after = {net.jobid}
    return out


def snakefile() -> Path:
    """The workflow's Snakefile beside the installed package (the repository's `workflow/Snakefile`)."""
    path = Path(__file__).resolve().parents[2] / "workflow" / "Snakefile"
    if not path.exists():
        raise RuntimeError(f"no workflow at {path}: run aows plan from a checkout of the repository")
    return path


def dry_run(targets: Sequence[str], configfiles: Sequence[str], cores: int, workdir: str | Path = ".") -> str:
    """Snakemake's dry run of `targets` from scratch (`--forceall`) with `configfiles`, as Snakemake itself reads
    them; its error when the config or a target is refused."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile()), "--dry-run", "--forceall", "--cores", str(cores),
           "--directory", str(workdir)]
    if configfiles:
        cmd += ["--configfile", *configfiles]
    cmd += ["--", *targets]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"snakemake's dry run of {' '.join(targets)} failed:\n{tail}")
    return res.stdout


def job_graph(targets: Sequence[str], configfiles: Sequence[str], cores: int, retrain_threads: int,
              workdir: str | Path = ".", seeds_together: bool = False) -> list[PlannedJob]:
    """The jobs Snakemake would run to make `targets` from scratch, with the hidden retraining added."""
    return with_retraining(parse_dry_run(dry_run(targets, configfiles, cores, workdir)), retrain_threads,
                           seeds_together)
