"""The plan's schedule (aows_core.plan.schedule) against what a schedule on N cores must be: every job after the jobs
it waits for, never more CPUs in use than the cores, no core idle while a ready job fits, and the closed forms of a
chain and of independent equal jobs."""

import math

from hypothesis import given
from hypothesis import strategies as st

from aows_core.plan.graph import PlannedJob
from aows_core.plan.schedule import critical_path, schedule


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 12))
    jobs = []
    for i in range(n):
        after = set(draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))) if i else set()
        jobs.append(PlannedJob(jobid=i, rule=f"r{i % 3}", threads=draw(st.integers(1, 4)),
                               priority=draw(st.sampled_from([0, 0, 50, 100])), after=after))
    seconds = {i: draw(st.floats(0.5, 100)) for i in range(n)}
    return jobs, seconds, draw(st.integers(1, 4))


@given(graphs())
def test_a_schedule_keeps_order_cores_and_no_idle_core(case):
    jobs, seconds, cores = case
    times = schedule(jobs, seconds, cores)
    assert set(times) == {j.jobid for j in jobs}
    for j in jobs:
        start, end = times[j.jobid]
        assert math.isclose(end - start, seconds[j.jobid])
        assert all(start >= times[a][1] - 1e-9 for a in j.after)
    by_id = {j.jobid: j for j in jobs}
    events = sorted({t for s, e in times.values() for t in (s, e)})
    for t in events:  # CPUs in use right after each event; a ready job that fits would have started
        running = [i for i, (s, e) in times.items() if s <= t < e]
        used = sum(min(by_id[i].threads, cores) for i in running)
        assert used <= cores
        ready = [j for j in jobs if times[j.jobid][0] > t and all(times[a][1] <= t + 1e-9 for a in j.after)]
        assert all(min(j.threads, cores) > cores - used for j in ready)


@given(graphs())
def test_on_one_core_jobs_run_one_after_another(case):
    jobs, seconds, _ = case
    times = schedule(jobs, seconds, cores=1)
    assert math.isclose(max(e for _, e in times.values()), sum(seconds.values()))


@given(st.lists(st.floats(0.5, 50), min_size=1, max_size=8))
def test_a_chain_takes_the_sum_of_its_jobs(durations):
    jobs = [PlannedJob(jobid=i, rule="r", after={i - 1} if i else set()) for i in range(len(durations))]
    times = schedule(jobs, dict(enumerate(durations)), cores=4)
    assert math.isclose(max(e for _, e in times.values()), sum(durations))
    assert math.isclose(critical_path(jobs, dict(enumerate(durations)))[0], sum(durations))


@given(st.integers(1, 20), st.integers(1, 6), st.integers(1, 3))
def test_independent_equal_jobs_take_rounds_of_the_cores(n, cores, threads):
    jobs = [PlannedJob(jobid=i, rule="r", threads=threads) for i in range(n)]
    times = schedule(jobs, {i: 10.0 for i in range(n)}, cores)
    per_round = max(1, cores // min(threads, cores))
    assert math.isclose(max(e for _, e in times.values()), 10.0 * math.ceil(n / per_round))
