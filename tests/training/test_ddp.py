"""Data-parallel supernet training (gloo, 2 CPU processes): unary reduction, gradient averaging, torchrun launch."""

import pytest
import json
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from aows_core import artifacts as io
from aows_core.config import validate
from aows_core.data import shard_bounds as _shard
from aows_core.search.unaries import EpochUnaries, WindowUnaries
from aows_core.training.distributed import AveragingOptimizer as _AveragingOptimizer
from aows_core.training.distributed import update_unaries as _update_unaries
from stage_calls import train_supernet

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop

SIZES, R, B, STEPS, WINDOW = (3, 4, 2, 5), 2, 16, 12, 7


def _stream():
    """A fixed stream of per-step global-batch choice indices (R, B, L) and loss differences (R, B)."""
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        idx = np.stack([rng.integers(0, k, (R, B)) for k in SIZES], axis=-1)
        yield idx, rng.normal(0.3, 1.0, (R, B))


def _estimators(rank: int, world: int) -> tuple[EpochUnaries, WindowUnaries]:
    """Both estimators fed this rank's shard of the stream through the training loop's update."""
    lo, hi = _shard(B, rank, world)
    ep, win = EpochUnaries(SIZES), WindowUnaries(SIZES, WINDOW)
    for idx, d in _stream():
        _update_unaries(ep, idx[:, lo:hi], d[:, lo:hi], world)
        _update_unaries(win, idx[:, lo:hi], d[:, lo:hi], world)
    return ep, win


def _sgd_step(rank: int, world: int) -> nn.ModuleDict:
    """One SGD step of a linear model (and a BN's running mean) on this rank's shard of a fixed batch."""
    torch.manual_seed(0)
    net = nn.ModuleDict({"lin": nn.Linear(5, 3), "bn": nn.BatchNorm1d(5)})
    x, y = torch.randn(B, 5), torch.randn(B, 3)
    lo, hi = _shard(B, rank, world)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    step = opt if world == 1 else _AveragingOptimizer(opt, net, world)
    step.zero_grad(set_to_none=True)
    net["bn"](x[lo:hi])  # running statistics from this rank's samples
    F.mse_loss(net["lin"](x[lo:hi]), y[lo:hi]).backward()
    step.step()
    return net


def _worker(rank: int, world: int, path: str) -> None:
    """One gloo rank: write its estimators and its model after the averaged step."""
    dist.init_process_group("gloo", init_method=f"file://{path}/rendezvous", rank=rank, world_size=world)
    try:
        ep, win = _estimators(rank, world)
        net = _sgd_step(rank, world)
        np.savez(f"{path}/rank{rank}.npz", sums=ep.sums, n=ep.n, buf=win.buf, pos=win.pos, seen=win.seen,
                 w=net["lin"].weight.detach().numpy(), b=net["lin"].bias.detach().numpy(),
                 rm=net["bn"].running_mean.numpy())
    finally:
        dist.destroy_process_group()


def test_two_ranks_hold_the_one_process_unaries_and_step(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    ep, win = _estimators(0, 1)
    net = _sgd_step(0, 1)
    for rank in (0, 1):
        r = np.load(tmp_path / f"rank{rank}.npz")
        np.testing.assert_allclose(r["sums"], ep.sums, rtol=0, atol=1e-12)  # all-reduced float64 sums
        assert np.array_equal(r["n"], ep.n) and ep.n.sum() == STEPS * R * B * len(SIZES)
        # window means: the gathered batch in rank order is the one-process sample order, exactly
        assert np.array_equal(r["buf"], win.buf) and np.array_equal(r["pos"], win.pos)
        assert np.array_equal(r["seen"], win.seen)
        np.testing.assert_allclose(r["w"], net["lin"].weight.detach().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(r["b"], net["lin"].bias.detach().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(r["rm"], net["bn"].running_mean.numpy(), rtol=0, atol=1e-6)


TINY = {
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 1, "batch_size": 32, "checkpoint_every": 3, "threads": 1},
}


def test_train_supernet_with_two_processes_keeps_the_configuration_stream(tmp_path):
    two = {**TINY, "supernet": {**TINY["supernet"], "processes": 2}}
    base = [sys.executable, "-m", "aows_core.cli", "train-supernet", "--config-json", json.dumps(two), "--method", "ows",
            "--out-dir", str(tmp_path / "two"), "--resume-dir", str(tmp_path / "r2"), "--quiet"]
    subprocess.run(base + ["--stop-after", "5"], check=True, timeout=300)  # rank 0 checkpoints, then all resume
    assert not (tmp_path / "two/unaries.parquet").exists()
    subprocess.run(base, check=True, timeout=300)
    train_supernet(validate(TINY), tmp_path / "one", tmp_path / "r1", method="ows", progress=False)
    a, meta = io.read_table(tmp_path / "one/unaries.parquet", "unaries")
    b, meta2 = io.read_table(tmp_path / "two/unaries.parquet", "unaries")
    assert a.column("count").to_pylist() == b.column("count").to_pylist()
    assert sum(b.column("count").to_pylist()) > 0 and None not in b.column("delta").to_pylist()
    assert meta["processes"] == 1 and meta2["processes"] == 2 and meta2["bn"].startswith("per-rank batch statistics")
    m = io.read_table(tmp_path / "two/metrics.parquet", "train_metrics")[0].to_pylist()
    assert [r["images"] for r in m] == [256] and np.isfinite(m[0]["loss_max"])
