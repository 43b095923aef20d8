"""Slimmable supernet (§3, §5): masked per-sample widths compute exactly the sliced fixed networks; sandwich step."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aows_core.nets.batchnorm import MaskedBatchNorm, MaskedBNOptions
from aows_core.nets.network import Network
from aows_core.nets.sandwich import NonFiniteLoss, sandwich_step
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import widths_tensor
from aows_core.space import get_space, mobilenet_v1_space

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def space():
    # Small but complete: conv stem, stride-1 and stride-2 dwsep blocks, 4 choices per layer.
    return mobilenet_v1_space("small", resolution=16, in_channels=3, num_classes=5, width_mult=0.25, n_choices=4)


def randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random BN statistics and affine parameters, and a classifier large enough that logits are O(1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.3)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 1.5 + 0.5)
                m.weight.copy_(1 + 0.3 * torch.randn(m.num_features, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.num_features, generator=g))  # non-zero shifts: docs/method.md D10
        model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=g))
    return model


def random_idx(space, B, seed=0):
    rng = np.random.default_rng(seed)
    idx = np.stack([rng.integers(0, len(c), B) for c in space.layer_choices], 1)
    idx[0] = [len(c) - 1 for c in space.layer_choices]  # the max configuration
    idx[1] = 0  # the min configuration
    return idx


def fixed(space, model, channels, train=False):
    net = Network(space, channels, init=False)
    net.load_state_dict(model.subnet_state_dict(channels))
    return net.train(train)


def test_state_dict_is_the_max_network(space):
    sup = Supernet(space)
    ref = Network(space, space.max_config).state_dict()
    own = sup.state_dict()
    assert list(own) == list(ref)
    assert all(own[k].shape == ref[k].shape for k in ref)
    Network(space, space.max_config).load_state_dict(own)
    ch = space.min_config
    sub = sup.subnet_state_dict(ch)
    want = Network(space, ch).state_dict()
    assert {k: v.shape for k, v in sub.items()} == {k: v.shape for k, v in want.items()}


@pytest.mark.parametrize("channels_last", [False, True])
def test_masked_eval_equals_fixed_networks(space, channels_last):
    sup = randomise(Supernet(space, channels_last=channels_last)).eval()
    B = 8
    idx = random_idx(space, B)
    w = widths_tensor(space, idx)
    x = torch.randn(B, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = sup(x, w)
        assert out.abs().max() > 0.5  # logits of order 1, so atol 1e-5 is a real test
        for b in range(B):
            ch = w[b].tolist()
            ref = fixed(space, sup, ch)(x[b : b + 1])[0]
            torch.testing.assert_close(out[b], ref, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(sup.forward_sliced(x[b : b + 1], ch)[0], ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sup(x), sup.forward_sliced(x, space.max_config), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("train", [False, True])
def test_truncation_to_the_batch_max_width_is_exact(space, train):
    sup = randomise(Supernet(space)).train(train).double()
    idx = np.minimum(random_idx(space, 6, seed=9)[1:], 1)  # no max configuration: every layer is truncated
    w = widths_tensor(space, idx)
    x = torch.randn(5, 3, 16, 16, generator=torch.Generator().manual_seed(10), dtype=torch.double)
    a = sup(x, w, truncate=True)
    b = sup(x, w, truncate=False)
    # float64 rounding differs between the two paths (BN statistics summed over differently shaped tensors);
    # across CPUs it reaches ~3e-10 after 14 layers. A real masking defect is of order 1e-2.
    torch.testing.assert_close(a, b, atol=1e-8, rtol=1e-8)
    if not train:
        for k in range(5):
            ch = w[k].tolist()
            torch.testing.assert_close(a[k], fixed(space, sup, ch).double()(x[k : k + 1])[0], atol=1e-8, rtol=1e-8)


def test_masked_eval_default_space_dwsep_shift():
    """docs/method.md D10 on the default preset: masking only at block ends would leak the depthwise BN shift."""
    sp = get_space("mobilenet_v1_fmnist")
    sup = randomise(Supernet(sp), seed=3).eval()
    idx = random_idx(sp, 3, seed=2)
    w = widths_tensor(sp, idx)
    x = torch.randn(3, 1, 28, 28, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out = sup(x, w)
        for b in range(3):
            ch = w[b].tolist()
            torch.testing.assert_close(out[b], fixed(sp, sup, ch)(x[b : b + 1])[0], atol=1e-5, rtol=1e-5)


def test_sliced_train_mode_equals_fixed_network_and_gradients(space):
    sup = randomise(Supernet(space)).train()
    ch = space.channels_of(np.r_[0, random_idx(space, 3, seed=5)[2], 0])
    x = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(6))
    net = fixed(space, sup, ch, train=True)
    out = sup.forward_sliced(x, ch)
    ref = net(x)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    grads = dict(sup.named_parameters())
    for name, p in net.named_parameters():
        g = grads[name].grad[tuple(slice(0, s) for s in p.shape)]
        torch.testing.assert_close(g, p.grad, atol=1e-4, rtol=1e-4)


def test_sliced_running_stats(space):
    sup = Supernet(space).train()
    x = torch.randn(8, 3, 16, 16)
    before = copy.deepcopy(sup.state_dict())
    sup.forward_sliced(x, space.min_config)  # a smaller configuration leaves running statistics alone
    assert all(torch.equal(before[k], v) for k, v in sup.state_dict().items())
    sup.forward_sliced(x, space.min_config, update_stats=True)
    bn = sup.layers[1][1].bn  # pointwise BN of edge 1 (output node 2)
    c = space.min_config[1]
    assert not torch.equal(bn.running_mean[:c], before["layers.1.1.bn.running_mean"][:c])
    assert torch.equal(bn.running_mean[c:], before["layers.1.1.bn.running_mean"][c:])


def test_masked_train_uniform_batch_equals_sliced(space):
    """Masked batch statistics: a batch of one configuration computes what the sliced network computes.

    In float64: with 1×1 feature maps and a few samples, float32 train-mode BN is ill-conditioned for
    both implementations alike, which would hide the semantics being tested.
    """
    sup = randomise(Supernet(space)).train().double()
    ch = space.channels_of(np.r_[0, random_idx(space, 3, seed=7)[2], 0])
    x = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(8), dtype=torch.double)
    w = torch.tensor([ch] * 6)
    torch.testing.assert_close(sup(x, w), sup.forward_sliced(x, ch), atol=1e-8, rtol=1e-8)


def test_masked_bn_relu_gradcheck_and_statistics():
    g = torch.Generator().manual_seed(0)
    B, C, H, W = 5, 4, 3, 2
    z = torch.randn(B, C, H, W, dtype=torch.double, generator=g, requires_grad=True)
    m = (torch.rand(B, C, generator=g) < 0.6).double()
    m[:, 0] = 0  # a channel no sample uses
    m[0, 1:] = 1
    w = torch.randn(C, dtype=torch.double, generator=g, requires_grad=True)
    b = torch.randn(C, dtype=torch.double, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z, w, b: MaskedBatchNorm.apply(z, m, w, b, MaskedBNOptions(1e-5)), (z, w, b))
    out = MaskedBatchNorm.apply(z, m, w, b, MaskedBNOptions(1e-5))
    assert torch.all(out[m == 0] == 0)
    for c in range(1, C):  # channel c's statistics come from its active samples only
        act = m[:, c] > 0
        zc = z[act, c]
        ref = torch.relu((zc - zc.mean()) / torch.sqrt(zc.var(unbiased=False) + 1e-5) * w[c] + b[c])
        torch.testing.assert_close(out[act, c], ref)


def test_unmasked_batch_norm_is_torchs_batch_norm_with_its_running_statistics():
    """All-ones mask, no ReLU (SyncBatchNorm2d's path, D30): output, gradients and running statistics of
    nn.BatchNorm2d in train mode (momentum and cumulative averaging)."""
    from aows_core.nets.batchnorm import SyncBatchNorm2d, group_batch_norm

    g = torch.Generator().manual_seed(1)
    z = torch.randn(6, 5, 4, 3, dtype=torch.double, generator=g, requires_grad=True)
    ones = torch.ones(6, 5, dtype=torch.double)
    w = torch.randn(5, dtype=torch.double, generator=g, requires_grad=True)
    b = torch.randn(5, dtype=torch.double, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z, w, b: MaskedBatchNorm.apply(z, ones, w, b, MaskedBNOptions(1e-5, relu=False)), (z, w, b))
    for momentum in (0.1, None):
        ref, ours = (nn.BatchNorm2d(5, momentum=momentum).double().train() for _ in range(2))
        assert isinstance(SyncBatchNorm2d(5), nn.BatchNorm2d)
        for mod in (ref, ours):
            mod.weight.data.copy_(w.detach())
            mod.bias.data.copy_(b.detach())
        for step in range(3):
            x = (z.detach() * (step + 1)).requires_grad_(True)
            x2 = x.detach().clone().requires_grad_(True)
            y_ref = ref(x)
            y = group_batch_norm(x2, ones, ours, None, relu=False, update_stats=True)
            torch.testing.assert_close(y, y_ref)
            y_ref.pow(2).sum().backward()
            y.pow(2).sum().backward()
            torch.testing.assert_close(x2.grad, x.grad)
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(ours.state_dict()[k], v, msg=k)
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad)


def test_sandwich_step_outputs_and_gradient_of_the_sum(space):
    torch.manual_seed(0)
    sup = Supernet(space)
    B = 8
    x = torch.randn(B, 3, 16, 16)
    y = torch.randint(0, 5, (B,))
    ws = torch.stack([widths_tensor(space, random_idx(space, B, seed=s)) for s in (1, 2)])
    ref = copy.deepcopy(sup).train()
    opt = torch.optim.SGD(sup.parameters(), lr=0.0)
    res = sandwich_step(sup, x, y, ws, opt, n_random=2, label_smoothing=0.1)
    assert res.ce_max.shape == (B,) and res.ce_random.shape == (2, B) and res.diffs().dtype == np.float64
    # Per-sample hard-label CEs come from the same step's train-mode logits (before the update).
    lmax = ref(x)
    torch.testing.assert_close(res.ce_max, F.cross_entropy(lmax, y, reduction="none").detach(), atol=1e-5, rtol=1e-5)
    soft = F.softmax(lmax.detach(), 1)
    total = F.cross_entropy(lmax, y, label_smoothing=0.1)
    total = total + F.kl_div(F.log_softmax(ref.forward_sliced(x, space.min_config), 1), soft, reduction="batchmean")
    for r in range(2):
        lr = ref(x, ws[r])
        torch.testing.assert_close(res.ce_random[r], F.cross_entropy(lr, y, reduction="none").detach(), atol=1e-5, rtol=1e-5)
        total = total + F.kl_div(F.log_softmax(lr, 1), soft, reduction="batchmean")
    assert res.loss == pytest.approx(total.item(), rel=1e-5)
    total.backward()
    got = dict(sup.named_parameters())
    for name, p in ref.named_parameters():
        torch.testing.assert_close(got[name].grad, p.grad, atol=1e-5, rtol=1e-4)


def test_sandwich_step_updates_and_nan_is_refused(space):
    torch.manual_seed(1)
    sup = Supernet(space)
    x = torch.randn(4, 3, 16, 16)
    y = torch.randint(0, 5, (4,))
    opt = torch.optim.SGD(sup.parameters(), lr=0.1)
    w0 = sup.classifier.weight.detach().clone()
    sandwich_step(sup, x, y, lambda r: widths_tensor(space, random_idx(space, 4, seed=r)), opt)
    assert not torch.equal(w0, sup.classifier.weight)
    before = copy.deepcopy(sup.state_dict())
    x[0, 0, 0, 0] = float("nan")
    with pytest.raises(NonFiniteLoss, match="non-finite training loss"):
        sandwich_step(sup, x, y, widths_tensor(space, random_idx(space, 4)), opt, step=7)
    params = dict(sup.named_parameters())
    assert all(torch.equal(before[k], params[k].detach()) for k in params)


def test_widths_validation(space):
    sup = Supernet(space)
    idx = random_idx(space, 2)
    assert widths_tensor(space, idx).tolist() == widths_tensor(space, np.c_[np.zeros(2, int), idx, np.zeros(2, int)]).tolist()
    with pytest.raises(ValueError, match="choice index out of range"):
        widths_tensor(space, idx + 10)
    with pytest.raises(ValueError, match="widths"):
        sup(torch.randn(2, 3, 16, 16), torch.tensor([space.max_config]))
    with pytest.raises(ValueError, match="layer 0"):
        sup(torch.randn(1, 3, 16, 16), torch.tensor([[999] + space.max_config[1:]]))


def test_sandwich_step_through_ddp_matches_plain(space, tmp_path):
    """A DistributedDataParallel wrapper (one gloo rank) gives the same step as the bare model."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    torch.manual_seed(2)
    base = Supernet(space)
    twin = copy.deepcopy(base)
    x = torch.randn(6, 3, 16, 16)
    y = torch.randint(0, 5, (6,))
    w = widths_tensor(space, random_idx(space, 6, seed=3))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(twin)
        r1 = sandwich_step(base, x, y, w, torch.optim.SGD(base.parameters(), lr=0.1))
        r2 = sandwich_step(ddp, x, y, w, torch.optim.SGD(ddp.parameters(), lr=0.1))
    finally:
        dist.destroy_process_group()
    torch.testing.assert_close(r1.ce_random, r2.ce_random)
    for (n, a), (_, b) in zip(base.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=n)


def test_frozen_differences_are_the_reduced_networks_batch_losses(space):
    """D26: configuration k's difference is the reduced network's train-mode CE on batch k mod n_batches minus the
    max network's on the same batch; weights and running statistics are left untouched, the mode restored."""
    from aows_core.nets.estimation import frozen_differences

    sup = randomise(Supernet(space)).eval()
    before = copy.deepcopy(sup.state_dict())
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(12, 3, 16, 16, generator=g), torch.randint(0, 5, (12,), generator=g)
    idx = random_idx(space, 5, seed=8)
    configs = [space.layer_channels(i) for i in idx]
    d = frozen_differences(sup, x, y, configs, batch_size=4)  # 3 batches: configuration 3 reuses batch 0
    assert d.shape == (5,) and d[0] == pytest.approx(0.0, abs=1e-12)  # the max configuration itself
    for k, ch in enumerate(configs):
        b = slice(4 * (k % 3), 4 * (k % 3) + 4)
        ref = F.cross_entropy(fixed(space, sup, ch, train=True)(x[b]), y[b])
        top = F.cross_entropy(fixed(space, sup, space.max_config, train=True)(x[b]), y[b])
        assert d[k] == pytest.approx(float(ref - top), abs=1e-5)
    assert not sup.training and all(torch.equal(before[k], v) for k, v in sup.state_dict().items())
    with pytest.raises(ValueError, match="fewer than one batch"):
        frozen_differences(sup, x[:3], y[:3], configs, batch_size=4)
