"""Data-parallel training (gloo, 2 CPU processes): unary reduction, DistributedDataParallel against a manual
flat all-reduce in the sandwich step, data-parallel retraining against one process, torchrun launches."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from stage_calls import greedy_trajectory, train_supernet
from torch import nn

from aows_core import artifacts as io
from aows_core.config import net_key, space_from_config, validate
from aows_core.data import load_splits
from aows_core.data import shard_bounds as _shard
from aows_core.nets.network import Network
from aows_core.nets.supernet import Supernet
from aows_core.search.unaries import EpochUnaries, WindowUnaries
from aows_core.training.accelerator import Accelerator
from aows_core.training.distributed import Dist, average_buffers, data_parallel
from aows_core.training.distributed import update_unaries as _update_unaries

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop

SIZES, R, B, STEPS, WINDOW = (3, 4, 2, 5), 2, 16, 12, 7

TINY = {
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 1, "batch_size": 32, "checkpoint_every": 3, "threads": 1, "estimate_configs": 100,
                 "estimate_images": 256},
}
RETRAIN = {"space": TINY["space"], "data": {"train_subset": 128, "search_val": 64, "calibration": 64},
           "retrain": {"epochs": 1, "batch_size": 32, "threads": 1, "eval_batch_size": 2000}}


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


class _LinearWithStats(nn.Module):
    """A linear model whose (parameter-free) BatchNorm only gathers running statistics of the input."""

    def __init__(self):
        super().__init__()
        self.lin, self.bn = nn.Linear(5, 3), nn.BatchNorm1d(5, affine=False)

    def forward(self, x):
        self.bn(x)
        return self.lin(x)


def _sgd_step(rank: int, world: int) -> _LinearWithStats:
    """One SGD step of the model through DDP (world > 1) on this rank's shard of a fixed batch, buffers averaged."""
    torch.manual_seed(0)
    net = _LinearWithStats()
    x, y = torch.randn(B, 5), torch.randn(B, 3)
    lo, hi = _shard(B, rank, world)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    wrapped = data_parallel(net, Dist(rank, world))  # kept alive: its reducer averages the gradients in backward
    opt.zero_grad(set_to_none=True)
    F.mse_loss(wrapped(x[lo:hi]), y[lo:hi]).backward()
    opt.step()
    average_buffers(net, world)
    return net


def _unaries_and_step(rank: int, world: int, path: str) -> None:
    """This gloo rank's estimators and its model after the averaged step, written."""
    ep, win = _estimators(rank, world)
    net = _sgd_step(rank, world)
    np.savez(f"{path}/rank{rank}.npz", sums=ep.sums, n=ep.n, buf=win.buf, pos=win.pos, seen=win.seen,
             w=net.lin.weight.detach().numpy(), b=net.lin.bias.detach().numpy(), rm=net.bn.running_mean.numpy())


def _launch_worker(rank: int, world: int, path: str) -> None:
    """One gloo rank of a group of `world`: every multi-process computation the tests of this module compare, one
    after the other in one process group, so that the module launches one group of two processes (and one of one)
    instead of one per test. Each computation seeds itself and writes its own files; the sandwich steps run first,
    under torch's default thread count, as when each test launched its own group."""
    dist.init_process_group("gloo", init_method=f"file://{path}/rendezvous{world}", rank=rank, world_size=world)
    try:
        if world == 2:
            _unaries_and_step(rank, world, path)
            _sandwich_worker(rank, world, path, steps=3, paths=("manual", "ddp"))
        _sandwich_worker(rank, world, path, steps=1, paths=("ddp", "sync"))
        if world == 2:
            _retrain_runs(rank, world, path)
        _sync_retrain_worker(rank, world, path)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The files of one launch of two gloo ranks and one of a single rank (`_launch_worker`)."""
    path = tmp_path_factory.mktemp("launched")
    mp.spawn(_launch_worker, args=(2, str(path)), nprocs=2, join=True)
    mp.spawn(_launch_worker, args=(1, str(path)), nprocs=1, join=True)
    return path


# the tests that read the launches (or the one-process supernet below) share one pytest-xdist worker, which makes
# them once (`--dist loadgroup`)
on_the_launches = pytest.mark.xdist_group("ddp_launched")
on_the_supernet = pytest.mark.xdist_group("ddp_ows_supernet")


@pytest.fixture(scope="module")
def ows_supernet(tmp_path_factory):
    """The one-process OWS supernet of TINY: the reference of the two-process one, and the model the greedy baseline
    scores (train_ows reads neither greedy nor the process counts)."""
    path = tmp_path_factory.mktemp("ows_supernet")
    train_supernet(validate(TINY), path / "one", path / "r1", method="ows", progress=False)
    return path / "one"


@on_the_launches
def test_two_ranks_hold_the_one_process_unaries_and_step(launched):
    ep, win = _estimators(0, 1)
    net = _sgd_step(0, 1)
    for rank in (0, 1):
        r = np.load(launched / f"rank{rank}.npz")
        np.testing.assert_allclose(r["sums"], ep.sums, rtol=0, atol=1e-12)  # all-reduced float64 sums
        assert np.array_equal(r["n"], ep.n) and ep.n.sum() == STEPS * R * B * len(SIZES)
        # window means: the gathered batch in rank order is the one-process sample order, exactly
        assert np.array_equal(r["buf"], win.buf) and np.array_equal(r["pos"], win.pos)
        assert np.array_equal(r["seen"], win.seen)
        np.testing.assert_allclose(r["w"], net.lin.weight.detach().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(r["b"], net.lin.bias.detach().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(r["rm"], net.bn.running_mean.numpy(), rtol=0, atol=1e-6)


@on_the_supernet
def test_train_supernet_with_two_processes_keeps_the_configuration_stream(tmp_path, ows_supernet):
    two = {**TINY, "supernet": {**TINY["supernet"], "processes": 2}}
    base = [sys.executable, "-m", "aows_core.cli", "train-supernet", "--config-json", json.dumps(two), "--method", "ows",
            "--out-dir", str(tmp_path / "two"), "--resume-dir", str(tmp_path / "r2"), "--quiet"]
    subprocess.run(base + ["--stop-after", "5"], check=True, timeout=300)  # rank 0 checkpoints, then all resume
    assert not (tmp_path / "two/unaries.parquet").exists()
    # resumed by one process for 1 step, then by two again: the process count is not part of the run (D30)
    one_proc = [a if a != json.dumps(two) else json.dumps(TINY) for a in base]
    subprocess.run(one_proc + ["--stop-after", "1"], check=True, timeout=300)
    assert torch.load(tmp_path / "r2/checkpoint.pt", weights_only=False)["step"] == 6
    assert not (tmp_path / "r2/checkpoint.pt.stale").exists()
    subprocess.run(base, check=True, timeout=300)
    a, meta = io.read_table(ows_supernet / "unaries.parquet", "unaries")
    b, meta2 = io.read_table(tmp_path / "two/unaries.parquet", "unaries")
    assert a.column("count").to_pylist() == b.column("count").to_pylist()
    assert sum(b.column("count").to_pylist()) > 0 and None not in b.column("delta").to_pylist()
    assert meta["processes"] == 1 and meta2["processes"] == 2 and meta2["bn"].startswith("per-rank batch statistics")
    m = io.read_table(tmp_path / "two/metrics.parquet", "train_metrics")[0].to_pylist()
    assert [r["images"] for r in m] == [256] and np.isfinite(m[0]["loss_max"])


# ------------------------------------------------------------- the sandwich step through DDP (docs/method.md D30)


class _ManualAveraging:
    """The reference DDP replaced: gradients and floating buffers averaged by one flat all-reduce before the step."""

    def __init__(self, opt: torch.optim.Optimizer, model: nn.Module, world: int):
        self.opt, self.model, self.world = opt, model, world

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        ts = [p.grad for p in self.model.parameters() if p.grad is not None]
        ts += [b for b in self.model.buffers() if b.is_floating_point()]
        flat = torch.cat([t.reshape(-1) for t in ts])
        dist.all_reduce(flat)
        flat.div_(self.world)
        off = 0
        for t in ts:
            t.copy_(flat[off : off + t.numel()].view(t.shape))
            off += t.numel()
        self.opt.step()


def _sandwich_states(rank: int, world: int, steps: int = 3, batch: int = 8,
                     paths: tuple[str, ...] = ("manual", "ddp", "sync")) -> dict[str, dict]:
    """The supernet's state after `steps` sandwich steps on this rank's shards, from the same initialisation:
    through the manual reference, through DistributedDataParallel (`data_parallel`, then `average_buffers`) and
    through DDP with BatchNorm over the global batch (`synchronised`, supernet.sync_bn)."""
    from aows_core.nets.batchnorm import synchronised
    from aows_core.nets.sandwich import sandwich_step
    from aows_core.nets.widths import widths_tensor
    from aows_core.search.sampler import uniform_layer_indices

    space = space_from_config(validate(TINY))
    lo, hi = _shard(batch, rank, world)
    out = {}
    for path in paths:
        torch.manual_seed(0)
        model = Supernet(space)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=4e-5)
        net, step_opt = ((model, _ManualAveraging(opt, model, world)) if path == "manual"
                         else (data_parallel(model, Dist(rank, world)), opt))
        group = dist.group.WORLD if path == "sync" else None
        g, rng = torch.Generator().manual_seed(1), np.random.default_rng(2)
        for _ in range(steps):
            x, y = torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g)
            idx = uniform_layer_indices(space, R * batch, rng).reshape(R, batch, space.n_layers)[:, lo:hi]
            widths = widths_tensor(space, idx.reshape(-1, space.n_layers)).reshape(R, hi - lo, space.n_layers)
            with synchronised(model, group):
                sandwich_step(net, x[lo:hi], y[lo:hi], widths, step_opt, R)
            if path != "manual":
                average_buffers(model, world)
        out[path] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return out


def _sandwich_worker(rank: int, world: int, path: str, steps: int, paths: tuple[str, ...]) -> None:
    """This rank's `_sandwich_states` after `steps` steps, written."""
    torch.save(_sandwich_states(rank, world, steps, paths=paths), f"{path}/sandwich{steps}_{world}_{rank}.pt")


@on_the_launches
def test_ddp_sandwich_steps_reach_the_manual_all_reduce_parameters(launched):
    ranks = [torch.load(launched / f"sandwich3_2_{r}.pt") for r in (0, 1)]
    torch.manual_seed(0)
    start = Supernet(space_from_config(validate(TINY))).state_dict()
    for states in ranks:
        manual, ddp = states["manual"], states["ddp"]
        assert manual.keys() == ddp.keys()
        for k in manual:
            if manual[k].is_floating_point():
                torch.testing.assert_close(ddp[k], manual[k], rtol=0, atol=1e-6, msg=k)
            else:
                assert torch.equal(ddp[k], manual[k]), k
        assert any(not torch.equal(manual[k], start[k]) for k in start)  # the steps moved the weights
    for k in ranks[0]["ddp"]:  # both ranks hold one model
        assert torch.equal(ranks[0]["ddp"][k], ranks[1]["ddp"][k]), k


@on_the_launches
def test_synchronised_batch_norm_makes_two_processes_take_the_one_process_step(launched):
    """supernet.sync_bn (D30): the max, sliced and masked passes normalise each shard with the global batch's
    statistics, so two processes take the step one process takes on the whole batch (same BN arithmetic: a
    one-process group; tests/nets/test_supernet.py checks it against nn.BatchNorm2d), running statistics
    included; with per-rank statistics they do not. One step: this tiny network on random data is chaotic
    enough that float32 rounding grows to O(1) within three steps at lr 0.1."""
    one = torch.load(launched / "sandwich1_1_0.pt")
    for rank in (0, 1):
        two = torch.load(launched / f"sandwich1_2_{rank}.pt")
        for k, v in one["sync"].items():
            if v.is_floating_point():
                torch.testing.assert_close(two["sync"][k], v, rtol=0, atol=1e-5, msg=k)
            else:
                assert torch.equal(two["sync"][k], v), k
        gap = max((two["ddp"][k] - v).abs().max().item() for k, v in one["ddp"].items() if v.is_floating_point())
        assert gap > 1e-1  # per-rank statistics of 4 images: another step


# ---------------------------------------------------------------- data-parallel retraining (docs/method.md D30)


class _FrozenBN(Network):
    """The fixed network with its BatchNorm statistics frozen (eval-mode BN while training), so that a rank's
    shard is normalised as the whole global batch is: two processes then compute one process's step."""

    def train(self, mode: bool = True):
        super().train(mode)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self


class _Recording:
    """Splits that record the training batches a run reads."""

    def __init__(self, splits):
        self.splits, self.seen = splits, []

    def __getattr__(self, name):
        return getattr(self.splits, name)

    def train_batches(self, *args, **kwargs):
        for x, y in self.splits.train_batches(*args, **kwargs):
            self.seen.append((x.clone(), y.clone()))
            yield x, y


def _retrain(rank: int, world: int, resume: str, stop_after: int | None = None, micro_batch: int | None = None,
             sync_bn: bool = False):
    """`train_network` of the min network in this rank's place; the result and the batches it read."""
    from aows_core.config import resolve, resume_settings
    from aows_core.training.loop import RunControl
    from aows_core.training.retrain import RetrainJob, run_id, train_network

    cfg = validate({**RETRAIN, "retrain": {**RETRAIN["retrain"], "micro_batch": micro_batch, "sync_bn": sync_bn}})
    s = resolve(cfg)
    space, channels = s.space, tuple(s.space.min_config)
    splits = _Recording(load_splits(s.data_spec("retrain")))
    job = RetrainJob(channels, s.seed, run_id(resume_settings(cfg, "retrain"), channels))
    res = train_network(s.retrain, space, job, splits, Accelerator(torch.device("cpu"), "fp32"),
                        RunControl(resume, False, stop_after), ddp=Dist(rank, world))
    return res, splits.seen


def _retrain_runs(rank: int, world: int, path: str) -> None:
    """With frozen BN, uninterrupted, and stopped after 2 steps then resumed; the weights, final loss and batches of
    each."""
    from aows_core.nets import network

    original, network.Network = network.Network, _FrozenBN  # this spawned process's copy of the module
    try:
        full, seen = _retrain(rank, world, f"{path}/resume_full")
        _retrain(rank, world, f"{path}/resume_cut", stop_after=2)
        dist.barrier()  # rank 0 has written the checkpoint
        if rank == 0:  # the same state, for a one-process run to resume
            import shutil

            shutil.copytree(f"{path}/resume_cut", f"{path}/resume_hand")
        dist.barrier()
        cut, _ = _retrain(rank, world, f"{path}/resume_cut")
        torch.save({"full": full.model.state_dict(), "cut": cut.model.state_dict(), "loss": full.final_train_loss,
                    "x": [x for x, _ in seen], "y": [y for _, y in seen]}, f"{path}/retrain{rank}.pt")
    finally:
        network.Network = original  # train-mode BN again for what the launch runs next


@on_the_launches
def test_two_process_retraining_sees_the_global_batches_and_reaches_the_one_process_weights(launched, tmp_path,
                                                                                             monkeypatch):
    from aows_core.nets import network

    monkeypatch.setattr(network, "Network", _FrozenBN)
    one, seen = _retrain(0, 1, str(tmp_path / "resume_one"))
    ranks = [torch.load(launched / f"retrain{r}.pt") for r in (0, 1)]
    assert len(seen) == 4 and all(len(r["y"]) == 4 for r in ranks)  # 128 images, batches of 32
    for k, (x, y) in enumerate(seen):  # each rank read its half of every global batch
        assert torch.equal(torch.cat([r["x"][k] for r in ranks]), x)
        assert torch.equal(torch.cat([r["y"][k] for r in ranks]), y)
    space = space_from_config(validate(RETRAIN))
    torch.manual_seed(0)  # train_network's initialisation (the config's seed)
    start = Network(space, space.min_config).state_dict()
    ref = one.model.state_dict()
    assert any(not torch.equal(ref[k], start[k]) for k in start)  # the steps moved the weights
    for r in ranks:
        for k, v in ref.items():
            if v.is_floating_point():
                torch.testing.assert_close(r["full"][k], v, rtol=0, atol=1e-5, msg=k)
            assert torch.equal(r["cut"][k], r["full"][k]), k  # exact resume with two processes
            assert torch.equal(r["full"][k], ranks[0]["full"][k]), k
        assert r["loss"] == pytest.approx(one.final_train_loss, abs=1e-5)
    # the two-process checkpoint resumes in one process that accumulates the gradients of two passes of 16 (the
    # two processes' shards; D30): it goes on from step 2, not afresh, and ends where the one-process run ends
    # (frozen BN: shards and chunks normalise as the whole batch does)
    part, _ = _retrain(0, 1, str(launched / "resume_hand"), stop_after=1, micro_batch=16)
    assert (part.epoch, part.step) == (0, 3) and not (launched / "resume_hand/checkpoint.pt.stale").exists()
    hand, _ = _retrain(0, 1, str(launched / "resume_hand"), micro_batch=16)
    for k, v in ref.items():
        if v.is_floating_point():
            torch.testing.assert_close(hand.model.state_dict()[k], v, rtol=0, atol=1e-5, msg=k)


def _sync_retrain_worker(rank: int, world: int, path: str) -> None:
    """One retraining step with BatchNorm over the group's global batch (retrain.sync_bn): the weights after it."""
    res, _ = _retrain(rank, world, f"{path}/resume_sync{world}", stop_after=1, sync_bn=True)
    torch.save(res.model.state_dict(), f"{path}/sync{world}_{rank}.pt")


@on_the_launches
def test_two_process_retraining_with_synchronised_batch_norm_takes_the_one_process_step(launched):
    """Train-mode BN (not frozen) over the global batch: two processes of 16 images take the step of one process
    holding all 32 (D30; that process in a group of one, for the same BN arithmetic). One step: with train-mode BN
    on 32 random-label images, float32 rounding grows ~30-fold per step here (1.8e-6, 6e-5, 5e-2 after 1-3)."""
    one = torch.load(launched / "sync1_0.pt")
    torch.manual_seed(0)  # train_network's initialisation (the config's seed)
    start = Network(space_from_config(validate(RETRAIN)), space_from_config(validate(RETRAIN)).min_config)
    assert any(not torch.equal(one[k], v) for k, v in start.state_dict().items())  # the step moved the weights
    for two in (torch.load(launched / f"sync2_{k}.pt") for k in (0, 1)):
        for k, v in one.items():
            if v.is_floating_point():
                torch.testing.assert_close(two[k], v, rtol=0, atol=1e-5, msg=k)
            else:
                assert torch.equal(two[k], v), k


def test_micro_batches_accumulate_the_whole_batch_gradient(tmp_path, monkeypatch):
    """retrain.micro_batch: chunks of a batch accumulate to its gradient (frozen BN: within float rounding), and
    unset it is one pass; the chunks cover the batch in near-equal parts."""
    from aows_core.nets import network
    from aows_core.training.retrain import micro_batches

    assert micro_batches(32, None) == [(0, 32)] and micro_batches(32, 64) == [(0, 32)]
    assert micro_batches(32, 10) == [(0, 8), (8, 16), (16, 24), (24, 32)] and micro_batches(5, 2) == [(0, 2), (2, 3), (3, 5)]

    class Counting(_FrozenBN):
        forwards = 0

        def forward(self, x):
            type(self).forwards += 1
            return super().forward(x)

    monkeypatch.setattr(network, "Network", Counting)
    whole, _ = _retrain(0, 1, str(tmp_path / "whole"))
    assert Counting.forwards == 4  # 128 images, batches of 32
    parts, _ = _retrain(0, 1, str(tmp_path / "parts"), micro_batch=10)
    assert Counting.forwards == 4 + 4 * 4  # four passes of 8 per step
    w, p = whole.model.state_dict(), parts.model.state_dict()
    for k, v in w.items():
        if v.is_floating_point():
            torch.testing.assert_close(p[k], v, rtol=0, atol=1e-5, msg=k)
    assert parts.final_train_loss == pytest.approx(whole.final_train_loss, abs=1e-5)


def test_aows_retrain_with_two_processes_relaunches_under_torchrun_and_evaluates_every_test_image(tmp_path):
    two = {**RETRAIN, "retrain": {**RETRAIN["retrain"], "processes": 2}}
    space = space_from_config(validate(two))
    base = [sys.executable, "-m", "aows_core.cli", "retrain", "--config-json", json.dumps(two), "--channels",
            net_key(space.min_config), "--out-dir", str(tmp_path / "two"), "--resume-dir", str(tmp_path / "r2"), "--quiet"]
    subprocess.run(base + ["--stop-after", "2"], check=True, timeout=300)
    assert not (tmp_path / "two/result.parquet").exists() and (tmp_path / "r2/checkpoint.pt").exists()
    # resumed with BatchNorm over the global batch: the checkpoint does not depend on it (D30)
    sync = json.dumps({**two, "retrain": {**two["retrain"], "sync_bn": True}})
    subprocess.run([sync if a == json.dumps(two) else a for a in base], check=True, timeout=300)
    table, meta = io.read_table(tmp_path / "two/result.parquet", "retrain")
    (row,) = table.to_pylist()
    assert row["test_n"] == 10_000 and 0 <= row["test_correct"] <= row["test_n"]  # Fashion-MNIST's test split, once
    assert meta["processes"] == 2 and meta["bn"].startswith("global-batch statistics")
    assert not (tmp_path / "r2/checkpoint.pt").exists()


@on_the_supernet
def test_greedy_with_two_processes_relaunches_under_torchrun_and_scores_as_one_process(tmp_path, ows_supernet):
    """greedy.processes = 2: each process scores every other search-validation image; the summed counts give the
    one-process trajectory (same trims, same errors, CE up to summation order) and rank 0 writes it (D30)."""
    cfg = validate({**TINY, "greedy": {"n_eval": 64, "n_cal": 48, "batch_size": 16}})
    one = greedy_trajectory(cfg, ows_supernet / "model.pt", tmp_path / "one.parquet", progress=False)
    two = {**cfg, "greedy": {**cfg["greedy"], "processes": 2}}
    subprocess.run([sys.executable, "-m", "aows_core.cli", "greedy", "--config-json", json.dumps(two), "--model",
                    str(ows_supernet / "model.pt"), "--out", str(tmp_path / "two.parquet"), "--quiet"],
                   check=True, timeout=300)
    table, meta = io.read_table(tmp_path / "two.parquet", "greedy_trajectory")
    rows = table.to_pylist()
    assert meta["processes"] == 2 and meta["n_eval"] == 64 and len(rows) == len(one) > 2
    assert [r["channels"] for r in rows] == [r["channels"] for r in one]
    assert [r["errors"] for r in rows] == [r["errors"] for r in one]
    for a, b in zip(rows, one):
        assert a["cross_entropy"] == pytest.approx(b["cross_entropy"], rel=1e-5)
