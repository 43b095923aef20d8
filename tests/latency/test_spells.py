"""Jobs timed in one of the host's spells are timed again until timed outside one (docs/method.md D47), on a host
whose spells are known job by job."""

import math

import numpy as np
import pandas as pd
import pytest
from conftest import write_uniform_configs

from aows_core import artifacts as io
from aows_core.config import ProfilingSettings
from aows_core.devices.base import PairedMeasurement
from aows_core.latency.protocol import SPELL_RISE, SPELL_TRIES, in_spell, merge_retimed, quiet_level, spell_level
from aows_core.stages.profile import ProfileJob, profile_session
from aows_core.training.loop import RunControl


class Host:
    """A network takes its channel sum ÷ 100 ms and the reference 1 ms, exactly, except in the jobs where `spell`
    holds: there the reference runs 1.3–1.7 times slower (by job) and the network by that factor times 0.7–1.3 (the
    two do not slow alike). Every job is 0.1 s of timing."""

    analytic = False
    unit = "ms"

    def __init__(self, spell):
        self.spell, self.jobs = spell, []

    def fingerprint(self):
        return {"backend": "spells"}

    def slow(self, job: int) -> tuple[float, float]:
        """(reference, network) factors of job `job`."""
        if not self.spell(job):
            return 1.0, 1.0
        ref = 1.3 + 0.02 * (job % 20)
        return ref, ref * (1.0 + 0.3 * math.sin(job))

    def measure_paired(self, channels, reference, repeats, warmup, job, min_time_s, chunks, share):
        self.jobs.append(job)
        ref, net = self.slow(job)
        return PairedMeasurement([np.full(3, sum(channels) / 100 * net)] * chunks, [np.full(2, ref)] * chunks, 0.1, 0.0)

    def truth(self, channels) -> float:
        return sum(channels) / 100


def _profile(space, tmp_path, host, monkeypatch, name="spells", stop_after=None, resume="resume", **kw):
    monkeypatch.setattr("aows_core.devices.get_device", lambda spec, space, seed: host)
    p = ProfilingSettings(**{"repeats": 6, "retest": 20, "retime": 0.0, "spell_retime": 0.5, **kw})
    return profile_session(ProfileJob(space, name, {"backend": "spells"}, p, 1), tmp_path / "c.parquet",
                           tmp_path / f"{name}.parquet", RunControl(tmp_path / resume, False, stop_after))


@pytest.fixture
def configs(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (60, 10, 30))
    return 100 + 20  # jobs of the plan: every configuration once, 20 retests


def _rows(tmp_path, name="spells"):
    table, meta = io.read_table(tmp_path / f"{name}.parquet", "latency")
    return table.to_pylist(), meta


def test_spells_are_timed_again_outside_them_and_the_table_is_exact(tiny_space, tmp_path, monkeypatch, configs):
    """Spells over jobs 10–29 and 60–74 of 120; the re-timings come after, outside them: every kept timing is the
    quiet one, so every latency is the truth and the retest pairs agree; without D47 they do not."""
    n = configs
    spell = lambda j: 10 <= j < 30 or 60 <= j < 75  # noqa: E731
    host = Host(spell)
    res = _profile(tiny_space, tmp_path, host, monkeypatch)
    rows, meta = _rows(tmp_path)
    assert res["timed_in_spell"] == meta["timed_in_spell"] == 35 and res["retimed_in_spell"] == 35
    assert meta["left_in_spell"] == 0 and meta["quiet_level_ms"] == pytest.approx(1.0) and meta["spells_retimed"]
    assert host.jobs == list(range(n + 35))  # one round: each spell job once, the slowest reference first
    assert meta["next_job"] == n + 35 and meta["retimed"] == 35
    assert sum(r["retimed"] for r in rows) == 35 and {r["job"] for r in rows if r["retimed"]} == {
        j for j in range(n) if spell(j)}
    assert all(r["latency_ms"] == pytest.approx(host.truth(r["channels"]), rel=1e-9) for r in rows)
    assert res["sigma_n"] == pytest.approx(0.0, abs=1e-12)

    off = _profile(tiny_space, tmp_path, Host(spell), monkeypatch, name="off", resume="off", spell_retime=0.0)
    rows_off, meta_off = _rows(tmp_path, "off")
    assert off["retimed"] == 0 and meta_off["left_in_spell"] == meta_off["timed_in_spell"] == 35
    err = [abs(r["latency_ms"] / host.truth(r["channels"]) - 1) for r in rows_off if spell(r["job"])]
    assert max(err) > 0.1 and off["sigma_n"] > 0.01


def test_a_spell_that_outlasts_the_session_is_tried_twice_and_said(tiny_space, tmp_path, monkeypatch, configs):
    """The host stays in its spell through the re-timings: each spell job is timed again SPELL_TRIES times, then
    left, and the file says how many remain in a spell."""
    n = configs
    spell = lambda j: 10 <= j < 30 or j >= n  # noqa: E731
    res = _profile(tiny_space, tmp_path, Host(spell), monkeypatch)
    _, meta = _rows(tmp_path)
    assert SPELL_TRIES == 2 and res["retimed_in_spell"] == 2 * 20 == meta["retimed"]
    assert meta["timed_in_spell"] == meta["left_in_spell"] == 20


def test_a_host_in_spells_for_most_of_the_session_is_left_as_paired_timing_leaves_it(tiny_space, tmp_path,
                                                                                    monkeypatch, configs):
    """No quiet majority to return to (SPELL_MAJORITY): re-timing a part would mix the host's two states in one
    table, so none is timed again and the file says the session was in spells."""
    spell = lambda j: j >= 40  # noqa: E731  80 of 120 jobs
    res = _profile(tiny_space, tmp_path, Host(spell), monkeypatch)
    _, meta = _rows(tmp_path)
    assert not meta["spells_retimed"] and res["retimed"] == res["retimed_in_spell"] == 0
    assert meta["timed_in_spell"] == meta["left_in_spell"] == 80 and meta["next_job"] == configs
    assert spell_level([{"ref_ms_raw": 1.0}] * 50 + [{"ref_ms_raw": 1.6}] * 50) is None
    assert spell_level([{"ref_ms_raw": 1.0}] * 51 + [{"ref_ms_raw": 1.6}] * 49) == pytest.approx(1.0)


def test_the_budget_takes_the_slowest_references_first(tiny_space, tmp_path, monkeypatch, configs):
    n = configs
    spell = lambda j: 10 <= j < 50  # noqa: E731
    host = Host(spell)
    res = _profile(tiny_space, tmp_path, host, monkeypatch, spell_retime=0.04)
    assert res["retimed_in_spell"] == math.ceil(0.04 * n) == 5 and res["left_in_spell"] == 40 - 5
    rows, _ = _rows(tmp_path)
    again = sorted(r["job"] for r in rows if r["retimed"])
    slowest = sorted(range(10, 50), key=lambda j: -host.slow(j)[0])[:5]
    assert again == sorted(slowest) and min(host.slow(j)[0] for j in again) >= max(
        host.slow(j)[0] for j in range(10, 50) if j not in again)


def test_a_session_killed_between_rounds_resumes_to_the_same_file(tiny_space, tmp_path, monkeypatch, configs):
    """Re-timing rounds follow from the journal alone: stopped inside the second round, then resumed, the file is
    the uninterrupted one's."""
    n = configs
    spell = lambda j: 10 <= j < 30 or n <= j < n + 8  # noqa: E731  the first 8 re-timings hit a spell again
    full = _profile(tiny_space, tmp_path, Host(spell), monkeypatch, name="full", resume="a")
    assert full["retimed_in_spell"] == 20 + 8 and full["left_in_spell"] == 0
    part = _profile(tiny_space, tmp_path, Host(spell), monkeypatch, name="part", resume="b", stop_after=n + 23)
    assert not part["complete"] and part["done"] == n + 23
    _profile(tiny_space, tmp_path, Host(spell), monkeypatch, name="part", resume="b")
    a = io.read_table(tmp_path / "full.parquet", "latency")[0].drop(["t_start_s"]).to_pandas()
    b = io.read_table(tmp_path / "part.parquet", "latency")[0].drop(["t_start_s"]).to_pandas()
    pd.testing.assert_frame_equal(a, b)


def test_merging_prefers_a_timing_outside_a_spell_then_the_less_disturbed():
    row = {"job": 3, "role": "sample", "config_id": 7, "latency_ms_raw": 2.0, "ref_ms_raw": 1.5, "ratio_spread": 0.05}
    calm = {"job": 9, "role": "retime", "retime_of": 3, "cause": "spell", "latency_ms_raw": 1.4, "ref_ms_raw": 1.0,
            "ratio_spread": 0.3}
    tidy = {**calm, "job": 10, "latency_ms_raw": 2.1, "ref_ms_raw": 1.6, "ratio_spread": 0.01}
    assert in_spell(row, 1.0) and not in_spell(calm, 1.0) and 1.5 > SPELL_RISE
    [m] = merge_retimed([row], [tidy, calm], level=1.0)
    assert m["latency_ms_raw"] == 1.4 and m["own_reference"] and m["retimed"] and m["job"] == 3
    assert "cause" not in m and "retime_of" not in m  # the job keeps its own fields (JOB_KEYS)
    [m] = merge_retimed([row], [tidy, calm])  # no level: the less disturbed (D27)
    assert m["latency_ms_raw"] == 2.1
    [m] = merge_retimed([{**row, "ref_ms_raw": 1.0}], [calm], level=1.0)  # neither in a spell: D27's rule
    assert m["latency_ms_raw"] == 2.0 and "own_reference" not in m and m["retimed"]


def test_the_quiet_level_is_a_low_quantile_and_absent_unpaired():
    rows = [{"ref_ms_raw": v} for v in [1.0] * 18 + [1.7, 1.8]]
    assert quiet_level(rows) == pytest.approx(1.0)
    assert quiet_level([{"ref_ms_raw": float("nan")}] * 3) == math.inf
    assert not in_spell({"ref_ms_raw": float("nan")}, math.inf)
