"""Supernet training without per-step host waits (docs/method.md D29): step records read at logging points, the
training-time unaries fed in step order when read (§5 eq. average_error, §6's window), the same run bit for bit as
when every step is read at once, non-finite steps raised on read, cuBLAS's workspace set before CUDA starts."""

import os

import numpy as np
import pytest
import torch
from stage_calls import train_supernet

from aows_core import artifacts as io
from aows_core.config import space_from_config, validate
from aows_core.devices.flops import variable_macs
from aows_core.latency import lut
from aows_core.nets import sandwich
from aows_core.nets.sandwich import NonFiniteLoss, SandwichResult
from aows_core.search.unaries import EpochUnaries, WindowUnaries
from aows_core.training import distributed
from aows_core.training.distributed import DeferredUnaries, update_unaries
from aows_core.training.supernet import EpochAccumulator, EpochSums

TINY = {
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "data": {"train_subset": 128, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 2, "batch_size": 32, "checkpoint_every": 3, "threads": 1, "estimate_configs": 24,
                 "estimate_batch": 32, "estimate_images": 64},
    "aows": {"warmup_epochs": 1, "window": 5, "refresh": 3, "estimate_configs": 16},
}


def _result(rng, R=2, B=6, bad=False, skip=False, step=0) -> SandwichResult:
    """A step's outputs as the sandwich step returns them (random CEs and losses)."""
    ce_max = torch.tensor(rng.random(B), dtype=torch.float32)
    losses = torch.tensor(rng.random(2 + R), dtype=torch.float64)
    if bad:
        losses[1] = float("nan")
    return SandwichResult(ce_max=ce_max, ce_random=torch.tensor(rng.random((R, B)), dtype=torch.float32),
                          losses=losses, acc=torch.tensor(rng.random(), dtype=torch.float64),
                          nonfinite=torch.tensor(bad), step=step, skipped_by_scaler=skip)


def _idx(sizes, rng, R=2, B=6):
    return np.stack([rng.integers(0, k, (R, B)) for k in sizes], -1)


@pytest.mark.parametrize("make", [lambda s: EpochUnaries(s), lambda s: WindowUnaries(s, window=3)],
                         ids=["epoch", "window"])
def test_deferred_unaries_equal_per_step_updates(make):
    """Steps queued and applied when read give the same sums, counts and window (ring buffer wrapped) as updating
    every step, also when read in the middle."""
    sizes = (3, 2, 4)
    rng = np.random.default_rng(0)
    steps = [(_idx(sizes, rng), _result(rng)) for _ in range(7)]
    now, later = make(sizes), DeferredUnaries(make(sizes))
    for k, (idx, res) in enumerate(steps):
        update_unaries(now, idx, res.diffs(), 1)
        later.defer(idx, res.record())
        if k == 3:
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(now.delta(), later.delta()))
    a, b = now.state_dict(), later.state_dict()
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a if k not in ("kind", "sizes"))


def test_a_nonfinite_step_raises_from_whichever_reads_it_first():
    """A non-finite step (checked on the device, D29) raises NonFiniteLoss with its number from the unaries' rows or
    the metrics row; an fp16 step the scaler skipped adds nothing to either."""
    sizes = (3, 2, 4)
    rng = np.random.default_rng(1)
    est = DeferredUnaries(EpochUnaries(sizes))
    est.defer(_idx(sizes, rng), _result(rng).record())
    est.defer(_idx(sizes, rng), _result(rng, bad=True, step=5).record())
    with pytest.raises(NonFiniteLoss, match="at step 5: min \\(distillation\\)=nan"):
        est.counts()
    acc = EpochAccumulator()
    acc.add(_result(rng, bad=True, step=9).record(), 6, 0.1, None)
    with pytest.raises(NonFiniteLoss, match="at step 9"):
        acc.state()

    skipped = DeferredUnaries(EpochUnaries(sizes))
    good = _result(rng)
    skipped.defer(_idx(sizes, rng), good.record())
    skipped.defer(_idx(sizes, rng), _result(rng, bad=True, skip=True).record())
    assert sum(int(c.sum()) for c in skipped.counts()) == 2 * 6 * len(sizes)  # the good step's samples only
    acc = EpochAccumulator()
    acc.add(good.record(), 6, 0.1, None)
    acc.add(_result(rng, bad=True, skip=True).record(), 6, 0.1, None)
    row = acc.row(0, "uniform")
    assert row["steps"] == 2 and acc.sums.skipped == 1 and row["loss_max"] == pytest.approx(good.loss_max)


def test_the_epoch_sums_are_the_old_per_step_float_sums():
    """EpochAccumulator read at the end sums what the old one summed per step, in the same order, to the bit."""
    rng = np.random.default_rng(2)
    results = [_result(rng, R=3) for _ in range(9)]
    acc = EpochAccumulator(EpochSums(steps=4, loss_max=1.5, loss_random=0.25, acc=2.0))
    old = {"loss_max": 1.5, "loss_min": 0.0, "loss_random": 0.25, "acc": 2.0}
    for k, res in enumerate(results):
        acc.add(res.record(), 6, 0.5, None)
        old["loss_max"] += res.loss_max
        old["loss_min"] += res.loss_min
        old["loss_random"] += float(np.mean(res.loss_random))
        old["acc"] += res.acc_max
        if k == 4:
            acc.state()  # a checkpoint in the middle
    state = acc.state()
    assert {k: state[k] for k in old} == old and state["steps"] == 13
    restored = EpochAccumulator.from_state(state)
    assert restored.row(0, "uniform") == acc.row(0, "uniform")


def _flops_lut(space, path):
    meta = io.provenance(space_name=space.name, space_hash=space.hash, device="flops", unit="MMAC per forward",
                         unit_short="MMAC", fingerprint={"backend": "flops"}, lam=0.0)
    io.write_records(lut.lut_records(space, variable_macs(space) / 1e6, np.ones(space.n_variables, int)), path, "lut",
                     meta)


def _outputs(d):
    """Weights, unary rows and metric rows (timings dropped) of a run's output folder."""
    w = torch.load(d / "model.pt", weights_only=False)["model"]
    rows = io.read_table(d / "unaries.parquet", "unaries")[0].to_pylist()
    skip = {"seconds", "images_per_s"}
    m = [{k: v for k, v in r.items() if k not in skip} for r in io.read_table(d / "metrics.parquet", "train_metrics")[0].to_pylist()]
    return w, rows, m


def _same(a, b):
    wa, ra, ma = a
    wb, rb, mb = b
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa) and ra == rb and ma == mb


@pytest.mark.slow
def test_the_device_path_run_on_the_cpu_trains_the_same_supernets(tmp_path, monkeypatch):
    """OWS, then AOWS with training-time unaries (its sampler reads the deferred window every step): the path CUDA
    runs (device-side guard, records read late, unaries applied when read), forced on the CPU, writes the same
    weights, unary rows and metrics as the CPU's read-every-step path, bit for bit."""
    cfg = validate({**TINY, "supernet": {**TINY["supernet"], "unaries": "training"}})
    space = space_from_config(cfg)
    _flops_lut(space, tmp_path / "lut.parquet")
    out = {}
    for name, defer in (("now", False), ("deferred", True)):
        monkeypatch.setattr(sandwich, "defers", lambda device, d=defer: d)
        d = tmp_path / name
        train_supernet(cfg, d / "ows", d / "r1", method="ows", progress=False)
        train_supernet(cfg, d / "aows", d / "r2", method="aows", lut_path=tmp_path / "lut.parquet", device="flops",
                       target="range:0.4", init_from=d / "ows/checkpoints/after_1.pt", progress=False)
        out[name] = (_outputs(d / "ows"), _outputs(d / "aows"))
    assert _same(out["now"][0], out["deferred"][0])
    assert _same(out["now"][1], out["deferred"][1])


@pytest.mark.slow
def test_a_nonfinite_loss_on_the_device_path_stops_the_run_before_any_output(tmp_path, monkeypatch):
    """lr = 1e30 on the deferred path: NonFiniteLoss at the next read (a checkpoint or the epoch's end), no unaries."""
    monkeypatch.setattr(sandwich, "defers", lambda device: True)
    cfg = validate({**TINY, "supernet": {**TINY["supernet"], "lr": 1e30}})
    with pytest.raises(NonFiniteLoss, match="non-finite training loss at step"):
        train_supernet(cfg, tmp_path / "n", tmp_path / "rn", method="ows", progress=False)
    assert not (tmp_path / "n/unaries.parquet").exists()


def test_cublas_workspace_is_set_before_the_process_group_touches_cuda(monkeypatch):
    """train.deterministic (D29): CUBLAS_WORKSPACE_CONFIG is in the environment before init_distributed runs (which
    may initialise CUDA); a user's own value is kept; without determinism nothing is set."""
    seen = []

    def fake_init(processes, device, key):
        seen.append(os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
        return distributed.Dist()

    monkeypatch.setattr(distributed, "init_distributed", fake_init)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    with distributed.process_group(1, "cpu"):
        pass
    with distributed.process_group(1, "cpu", deterministic=True):
        pass
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    with distributed.process_group(1, "cpu", deterministic=True):
        pass
    assert seen == [None, ":4096:8", ":16:8"]


def _retrain(cfg, tmp_path, name):
    from aows_core.config import resolve, resume_settings
    from aows_core.data import load_splits
    from aows_core.training.accelerator import accelerator
    from aows_core.training.loop import RunControl
    from aows_core.training.retrain import RetrainJob, run_id, train_network

    s = resolve(cfg)
    space, channels = s.space, tuple(s.space.max_config)
    splits = load_splits(s.data_spec("retrain"))
    job = RetrainJob(channels, s.seed, run_id(resume_settings(cfg, "retrain"), channels))
    return train_network(s.retrain, space, job, splits, accelerator(s.train), RunControl(tmp_path / name, False))


def test_retraining_on_the_device_path_run_on_the_cpu_is_the_same_and_refuses_nan(tmp_path, monkeypatch):
    """Retraining (§7) with the losses kept on the device and read at logging points (D29): the same weights and
    last-epoch loss sum as reading every step; a non-finite loss is not applied and raises at the next read."""
    cfg = validate({**TINY, "retrain": {"epochs": 1, "batch_size": 64, "checkpoint_every": 5, "train_subset": 128}})
    now = _retrain(cfg, tmp_path, "now")
    monkeypatch.setattr(sandwich, "defers", lambda device: True)
    later = _retrain(cfg, tmp_path, "later")
    assert now.loss_n == later.loss_n == 2 and now.loss_sum == later.loss_sum
    a, b = now.model.state_dict(), later.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    bad = validate({**cfg, "retrain": {**cfg["retrain"], "lr": 1e30}})
    with pytest.raises(FloatingPointError, match="non-finite loss at epoch 0 step"):
        _retrain(bad, tmp_path, "bad")
