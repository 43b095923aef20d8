"""Adding a layer kind is one file (docs/method.md D45): a squeeze-and-excitation kind (tests/nets/se_kind.py) in a
small residual space, through the networks, ONNX and every stage on the synthetic device."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import se_kind  # the one file: importing it registers the `my_se` kind
import torch
import torch.nn.functional as F
from net_cases import images, random_configs, randomise
from torch import nn

from aows_core import artifacts
from aows_core.config import validate
from aows_core.devices.flops import network_macs, network_params
from aows_core.kinds import register, unregister
from aows_core.nets.network import Network, folded_state
from aows_core.nets.onnx import check_agreement, onnx_from_weights
from aows_core.nets.supernet import Supernet
from aows_core.space import PRESETS, Block, SearchSpace, Theta, register_preset, width_choices

MULTS = (0.5, 1.0, 1.5)


@pytest.fixture(scope="module", autouse=True)
def _se_registered():
    """The kind for this module's tests only (registered again after another module's teardown removed it)."""
    register(se_kind.SqueezeExciteKind)
    yield
    unregister("my_se")


def se_space(**overrides) -> SearchSpace:
    """28×28 grey images, 10 classes: a stem, an inverted residual block on the stem's stream, a stride-2 block to a
    new stream and a second block on it, each with a squeeze-and-excitation gate on its expansion (MobileNet-v3's
    place), and the classifier. Nodes: 0 input, 1 and 4 streams (tied), 2, 3, 5 expansions, 6 classes."""
    if overrides:
        raise ValueError(f"the se_tiny space takes no parameters, got {sorted(overrides)}")
    base = (16, 32, 32, 32, 64, 10)
    choices = ((1,), *(width_choices(b, MULTS) for b in base[:-1]), (10,))

    def t(hw, stride, k, kind):
        return Theta(hw, hw, stride, k, kind)

    edges_thetas = [
        ((0, 1), t(28, 2, 3, "conv")),
        ((1, 2), t(14, 1, 1, "conv")), ((2, 2), t(14, 1, 3, "dw")), ((2, 2), t(14, 1, 1, "my_se")),
        ((2, 1), t(14, 1, 1, "pconv")), ((1, 1), t(14, 1, 1, "add")),
        ((1, 3), t(14, 1, 1, "conv")), ((3, 3), t(14, 2, 3, "dw")), ((3, 3), t(7, 1, 1, "my_se")),
        ((3, 4), t(7, 1, 1, "pconv")),
        ((4, 5), t(7, 1, 1, "conv")), ((5, 5), t(7, 1, 3, "dw")), ((5, 5), t(7, 1, 1, "my_se")),
        ((5, 4), t(7, 1, 1, "pconv")), ((4, 4), t(7, 1, 1, "add")),
        ((4, 6), t(7, 1, 1, "linear")),
    ]
    blocks = (Block("conv", 0, 1, -1, 2, (0,)), Block("inverted_residual", 1, 1, 2, 1, (1, 2, 3, 4), -1, 5),
              Block("inverted_residual", 1, 4, 3, 2, (6, 7, 8, 9)),
              Block("inverted_residual", 4, 4, 5, 1, (10, 11, 12, 13), -1, 14), Block("classifier", 4, 6, -1, 1, (15,)))
    return SearchSpace("se_tiny", choices, tuple(th for _, th in edges_thetas), base,
                       tuple(e for e, _ in edges_thetas), blocks)


SPACE = se_space()


def counted(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(MACs, parameters) by forward hooks on Conv2d and Linear (test_network.py's rule)."""
    macs = [0]

    def hook(m, _inp, out):
        if isinstance(m, nn.Conv2d):
            k = m.kernel_size[0] * m.kernel_size[1]
            macs[0] += k * (m.in_channels // m.groups) * m.out_channels * out.shape[2] * out.shape[3]
        else:
            macs[0] += m.in_features * m.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model.eval()(x)
    for h in handles:
        h.remove()
    return macs[0], sum(p.numel() for p in model.parameters())


def test_the_new_kind_counts_what_its_network_computes():
    x = images(SPACE, 1)
    for ch in random_configs(SPACE, 6, seed=1):
        assert counted(Network(SPACE, ch), x) == (network_macs(SPACE, ch), network_params(SPACE, ch))
    assert {t.kind for t in SPACE.thetas} >= {"my_se", "dw", "add", "pconv"} and not SPACE.is_chain


def test_masked_sliced_and_reduced_agree_with_the_new_kind():
    """Eval: 50 configurations masked in one batch = sliced = the reduced network (≤ 1e-5); train mode (float64):
    masked and sliced batch statistics, logits and gradients agree."""
    torch.manual_seed(0)
    sup = randomise(Supernet(SPACE)).eval()
    configs = random_configs(SPACE, 50, seed=2)
    x = images(SPACE, 50)
    with torch.no_grad():
        mixed = sup(x, torch.tensor(configs))
        assert mixed.abs().max() > 0.5
        for k, ch in enumerate(configs):
            sliced = sup.forward_sliced(x[k : k + 1], ch)
            torch.testing.assert_close(mixed[k : k + 1], sliced, atol=1e-5, rtol=0)
            torch.testing.assert_close(sup.subnet(ch)(x[k : k + 1]), sliced, atol=1e-5, rtol=0)
    a = randomise(Supernet(SPACE)).double().train()
    b = randomise(Supernet(SPACE)).double().train()
    b.load_state_dict(a.state_dict())
    ch, xd, y = configs[3], x[:6].double(), torch.arange(6)
    la, lb = a(xd, torch.tensor([ch] * 6)), b.forward_sliced(xd, ch, update_stats=False)
    torch.testing.assert_close(la, lb, atol=1e-10, rtol=0)
    F.cross_entropy(la, y).backward()
    F.cross_entropy(lb, y).backward()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-10, rtol=1e-7, msg=n)


def test_the_new_kind_exports_what_torch_computes():
    x = images(SPACE, 3, seed=4)
    for ch in random_configs(SPACE, 3, seed=5):
        net = randomise(Network(SPACE, ch)).eval()
        proto = onnx_from_weights(SPACE, ch, folded_state(net), batch=None)
        onnx.checker.check_model(proto)
        assert {n.op_type for n in proto.graph.node} >= {"Sigmoid", "Mul", "Add"}
        check_agreement(proto, net, x, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_space_with_the_new_kind_runs_every_stage_on_the_synthetic_device(tmp_path):
    """sample → profile → fit → validate → OWS supernet → decode (OWS) → greedy → decisions (greedy, uniform) →
    retrain → export (ONNX checked against torch) → measure, in-process on the registered `se_tiny` preset."""
    register_preset("se_tiny", se_space)
    try:
        _every_stage(tmp_path)
    finally:
        PRESETS.pop("se_tiny")  # the preset (and the schema's preset list) as the other tests expect them


def _every_stage(d):
    from stage_calls import (
        decide_baseline,
        decode,
        export,
        fit_lut,
        greedy_trajectory,
        measure,
        profile,
        retrain,
        sample,
        train_supernet,
        validate_lut,
    )

    cfg = validate({
        "seed": 0, "space": {"preset": "se_tiny"},
        "devices": {"synth": {"backend": "synthetic", "noise": 0.01, "drift": 0.1, "nonadditive": 0.0}},
        "sampling": {"coverage": 6, "lambda_val": 30, "test": 60}, "profiling": {"repeats": 5, "retest": 10},
        "lut": {"lambdas": [0.0, 1e-3]}, "decode": {"targets": ["range:0.4"]},
        "data": {"train_subset": 2048, "search_val": 64, "calibration": 64},
        "supernet": {"epochs": 1, "batch_size": 64, "estimate_configs": 100, "estimate_images": 256}, "greedy": {"n_eval": 64, "n_cal": 64, "batch_size": 64},
        "retrain": {"epochs": 2, "batch_size": 64, "eval_batch_size": 2000, "seeds": [0]},
    })
    sample(cfg, d / "configs.parquet")
    profile(cfg, "synth", d / "configs.parquet", d / "lat.parquet", d / "resume", progress=False)
    fit_lut(cfg, "synth", d / "lat.parquet", d / "lut.parquet", d / "fit.parquet")
    val = validate_lut(cfg, "synth", d / "lat.parquet", d / "lut.parquet", d / "val.parquet", d / "pred.parquet",
                       d / "val.pdf")
    # the my_se layers' variables are fitted with the others: held-out networks predicted at the noise floor
    assert val["lut"]["nrmse"] <= 1.5 * val["sigma_n"] + 0.005 and val["lut"]["within_10pct"] >= 0.98
    train_supernet(cfg, d / "ows", d / "resume_ows", method="ows", progress=False)
    decode(cfg, "synth", "ows", d / "ows" / "unaries.parquet", d / "lut.parquet", ["range:0.4"], d / "ows.parquet")
    greedy_trajectory(cfg, d / "ows" / "model.pt", d / "greedy_traj.parquet", progress=False)
    decide_baseline(cfg, "synth", "greedy", d / "lut.parquet", ["range:0.4"], d / "greedy.parquet",
                    trajectory=d / "greedy_traj.parquet")
    decide_baseline(cfg, "synth", "uniform", d / "lut.parquet", ["range:0.4"], d / "uniform.parquet")
    decisions = artifacts.read_decisions([d / f"{m}.parquet" for m in ("ows", "greedy", "uniform")], SPACE, "synth")
    for row in decisions:
        assert row["predicted_latency_ms"] <= row["target_ms"] * (1 + 1e-9)
        SPACE.indices(row["channels"])
    retrain(cfg, d / "ows.parquet", d / "retrained", d / "resume_rt", progress=False)
    res = artifacts.read_table(d / "retrained" / "result.parquet", "retrain")[0].to_pylist()[0]
    assert res["test_acc"] > 0.5  # Fashion-MNIST learnt in two short epochs (chance: 0.1)
    info = export(cfg, d / "retrained" / "model.pt", d / "export")
    assert (d / "export" / "model.onnx").exists() and info["top1_agreement"] == 1.0
    measure(cfg, "synth", [d / "ows.parquet", d / "greedy.parquet"], d / "lat.parquet", d / "lut.parquet",
            d / "measure.parquet")
    rows = artifacts.read_table(d / "measure.parquet", "measure")[0].to_pylist()
    assert len(rows) == 2 and all(np.isfinite(r["measured_ms"]) for r in rows)
