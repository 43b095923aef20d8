"""The fixed-width network of a MobileNet-v1 space, BN folding and the cheap timing form (nets.network)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from aows_core.nets.network import Network, TimingFactory, fold, folded_state
from aows_core.space import get_space

FMNIST = get_space("mobilenet_v1_fmnist")
IMAGENET = get_space("mobilenet_v1_imagenet")


def random_config(space, rng):
    return [int(rng.choice(c)) for c in space.layer_choices]


def perturb_bn(model: nn.Module, seed: int = 0) -> None:
    """Give every BN non-trivial running statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(n, generator=g) * 1.5 + 0.25)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.2)


def expected_shapes(space, channels):
    """Deployment-form parameter shapes computed from the space alone."""
    full = space.full(channels)
    shapes = {}
    for i, t in enumerate(space.thetas):
        ci, co, k = full[i], full[i + 1], t.kernel
        if t.kind == "conv":
            shapes[f"layers.{i}.conv.weight"], shapes[f"layers.{i}.conv.bias"] = (co, ci, k, k), (co,)
        elif t.kind == "dwsep":
            shapes[f"layers.{i}.0.conv.weight"], shapes[f"layers.{i}.0.conv.bias"] = (ci, 1, k, k), (ci,)
            shapes[f"layers.{i}.1.conv.weight"], shapes[f"layers.{i}.1.conv.bias"] = (co, ci, 1, 1), (co,)
        else:
            shapes["classifier.weight"], shapes["classifier.bias"] = (co, ci), (co,)
    return shapes


@pytest.mark.parametrize("seed", range(3))
def test_output_shape_random_configs(seed):
    rng = np.random.default_rng(seed)
    cfg = random_config(FMNIST, rng)
    m = Network(FMNIST, cfg)
    with torch.no_grad():
        out = m(torch.randn(2, 1, 28, 28))
    assert out.shape == (2, 10)
    assert m.channels == cfg
    # conv + BN + ReLU everywhere: one BN per convolution
    n_conv = sum(isinstance(x, nn.Conv2d) for x in m.modules())
    n_bn = sum(isinstance(x, nn.BatchNorm2d) for x in m.modules())
    assert n_conv == n_bn == 1 + 2 * (FMNIST.n_edges - 2)


def test_imagenet_preset_shapes():
    cfg = random_config(IMAGENET, np.random.default_rng(0))
    m = Network(IMAGENET, cfg, init=False, device="meta")
    assert m(torch.empty(2, 3, 224, 224, device="meta")).shape == (2, 1000)
    # spatial sizes follow Θ.out_hw at every edge
    x = torch.empty(1, 3, 224, 224, device="meta")
    for i, edge in enumerate(m.layers):
        x = edge(x)
        assert tuple(x.shape[2:]) == IMAGENET.thetas[i].out_hw()
        assert x.shape[1] == IMAGENET.full(cfg)[i + 1]


def test_extreme_configs_forward():
    for cfg in (FMNIST.min_config, FMNIST.max_config):
        assert Network(FMNIST, cfg).eval()(torch.zeros(1, 1, 28, 28)).shape == (1, 10)


@pytest.mark.parametrize("seed", range(3))
def test_fold_bn_matches_eval_model(seed):
    rng = np.random.default_rng(100 + seed)
    cfg = random_config(FMNIST, rng)
    m = Network(FMNIST, cfg)
    perturb_bn(m, seed)
    m.train()  # folding must use the running statistics whatever the mode
    f = fold(m)
    assert not f.training
    assert not any(isinstance(x, nn.BatchNorm2d) for x in f.modules())
    assert all(c.bias is not None for c in f.modules() if isinstance(c, nn.Conv2d))
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref = m.eval()(x)
        out = f(x)
    scale = ref.abs().max().item()
    assert scale > 0
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5 * max(scale, 1.0))


def test_fold_bn_state_names_and_shapes():
    cfg = random_config(FMNIST, np.random.default_rng(7))
    state = folded_state(Network(FMNIST, cfg))
    assert {k: tuple(v.shape) for k, v in state.items()} == expected_shapes(FMNIST, cfg)


@pytest.mark.parametrize("space", [FMNIST, IMAGENET], ids=["fmnist", "imagenet"])
def test_timing_model_shapes_and_values(space):
    cfg = random_config(space, np.random.default_rng(3))
    t = TimingFactory(space)(cfg)
    assert not t.bn and not t.training
    got = {k: tuple(v.shape) for k, v in t.state_dict().items()}
    assert got == expected_shapes(space, cfg)
    for p in t.parameters():
        assert torch.isfinite(p).all()
        a = p.abs()
        assert ((a == 0) | (a > 1e-30)).all(), "no denormals in timing weights"
        assert a.max() > 0
    # layers never share memory (same working set as freshly allocated weights)
    spans = sorted((p.data_ptr(), p.data_ptr() + p.numel() * p.element_size()) for p in t.parameters())
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_timing_model_cached_and_runs():
    fac = TimingFactory(FMNIST, seed=1)
    cfg = random_config(FMNIST, np.random.default_rng(4))
    a, b = fac(cfg), fac(cfg)
    assert a.layers[3] is b.layers[3]
    with torch.inference_mode():
        y = a(torch.randn(2, 1, 28, 28))
    assert y.shape == (2, 10) and torch.isfinite(y).all()


def test_timing_model_channels_last():
    fac = TimingFactory(FMNIST, channels_last=True)
    m = fac(FMNIST.max_config)
    w = m.layers[1][1].conv.weight
    assert w.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(1, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        assert torch.isfinite(m(x)).all()


def test_config_outside_space_names_layer():
    cfg = list(FMNIST.min_config)
    cfg[3] = 13
    with pytest.raises(ValueError, match=r"layer 3.*allowed widths"):
        Network(FMNIST, cfg)
    with pytest.raises(ValueError, match=r"layer 3"):
        TimingFactory(FMNIST)(cfg)
    with pytest.raises(ValueError, match="searchable layers"):
        Network(FMNIST, cfg[:-1])
