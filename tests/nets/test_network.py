"""Fixed-width residual networks (D44): torchvision-faithful at the base widths, BN folding, timing factory, ONNX."""

from __future__ import annotations

import onnx
import pytest
import torch
import torchvision
from torch import nn

from aows_core.nets.family import fold, folded_state, network, supernet, timing_factory
from aows_core.nets.mobilenet import MobileNetV1, TimingFactory
from aows_core.nets.onnx import check_agreement, onnx_from_weights, param_shapes
from aows_core.nets.residual import ResidualNet, ResidualTimingFactory, SlimmableResidualNet
from aows_core.nets.slimmable import SlimmableMobileNetV1
from aows_core.space import get_space
from residual_cases import FAMILIES, images, random_configs, randomise

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state (the networks' own initialisation draws from it)."""
    torch.manual_seed(0)

TORCHVISION = {"mobilenet_v2_imagenet": torchvision.models.mobilenet_v2,
               "resnet18_imagenet": torchvision.models.resnet18,
               "resnet50_imagenet": torchvision.models.resnet50}


def counted(model: nn.Module, x: torch.Tensor) -> tuple[int, int, list[tuple[int, ...]]]:
    """(MACs of one image, parameters, conv weight shapes in execution order), by forward hooks on Conv2d and Linear:
    a conv costs kernel elements × in/groups × out × output H×W, a Linear in × out."""
    macs, shapes = [0], []

    def hook(m: nn.Module, _inp, out: torch.Tensor) -> None:
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            macs[0] += kh * kw * (m.in_channels // m.groups) * m.out_channels * out.shape[2] * out.shape[3]
            shapes.append(tuple(m.weight.shape))
        else:
            macs[0] += m.in_features * m.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model.eval()(x)
    for h in handles:
        h.remove()
    return macs[0], sum(p.numel() for p in model.parameters()), shapes


@pytest.mark.parametrize("classes", [10, 1000])
@pytest.mark.parametrize("preset", list(TORCHVISION))
def test_macs_params_and_layers_equal_torchvision(preset, classes):
    """At the base widths the network is torchvision's: equal MACs, parameters and conv shapes in execution order
    (on the meta device: shapes only, at 224×224)."""
    space = get_space(preset, num_classes=classes)
    with torch.device("meta"):
        ours = ResidualNet(space, space.base_config)
        ref = TORCHVISION[preset](num_classes=classes)
    x = torch.empty(1, 3, 224, 224, device="meta")
    got, want = counted(ours, x), counted(ref, x)
    print(f"{preset} classes={classes}: {got[0]} MACs, {got[1]} parameters")
    assert got[:2] == want[:2]
    assert got[2] == want[2]


@pytest.mark.parametrize("preset", list(TORCHVISION))
def test_torchvision_weights_give_torchvision_outputs(preset):
    """The network's state dict, taken in order, loads into torchvision's (same tensors, same shapes) and both compute
    the same logits in eval mode: same strides, paddings, activations, residual adds and pooling."""
    space = get_space(preset)
    ours = randomise(ResidualNet(space, space.base_config), seed=3).eval()
    ref = TORCHVISION[preset]().eval()
    mine, theirs = ours.state_dict(), ref.state_dict()
    assert [v.shape for v in mine.values()] == [v.shape for v in theirs.values()]
    ref.load_state_dict(dict(zip(theirs, mine.values())))
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = ref(x)
        assert want.abs().max() > 0.1
        torch.testing.assert_close(ours(x), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_folded_deployment_form(family):
    """fold: the deployment form (BN folded into conv biases) computes the eval-mode logits, with the parameter
    names and shapes of ResidualNet(bn=False); folded_state's order is param_shapes' (the ONNX graph order)."""
    space = FAMILIES[family]
    x = images(space, 4)
    for ch in random_configs(space, 3, seed=5):
        net = randomise(ResidualNet(space, ch)).eval()
        state = folded_state(net)
        ref = ResidualNet(space, ch, bn=False, init=False, device="meta").state_dict()
        assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in ref.items()}
        assert [(k, tuple(v.shape)) for k, v in state.items()] == param_shapes(space, ch)
        with torch.no_grad():
            ref = net(x)
            torch.testing.assert_close(fold(net)(x), ref, rtol=1e-4, atol=1e-5 * max(ref.abs().max().item(), 1.0))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_onnx_graph_agrees_with_torch(family):
    """The ONNX graph of a configuration, from the folded weights (the export) and from the timing factory's
    weights (the onnxruntime device's graph pieces), computes the torch logits in ONNX Runtime."""
    space = FAMILIES[family]
    x = images(space, 3, seed=2)
    fac = ResidualTimingFactory(space)
    for ch in random_configs(space, 3, seed=6):
        net = randomise(ResidualNet(space, ch)).eval()
        proto = onnx_from_weights(space, ch, folded_state(net), batch=None)
        onnx.checker.check_model(proto)
        err, agree = check_agreement(proto, net, x, rtol=1e-4, atol=1e-5)
        assert agree == 1.0
        timed = fac(ch)
        check_agreement(onnx_from_weights(space, ch, timed.state_dict(), batch=3), timed, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_timing_factory_builds_the_deployment_form(family, channels_last):
    """The timing factory's network of a configuration is ResidualNet(bn=False) in structure (module types and
    parameter names and shapes), in eval mode, with weights that share no memory, and computes what that network
    computes with the same weights."""
    space = FAMILIES[family]
    fac = timing_factory(space, seed=1, channels_last=channels_last).prebuild()
    assert isinstance(fac, ResidualTimingFactory)
    x = images(space, 2)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for ch in random_configs(space, 4, seed=7):
        net = fac(ch)
        ref = ResidualNet(space, ch, bn=False, init=False)
        assert not net.training and net.channels == ch
        assert [(n, type(m)) for n, m in net.named_modules()] == [(n, type(m)) for n, m in ref.named_modules()]
        state = net.state_dict()
        assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in ref.state_dict().items()}
        spans = sorted((p.data_ptr(), p.data_ptr() + p.numel() * p.element_size()) for p in net.parameters())
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        ref.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(net(x), ref.eval()(x), atol=1e-6, rtol=1e-5)
    assert fac(space.max_config).layers[0] is fac(space.max_config).layers[0]  # edges are cached


def test_dispatch_by_space():
    """nets.family: MobileNet-v1 classes for a chain, the residual ones otherwise."""
    chain, res = get_space("mobilenet_v1_fmnist"), FAMILIES["resnet_fmnist"]
    assert type(network(chain, chain.min_config)) is MobileNetV1
    assert type(network(res, res.min_config, bn=False)) is ResidualNet
    assert type(supernet(chain)) is SlimmableMobileNetV1 and type(supernet(res)) is SlimmableResidualNet
    assert type(timing_factory(chain)) is TimingFactory
    net = network(chain, chain.min_config)
    assert set(folded_state(net)) == set(MobileNetV1(chain, chain.min_config, bn=False).state_dict())
    assert type(fold(net)) is MobileNetV1
