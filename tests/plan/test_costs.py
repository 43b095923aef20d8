"""The plan's cost models against their definitions, with a stub calibration (no unit is measured)."""

import numpy as np
import pytest

from aows_core.config import resolve, validate
from aows_core.plan.costs import Costs, Facts, _config, _macs, _through
from aows_core.plan.graph import PlannedJob


def mmac(space, which):
    return float(_macs(space, _config(space, which)).sum() / 1e6)


class StubCalibration:
    """Unit costs by name and `which`: a scoring's seconds are its network's MMAC squared-root (concave in MACs), a
    retraining step's a tenth of its MMAC, a network's latency on a device 1 + its MMAC squared-root (ms)."""

    def __init__(self, space):
        self.space, self.asked = space, []

    def get(self, name, key, measure):
        self.asked.append((name, key.get("which")))
        if name == "score_call":
            return float(np.sqrt(mmac(self.space, key["which"])))
        if name == "retrain_step":
            return mmac(self.space, key["which"]) / 10
        if name == "network_latency":
            return 1 + float(np.sqrt(mmac(self.space, key["which"])))
        return 0.0 if name == "test_image" else 1.0


@pytest.fixture(scope="module")
def costs():
    settings = resolve(validate({}))
    return Costs(settings, StubCalibration(settings.space), Facts(10, 10, 100, {}, {})), settings.space


def test_a_scoring_runs_through_the_narrowest_middle_and_widest_networks(costs):
    """Regression (issue 42): interpolated between the two ends alone, the MobileNet-v2 preset's scorings were priced
    at 0.53–0.69 of their time; a third calibrated network in the middle bends the line where the cost does."""
    c, space = costs
    points = [float(_macs(space, _config(space, w)).sum()) for w in ("min", "mid", "max")]
    assert points[0] < points[1] < points[2]
    for m in points:  # exact at each calibrated network
        assert c.scoring(m) == pytest.approx(np.sqrt(m / 1e6))
    lo, mid, hi = points
    for t in (0.25, 0.5, 0.75):  # linear between neighbouring points
        for a, b in ((lo, mid), (mid, hi)):
            x = a + t * (b - a)
            assert c.scoring(x) == pytest.approx((1 - t) * np.sqrt(a / 1e6) + t * np.sqrt(b / 1e6))
    assert c.scoring(hi * 1.5) > c.scoring(hi)  # continued along the last segment beyond the widest
    assert {w for n, w in c.cal.asked if n == "score_call"} == {"min", "mid", "max"}


def test_a_finalist_is_the_network_whose_latency_meets_its_target(costs):
    """Regression (issue 42): a finalist's compute was r^(2/3) of the way from the narrowest network's to the widest's
    for every space and device; fitted on the default (batch 1), it priced the MobileNet-v2 preset's retraining (batch
    8, finalists at x ≈ r) at 1.47× its time. Now: the MACs at which the line through the three timed networks'
    (MACs, latency) reaches the target."""
    c, space = costs
    m = [mmac(space, w) for w in ("min", "mid", "max")]
    lat = [1 + np.sqrt(x) for x in m]
    job = PlannedJob(jobid=0, rule="retrain_net", wildcards={"device": "cpu", "target": "range:0.25"})
    for r in (0.0, 0.1, 0.25, 0.4, 1.0):
        goal = lat[0] + r * (lat[2] - lat[0])
        assert c.finalist_macs(f"range:{r}", "cpu") / 1e6 == pytest.approx(np.interp(goal, lat, m))
    assert c.finalist_macs(f"{lat[1]}ms", "cpu") / 1e6 == pytest.approx(m[1])  # an absolute target on the device
    assert c.finalist_macs("range:0.25", "nowhere") / 1e6 == pytest.approx(m[1])  # no device: the middle
    # the retraining is priced through the three networks' steps at that MACs count
    steps = c.f.retrain_steps * int(c.s.retrain.epochs) * len(c.s.retrain.seeds)
    want = 1.0 + steps * np.interp(c.finalist_macs("range:0.25", "cpu") / 1e6, m, [x / 10 for x in m])
    assert c._retrain_net(job) == pytest.approx(want)


def test_a_counted_devices_finalist_is_priced_by_its_mflops():
    settings = resolve(validate({"devices": {"flops": {"backend": "flops"}}}))
    c = Costs(settings, StubCalibration(settings.space), Facts(10, 10, 100, {}, {}))
    assert c.finalist_macs("3mflops", "flops") == pytest.approx(3e6)
    assert not any(n == "network_latency" for n, _ in c.cal.asked)  # nothing timed on a counted device


def test_through_is_linear_between_points_and_continues_the_nearest_segment():
    pts = [(0.0, 1.0), (2.0, 3.0), (4.0, 4.0)]
    assert [_through(pts, x) for x in (-2.0, 0.0, 1.0, 3.0, 4.0, 6.0)] == pytest.approx([-1.0, 1.0, 2.0, 3.5, 4.0, 5.0])
    assert _through([(1.0, 2.0), (1.0, 2.0)], 5.0) == 2.0  # one distinct point: constant
