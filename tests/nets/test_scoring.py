"""Prefix reuse in `SubnetScorer` (D22, D44): a configuration resumes from the cached states of the leading blocks whose
nodes' widths it shares with the cached one, and scores exactly what the whole pass scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from net_cases import images, randomise

from aows_core.nets.scoring import SubnetScorer, _shared_prefixes
from aows_core.nets.supernet import Supernet
from aows_core.search.baselines import greedy_search
from aows_core.space import get_space

torch.set_num_threads(1)

SPACES = {
    "mobilenet_v2_fmnist": lambda: get_space("mobilenet_v2_fmnist"),
    "resnet_fmnist": lambda: get_space("resnet_fmnist", n_choices=3, width_mult=0.5),
    "mobilenet_v1_fmnist": lambda: get_space("mobilenet_v1_fmnist", n_choices=2, width_mult=0.5),  # the chain
    "mobilenet_v2_small": lambda: get_space("mobilenet_v2_fmnist", n_choices=2, width_mult=0.5),  # a short greedy
}


def supernet(name: str):
    torch.manual_seed(0)
    space = SPACES[name]()
    net = Supernet(space)
    return randomise(net)


def data(space):
    cal, x = images(space, 16, seed=5), images(space, 11, seed=6)  # 11 = 5 + 5 + 1: an uneven last batch
    return cal, x, (torch.arange(11) * 7) % space.num_classes


def scorer(net, **kw) -> SubnetScorer:
    cal, x, y = data(net.space)
    return SubnetScorer(net, cal, x, y, batch_size=5, **kw)


class Fresh:
    """The whole pass, no reuse: every configuration scored by a new scorer (an empty cache)."""

    batched = False

    def __init__(self, net):
        self.net = net
        self.space, self.n = net.space, len(data(net.space)[2])

    def score(self, channels, start_edge: int = 0):
        return scorer(self.net).score(channels)

    def score_many(self, configs):
        return [self.score(c) for c in configs]


def count_blocks(s: SubnetScorer) -> list[int]:
    """Wrap the scorer's per-block step to count the blocks it runs."""
    n = [0]
    name = "_block"
    step = getattr(s, name)

    def counted(*a, **k):
        n[0] += 1
        return step(*a, **k)

    setattr(s, name, counted)
    return n


def assert_same(got, want):
    assert got[0] == want[0]
    assert got[1] == pytest.approx(want[1], abs=1e-6, rel=0)


def greedy_like(space, rng, steps: int) -> list[tuple[list[int], int]]:
    """(channels, lowered node) in greedy order: per step every one-node-lowered neighbour in ascending node order,
    then a random one of them becomes the current configuration; then single lowerings in random node order."""
    counts = np.array([len(c) for c in space.choices])
    cur = counts - 1
    out = []
    for _ in range(steps):
        movable = [i for i in range(1, len(counts) - 1) if cur[i] > 0]
        for i in movable:
            c = cur.copy()
            c[i] -= 1
            out.append((space.channels_of(c), i))
        cur[int(rng.choice(movable))] -= 1
    for i in rng.permutation(np.arange(1, len(counts) - 1)):
        if cur[i] > 0:
            cur[i] -= 1
            out.append((space.channels_of(cur), int(i)))
    return out


@pytest.mark.parametrize("name", ["mobilenet_v2_fmnist", "resnet_fmnist", "mobilenet_v1_fmnist"])
def test_prefix_reuse_scores_what_a_fresh_scorer_scores(name):
    """A greedy-like sequence scored by one scorer with `start_edge` = lowered node − 1: each score is that of a fresh
    scorer (empty cache), and fewer blocks run than in whole passes."""
    net = supernet(name)
    space = net.space
    seq = greedy_like(space, np.random.default_rng(3), steps=2)
    s = scorer(net)
    ran = count_blocks(s)
    n_blocks = len(space.blocks) - 1
    for ch, node in seq:
        assert_same(s.score(ch, start_edge=node - 1), scorer(net).score(ch))
    assert ran[0] < 0.75 * n_blocks * len(seq)
    assert len(s._prefix) <= n_blocks


@pytest.mark.parametrize("name", ["mobilenet_v2_fmnist", "resnet_fmnist"])
def test_any_start_edge_and_order_scores_the_same(name):
    """`start_edge` is only a caching hint: any value, in any order of configurations, gives the whole pass's scores."""
    net = supernet(name)
    space = net.space
    rng = np.random.default_rng(7)
    base = [int(rng.choice(c)) for c in space.layer_choices]
    configs = []
    for _ in range(12):
        c = list(base)
        for k in rng.choice(space.n_layers, size=2, replace=False):
            c[k] = int(rng.choice(space.layer_choices[k]))
        configs.append(c)
    s, whole = scorer(net), Fresh(net)
    for c in configs:
        assert_same(s.score(c, start_edge=int(rng.integers(0, space.n_layers + 1))), whole.score(c))


@pytest.mark.parametrize("name", ["mobilenet_v2_fmnist", "resnet_fmnist"])
def test_score_many_reuses_the_neighbours_prefixes(name):
    """`score_many` over the one-node-lowered neighbours of the max configuration: the whole pass's scores, fewer
    blocks run."""
    net = supernet(name)
    space = net.space
    cur = np.array([len(c) for c in space.choices]) - 1
    cands = []
    for i in range(1, space.n_nodes - 1):
        c = cur.copy()
        c[i] -= 1
        cands.append(space.channels_of(c))
    L = len(cands)
    assert _shared_prefixes(cands) == [*range(L - 1), L - 2]  # node k + 1 lowered: the first k widths are shared
    s = scorer(net)
    ran = count_blocks(s)
    got = s.score_many(cands)
    for g, w in zip(got, Fresh(net).score_many(cands)):
        assert_same(g, w)
    assert ran[0] < 0.75 * (len(space.blocks) - 1) * len(cands)


@pytest.mark.parametrize("name", ["mobilenet_v2_small", "resnet_fmnist", "mobilenet_v1_fmnist"])
def test_greedy_search_trajectory_is_unchanged_by_reuse(name):
    """`greedy_search` with prefix reuse gives the trajectory (configurations, errors, CE) of whole passes."""
    net = supernet(name)
    with_reuse = greedy_search(scorer(net))
    without = greedy_search(Fresh(net))
    assert [r["channels"] for r in with_reuse] == [r["channels"] for r in without]
    assert [r["lowered_layer"] for r in with_reuse] == [r["lowered_layer"] for r in without]
    for a, b in zip(with_reuse, without):
        assert a["errors"] == b["errors"]
        assert a["cross_entropy"] == pytest.approx(b["cross_entropy"], abs=1e-6, rel=0)
