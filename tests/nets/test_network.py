"""Fixed-width networks of every space (D44, D45): torchvision-faithful at the base widths, BN folding, timing
factory, ONNX, and MobileNet-v1 files of the earlier layout."""

from __future__ import annotations

import onnx
import pytest
import torch
import torchvision
from net_cases import FAMILIES, images, random_configs, randomise
from torch import nn

from aows_core.artifacts import ArtifactError, current_names
from aows_core.nets.network import Network, TimingFactory, fold, folded_state
from aows_core.nets.onnx import check_agreement, onnx_from_weights, param_shapes
from aows_core.nets.supernet import Supernet
from aows_core.space import get_space

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
        ours = Network(space, space.base_config)
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
    ours = randomise(Network(space, space.base_config), seed=3).eval()
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
    names and shapes of Network(bn=False); folded_state's order is param_shapes' (the ONNX graph order)."""
    space = FAMILIES[family]
    x = images(space, 4)
    for ch in random_configs(space, 3, seed=5):
        net = randomise(Network(space, ch)).eval()
        state = folded_state(net)
        ref = Network(space, ch, bn=False, init=False, device="meta").state_dict()
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
    fac = TimingFactory(space)
    for ch in random_configs(space, 3, seed=6):
        net = randomise(Network(space, ch)).eval()
        proto = onnx_from_weights(space, ch, folded_state(net), batch=None)
        onnx.checker.check_model(proto)
        err, agree = check_agreement(proto, net, x, rtol=1e-4, atol=1e-5)
        assert agree == 1.0
        timed = fac(ch)
        check_agreement(onnx_from_weights(space, ch, timed.state_dict(), batch=3), timed, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_timing_factory_builds_the_deployment_form(family, channels_last):
    """The timing factory's network of a configuration is Network(bn=False) in structure (module types and
    parameter names and shapes), in eval mode, with weights that share no memory, and computes what that network
    computes with the same weights."""
    space = FAMILIES[family]
    fac = TimingFactory(space, seed=1, channels_last=channels_last).prebuild()
    x = images(space, 2)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for ch in random_configs(space, 4, seed=7):
        net = fac(ch)
        ref = Network(space, ch, bn=False, init=False)
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


def legacy_chain_names(space, state):
    """A MobileNet-v1 state dict renamed as the earlier layout wrote it (an independent statement of that layout):
    edge i an nn.Sequential of conv, BN, ReLU (conv) or conv, BN, ReLU, conv, BN, ReLU (dwsep)."""
    out = {}
    for k, v in state.items():
        parts = k.split(".")
        if parts[0] != "layers":
            out[k] = v
            continue
        i = parts[1]
        if space.thetas[int(i)].kind == "conv":  # layers.i.{conv,bn}.p → features.i.{0,1}.p
            j, p = {"conv": 0, "bn": 1}[parts[2]], parts[3]
        else:  # layers.i.{0,1}.{conv,bn}.p → features.i.{0,1,3,4}.p
            j, p = 3 * int(parts[2]) + {"conv": 0, "bn": 1}[parts[3]], parts[4]
        out[f"features.{i}.{j}.{p}"] = v
    return out


def test_earlier_mobilenet_v1_files_load_through_the_name_map():
    """A supernet or retrained network saved before the one network path (features.{i}.{j}) loads into today's
    classes with the same tensors; a file whose edges do not map is refused naming the stage to rerun."""
    space = get_space("mobilenet_v1_fmnist")
    sup = randomise(Supernet(space))
    old = legacy_chain_names(space, sup.state_dict())
    assert any(k.startswith("features.13.4.") for k in old)
    new = current_names(old, space, "model.pt", "the supernet training")
    assert list(new) == list(sup.state_dict()) and all(torch.equal(new[k], v) for k, v in sup.state_dict().items())
    ch = space.min_config
    net = Network(space, ch)
    net.load_state_dict(current_names(legacy_chain_names(space, net.state_dict()), space, "model.pt", "retraining"))
    broken = {k: v for k, v in old.items() if not k.startswith("features.3.4.")}
    with pytest.raises(ArtifactError, match="rerun the supernet training"):
        current_names(broken, space, "model.pt", "the supernet training")
    assert current_names(sup.state_dict(), space, "model.pt", "x") is not None  # today's names pass unchanged
