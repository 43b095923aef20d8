"""The plan's cost models against their definitions, with a stub calibration (no unit is measured)."""

import numpy as np
import pytest

from aows_core.config import resolve, validate
from aows_core.plan.costs import Costs, Facts, _compute_share, _config, _macs


class StubCalibration:
    """Unit costs by name and `which`: a scoring's seconds are its network's MMAC squared-root (concave in MACs)."""

    def __init__(self, space):
        self.space, self.asked = space, []

    def get(self, name, key, measure):
        self.asked.append((name, key.get("which")))
        if name == "score_call":
            return float(np.sqrt(_macs(self.space, _config(self.space, key["which"])).sum() / 1e6))
        return 1.0


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


def test_a_range_targets_compute_share_is_r_to_the_two_thirds():
    assert [_compute_share(f"range:{r}") for r in (0.0, 0.1, 0.25, 1.0)] == pytest.approx(
        [0.0, 0.1 ** (2 / 3), 0.25 ** (2 / 3), 1.0])
    assert _compute_share("2.5ms") == 0.5 and _compute_share("300mflops") == 0.5
