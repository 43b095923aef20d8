"""The greedy (AutoSlim) baseline: cached-prefix scoring equals a recalibrated sliced network; the trajectory."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stage_calls import greedy_trajectory

from aows_core import artifacts as io
from aows_core.artifacts import read_supernet_state as load_model_state
from aows_core.config import space_from_config, validate
from aows_core.nets.scoring import SubnetScorer as GreedyScorer
from aows_core.nets.supernet import Supernet
from aows_core.search.baselines import greedy_search, greedy_trim


def chain_greedy(counts, score):
    return greedy_trim(counts, lambda c, _n: score(c))

CFG = {
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "greedy": {"n_eval": 48, "n_cal": 40, "batch_size": 16},
}


@pytest.fixture(scope="module")
def setup():
    cfg = validate(CFG)
    space = space_from_config(cfg)
    torch.manual_seed(0)
    model = Supernet(space)
    with torch.no_grad():  # a non-trivial BN state and weights
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    model.double()  # float64: the comparisons below are exact up to rounding, not chaotic in float32
    g = torch.Generator().manual_seed(1)
    cal = torch.randn(40, 1, 28, 28, generator=g, dtype=torch.float64)
    x = torch.randn(48, 1, 28, 28, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (48,), generator=g)
    return cfg, space, model, cal, x, y


def reference_score(model, channels, cal, x, y):
    """A fixed-width copy, BN statistics reset and recomputed from all calibration images at once."""
    net = model.subnet(channels)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = 1.0
    with torch.no_grad():
        net.train()(cal)
        logits = net.eval()(x)
    return int((logits.argmax(1) != y).sum()), float(F.cross_entropy(logits.double(), y, reduction="sum"))


def test_scores_with_cached_prefixes_equal_recalibrated_subnets(setup):
    _, space, model, cal, x, y = setup
    scorer = GreedyScorer(model, cal, x, y, batch_size=16)
    rng = np.random.default_rng(0)
    base = [rng.integers(len(c)) for c in space.layer_choices]
    for start in (0, 3, 7, 12):
        for _ in range(2):
            idx = list(base)
            if start < len(idx):
                idx[start] = rng.integers(len(space.layer_choices[start]))  # candidates share the prefix
            ch = [c[j] for c, j in zip(space.layer_choices, idx)]
            e, ce = scorer.score(ch, start_edge=start)
            e_ref, ce_ref = reference_score(model, ch, cal, x, y)
            assert e == e_ref
            assert ce == pytest.approx(ce_ref, rel=1e-9)


def test_trajectory_is_the_greedy_trimming_of_its_score():
    space = space_from_config(validate({"space": {**CFG["space"], "resolution": 8}}))
    torch.manual_seed(0)
    model = Supernet(space)  # float32: cached and uncached scores run the same operations
    g = torch.Generator().manual_seed(2)
    cal, x = (torch.randn(n, 1, 8, 8, generator=g) for n in (24, 32))
    y = torch.randint(0, 10, (32,), generator=g)
    rows = greedy_search(GreedyScorer(model, cal, x, y, batch_size=16))
    n = len(y)
    plain = GreedyScorer(model, cal, x, y, batch_size=16)  # equals reference_score (test above), no prefix cache

    def score(node_idx):
        e, ce = plain.score(space.channels_of(node_idx))
        return e + ce / n / (1 + ce / n)  # errors first, then cross-entropy (lexicographic)

    counts = [len(c) for c in space.choices]
    ref = chain_greedy(counts, score)
    assert [r["channels"] for r in rows] == [space.channels_of(c) for c in ref]
    assert rows[0]["channels"] == space.max_config and rows[-1]["channels"] == space.min_config
    assert len(rows) == 1 + sum(len(c) - 1 for c in space.layer_choices)
    assert [r["step"] for r in rows] == list(range(len(rows)))


def test_shares_of_the_evaluation_images_sum_to_the_whole_score(setup):
    """Data-parallel scoring (greedy.processes, D30): every process holds every N-th evaluation image and all the
    calibration images, so the shares' (errors, CE) sum to the one-process score; `reduce` is that sum."""
    _, space, model, cal, x, y = setup
    whole = GreedyScorer(model, cal, x, y, batch_size=16)
    shares = [GreedyScorer(model, cal, x[r::3], y[r::3], batch_size=16) for r in range(3)]
    rng = np.random.default_rng(0)
    for _ in range(4):
        ch = [int(rng.choice(c)) for c in space.layer_choices]
        e, ce = whole.score(ch)
        parts = [s.score(ch) for s in shares]
        assert sum(p[0] for p in parts) == e and sum(p[1] for p in parts) == pytest.approx(ce, rel=1e-12)
    twice = GreedyScorer(model, cal, x, y, batch_size=16, reduce=lambda v: [2 * a for a in v])  # a twin rank
    assert twice.n == 2 * whole.n == 96 and twice.score(space.max_config)[0] == 2 * whole.score(space.max_config)[0]


def test_stage_writes_the_trajectory_and_refuses_a_foreign_model(setup, tmp_path):
    cfg, space, model, *_ = setup
    torch.save({"space_hash": space.hash, "model": model.state_dict()}, tmp_path / "model.pt")
    rows = greedy_trajectory(cfg, tmp_path / "model.pt", tmp_path / "traj.parquet", progress=False)
    table, meta = io.read_table(tmp_path / "traj.parquet", "greedy_trajectory")
    assert table.schema.remove_metadata().equals(io.SCHEMAS["greedy_trajectory"])
    assert table.num_rows == len(rows) and meta["n_eval"] == 48 and meta["n_cal"] == 40
    assert all(0 <= r["error"] <= 1 for r in rows)
    torch.save({"space_hash": "other", "model": model.state_dict()}, tmp_path / "foreign.pt")
    with pytest.raises(ValueError, match="trained on space"):
        load_model_state(tmp_path / "foreign.pt", space)
