"""Slimmable residual supernet (§3, §5; D44, D10): one mask per node makes a masked sample the reduced network;
sandwich step, BN-recalibrated scoring and the estimation pass on residual spaces."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from net_cases import FAMILIES, images, random_configs, randomise
from torch import nn

from aows_core.nets.batchnorm import synchronised
from aows_core.nets.estimation import estimate_differences, frozen_differences
from aows_core.nets.network import Network
from aows_core.nets.sandwich import sandwich_step
from aows_core.nets.scoring import SubnetScorer
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import place_widths

torch.set_num_threads(1)
N_CONFIGS = 100


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state (the networks' own initialisation draws from it)."""
    torch.manual_seed(0)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_state_dict_is_the_max_network(family):
    space = FAMILIES[family]
    own = Supernet(space).state_dict()
    ref = Network(space, space.max_config).state_dict()
    assert list(own) == list(ref) and all(own[k].shape == ref[k].shape for k in ref)
    sub = Supernet(space).subnet_state_dict(space.min_config)
    want = Network(space, space.min_config).state_dict()
    assert {k: v.shape for k, v in sub.items()} == {k: v.shape for k, v in want.items()}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_masked_sliced_and_subnet_agree_in_eval(family):
    """100 configurations (eval, float32, random BN statistics): sample k of one mixed batch masked to configuration
    k, the sliced forward and the fixed Network with the sliced weights give the same logits (≤ 1e-5); a batch
    of one configuration repeated, masked, gives the sliced logits; truncation to the batch's widest is exact."""
    space = FAMILIES[family]
    sup = randomise(Supernet(space)).eval()
    configs = random_configs(space, N_CONFIGS)
    x = images(space, N_CONFIGS)
    with torch.no_grad():
        mixed = sup(x, torch.tensor(configs))
        assert mixed.abs().max() > 0.3  # logits of order 1 (0.3–3), so 1e-5 is a real test
        torch.testing.assert_close(sup(x, place_widths(torch.tensor([configs]), "cpu")[0]), mixed, atol=0, rtol=0)
        torch.testing.assert_close(sup(x, torch.tensor(configs), truncate=False), mixed, atol=1e-5, rtol=0)
        for k, ch in enumerate(configs):
            xk = x[k : k + 1]
            sliced = sup.forward_sliced(xk, ch)
            torch.testing.assert_close(mixed[k : k + 1], sliced, atol=1e-5, rtol=0)
            torch.testing.assert_close(sup.subnet(ch)(xk), sliced, atol=1e-5, rtol=0)
        for k, ch in enumerate(configs[:10]):
            xb = x[4 * k : 4 * k + 4]
            torch.testing.assert_close(sup(xb, torch.tensor([ch] * 4)), sup.forward_sliced(xb, ch), atol=1e-5, rtol=0)


def test_channels_last_masked_equals_sliced():
    space = FAMILIES["tiny_bottleneck"]
    sup = randomise(Supernet(space, channels_last=True)).eval()
    configs = random_configs(space, 8, seed=3)
    x = images(space, 8)
    with torch.no_grad():
        out = sup(x, torch.tensor(configs))
        for k, ch in enumerate(configs):
            torch.testing.assert_close(out[k : k + 1], sup.forward_sliced(x[k : k + 1], ch), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_train_mode_masked_bn_equals_sliced_bn(family):
    """Train mode, a batch of one configuration (float64, so that the masked BN's analytic backward and torch's are
    compared beyond float32 rounding): masked BN statistics are the sliced network's batch statistics (logits and
    gradients); the max configuration's module forward is the sliced max forward and updates the running
    statistics alike."""
    space = FAMILIES[family]
    a = randomise(Supernet(space)).double().train()
    b = copy.deepcopy(a)
    ch = random_configs(space, 3, seed=4)[2]
    x, y = images(space, 6).double(), torch.arange(6) % space.num_classes
    la, lb = a(x, torch.tensor([ch] * 6)), b.forward_sliced(x, ch, update_stats=False)
    torch.testing.assert_close(la, lb, atol=1e-10, rtol=0)
    F.cross_entropy(la, y).backward()
    F.cross_entropy(lb, y).backward()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-10, rtol=1e-7, msg=n)
    torch.testing.assert_close(a(x), b.forward_sliced(x, space.max_config), atol=1e-10, rtol=0)
    for (n, s), t in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(s, t, atol=1e-10, rtol=1e-8, msg=n)


@pytest.mark.parametrize("family", ["mobilenet_v2_fmnist", "tiny_bottleneck"])
def test_synchronised_bn_of_one_rank_is_plain_bn(family, tmp_path):
    """With `bn_group` set (one gloo rank, D30) the masked, sliced and max passes in train mode give the logits and
    running statistics of the passes without it (float64)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    space = FAMILIES[family]
    a = randomise(Supernet(space)).double().train()
    b = copy.deepcopy(a)
    x = images(space, 6).double()
    w = torch.tensor(random_configs(space, 8, seed=5)[2:])
    ch = random_configs(space, 3, seed=6)[2]

    def passes(net):
        return [net(x, w), net.forward_sliced(x, ch, update_stats=True), net(x)]

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        with synchronised(b, dist.group.WORLD):
            got = passes(b)
    finally:
        dist.destroy_process_group()
    for u, v in zip(passes(a), got):
        torch.testing.assert_close(v, u, atol=1e-10, rtol=0)
    for (n, s), t in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(t, s, atol=1e-10, rtol=1e-8, msg=n)


def test_sandwich_step_trains_a_residual_supernet():
    space = FAMILIES["mobilenet_v2_fmnist"]
    sup = Supernet(space)
    before = copy.deepcopy(sup.state_dict())
    x, y = images(space, 6), torch.arange(6) % 10
    w = torch.tensor(random_configs(space, 8, seed=2)[2:])
    res = sandwich_step(sup, x, y, w, torch.optim.SGD(sup.parameters(), lr=0.1))
    assert res.ce_random.shape == (1, 6) and torch.isfinite(res.losses).all()
    assert any(not torch.equal(before[k], v) for k, v in sup.state_dict().items())


def no_dropout(net: Network) -> Network:
    """The fixed network without its kinds' dropout (MobileNet-v2's, a traced head's; the supernet has none)."""
    for m in net.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return net


def recalibrated_reference(sup: Supernet, ch, cal, x) -> torch.Tensor:
    """The scorer's definition by hand: the fixed network, one train-mode pass on the calibration images with
    momentum 1 (running statistics = their batch statistics, unbiased variance), then eval on x."""
    net = no_dropout(sup.subnet(ch))
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 1.0
    with torch.no_grad():
        net.train()(cal)
        return net.eval()(x)


@pytest.mark.parametrize("family", ["mobilenet_v2_fmnist", "tiny_bottleneck"])
def test_scorer_recalibrates_each_configuration(family):
    """SubnetScorer on a residual supernet: errors and cross-entropy of the fixed network recalibrated on the
    calibration images (D22), scored one at a time and batched (several configurations per forward)."""
    space = FAMILIES[family]
    sup = randomise(Supernet(space))
    cal, x = images(space, 16, seed=5), images(space, 10, seed=6)
    y = torch.arange(10) % space.num_classes
    scorer = SubnetScorer(sup, cal, x, y, batch_size=4, batched=True, per_pass=3)
    assert scorer.batched
    configs = random_configs(space, 4, seed=9)
    for ch, (errors, ce) in zip(configs, scorer.score_many(configs)):
        logits = recalibrated_reference(sup, ch, cal, x)
        assert errors == int((logits.argmax(1) != y).sum())
        assert ce == pytest.approx(float(F.cross_entropy(logits.double(), y, reduction="sum")), rel=1e-5)
        one = scorer.score(ch, start_edge=3)
        assert one[0] == errors and one[1] == pytest.approx(ce, rel=1e-5)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_estimation_batched_and_sliced_are_the_reduced_networks(family):
    """The estimation pass on a residual space, sliced and batched: each difference is the reduced network's
    train-mode batch loss minus the max network's (D26)."""
    space = FAMILIES[family]
    sup = randomise(Supernet(space)).eval()
    x, y = images(space, 8), torch.arange(8) % space.num_classes
    configs = random_configs(space, 3, seed=11)
    d = frozen_differences(sup, x, y, configs, batch_size=4)
    np.testing.assert_allclose(estimate_differences(sup, x, y, configs, batch_size=4, batched=True), d, atol=1e-4)
    for k, ch in enumerate(configs):
        b = slice(4 * (k % 2), 4 * (k % 2) + 4)
        with torch.no_grad():
            ce = F.cross_entropy(no_dropout(sup.subnet(ch)).train()(x[b]), y[b]) - F.cross_entropy(
                no_dropout(sup.subnet(space.max_config)).train()(x[b]), y[b])
        assert d[k] == pytest.approx(float(ce), abs=1e-5)
