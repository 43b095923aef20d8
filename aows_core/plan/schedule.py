"""When each planned job would run on `cores` CPUs: a list schedule of the job graph, as Snakemake's scheduler fills
free cores (ready jobs by priority, then by the longest work still behind them)."""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Mapping, Sequence

from .graph import PlannedJob


def critical_path(jobs: Sequence[PlannedJob], seconds: Mapping[int, float]) -> dict[int, float]:
    """Per job, its own seconds plus the longest chain of seconds of the jobs that wait for it."""
    waiting: dict[int, list[int]] = {j.jobid: [] for j in jobs}
    for j in jobs:
        for a in j.after:
            waiting[a].append(j.jobid)
    memo: dict[int, float] = {}

    def tail(i: int) -> float:
        if i not in memo:
            memo[i] = seconds[i] + max((tail(k) for k in waiting[i]), default=0.0)
        return memo[i]

    for j in jobs:
        tail(j.jobid)
    return memo


def schedule(jobs: Sequence[PlannedJob], seconds: Mapping[int, float], cores: int) -> dict[int, tuple[float, float]]:
    """(start, end) seconds of every job on `cores` CPUs, each job holding min(threads, cores) of them."""
    by_id = {j.jobid: j for j in jobs}
    tail = critical_path(jobs, seconds)
    left = {j.jobid: set(j.after) & by_id.keys() for j in jobs}
    ready = [i for i, a in left.items() if not a]
    running: list[tuple[float, int]] = []
    free, now = cores, 0.0
    times: dict[int, tuple[float, float]] = {}
    while ready or running:
        ready.sort(key=lambda i: (-by_id[i].priority, -tail[i], i))
        for i in list(ready):
            need = min(by_id[i].threads, cores)
            if need <= free:
                free -= need
                ready.remove(i)
                times[i] = (now, now + seconds[i])
                heappush(running, (now + seconds[i], i))
        if not running:
            raise RuntimeError("the job graph has a cycle or a job needing no CPU")
        now, done = heappop(running)
        free += min(by_id[done].threads, cores)
        for k, a in left.items():
            if done in a:
                a.discard(done)
                if not a and k not in times and k not in ready:
                    ready.append(k)
    return times
