"""Shared fixtures: a tiny space and configuration files written through the real artifact code."""

import os

# Under pytest-xdist two workers (and the Snakemake jobs and torchrun processes they start, which inherit this)
# share the cores: OpenMP threads that spin while they wait would take the cores from each other's work. Set before
# torch loads (aows_core and the test modules import it later).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402
from tiny_workflow import group_tiny_run_tests, pareto_run, tiny_run, tiny_runs  # noqa: F401 (the session fixtures)

from aows_core import artifacts as io
from aows_core.space import mobilenet_v1_space

# The tests check properties, not speed: under pytest-xdist the cores are shared, and hypothesis's default
# 200 ms deadline per example would fail a correct example that waited for a core.
settings.register_profile("shared_cores", deadline=None)
settings.load_profile("shared_cores")


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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook turns the group marks into node ids
def pytest_collection_modifyitems(items):
    """Under pytest-xdist (`--dist loadgroup`), every test that reads the tiny runs goes to one worker, which makes
    them once; the other tests spread over the other workers. Tests marked `cuda` skip where torch sees no GPU
    (`bash scripts/gpu_check.sh` runs them on one)."""
    group_tiny_run_tests(items)
    no_gpu = None
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            if no_gpu is None:
                import torch

                no_gpu = not torch.cuda.is_available()
            if no_gpu:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (bash scripts/gpu_check.sh runs it on one)"))
