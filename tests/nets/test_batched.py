"""Batched scoring: several configurations per forward, each with its own BatchNorm statistics, equal the
sliced one-at-a-time passes — the estimation pass (D26), recalibrated scoring (§3, D22) and greedy's trajectory.

The batched path is CUDA's; here it is forced on the CPU. In float32 the sliced pass itself lies up to 4e-5 nats
from its float64 value on these 27-unit random networks (BatchNorm over 16 images amplifies rounding), and the
batched one as far, summing in other orders: float32 comparisons use atol 1e-4 nats, and the float64 ones are tight
(1e-10), so error counts and greedy's ties are compared exactly there.
"""

import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from aows_core.nets import batched as B
from aows_core.nets import estimation
from aows_core.nets.estimation import batched_differences, estimate_differences, frozen_differences
from aows_core.nets.scoring import SubnetScorer
from aows_core.nets.supernet import Supernet
from aows_core.search.baselines import greedy_search
from aows_core.space import DEFAULT_PRESET, get_space

torch.set_num_threads(1)


def randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BN affine parameters (non-zero shifts, docs/method.md D10) and a classifier giving O(1) logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(1 + 0.3 * torch.randn(m.num_features, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.num_features, generator=g))
        w = model.classifier.weight
        w.copy_(2 * torch.randn(w.shape, generator=g) / w.shape[1] ** 0.5)
    return model


def random_configs(space, k, seed=0, shared=True):
    """k random configurations; with `shared`, some share a prefix with another (the plan merges those)."""
    rng = np.random.default_rng(seed)
    cfgs = [[int(rng.choice(c)) for c in space.layer_choices] for _ in range(k)]
    cfgs[1] = list(space.max_config)
    cfgs[2] = list(space.min_config)
    if shared:
        cfgs[3] = cfgs[0][:5] + cfgs[3][5:]
        cfgs[4] = list(cfgs[0])  # a duplicate
    return cfgs


@pytest.fixture(scope="module")
def space():
    return get_space(DEFAULT_PRESET)


@pytest.fixture(scope="module")
def small():
    """The default preset at a quarter of its widths, for the float64 comparisons."""
    return get_space(DEFAULT_PRESET, width_mult=0.25, n_choices=4)


@pytest.fixture(scope="module")
def images(space):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, space.in_channels, *space.resolution, generator=g)
    y = torch.randint(0, space.num_classes, (64,), generator=g)
    return x, y


def test_prefix_plan_runs_each_distinct_prefix_once(space):
    cfgs = random_configs(space, 9)
    sources = [0, 1, 0, 0, 0, 1, 1, 0, 1]
    plan = B.prefix_plan(space, cfgs, sources)
    assert plan.nodes == tuple((1,) if j == 0 else (j, j + 1) for j in range(space.n_layers))  # a chain's blocks
    for e in range(space.n_layers):
        distinct = {(s, *c[: e + 1]) for s, c in zip(sources, cfgs)}
        assert len(plan.widths[e]) == len(distinct)
    # following the parents back from each configuration's last group gives its widths and its source
    for k, (s, c) in enumerate(zip(sources, cfgs)):
        g, back = plan.last[k], []
        for e in reversed(range(space.n_layers)):
            back.append(int(plan.widths[e][g, -1]))
            g = plan.parents[e][g]
        assert back[::-1] == c and g == s
    assert plan.last[4] == plan.last[0]  # the duplicate runs once


def test_masked_channels_are_exact_zeros(space, images):
    net = randomise(Supernet(space))
    cfgs = random_configs(space, 5, seed=3, shared=False)
    dp = B.DevicePlan(B.prefix_plan(space, cfgs), torch.device("cpu"))
    with torch.no_grad():
        x5 = B.grouped_features(net, dp, B.as_sources(net, images[0][:8], 1), B.TRAIN, [])[dp.last]
    for k, c in enumerate(cfgs):
        assert (x5[k, :, c[-1]:] == 0).all()
        assert (x5[k, :, : c[-1]].abs().amax((0, 2, 3)) > 0).float().mean() > 0.5  # the active ones live (ReLU)


@pytest.mark.parametrize("channels_last", [False, True])
def test_batched_estimation_equals_sliced(space, images, channels_last):
    x, y = images
    net = randomise(Supernet(space, channels_last=channels_last))
    cfgs = random_configs(space, 12)
    ref = frozen_differences(net, x, y, cfgs, 16)
    assert np.abs(ref).max() > 0.1  # differences of a real size, so atol 1e-4 tests something
    exact = frozen_differences(copy.deepcopy(net).double(), x.double(), y, cfgs, 16)
    for per_pass in (1, 5, 12):
        got = batched_differences(net, x, y, cfgs, 16, per_pass=per_pass)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)
        np.testing.assert_allclose(got, exact, rtol=0, atol=1e-4)  # as accurate as the sliced pass
    assert got[1] == pytest.approx(0.0, abs=1e-4)  # the max configuration against itself
    assert net.training  # the mode is restored


def test_estimation_float64_is_tight_and_leaves_running_statistics(small, images):
    x, y = images
    net = randomise(Supernet(small)).double().eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    cfgs = random_configs(small, 8, seed=5)
    ref = frozen_differences(net, x.double(), y, cfgs, 32)
    got = batched_differences(net, x.double(), y, cfgs, 32, per_pass=3)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="fewer than one batch"):
        batched_differences(net, x[:31].double(), y[:31], cfgs, 32)
    assert not net.training
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())


def test_estimate_differences_chooses_by_device(space, images, monkeypatch):
    x, y = images
    net = randomise(Supernet(space))
    cfgs = random_configs(space, 6)
    called = []
    for name in ("frozen_differences", "batched_differences"):
        real = getattr(estimation, name)
        monkeypatch.setattr(estimation, name, lambda *a, _r=real, _n=name, **k: called.append(_n) or _r(*a, **k))
    cpu = estimate_differences(net, x, y, cfgs, 16)
    forced = estimate_differences(net, x, y, cfgs, 16, batched=True)
    assert called == ["frozen_differences", "batched_differences"]
    np.testing.assert_allclose(forced, cpu, rtol=0, atol=1e-4)
    assert not B.on_cuda(net) and SubnetScorer(net, x[:8], x[8:], y[8:], 16).batched is False


def _scorer(net, x, y, **kw):
    return SubnetScorer(net, x[:24], x[24:], y[24:], batch_size=16, **kw)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_score_many_equals_one_at_a_time(space, small, images, dtype, tol):
    x, y = images
    space = space if dtype == torch.float32 else small
    net = randomise(Supernet(space, channels_last=True)).to(dtype)
    x = x.to(dtype)
    cfgs = random_configs(space, 10, seed=7)
    one = [_scorer(net, x, y).score(c) for c in cfgs]
    many = _scorer(net, x, y, batched=True, per_pass=4).score_many(cfgs)
    assert len({e for e, _ in one}) > 1  # configurations that score differently
    assert [e for e, _ in many] == [e for e, _ in one]
    n = len(y) - 24
    np.testing.assert_allclose([ce / n for _, ce in many], [ce / n for _, ce in one], rtol=0, atol=tol)
    assert _scorer(net, x, y, batched=False).score_many(cfgs) == one  # the CPU path is `score`, unchanged


def test_score_many_reduces_once_per_call(small, images):
    """One host copy and one sum over the processes (D30) per call, however many configurations: shares of the
    evaluation images sum to the whole score."""
    x, y = images
    net = randomise(Supernet(small)).double()
    x = x.double()
    cfgs = random_configs(small, 6, seed=9)
    calls = []

    def twice(v):
        calls.append(len(v))
        return [2 * a for a in v]

    whole = _scorer(net, x, y, batched=True).score_many(cfgs)
    doubled = _scorer(net, x, y, batched=True, per_pass=2, reduce=twice).score_many(cfgs)
    assert calls == [1, 2 * len(cfgs)]  # n at construction, then one reduce for the 3 chunks
    assert [e for e, _ in doubled] == [2 * e for e, _ in whole]
    shares = [SubnetScorer(net, x[:24], x[24 + r::2], y[24 + r::2], 16, batched=True).score_many(cfgs)
              for r in range(2)]
    assert [a[0] + b[0] for a, b in zip(*shares)] == [e for e, _ in whole]
    np.testing.assert_allclose([a[1] + b[1] for a, b in zip(*shares)], [ce for _, ce in whole], rtol=1e-12)


def test_greedy_trajectory_batched_equals_one_at_a_time():
    space = get_space(DEFAULT_PRESET, n_choices=2, width_mult=0.25, resolution=8)
    torch.manual_seed(0)
    net = randomise(Supernet(space), seed=2).double()  # float64: ties compared exactly
    g = torch.Generator().manual_seed(2)
    cal, x = (torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64) for n in (24, 40))
    y = torch.randint(0, 10, (40,), generator=g)
    one = greedy_search(SubnetScorer(net, cal, x, y, batch_size=16))
    many = greedy_search(SubnetScorer(net, cal, x, y, batch_size=16, batched=True))
    assert [r["channels"] for r in many] == [r["channels"] for r in one]
    assert [r["errors"] for r in many] == [r["errors"] for r in one]
    np.testing.assert_allclose([r["cross_entropy"] for r in many], [r["cross_entropy"] for r in one], rtol=1e-11)
    assert many[-1]["channels"] == space.min_config and len({r["errors"] for r in one}) > 1


@pytest.mark.parametrize("family, n_choices", [("mobilenet_v2", 2), ("resnet", 3)])  # MobileNet-v2: 17 blocks
def test_every_family_batched_equals_sliced(family, n_choices):
    """Residual spaces (tied streams, inner widths, adds, projections; D44) through the batched passes, float64:
    the estimation differences, the recalibrated scores and greedy's trajectory equal the sliced ones. At 14×14
    pixels, not the presets' 28×28: the same blocks, strides and projections at a quarter of the float64 work."""
    space = get_space(f"{family}_fmnist", n_choices=n_choices, width_mult=0.5, resolution=14)
    torch.manual_seed(0)
    net = randomise(Supernet(space), seed=4).double()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(48, 1, 14, 14, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (48,), generator=g)
    cfgs = random_configs(space, 8, seed=2)
    ref = frozen_differences(net, x, y, cfgs, 16)
    assert np.abs(ref).max() > 0.05
    np.testing.assert_allclose(batched_differences(net, x, y, cfgs, 16, per_pass=3), ref, rtol=0, atol=1e-10)
    one = [_scorer(net, x, y).score(c) for c in cfgs]
    many = _scorer(net, x, y, batched=True, per_pass=3).score_many(cfgs)
    assert [e for e, _ in many] == [e for e, _ in one] and len({e for e, _ in one}) > 1
    np.testing.assert_allclose([ce for _, ce in many], [ce for _, ce in one], rtol=1e-10)
    cal, xe, ye = x[:16], x[16:], y[16:]
    a = greedy_search(SubnetScorer(net, cal, xe, ye, batch_size=16))
    b = greedy_search(SubnetScorer(net, cal, xe, ye, batch_size=16, batched=True))
    assert [r["channels"] for r in b] == [r["channels"] for r in a]


@pytest.mark.cuda
def test_cuda_batched_is_chosen_equal_and_waits_once(space, images):
    """On CUDA the batched path is the default, equals the sliced one, and waits for the GPU at most once per chunk."""
    x, y = (t.cuda() for t in images)
    net = randomise(Supernet(space, channels_last=True)).cuda()
    cfgs = random_configs(space, 12)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    ref = frozen_differences(net, x, y, cfgs, 16)
    scorer = _scorer(net, x, y, per_pass=4)
    assert scorer.batched and B.on_cuda(net)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            got = estimate_differences(net, x, y, cfgs, 16)
            many = scorer.score_many(cfgs)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in seen if "synchroniz" in str(w.message)]
    assert len(syncs) <= 2 * 3  # ≤ one per chunk of each call, not one per configuration
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)
    one = [_scorer(net, x, y, batched=False).score(c) for c in cfgs]
    np.testing.assert_allclose([c for _, c in many], [c for _, c in one], rtol=1e-5)
