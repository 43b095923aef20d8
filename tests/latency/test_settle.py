"""A measuring session timed until its rounds are as quiet as the profile and the host back at its profiled speed
(docs/method.md D46), on a host whose disturbance and speed are known job by job."""

import math

import numpy as np
import pytest

from aows_core.config import ProfilingSettings
from aows_core.devices.base import PairedMeasurement
from aows_core.latency.protocol import (
    QUIET_FLOOR,
    QuietTarget,
    measure_plan,
    quiet_limit,
    round_noise,
    settle_rounds,
    time_jobs,
    window_level,
    window_noise,
)


class Host:
    """Each network takes its channel sum ÷ 100 ms and the reference 1 ms, both times the host's `speed` of the job
    (1 unless given); in the jobs where `disturbed` holds, the network's chunks run 1–40 % slower at random (the host
    changed speed between them and the reference's), otherwise they are exact. Every job is 0.5 s of timing."""

    analytic = False

    def __init__(self, disturbed, speed=lambda job: 1.0):
        self.disturbed, self.speed, self.jobs = disturbed, speed, []
        self.rng = np.random.default_rng(0)

    def measure_paired(self, channels, reference, repeats, warmup, job, min_time_s, chunks, share):
        self.jobs.append(job)
        slow = self.rng.uniform(1.01, 1.4) if self.disturbed(job) else 1.0
        network = [np.full(3, sum(channels) / 100 * slow * self.speed(job))] * chunks
        return PairedMeasurement(network, [np.full(2, self.speed(job))] * chunks, 0.5, 0.0)


@pytest.fixture
def nets(tiny_space):
    return [tuple(tiny_space.min_config), tuple(tiny_space.middle_config), tuple(tiny_space.max_config)]


def _session(space, nets, host, rounds=5, first=100, quiet=0.02, budget_s=60.0):
    jobs = measure_plan(nets, rounds, 0, False, first)
    rows = time_jobs(host, jobs, ProfilingSettings(), space)
    return settle_rounds(host, jobs, rows, ProfilingSettings(), space, 0, QuietTarget(1.0, quiet, budget_s))


def test_a_quiet_session_is_timed_in_its_rounds_alone(tiny_space, nets):
    host = Host(lambda j: False)
    jobs, rows, s = _session(tiny_space, nets, host)
    assert s.settled and s.rounds_timed == 5 and s.extra_s == 0 and s.noise == (0.0,)
    assert [j.job for j in jobs] == host.jobs == list(range(100, 115)) and len(rows) == 15


def test_a_disturbed_start_is_timed_past_and_dropped(tiny_space, nets):
    """Disturbed for its first 4 rounds (jobs 100–111): rounds are added until the last 5 are all undisturbed — round
    9, the first window without a disturbed job — and those are what the session keeps."""
    host = Host(lambda j: j < 112)
    jobs, rows, s = _session(tiny_space, nets, host)
    assert s.settled and s.rounds_timed == 9 and len(s.noise) == 5
    assert all(n > 0.02 for n in s.noise[:-1]) and s.noise[-1] == 0.0
    assert host.jobs == list(range(100, 127)) and s.extra_s == pytest.approx(12 * 0.5)
    assert [j.round for j in jobs] == [r for r in range(4, 9) for _ in nets] and len(rows) == 15
    assert [r["job"] for r in rows] == [j.job for j in jobs] == list(range(112, 127))
    assert sorted((j.network, j.channels) for j in jobs[-3:]) == [(k, n) for k, n in enumerate(nets)]
    assert s.to_dict()["window_noise"] == list(s.noise) and s.message(60) == ""


def test_a_host_that_stays_disturbed_is_left_after_the_budget_and_says_so(tiny_space, nets):
    host = Host(lambda j: True)
    jobs, rows, s = _session(tiny_space, nets, host, budget_s=6.0)
    assert not s.settled and s.extra_s == pytest.approx(6.0) and s.rounds_timed == 9 and len(rows) == 15
    assert "measure.settle_s = 6 s" in s.message(6.0) and "2.0 % needed" in s.message(6.0)
    assert _session(tiny_space, nets, Host(lambda j: True), budget_s=0.0)[2].rounds_timed == 5  # settle_s 0


def test_a_host_off_its_profiled_speed_is_timed_until_it_returns(tiny_space, nets):
    """Steady but 10 % slower than when profiled for its first 4 rounds (a measure right after a training): the
    rounds agree (noise 0), yet rounds are added until most of the last 5 ran at the profiled speed, and those kept;
    a host that stays slower is left after the budget, the file and the message say how far off it was. Within
    `quiet` of the profiled speed a session settles at once."""
    jobs, rows, s = _session(tiny_space, nets, Host(lambda j: False, lambda j: 1.1 if j < 112 else 1.0))
    # the window's speed is its references' median: settled once 3 of its 5 rounds ran at the profiled speed
    assert s.settled and s.rounds_timed == 7 and s.noise == (0.0,) * 3
    assert s.level == pytest.approx((1.1, 1.1, 1.0)) and s.to_dict()["window_level"] == list(s.level)
    assert [r["job"] for r in rows] == list(range(106, 121))
    jobs, rows, s = _session(tiny_space, nets, Host(lambda j: False, lambda j: 1.1), budget_s=6.0)
    assert not s.settled and s.rounds_timed == 9 and s.level[-1] == pytest.approx(1.1)
    assert "the reference at +10.0 % of its profiled time" in s.message(6.0)
    jobs, rows, s = _session(tiny_space, nets, Host(lambda j: False, lambda j: 1.015))
    assert s.settled and s.rounds_timed == 5 and window_level(rows, 1.0) == pytest.approx(1.015)


def test_window_noise_is_the_round_noise_of_the_corrected_timings(tiny_space, nets):
    host = Host(lambda j: j % 2 == 0)
    jobs = measure_plan(nets, 4, 0, False)
    rows = time_jobs(host, jobs, ProfilingSettings(), tiny_space)
    per = {}
    for r in rows:
        per.setdefault(r["network"], []).append(r["latency_ms_raw"] / r["ref_ms_raw"] * 2.0)
    assert window_noise(rows, 2.0) == pytest.approx(round_noise(per)) and "latency_ms" not in rows[0]


def test_quiet_is_the_profiles_noise_with_a_floor_under_the_gate():
    assert quiet_limit(0.03, 0.05) == pytest.approx(0.045)
    assert quiet_limit(0.005, 0.05) == QUIET_FLOOR
    assert quiet_limit(0.09, 0.05) == 0.05 and quiet_limit(0.0, 0.012) == 0.012
    assert math.isclose(quiet_limit(0.02, math.inf), 0.03)
