"""Shared fixtures: a tiny space and configuration files written through the real artifact code."""

import numpy as np
import pytest

from aows_core import artifacts as io
from aows_core.space import mobilenet_v1_space


@pytest.fixture
def tiny_space():
    return mobilenet_v1_space("tiny", resolution=8, in_channels=1, num_classes=4, width_mult=0.25, n_choices=3)


def write_uniform_configs(space, path, n_per_set=(30, 10, 20), seed=0):
    """A configs artifact with uniformly sampled train / lambda_val / test sets."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, n in zip(("train", "lambda_val", "test"), n_per_set):
        for _ in range(n):
            ch = [int(rng.choice(c)) for c in space.layer_choices]
            rows.append({"config_id": len(rows), "channels": ch, "set": name, "sampler": "uniform"})
    io.write_records(rows, path, "configs", io.provenance(space_name=space.name, space_hash=space.hash, sampler="uniform"))
    return rows


@pytest.fixture(autouse=True)
def _denormals_restored():
    """A timing device flushes denormals for its whole process (DESIGN: timed like profiled); tests share one
    process, so the next test (e.g. hypothesis, which needs subnormals) gets the default back."""
    yield
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_flush_denormal(False)
