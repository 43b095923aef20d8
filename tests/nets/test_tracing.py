"""A user's module traced into a search space (aows_core.tracing, D48): torchvision's networks trace into the spaces
the presets describe by hand, the widest network is the user's network with its weights, coupled channels agree with
Torch-Pruning's dependency graph, and what no kind runs is refused naming the module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torchvision
from net_cases import randomise
from torch import nn

from aows_core.config import ConfigError, load, resolve
from aows_core.devices.flops import network_macs, network_params
from aows_core.nets.network import Network, fold
from aows_core.space import get_space
from aows_core.tracing import TraceError, load_model, trace_space, traced_choices, trained_state

torch.set_num_threads(1)
USER = str(Path(__file__).parents[1] / "fixtures" / "user_models.py")
PRESETS = {"resnet18": "resnet18_imagenet", "resnet50": "resnet50_imagenet", "mobilenet_v2": "mobilenet_v2_imagenet"}


@pytest.mark.parametrize("name", list(PRESETS))
def test_torchvision_traces_into_the_preset(name):
    """torchvision's resnet18, resnet50 and mobilenet_v2 trace into the layers, edges, base widths, activation and
    residual structure of the hand-written presets (which equal torchvision layer for layer, tests/nets)."""
    traced = trace_space(torchvision.models.get_model(name), (3, 224, 224), name).space
    preset = get_space(PRESETS[name])
    assert traced.thetas == preset.thetas
    assert traced.act == preset.act
    assert [(b.shortcut, b.add) for b in traced.blocks if b.add >= 0] == \
           [(b.shortcut, b.add) for b in preset.blocks if b.add >= 0]
    base = {p: b for (ts, td), (ps, pd) in zip(traced.edges, preset.edges) for p, b in ((ps, 0), (pd, 0))}
    assert network_macs(traced, traced.base_config) == network_macs(preset, preset.base_config)
    assert network_params(traced, traced.base_config) == network_params(preset, preset.base_config)
    if name == "resnet50":
        # the preset ties a bottleneck's 1×1 and 3×3 widths into one inner node (D44); torchvision couples them no
        # more than the trace does: each preset node is one traced node or a bottleneck's two
        of = {}
        for (ts, td), (ps, pd) in zip(traced.edges, preset.edges):
            assert of.setdefault(ts, ps) == ps and of.setdefault(td, pd) == pd
        assert traced.n_nodes == preset.n_nodes + 16 and sorted(set(of.values())) == list(range(preset.n_nodes))
        return
    assert traced.edges == preset.edges and traced.base == preset.base and len(base) == preset.n_nodes
    assert [len(t) > 1 for t in traced.tied()] == [len(t) > 1 for t in preset.tied()]
    assert traced.roles() == preset.roles()


@pytest.mark.parametrize("make", [lambda: torchvision.models.resnet18(num_classes=10),
                                  lambda: torchvision.models.mobilenet_v2(num_classes=10),
                                  lambda: load_model(f"{USER}:small_net", {"in_channels": 3})],
                         ids=["resnet18", "mobilenet_v2", "user"])
def test_widest_network_is_the_model_with_its_weights(make):
    """The fixed network at the traced widths, given `trained_state`, computes the model's logits (eval mode), and so
    does its deployment form (BN folded; a conv's own bias folded into its BN)."""
    model = randomise(make(), seed=1).eval()
    traced = trace_space(model, (3, 48, 48))
    space = traced.space
    assert space.max_config == space.base_config  # the traced width is each node's largest choice
    net = Network(space, space.base_config)
    net.load_state_dict(trained_state(traced, model))
    x = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(net.eval()(x), want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fold(net)(x), want, rtol=1e-4, atol=1e-4)


def _our_groups(traced) -> set[frozenset[str]]:
    """Per searched node, the convolutions whose output channels it holds."""
    space, out = traced.space, {}
    for (s, d), mods in zip(space.edges, traced.modules):
        if "conv" in mods:
            out.setdefault(d, set()).add(mods["conv"])
    return {frozenset(v) for k, v in out.items() if 0 < k < space.n_nodes - 1}


def _pruning_groups(model: nn.Module, x: torch.Tensor) -> set[frozenset[str]]:
    """Torch-Pruning's coupled groups: per group, the convolutions whose output channels are pruned together."""
    import torch_pruning as tp
    names = {m: n for n, m in model.named_modules()}
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=x)
    out = set()
    for conv in (m for m in model.modules() if isinstance(m, nn.Conv2d)):
        group = dg.get_pruning_group(conv, tp.prune_conv_out_channels, idxs=[0])
        out.add(frozenset(names[dep.target.module] for dep, _ in group
                          if isinstance(dep.target.module, nn.Conv2d)
                          and dep.handler.__name__ == tp.prune_conv_out_channels.__name__))
    return out


@pytest.mark.parametrize("make", [lambda: torchvision.models.resnet18(num_classes=10),
                                  lambda: torchvision.models.mobilenet_v2(num_classes=10),
                                  lambda: load_model(f"{USER}:small_net", {})],
                         ids=["resnet18", "mobilenet_v2", "user"])
def test_coupled_channels_agree_with_torch_pruning(make):
    """The channels the trace ties into one node are the ones Torch-Pruning's DependencyGraph prunes together."""
    model = make().eval()
    shape = (1, 28, 28) if isinstance(model, nn.Module) and model.__class__.__name__ == "SmallNet" else (3, 64, 64)
    traced = trace_space(model, shape)
    assert _our_groups(traced) == _pruning_groups(model, torch.randn(1, *shape))


def test_choices_and_fixed_modules():
    """Each node chooses multipliers of its traced width, the width itself the largest; `fixed` keeps the groups its
    modules write at one width, a depthwise conv's being its input's."""
    assert traced_choices(64, [0.25, 0.5, 1.0]) == (16, 32, 64)
    assert traced_choices(20, [0.1, 0.96, 1.0]) == (8, 16, 20)  # never above the traced width, never below 8
    model = load_model(f"{USER}:small_net", {})
    free = trace_space(model, (1, 28, 28)).space
    kept = trace_space(model, (1, 28, 28), fixed=["stem", "dw"]).space
    assert free.choices[1] != (16,) and kept.choices[1] == (16,)  # the stem's output, tied across stage 1
    node = next(s for (s, d), t in zip(kept.edges, kept.thetas) if t.kind == "dw")
    assert kept.choices[node] == (32,) and len(free.choices[node]) > 1
    with pytest.raises(TraceError, match=r"space.fixed names 'stage9'.*traced modules: .*stem\.0"):
        trace_space(model, (1, 28, 28), fixed=["stage9"])


@pytest.mark.parametrize("name, module, what", [
    ("mobilenet_v3_small", "features.0.2", "Hardswish"),
    ("resnext50_32x4d", "layer1.0.conv2", "grouped convolution"),
    ("densenet121", "features.denseblock1", ""),
    ("squeezenet1_0", "features.0", "padded by k // 2"),
    ("vgg11", "features.0", "without a BatchNorm2d"),
])
def test_what_no_kind_runs_is_refused_naming_the_module(name, module, what):
    """An operator or module no registered kind runs stops the trace, naming the module and the way out."""
    with pytest.raises(TraceError) as e:
        trace_space(torchvision.models.get_model(name, num_classes=10), (3, 64, 64))
    msg = str(e.value)
    print(msg)
    assert module in msg and what in msg and ("register a kind" in msg.lower() or "aows's blocks" in msg), msg


def test_user_modules_that_cannot_be_searched():
    """A squeeze-and-excitation product, a file without the function and a function returning no module."""
    with pytest.raises(TraceError, match="'se"):
        trace_space(load_model(f"{USER}:gated", {}), (1, 28, 28))
    with pytest.raises(TraceError, match="torch.fx cannot trace the module .*data-dependent control flow"):
        trace_space(load_model(f"{USER}:branchy", {}), (1, 28, 28))
    with pytest.raises(TraceError, match=r"does not run on an input of shape \(3, 28, 28\)"):
        trace_space(load_model(f"{USER}:small_net", {}), (3, 28, 28))
    with pytest.raises(TraceError, match="has no function 'nope'"):
        load_model(f"{USER}:nope")
    with pytest.raises(TraceError, match="not a torch.nn.Module"):
        load_model(f"{USER}:not_a_module")
    with pytest.raises(TraceError, match="expected torchvision:<name>"):
        load_model("resnet18")
    with pytest.raises(TraceError, match="Unknown model"):
        load_model("torchvision:resnet_nope")


def test_config_traces_space_model(tmp_path):
    """`space.model` in a config traces the module on the dataset's image shape; preset-only keys are refused."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"space: {{model: '{USER}:small_net', model_kwargs: {{width: 8}}, fixed: [head]}}\n")
    space = resolve(load(cfg)).space
    assert space.in_channels == 1 and space.resolution == (28, 28) and space.num_classes == 10
    assert space.name == "small_net" and space.base[0] == 8
    cfg.write_text(f"space: {{model: '{USER}:small_net', width_mult: 0.5}}\n")
    with pytest.raises(ConfigError, match="space.width_mult applies to a preset"):
        resolve(load(cfg))


def test_cli_prints_a_traced_space(capsys):
    """`aows space --model M --input C,H,W --json` prints what `--preset` prints, each layer with its module."""
    from aows_core.cli import main

    assert main(["space", "--model", "torchvision:resnet18", "--input", "3,64,64", "--model-kwargs",
                 '{"num_classes": 10}', "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    preset = get_space("resnet18_imagenet", num_classes=10, resolution=64)
    assert d["n_layers"] == preset.n_layers and d["tied_nodes"] == preset.describe()["tied_nodes"]
    assert d["edges"][0]["modules"] == {"conv": "conv1", "bn": "bn1"} and d["edges"][-1]["modules"] == {"linear": "fc"}
    assert d["base_macs"] == network_macs(preset, preset.base_config)
    assert main(["space", "--model", f"{USER}:gated", "--input", "1,28,28"]) == 2
    assert "se" in capsys.readouterr().err
