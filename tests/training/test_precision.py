"""Device and precision of the training stages (`train:`, docs/method.md D29): the rule, its errors, its hash,
bf16 autocast that trains, resumes exactly and keeps BatchNorm in float32; CUDA checks where a GPU is present."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stage_calls import greedy_trajectory, proxy_scores, train_supernet

from aows_core import artifacts as io
from aows_core.config import (
    STAGE_SECTIONS,
    ConfigError,
    TrainSettings,
    net_key,
    resolve,
    settings_hash,
    space_from_config,
    stage_settings,
    validate,
)
from aows_core.nets.batchnorm import MaskedBatchNorm, MaskedBNOptions
from aows_core.nets.sandwich import sandwich_step
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import widths_tensor
from aows_core.search.sampler import uniform_layer_indices
from aows_core.stages import retrain as retrain_stage
from aows_core.training.accelerator import Accelerator, accelerator, resolve_device

TRAINING_STAGES = {"train_ows", "train_aows", "greedy", "proxy", "retrain"}
TINY = {
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 2, "batch_size": 32, "checkpoint_every": 3, "threads": 1, "estimate_configs": 24,
                 "estimate_batch": 32, "estimate_images": 64},
    "aows": {"warmup_epochs": 1, "window": 50, "refresh": 3, "estimate_configs": 16},
    "greedy": {"n_eval": 64, "n_cal": 64, "batch_size": 64},
    "retrain": {"epochs": 1, "batch_size": 64, "checkpoint_every": 2, "eval_batch_size": 2000, "seeds": None},
}
BF16 = {"device": "cpu", "precision": "bf16"}
cuda = pytest.mark.cuda  # skipped without a GPU (tests/conftest.py); scripts/gpu_check.sh runs these


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---- the rule and its errors -------------------------------------------------------------------
def test_auto_is_cuda_only_where_torch_sees_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto", local_rank=1, local_world=2) == torch.device("cuda", 1)
    assert resolve_device("auto", local_rank=2, local_world=3) == torch.device("cpu")  # not a GPU for every process
    assert resolve_device("cpu", local_rank=1, local_world=2) == torch.device("cpu")  # cpu forces gloo on the CPU


def test_cuda_without_cuda_is_refused_naming_the_key_and_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"train\.device: cuda.*set train\.device: auto .* or cpu"):
        accelerator(TrainSettings(device="cuda"))


def test_fp16_on_the_cpu_is_refused_naming_the_key_and_the_fix(monkeypatch):
    needle = r"train\.precision: fp16 trains on CUDA only.*use train\.precision: bf16"
    with pytest.raises(ConfigError, match=needle):  # when the config is read: no machine trains fp16 on `cpu`
        validate({"train": {"device": "cpu", "precision": "fp16"}})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = validate({"train": {"precision": "fp16"}})  # auto: a valid config, for GPU machines
    with pytest.raises(ConfigError, match=needle):  # and refused where auto resolves to the CPU
        accelerator(resolve(cfg).train)
    with pytest.raises(ConfigError, match=r"train\.precision: fp16 with supernet\.processes = 2 is not supported"):
        validate({"train": {"precision": "fp16"}, "supernet": {"processes": 2}})


def test_a_stage_refuses_before_it_trains(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = validate({**TINY, "train": {"device": "cuda"}})
    with pytest.raises(ConfigError, match=r"train\.device"):
        train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False)
    assert not (tmp_path / "resume").exists()


@pytest.mark.parametrize("change", [{"device": "cpu"}, {"precision": "bf16"}])
def test_device_and_precision_rerun_the_training_stages_and_nothing_else(change):
    a, b = validate({}), validate({"train": change})
    for stage in STAGE_SECTIONS:
        differs = settings_hash(stage_settings(a, stage)) != settings_hash(stage_settings(b, stage))
        assert differs == (stage in TRAINING_STAGES), stage
    for stage in ("profile", "measure"):  # as the workflow hashes them, with their device's settings
        assert settings_hash(stage_settings(a, stage, "cpu")) == settings_hash(stage_settings(b, stage, "cpu"))


# ---- float32 BatchNorm under bf16 autocast -------------------------------------------------------
def test_masked_batchnorm_normalises_in_float32_under_bf16_autocast(tiny_space):
    torch.manual_seed(0)
    net = Supernet(tiny_space).train()
    bn = net.layers[0].bn
    C = bn.num_features
    z = torch.randn(6, C, 5, 5).bfloat16()
    m = (torch.rand(6, C) > 0.3).float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net._masked(z, bn, m, True)
    ref = MaskedBatchNorm.apply(z.float(), m, bn.weight, bn.bias, MaskedBNOptions(bn.eps))  # float32 statistics of the same inputs
    assert out.dtype == torch.float32 and torch.equal(out, ref)
    low = MaskedBatchNorm.apply(z, m, bn.weight.bfloat16(), bn.bias.bfloat16(), MaskedBNOptions(bn.eps))  # what bfloat16 BN would give
    assert not torch.equal(out, low.float())


def test_bf16_sandwich_steps_keep_the_running_statistics_float32(tiny_space):
    torch.manual_seed(0)
    net = Supernet(tiny_space, channels_last=True)
    before = {k: v.clone() for k, v in net.named_buffers() if k.endswith(("running_mean", "running_var"))}
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 4, (16,))
    bf16 = Accelerator(torch.device("cpu"), "bf16")
    for k in range(3):
        idx = uniform_layer_indices(tiny_space, 16, np.random.default_rng(k))
        res = sandwich_step(net, x, y, widths_tensor(tiny_space, idx)[None], opt, 1, autocast=bf16.autocast)
        assert np.isfinite(res.loss)
    after = dict(net.named_buffers())
    assert all(after[k].dtype == torch.float32 and torch.isfinite(after[k]).all() for k in before)
    assert all(not torch.equal(after[k], before[k]) for k in before)  # the max passes updated them
    assert all(p.dtype == torch.float32 for p in net.parameters())  # autocast never casts the weights


def test_bf16_loss_after_n_steps_is_within_a_few_percent_of_fp32():
    """A fixed small conv+BN network, the same Fashion-MNIST batches and steps in fp32 and under bf16 autocast.

    Shallow on purpose: in the 14-layer MobileNet a 0.4 % perturbation of the weights alone moves the loss
    after 24 steps by up to 27 % in fp32 (docs/method.md D29), which would hide what autocast does."""
    from torch import nn

    from aows_core.config import data_spec
    from aows_core.data import first_images, load_splits

    x, y = first_images(load_splits(data_spec(validate(TINY))).train_batches(0), 256)
    losses = {}
    for precision in ("fp32", "bf16"):
        acc = Accelerator(torch.device("cpu"), precision)
        torch.manual_seed(0)
        layers = [m for c_in, c_out in ((1, 16), (16, 32), (32, 64))
                  for m in (nn.Conv2d(c_in, c_out, 3, 2, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())]
        net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        trace = []
        for step in range(40):
            xb, yb = x[(step % 4) * 64:(step % 4 + 1) * 64], y[(step % 4) * 64:(step % 4 + 1) * 64]
            with acc.autocast():
                logits = net(xb).float()
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            trace.append(loss.item())
        losses[precision] = (np.mean(trace[:4]), np.mean(trace[-4:]))
    assert losses["fp32"][1] < 0.6 * losses["fp32"][0]  # it learns
    assert losses["bf16"][1] == pytest.approx(losses["fp32"][1], rel=0.03)


# ---- the stages in bf16 on the CPU: train, resume exactly ---------------------------------------
@pytest.fixture(scope="module")
def bf16_supernet(tmp_path_factory):
    d = tmp_path_factory.mktemp("bf16_supernet")
    cfg = validate({**TINY, "train": BF16})
    r = train_supernet(cfg, d / "out", d / "resume", method="ows", progress=False)
    return cfg, d, r


@pytest.mark.slow
def test_a_bf16_supernet_trains_and_resumes_exactly(bf16_supernet, tmp_path):
    cfg, d, full = bf16_supernet
    assert full["complete"] and np.isfinite(full["metrics"]["loss_max"])
    weights = torch.load(d / "out/model.pt", weights_only=False)["model"]
    torch.manual_seed(int(cfg["seed"]))
    init = Supernet(space_from_config(cfg), channels_last=True).state_dict()
    assert all(weights[k].dtype == init[k].dtype for k in init)  # float32 weights and BN statistics
    assert not _same(weights, init)
    meta = io.read_table(d / "out/metrics.parquet", "train_metrics")[1]
    assert meta["train"] == {**BF16, "deterministic": False, "resolved_device": "cpu"}
    r = train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False, stop_after_steps=5)
    assert not r["complete"] and r["step"] == 5  # between checkpoints (every 3 steps)
    train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False)
    assert _same(torch.load(tmp_path / "out/model.pt", weights_only=False)["model"], weights)  # bit-identical
    fp32 = validate({**TINY, "train": {"device": "cpu", "precision": "fp32"}})
    train_supernet(fp32, tmp_path / "fp32", tmp_path / "r32", method="ows", progress=False)
    assert not _same(torch.load(tmp_path / "fp32/model.pt", weights_only=False)["model"], weights)  # autocast acted


@pytest.mark.slow
def test_a_bf16_aows_supernet_resumes_exactly(bf16_supernet, tmp_path):
    """Adaptive sampling with frozen-weight estimation passes under autocast, stopped mid-epoch and resumed."""
    from aows_core.devices.flops import variable_macs
    from aows_core.latency import lut

    cfg, d, _ = bf16_supernet
    space = space_from_config(cfg)
    meta = io.provenance(space_name=space.name, space_hash=space.hash, device="flops", unit="MMAC per forward",
                         unit_short="MMAC", fingerprint={"backend": "flops"}, lam=0.0)
    rows = lut.lut_records(space, variable_macs(space) / 1e6, np.ones(space.n_variables, int))
    io.write_records(rows, tmp_path / "lut.parquet", "lut", meta)

    def run(name, stop_after=None):
        return train_supernet(cfg, tmp_path / name, tmp_path / f"r_{name}", method="aows", device="flops",
                              lut_path=tmp_path / "lut.parquet", target="range:0.3",
                              init_from=d / "out/checkpoints/after_1.pt", progress=False, stop_after_steps=stop_after)

    full = run("full")
    assert full["complete"] and full["metrics"]["sampling"] == "aows" and np.isfinite(full["metrics"]["loss_max"])
    assert not run("resumed", stop_after=4)["complete"]
    run("resumed")
    assert _same(torch.load(tmp_path / "resumed/model.pt", weights_only=False)["model"],
                 torch.load(tmp_path / "full/model.pt", weights_only=False)["model"])


@pytest.mark.slow
def test_bf16_retraining_learns_and_resumes_exactly(tmp_path):
    cfg = validate({**TINY, "data": {**TINY["data"], "train_subset": 1024}, "train": BF16,
                    "retrain": {**TINY["retrain"], "epochs": 3, "checkpoint_every": 7}})
    channels = net_key(space_from_config(cfg).max_config)

    def run(name, stop_after=None, config=cfg):
        return retrain_stage.run(config, {}, {"out_dir": tmp_path / name}, resume_dir=tmp_path / f"r_{name}",
                                 channels=channels, progress=False, stop_after=stop_after)

    full = run("full")
    assert full["complete"] and np.isfinite(full["final_train_loss"]) and full["test_acc"] > 0.25  # chance: 0.1
    part = run("resumed", stop_after=20)  # mid-epoch 1 (16 steps an epoch), between checkpoints
    assert not part["complete"] and (part["epoch"], part["step"]) == (1, 4)
    resumed = run("resumed")
    assert resumed["test_correct"] == full["test_correct"]
    weights = torch.load(tmp_path / "full/model.pt", weights_only=False)["model"]
    assert _same(torch.load(tmp_path / "resumed/model.pt", weights_only=False)["model"], weights)
    run("fp32", config=validate({**cfg, "train": {"device": "cpu", "precision": "fp32"}}))
    assert not _same(torch.load(tmp_path / "fp32/model.pt", weights_only=False)["model"], weights)


@pytest.mark.slow
def test_bf16_greedy_scores_agree_with_fp32(bf16_supernet, tmp_path):
    cfg, d, _ = bf16_supernet
    rows = greedy_trajectory(cfg, d / "out/model.pt", tmp_path / "bf16.parquet", progress=False)
    ref = greedy_trajectory(validate({**cfg, "train": {"device": "cpu", "precision": "fp32"}}), d / "out/model.pt",
                            tmp_path / "fp32.parquet", progress=False)
    assert len(rows) == len(ref) and rows[-1]["channels"] == ref[-1]["channels"]
    # the max network, scored in bf16 and in fp32: the same mean cross-entropy within 2 %, a few images' errors
    assert rows[0]["cross_entropy"] == pytest.approx(ref[0]["cross_entropy"], rel=0.02)
    assert abs(rows[0]["error"] - ref[0]["error"]) <= 0.1


@pytest.mark.slow
def test_bf16_proxy_scores_agree_with_fp32(bf16_supernet, tmp_path):
    cfg, d, _ = bf16_supernet
    space = space_from_config(cfg)
    rows = [{"method": "ows", "device": "flops", "target": f"range:{r}", "target_ms": 1.0, "unit": "MMAC",
             "channels": ch, "predicted_latency_ms": 1.0, "objective": 0.0, "gamma": 0.0, "dual_bound": 0.0,
             "gap": 0.0, "exact": True, "unvisited_policy": "exclude", "epoch": 1}
            for r, ch in ((0.0, space.min_config), (1.0, space.max_config))]
    io.write_decisions(rows, tmp_path / "decisions.parquet", {"space_hash": space.hash, "space_name": space.name})
    scores = {}
    for precision in ("bf16", "fp32"):
        c = validate({**cfg, "train": {"device": "cpu", "precision": precision}})
        out = tmp_path / f"{precision}.parquet"
        scores[precision] = proxy_scores(c, "flops", [tmp_path / "decisions.parquet"], d / "out/unaries.parquet",
                                         d / "out/model.pt", out)
        assert np.isfinite(io.read_table(out, "proxy")[1]["unaries_check"]["spearman_sum_delta_vs_supernet_ce"])
    # Σδ reads only the unaries, never the precision: each finalist's, in both precisions, is the sum of the unaries
    # table's own rows (the last epoch's frozen estimate, D26) at its widths, summed here from the file
    table = io.read_table(d / "out/unaries.parquet", "unaries")[0].to_pylist()
    last = max(r["epoch"] for r in table)
    delta = {(r["layer"], r["width"]): r["delta"] for r in table if r["epoch"] == last and r["estimator"] == "frozen"}
    expected = [sum(delta[(layer, c)] for layer, c in enumerate(r["channels"])) for r in rows]
    assert np.isfinite(expected).all() and expected[0] != expected[1]  # the min and the max network differ
    for precision in ("bf16", "fp32"):
        assert [r["sum_delta"] for r in scores[precision]] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    for a, b in zip(scores["bf16"], scores["fp32"]):
        assert abs(a["supernet_acc"] - b["supernet_acc"]) <= 0.1


def test_deterministic_makes_cuda_deterministic_and_leaves_the_cpu_alone(monkeypatch):
    """train.deterministic (D29): deterministic kernels, cuDNN autotuning off and cuBLAS's workspace setting for a
    CUDA device (no GPU needed to resolve one); nothing changes for the CPU or without the key."""
    calls = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on: calls.append(on))
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    on = TrainSettings(deterministic=True)
    assert accelerator(on, torch.device("cpu")).device.type == "cpu" and calls == []
    accelerator(TrainSettings(), torch.device("cuda", 0))
    assert calls == [] and torch.backends.cudnn.benchmark
    assert accelerator(on, torch.device("cuda", 0)).device == torch.device("cuda", 0)
    assert calls == [True] and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


# ---- CUDA: one command checks a GPU install ------------------------------------------------------
@cuda
def test_one_supernet_step_on_cuda_in_bf16(tmp_path):
    cfg = validate({**TINY, "train": {"device": "cuda", "precision": "bf16"}})
    r = train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False, stop_after_steps=0)
    assert not r["complete"] and r["step"] == 1
    state = torch.load(tmp_path / "resume/checkpoint.pt", map_location="cpu", weights_only=False)["model"]
    assert all(v.dtype != torch.bfloat16 and (not v.is_floating_point() or torch.isfinite(v).all())
               for v in state.values())


@cuda
def test_one_retraining_step_on_cuda_in_bf16(tmp_path):
    cfg = validate({**TINY, "train": {"device": "cuda", "precision": "bf16"}})
    r = retrain_stage.run(cfg, {}, {"out_dir": tmp_path / "out"}, resume_dir=tmp_path / "resume",
                          channels=net_key(space_from_config(cfg).max_config), progress=False, stop_after=0)
    assert not r["complete"] and r["step"] == 1
    state = torch.load(tmp_path / "resume/checkpoint.pt", map_location="cpu", weights_only=False)["model"]
    assert all(not v.is_floating_point() or (v.dtype == torch.float32 and torch.isfinite(v).all())
               for v in state.values())


@cuda
def test_a_deterministic_cuda_retraining_resumes_exactly(tmp_path):
    """train.deterministic on CUDA: stopped mid-epoch and resumed, the weights equal an uninterrupted run's."""
    cfg = validate({**TINY, "train": {"device": "cuda", "precision": "fp32", "deterministic": True},
                    "retrain": {**TINY["retrain"], "epochs": 2, "checkpoint_every": 3}})
    channels = net_key(space_from_config(cfg).max_config)

    def run(name, stop_after=None):
        return retrain_stage.run(cfg, {}, {"out_dir": tmp_path / name}, resume_dir=tmp_path / f"r_{name}",
                                 channels=channels, progress=False, stop_after=stop_after)

    full = run("full")
    assert not run("resumed", stop_after=5)["complete"]
    resumed = run("resumed")
    assert resumed["test_correct"] == full["test_correct"]
    assert _same(torch.load(tmp_path / "resumed/model.pt", weights_only=False)["model"],
                 torch.load(tmp_path / "full/model.pt", weights_only=False)["model"])


@cuda
def test_greedy_scores_on_cuda_in_bf16(tmp_path):
    cfg = validate({**TINY, "train": {"device": "cuda", "precision": "bf16"}})
    space = space_from_config(cfg)
    torch.manual_seed(0)
    model = Supernet(space, channels_last=True)
    io.save_torch({"space": space.to_dict(), "space_hash": space.hash, "model": model.state_dict(),
                          "run_id": "cuda-check"}, tmp_path / "model.pt")
    rows = greedy_trajectory(cfg, tmp_path / "model.pt", tmp_path / "greedy.parquet", progress=False)
    assert rows[0]["channels"] == space.max_config and rows[-1]["channels"] == space.min_config
    assert all(0.0 <= r["error"] <= 1.0 for r in rows)
