"""Search space: the paper's ImageNet table, shared latency variables, configuration checks."""

import json
import subprocess

import numpy as np
import pytest

from aows_core.space import (
    PRESETS,
    SearchSpace,
    Theta,
    get_space,
    layer_columns,
    mobilenet_v1_space,
    pad_nodes,
    width_choices,
)

PAPER_TABLE = {
    1: [8, 16, 24, 32, 40, 48],
    2: list(range(16, 97, 8)),
    3: [24, 40, 48, 64, 80, 88, 104, 112, 128, 144, 152, 168, 176, 192],
    5: [48, 80, 104, 128, 152, 176, 208, 232, 256, 280, 304, 336, 360, 384],
    7: [104, 152, 208, 256, 304, 360, 408, 464, 512, 560, 616, 664, 720, 768],
    13: [208, 304, 408, 512, 616, 720, 816, 920, 1024, 1128, 1232, 1328, 1432, 1536],
}
SAME_AS = {4: 3, 6: 5, 8: 7, 9: 7, 10: 7, 11: 7, 12: 7, 14: 13}


def test_imagenet_preset_is_the_papers_table():
    s = get_space("mobilenet_v1_imagenet")
    table = {**PAPER_TABLE, **{i: PAPER_TABLE[j] for i, j in SAME_AS.items()}}
    assert [list(c) for c in s.layer_choices] == [table[i] for i in range(1, 15)]
    assert s.in_channels == 3 and s.num_classes == 1000 and s.resolution == (224, 224)
    assert s.n_slots == 2396 and s.n_variables == 1612
    assert s.n_nodes == 16 and s.n_edges == 15
    # layers 8-12 (edges 7..11) share one table; nothing else is shared
    shared = [i for i, t in enumerate(s.thetas) if sum(t == u for u in s.thetas) > 1]
    assert shared == [7, 8, 9, 10, 11]
    assert all((s.edge_tables[i] == s.edge_tables[7]).all() for i in shared)


def test_width_rounding_rule():
    assert width_choices(32, np.linspace(0.2, 1.5, 14)) == tuple(PAPER_TABLE[1])
    assert width_choices(16, [0.2]) == (8,)  # at least 8


def test_variable_keys_and_ids_are_consistent():
    s = get_space("mobilenet_v1_fmnist")
    rng = np.random.default_rng(0)
    for _ in range(20):
        ch = [int(rng.choice(c)) for c in s.layer_choices]
        idx = s.indices(ch)
        full = s.full(ch)
        for e, v in enumerate(s.variable_ids(idx)):
            theta, ci, co = s.variables[v]
            assert theta == s.thetas[e] and (ci, co) == (full[e], full[e + 1])
        assert s.channels_of(idx) == ch


def test_configuration_outside_the_space_names_layer_and_widths():
    s = get_space("mobilenet_v1_fmnist")
    bad = s.max_config
    bad[3] = 100
    with pytest.raises(ValueError, match=r"layer 3 .*allowed widths: \[24, 56"):
        s.indices(bad)
    with pytest.raises(ValueError, match="14 searchable layers"):
        s.indices([8, 16])


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ValueError, match="mobilenet_v1_imagenet"):
        get_space("resnet")


def test_space_hash_tracks_definition_not_name():
    a = mobilenet_v1_space("a", resolution=32, n_choices=4)
    b = mobilenet_v1_space("b", resolution=32, n_choices=4)
    c = mobilenet_v1_space("c", resolution=32, n_choices=5)
    assert a.hash == b.hash != c.hash


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_space_cli_json(preset):
    out = subprocess.run(["aows", "space", "--preset", preset, "--json"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    s = get_space(preset)
    assert d["n_variables"] == s.n_variables and d["n_slots"] == s.n_slots and d["size"] == s.size
    assert len(d["edges"]) == s.n_edges and d["layer_choices"] == [list(c) for c in s.layer_choices]


def test_node_and_layer_vocabulary():
    s = get_space("mobilenet_v1_fmnist")
    u = pad_nodes([np.arange(len(c)) for c in s.layer_choices])
    assert len(u) == s.n_nodes and [x.size for x in u] == [len(c) for c in s.choices]
    assert u[0].tolist() == [0.0] == u[-1].tolist() and all(x.dtype == np.float64 for x in u)
    idx = np.stack([s.indices(s.max_config), s.indices(s.min_config)])
    layers = s.layer_columns(idx)
    assert layers.shape == (2, s.n_layers) and np.array_equal(layer_columns(layers, s.n_layers), layers)
    assert s.layer_channels(layers[0]) == s.max_config == s.channels_of(idx[0])
    with pytest.raises(ValueError, match="columns"):
        s.layer_columns(idx[:, :5])


def test_a_network_needs_the_classifier_last_and_only_there():
    from aows_core.space import check_blocks

    check_blocks(get_space("mobilenet_v1_fmnist"))
    t = Theta(4, 4, 1, 1, "linear")
    bad = SearchSpace("bad", ((1,), (8, 16), (4,)), (t, Theta(4, 4, 1, 3, "conv")))
    with pytest.raises(ValueError, match="edge 0 is 'linear'"):
        check_blocks(bad)


def test_an_unknown_or_misplaced_layer_kind_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown layer kind 'capsule'; registered kinds: \['add', 'cat', 'conv'"):
        SearchSpace("bad", ((1,), (8, 16), (4,)), (Theta(4, 4, 1, 3, "capsule"), Theta(4, 4, 1, 1, "linear")))
    with pytest.raises(ValueError, match="reads and writes one width"):
        SearchSpace("bad", ((1,), (8, 16), (4,)), (Theta(4, 4, 1, 3, "dw"), Theta(4, 4, 1, 1, "linear")))


# ---- residual spaces (docs/method.md D44) -------------------------------------------------------
RESIDUAL = ["mobilenet_v2_fmnist", "resnet_fmnist", "mobilenet_v2_imagenet", "resnet18_imagenet", "resnet50_imagenet"]


@pytest.mark.parametrize("preset", RESIDUAL)
def test_residual_stages_tie_their_stream_and_free_inner_widths(preset):
    s = get_space(preset)
    assert not s.is_chain and s.hash == SearchSpace.from_dict(s.to_dict()).hash
    assert SearchSpace.from_dict(s.to_dict()) == s
    roles = s.roles()
    for b in s.blocks:
        if b.add >= 0:  # a residual: the block adds to the stream it reads, or projects it
            assert s.edges[b.add] == (b.dst, b.dst) and (b.src == b.dst) == (b.shortcut < 0)
        if b.inner >= 0:  # an inner width is read and written inside its own block only
            users = {e for e, (u, v) in enumerate(s.edges) if b.inner in (u, v)}
            assert users <= set(b.edges) and roles[b.inner] == "inner"
    tied = [n for n in range(s.n_nodes) if len(s.tied()[n]) > 1]
    assert tied and all(roles[n] == "stream" for n in tied)
    # every edge's variables: one per width pair, or one per width for a one-width layer (depthwise, add)
    for (u, v), tab in zip(s.edges, s.edge_tables):
        assert (tab >= 0).sum() == (len(s.choices[u]) if u == v else len(s.choices[u]) * len(s.choices[v]))


def _torchvision_counts(name: str, num_classes: int) -> tuple[int, int]:
    """MACs (Conv2d and Linear, by forward hooks) and parameters of a torchvision model at 224×224."""
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(num_classes=num_classes).eval()
    macs = [0]

    def hook(m, _, out):
        macs[0] += m.weight.numel() * (out.shape[2] * out.shape[3] if out.dim() == 4 else 1)

    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.zeros(1, 3, 224, 224))
    return macs[0], sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("preset,model", [("mobilenet_v2_imagenet", "mobilenet_v2"), ("resnet18_imagenet", "resnet18"),
                                          ("resnet50_imagenet", "resnet50")])
@pytest.mark.parametrize("num_classes", [10, 1000])
def test_imagenet_presets_at_multiplier_one_count_as_torchvision(preset, model, num_classes):
    from aows_core.devices.flops import network_macs, network_params

    s = get_space(preset, num_classes=num_classes)
    assert all(b in c for b, c in zip(s.base, s.layer_choices))  # 1.0 is a choice of every width
    assert (network_macs(s, s.base_config), network_params(s, s.base_config)) == _torchvision_counts(model, num_classes)


def test_space_cli_json_names_tied_and_inner_widths_and_the_base_network():
    out = subprocess.run(["aows", "space", "--preset", "resnet18_imagenet", "--json"], capture_output=True, text=True,
                         check=True)
    d = json.loads(out.stdout)
    assert d["base_macs"] == 1_814_073_344 and d["base_params"] == 11_689_512  # torchvision's resnet18
    assert d["tied_nodes"] == [1, 5, 8, 11] and d["inner_nodes"] == [2, 3, 4, 6, 7, 9, 10, 12]  # stem shared by layer1
    assert [b["residual"] for b in d["blocks"][1:3]] == ["identity", "identity"]
    assert d["blocks"][3]["residual"] == "projection" and d["nodes"][1]["tied"]


def test_one_width_layers_get_monotonicity_pairs_along_their_width():
    from aows_core.latency.lut import check_pairs, monotonicity_pairs

    s = get_space("mobilenet_v2_fmnist")
    counts = check_pairs(s, monotonicity_pairs(s))
    assert counts["width"] > 0
    assert check_pairs(get_space("mobilenet_v1_fmnist"), monotonicity_pairs(get_space("mobilenet_v1_fmnist")))["width"] == 0


def test_stage_refuses_unknown_block_kinds():
    from aows_core.space import Stage

    with pytest.raises(ValueError, match="unknown block kind 'se'"):
        Stage("se", 16)
