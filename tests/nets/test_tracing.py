"""A user's module traced into a search space (aows_core.tracing, D48): torchvision's networks trace into the spaces
the presets describe by hand, the widest network is the user's network with its weights, coupled channels agree with
Torch-Pruning's dependency graph, and what no kind runs is refused naming the module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torchvision
from net_cases import random_configs, randomise
from torch import nn

from aows_core.config import ConfigError, load, resolve
from aows_core.devices.flops import network_macs, network_params
from aows_core.kinds.base import PoolShape
from aows_core.nets.network import Network, fold
from aows_core.space import get_space
from aows_core.tracing import (
    TraceError,
    channel_importance,
    load_model,
    node_group_width,
    ordered_state,
    read_weights,
    trace_space,
    traced_choices,
    trained_state,
)

torch.set_num_threads(1)
USER = str(Path(__file__).parents[1] / "fixtures" / "user_models.py")
EXAMPLE = str(Path(__file__).parents[2] / "examples" / "my_cnn.py")
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
                                  lambda: torchvision.models.mnasnet0_5(num_classes=10),
                                  lambda: torchvision.models.efficientnet_b0(num_classes=10),
                                  lambda: torchvision.models.regnet_y_400mf(num_classes=10),
                                  lambda: torchvision.models.mobilenet_v3_small(num_classes=10),
                                  lambda: load_model("timm:efficientnet_b0", {"num_classes": 10}),
                                  lambda: load_model(f"{USER}:small_net", {"in_channels": 3}),
                                  lambda: load_model(f"{EXAMPLE}:my_cnn", {"in_channels": 3}),
                                  lambda: load_model(f"{USER}:plain_net", {"in_channels": 3}),
                                  lambda: load_model(f"{USER}:fire_net", {"in_channels": 3, "width": 32})],
                         ids=["resnet18", "mobilenet_v2", "mnasnet0_5", "efficientnet_b0", "regnet_y_400mf",
                              "mobilenet_v3_small", "timm_efficientnet_b0", "user", "example", "plain", "fire"])
def test_widest_network_is_the_model_with_its_weights(make):
    """The fixed network at the traced widths, given `trained_state`, computes the model's logits (eval mode), and so
    does its deployment form (BN folded): units of their own activations (SiLU, Hardswish), grouped convolutions,
    squeeze-and-excitation and a two-layer head included (D49); convolutions with biases with and without BatchNorm,
    unpadded ones, other max-pools and a flatten classifier of three Linear layers over an uneven 11×11 → 3×3 pool
    (D54); concatenated branches, max-pools of their own and a convolutional classifier (D55)."""
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


@pytest.mark.parametrize("make, kinds", [
    (lambda: load_model(f"{USER}:plain_net", {"in_channels": 3}), ["fc:pool3:relu:d0.5", "fc:relu:d0.5", "linear:flat"]),
    (lambda: load_model(f"{USER}:fire_net", {"in_channels": 3, "width": 32}), ["linear:conv:relu:d0.5"]),
    (lambda: load_model(f"{EXAMPLE}:my_cnn", {"in_channels": 3}), ["linear:d0.2"]),
    (lambda: torchvision.models.mobilenet_v2(num_classes=10), ["linear:d0.2"])],
    ids=["plain", "fire", "example", "mobilenet_v2"])
def test_dropout_is_the_models(make, kinds):
    """A Dropout before a Linear layer or a convolutional classifier is the layer kind's `d<p>` (D57): the fixed
    network at the traced widths, training, draws the model's dropout masks from the same generator state and so
    computes the model's training-mode logits."""
    model = randomise(make(), seed=1)
    traced = trace_space(model, (3, 48, 48))
    space = traced.space
    assert [t.kind for t in space.thetas if t.kind.startswith(("fc", "linear"))] == kinds
    net = Network(space, space.base_config)
    net.load_state_dict(trained_state(traced, model))
    x = torch.randn(4, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    outs = []
    for m in (model.train(), net.train()):
        torch.manual_seed(3)
        with torch.no_grad():
            outs.append(m(x))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4)
    with torch.no_grad():  # and the masks are drawn: another generator state gives other logits
        assert not torch.allclose(net(x), outs[0], rtol=1e-3, atol=1e-3)


def test_presets_keep_their_dropout():
    """MobileNet-v2's presets carry torchvision's Dropout(0.2) before the classifier in their classifier kind (D57),
    the MobileNet-v1 default none."""
    for preset, want in (("mobilenet_v2_fmnist", 0.2), ("mobilenet_v2_imagenet", 0.2), ("mobilenet_v1_fmnist", 0)):
        space = get_space(preset)
        drop = Network(space, space.base_config).dropout
        assert (drop.p if isinstance(drop, nn.Dropout) else 0) == want


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
                                  lambda: torchvision.models.mnasnet0_5(num_classes=10),
                                  lambda: load_model(f"{USER}:small_net", {})],
                         ids=["resnet18", "mobilenet_v2", "mnasnet0_5", "user"])
def test_coupled_channels_agree_with_torch_pruning(make):
    """The channels the trace ties into one node are the ones Torch-Pruning's DependencyGraph prunes together."""
    model = make().eval()
    shape = (1, 28, 28) if isinstance(model, nn.Module) and model.__class__.__name__ == "SmallNet" else (3, 64, 64)
    traced = trace_space(model, shape)
    assert _our_groups(traced) == _pruning_groups(model, torch.randn(1, *shape))


def test_grouped_convolutions_keep_their_group_width():
    """A grouped convolution reads and writes one node (a narrower width runs fewer groups of the same width, D49):
    the conv before it writes that node, its choices are multiples of the group width, and a squeeze-and-excitation
    on it is a layer of that node with its traced squeeze width (Torch-Pruning, which splits a grouped conv's input
    from its output, groups these differently by design)."""
    traced = trace_space(load_model(f"{EXAMPLE}:my_cnn", {"width": 12}), (1, 28, 28))
    space = traced.space
    for (s, d), t, mods in zip(space.edges, space.thetas, traced.modules):
        if t.kind.startswith("gconv:"):
            assert s == d and t.kind == "gconv:8" and all(c % 8 == 0 for c in space.choices[s])
            writer = next(m["conv"] for (a, b), m in zip(space.edges, traced.modules) if b == s and a != b)
            assert writer.endswith("reduce.0") and writer.rpartition(".reduce")[0] in mods["conv"]
        if t.kind.startswith("se:"):
            assert s == d and set(mods) == {"fc1", "fc2"} and mods["fc1"].endswith("se.reduce")
    assert sum(t.kind.startswith("se:") for t in space.thetas) == 4
    assert [t.kind for t in space.thetas][0] == "conv:hardswish" and space.thetas[-2].kind == "conv:silu"


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
    ("convnext_tiny", "features.0.1", "'permute'"),
    ("shufflenet_v2_x1_0", "stage2.0.branch1.0", "depthwise convolution without an activation"),
    ("densenet121", "denselayer1.norm1", "a BatchNorm2d that does not directly follow a convolution"),
    ("googlenet", "inception3a", "a concatenation of 4 tensors"),
])
def test_what_no_kind_runs_is_refused_naming_the_module(name, module, what):
    """An operator or module no registered kind runs stops the trace, naming the module and the way out."""
    kwargs = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
    with pytest.raises(TraceError) as e:
        trace_space(torchvision.models.get_model(name, num_classes=10, **kwargs), (3, 64, 64))
    msg = str(e.value)
    print(msg)
    assert module in msg and what in msg, msg
    assert "register a kind" in msg.lower() or "aows's blocks" in msg, msg


def test_user_modules_that_cannot_be_searched():
    """A spatial gate (a product no kind runs), a file without the function and a function returning no module."""
    with pytest.raises(TraceError, match="'sigmoid': a sigmoid that does not gate a squeeze-and-excitation"):
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
    assert "a sigmoid that does not gate" in capsys.readouterr().err


@pytest.mark.parametrize("make", [lambda: torchvision.models.resnet18(num_classes=10),
                                  lambda: torchvision.models.mobilenet_v2(num_classes=10),
                                  lambda: load_model(f"{USER}:small_net", {"in_channels": 3}),
                                  lambda: load_model(f"{EXAMPLE}:my_cnn", {"in_channels": 3}),
                                  lambda: load_model(f"{USER}:plain_net", {"in_channels": 3}),
                                  lambda: load_model(f"{USER}:fire_net", {"in_channels": 3, "width": 32})],
                         ids=["resnet18", "mobilenet_v2", "user", "example", "plain", "fire"])
def test_channels_ordered_by_importance_keep_the_function(make):
    """`ordered_state` permutes every node's channels, most important first, and the network still computes the
    model's logits (writers and readers of a node permuted alike, a tied stream across all its blocks, a squeeze-and-
    excitation's fc1 inputs and fc2 outputs, a grouped convolution's groups whole, a flatten classifier's pool² inputs
    per channel; a unit without BatchNorm by its filters, D54); a node of one width keeps its order (D55)."""
    model = randomise(make(), seed=2).eval()
    traced = trace_space(model, (3, 40, 40))
    space, state = traced.space, trained_state(traced, model)
    ordered = ordered_state(space, state, "bn")
    net = Network(space, space.base_config).eval()
    net.load_state_dict(ordered)
    x = torch.randn(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(net(x), model(x), rtol=1e-4, atol=1e-4)
    moved, searched = 0, [node for node in range(1, space.n_nodes - 1) if len(space.choices[node]) > 1]
    for node in range(1, space.n_nodes - 1):
        score = channel_importance(space, ordered, node).view(-1, node_group_width(space, node)).sum(1)
        if node not in searched:  # one width: kept as it is (a concatenation's operands, D55)
            torch.testing.assert_close(score, channel_importance(space, state, node))  # its inputs' order moved
            continue
        assert torch.all(score[:-1] >= score[1:]), node  # a grouped convolution's groups move whole (D49)
        moved += not torch.equal(score, channel_importance(space, state, node))
    assert moved > len(searched) // 2  # the order changed, not only kept


def test_weights_file_is_checked_against_the_model(tmp_path):
    """A file of another model names the first mismatched key and both shapes; a missing or extra key and an
    unreadable file are named too."""
    model = load_model(f"{USER}:small_net", {})
    good, wide, bad = tmp_path / "good.pt", tmp_path / "wide.pt", tmp_path / "bad.pt"
    torch.save(model.state_dict(), good)
    torch.save({"state_dict": load_model(f"{USER}:small_net", {"width": 24}).state_dict()}, wide)
    bad.write_text("not a state dict")
    assert set(read_weights(good, model)) == set(model.state_dict())
    with pytest.raises(TraceError, match=r"'stem.0.weight' has shape \(24, 1, 3, 3\), the model's is \(16, 1, 3, 3\)"):
        read_weights(wide, model)
    with pytest.raises(TraceError, match="cannot read it as a torch state dict"):
        read_weights(bad, model)
    state = model.state_dict()
    torch.save({k: v for k, v in state.items() if k != "head.bias"}, bad)
    with pytest.raises(TraceError, match="has no 'head.bias'"):
        read_weights(bad, model)
    torch.save({**state, "extra.weight": torch.zeros(1)}, bad)
    with pytest.raises(TraceError, match="holds 'extra.weight', which the model has not"):
        read_weights(bad, model)


def test_supernet_starts_from_space_weights(tmp_path):
    """`space.weights`: the supernet's widest network computes the trained model's logits at step 0, and its narrowest
    front slice holds each node's strongest channels by BatchNorm |γ|; a mismatched file stops the config's reading."""
    from aows_core.nets.supernet import Supernet

    model = randomise(load_model(f"{USER}:small_net", {}), seed=4).eval()
    path = tmp_path / "trained.pt"
    torch.save(model.state_dict(), path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"space: {{model: '{USER}:small_net', weights: '{path}'}}\n")
    settings = resolve(load(cfg))
    space = settings.space
    sup = Supernet(space)
    sup.load_state_dict(settings.initial_state())
    x = torch.randn(3, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(sup.eval()(x), model(x), rtol=1e-4, atol=1e-4)
    stem = sup.subnet_state_dict(space.min_config)["layers.0.bn.weight"]
    gammas = channel_importance(space, trained_state(trace_space(model, (1, 28, 28)), model), 1)
    torch.testing.assert_close(channel_importance(space, sup.state_dict(), 1)[: stem.numel()],
                               gammas.sort(descending=True).values[: stem.numel()])
    torch.save(load_model(f"{USER}:small_net", {"width": 24}).state_dict(), path)
    with pytest.raises(TraceError, match="'stem.0.weight' has shape"):
        resolve(load(cfg))
    cfg.write_text(f"space: {{weights: '{path}'}}\n")
    with pytest.raises(ConfigError, match="space.weights initialises a traced space.model"):
        resolve(load(cfg))


@pytest.mark.slow
def test_supernet_stage_trains_from_space_weights(tmp_path):
    """`aows train-supernet` on a traced model with `space.weights` starts from them: after one step its weights are
    the ordered trained ones, moved by one SGD step, not a fresh initialisation (regression: the stage's set-up)."""
    from stage_calls import train_supernet

    from aows_core.config import validate

    model = randomise(load_model(f"{USER}:small_net", {"width": 8}), seed=5)
    path = tmp_path / "trained.pt"
    torch.save(model.state_dict(), path)
    cfg = validate({"seed": 0, "space": {"model": f"{USER}:small_net", "model_kwargs": {"width": 8},
                                         "weights": str(path)},
                    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
                    "supernet": {"epochs": 1, "batch_size": 64, "estimate_configs": 20, "estimate_images": 64}})
    train_supernet(cfg, tmp_path / "ows", tmp_path / "resume", method="ows", progress=False, stop_after_steps=1)
    after = torch.load(tmp_path / "resume" / "checkpoint.pt", weights_only=False)["model"]
    start = resolve(cfg).initial_state()
    for k in ("layers.0.conv.weight", "classifier.weight"):
        assert (after[k] - start[k]).norm() < 0.2 * start[k].norm(), k


@pytest.mark.slow
def test_finalists_fine_tune_from_space_weights(tmp_path):
    """`retrain.init: weights`: a finalist's training starts from its front slice of the ordered weights (moved by one
    SGD step), not from a fresh initialisation; without space.weights the setting is refused when the config is read."""
    from aows_core.config import validate
    from aows_core.nets.supernet import Supernet
    from aows_core.stages import retrain

    model = randomise(load_model(f"{USER}:small_net", {"width": 16}), seed=6)
    path = tmp_path / "trained.pt"
    torch.save(model.state_dict(), path)
    space_cfg = {"model": f"{USER}:small_net", "model_kwargs": {"width": 16}, "weights": str(path)}
    cfg = validate({"seed": 0, "space": space_cfg, "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
                    "retrain": {"epochs": 1, "batch_size": 64, "seeds": [0], "init": "weights"}})
    settings = resolve(cfg)
    channels = [c[len(c) // 2] for c in settings.space.layer_choices]
    retrain.run(cfg, {"decision": None}, {"out_dir": tmp_path / "out"}, resume_dir=tmp_path / "resume",
                channels="-".join(map(str, channels)), progress=False, stop_after=1)
    after = torch.load(tmp_path / "resume" / "checkpoint.pt", weights_only=False)["model"]
    widest = Supernet(settings.space)
    widest.load_state_dict(settings.initial_state())
    start = widest.subnet_state_dict(channels)
    for k in ("layers.0.conv.weight", "classifier.weight"):
        assert after[k].shape == start[k].shape and (after[k] - start[k]).norm() < 0.2 * start[k].norm(), k
    with pytest.raises(ConfigError, match="retrain.init: weights fine-tunes the finalists from space.weights"):
        resolve(validate({"retrain": {"init": "weights"}}))


def test_kind_parameters_are_checked():
    """A kind's parameters follow its name (D49): a unit's own activation, a group width, a squeeze; anything else
    is refused naming what the kind takes."""
    from aows_core.kinds import kind_of

    assert kind_of("conv:hardswish").act == "hardswish" and kind_of("conv").act is None
    assert kind_of("gconv:16").group_width() == 16 and kind_of("gconv:16:silu").act == "silu"
    assert kind_of("linear:conv:relu").conv_act == "relu" and kind_of("cat:r").reverse
    assert kind_of("maxpool:mp3s2p0c").pool == PoolShape(3, 2, 0, True) and kind_of("maxpool").pool == PoolShape()
    assert kind_of("se:24:relu:hardsigmoid").s == 24
    assert [(kind_of(k).pool, kind_of(k).act) for k in ("fc:gap:hardswish", "fc:pool7:relu", "fc:relu")] == \
        [(0, "hardswish"), (7, "relu"), (None, "relu")]
    assert (kind_of("linear").pool, kind_of("linear:pool7").pool, kind_of("linear:flat").pool) == (0, 7, None)
    drops = [kind_of(k) for k in ("linear:d0.2", "linear:flat:d0.5", "linear:conv:relu:d0.5", "fc:pool7:relu:d0.5")]
    assert [(k.dropout, k.pool) for k in drops] == [(0.2, 0), (0.5, None), (0.5, 0), (0.5, 7)]
    assert kind_of("linear").dropout == kind_of("fc:relu").dropout == 0
    alex = kind_of("convpool:p2:nobn:mp3s2p0")
    assert (alex.pad, alex.norm, alex.has_bias, alex.pool) == (2, False, True, PoolShape(3, 2, 0))
    vgg = kind_of("convpool:bias:mp2s2p0c:relu6")
    assert (vgg.pad, vgg.norm, vgg.bias, vgg.pool, vgg.act) == (None, True, True, PoolShape(2, 2, 0, True), "relu6")
    for bad, what in [("pconv:relu", "has no activation"), ("conv:gelu", "the unit's activation"),
                      ("conv:mp2s2p0", "takes, once each"), ("conv:p1:p2", "takes, once each"),
                      ("conv:bias:nobn", "takes, once each"), ("gconv:x", "group width"),
                      ("se:8:relu", "squeeze width"), ("linear:1024:hardswish", "flat, pool<k>"),
                      ("linear:pool", "flat, pool<k>"), ("linear:conv", "conv:<activation>"),
                      ("fc:gap", "its activation"), ("fc:pool:relu", "gap or pool<k>"), ("cat:x", "r \\(the shortcut"),
                      ("maxpool:3", "mp<k>s<s>p<p>"), ("linear:d1.5", "0 < p < 1"), ("fc:relu:d0", "0 < p < 1"),
                      ("linear:d0.2:flat", "flat, pool<k>"),
                      ("nope:1", "unknown layer kind")]:
        with pytest.raises(ValueError, match=what):
            kind_of(bad)


def test_a_concatenation_keeps_its_widths():
    """Every node a concatenation reads or writes keeps its traced width, the 1×1 squeeze before it and a layer
    inside a branch are searched, the branches join in the module's order (`cat:r` where the longer branch is the
    second operand), and a space that searches a concatenated node is refused (D55)."""
    from dataclasses import replace

    from aows_core.space import check_blocks

    space = trace_space(load_model(f"{USER}:fire_net", {"width": 32}), (1, 28, 28)).space
    cats = [b for b in space.blocks if b.add >= 0]
    assert [space.thetas[b.add].kind for b in cats] == ["cat", "cat:r", "cat"]
    for b in cats:
        ends = (space.edges[b.edges[-1]][1], space.edges[b.shortcut][1], b.dst)
        assert all(len(space.choices[d]) == 1 for d in ends)
        assert space.base[b.dst - 1] == space.base[ends[0] - 1] + space.base[ends[1] - 1]
        assert len(space.choices[b.src]) > 1  # the squeeze
    inner = space.edges[cats[1].edges[0]][1]
    assert len(cats[1].edges) == 2 and len(space.choices[inner]) > 1
    choices = list(space.choices)
    choices[cats[0].dst] = (16, choices[cats[0].dst][0])
    with pytest.raises(ValueError, match=f"block .* concatenates node {cats[0].dst}, whose width is searched"):
        check_blocks(replace(space, choices=tuple(choices)))


@pytest.mark.parametrize("n, k", [(7, 7), (14, 7), (1, 7), (11, 3), (6, 4), (3, 5)])
def test_adaptive_average_pool_in_onnx_is_torchs(n, k):
    """The ONNX form of an adaptive average pool (a flatten classifier's, D54) gives torch's
    `adaptive_avg_pool2d` in ONNX Runtime: equal, divisible, repeated, uneven and overlapping windows."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from aows_core.nets.onnx import IR_VERSION, OPSET, GraphBuilder

    g = GraphBuilder("relu")
    g.adaptive_average_pool("x", "y", (n, n), k)
    graph = helper.make_graph(g.nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    x = torch.randn(2, 3, n, n, generator=torch.Generator().manual_seed(n * k))
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(got), F.adaptive_avg_pool2d(x, k), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k, s, p, ceil", [(3, 2, 1, False), (3, 2, 0, False), (3, 2, 0, True), (2, 2, 0, False),
                                           (2, 2, 0, True), (3, 1, 1, True), (5, 3, 2, True), (4, 3, 1, True)])
def test_max_pool_sizes_are_torchs(k, s, p, ceil):
    """A max-pool's output size (`PoolShape.out`, ceil mode's last-window rule included) is the one torch computes,
    for every input size from the kernel's up to 40."""
    pool = nn.MaxPool2d(k, s, p, ceil_mode=ceil)
    for n in range(max(k - 2 * p, 1), 41):
        assert PoolShape(k, s, p, ceil).out(n) == pool(torch.zeros(1, 1, n, n)).shape[-1], n


@pytest.mark.parametrize("make", [lambda: torchvision.models.resnet18(num_classes=10),
                                  lambda: torchvision.models.mobilenet_v3_small(num_classes=10),
                                  lambda: torchvision.models.regnet_y_400mf(num_classes=10),
                                  lambda: load_model("timm:regnety_004", {"num_classes": 10}),
                                  lambda: load_model(f"{EXAMPLE}:my_cnn", {"in_channels": 3}),
                                  lambda: load_model(f"{USER}:plain_net", {"in_channels": 3}),
                                  lambda: load_model(f"{USER}:fire_net", {"in_channels": 3, "width": 32})],
                         ids=["resnet18", "mobilenet_v3_small", "regnet_y_400mf", "timm_regnety_004", "example",
                              "plain", "fire"])
def test_a_finalist_deploys_as_the_users_own_module(make):
    """`user_module`: the user's module at a configuration's widths — the same classes under the same names, fewer
    channels — holding the fixed network's weights, computes its logits (D49); MobileNet-v3's BatchNorms keep their
    eps of 1e-3, their running variance holding the difference; timm's BatchNormAct2d keeps its class and activation."""
    from aows_core.tracing import user_module

    model = make().eval()
    traced = trace_space(model, (3, 40, 40))
    space = traced.space
    x = torch.randn(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    for ch in [c for c in random_configs(space, 3, seed=4)[1:] if c != space.max_config]:
        net = randomise(Network(space, ch), seed=3).eval()
        mine = user_module(traced, model, net.state_dict())
        assert [(n, type(m)) for n, m in mine.named_modules()] == [(n, type(m)) for n, m in model.named_modules()]
        assert set(mine.state_dict()) == set(model.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(mine(x), net(x), rtol=1e-4, atol=1e-4)
        def widths(net: nn.Module) -> list[int]:
            return [getattr(m, "out_channels", getattr(m, "out_features", 0)) for m in net.modules()
                    if isinstance(m, (nn.Conv2d, nn.Linear))]

        assert widths(mine) != widths(model)


def test_a_space_too_wide_for_the_decoders_is_refused_naming_what_to_fix():
    """More joint choices at one node than the decoders hold (D44) stop the trace, naming the node, the modules
    to keep with space.fixed and n_choices; keeping them at their width makes it decodable."""
    with torch.device("meta"):
        model = torchvision.models.resnet50()
    with pytest.raises(TraceError, match=r"too wide for the decoders: at node \d+ .*joint choices.* space.fixed "
                                         r"\(the modules writing them: .*layer4.*\), or lower space.n_choices"):
        trace_space(model, (3, 224, 224), n_choices=64)
    trace_space(model, (3, 224, 224), n_choices=64, fixed=["layer3", "layer4"])


@pytest.mark.slow
def test_export_writes_the_finalist_as_the_users_module(tmp_path):
    """`aows export` of a traced space's finalist also writes module_state_dict.pt: `narrowed` loads it into the
    user's module, which gives the exported network's logits on test images (D49)."""
    from aows_core import artifacts
    from aows_core.config import validate
    from aows_core.stages import export
    from aows_core.tracing import narrowed

    cfg = validate({"seed": 0, "space": {"model": f"{EXAMPLE}:my_cnn", "model_kwargs": {"width": 8}}})
    space = resolve(cfg).space
    channels = random_configs(space, 3, seed=7)[2]
    net = randomise(Network(space, channels), seed=7).eval()
    artifacts.save_torch({"space": space.to_dict(), "space_hash": space.hash, "channels": channels,
                          "model": net.state_dict()}, tmp_path / "model.pt")
    report = export.run(cfg, {"model": tmp_path / "model.pt"}, {"out_dir": tmp_path / "out"}, n_check=16)
    assert report["module"]["max_abs_diff"] < 1e-4 and report["module"]["state_dict"] == "module_state_dict.pt"
    mine = narrowed(load_model(f"{EXAMPLE}:my_cnn", {"width": 8}), torch.load(tmp_path / "out" / "module_state_dict.pt"))
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(mine(x), net(x), rtol=1e-4, atol=1e-4)


def test_weights_the_module_carries(tmp_path):
    """`space.weights: module`: the supernet starts from the weights the module's function returns it with (no file,
    D49), ordered as a weights file's would be."""
    from aows_core.config import validate

    cfg = validate({"space": {"model": f"{USER}:trained_small_net", "model_kwargs": {"width": 8}, "weights": "module"},
                    "retrain": {"init": "weights"}})
    settings = resolve(cfg)
    model = load_model(f"{USER}:trained_small_net", {"width": 8})
    traced = trace_space(model, (1, 28, 28))
    want = ordered_state(traced.space, trained_state(traced, model), "bn")
    got = settings.initial_state()
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert not torch.equal(got["layers.0.bn.weight"], torch.ones(8))
