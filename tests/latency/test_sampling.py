"""Uniform and coverage-biased configuration sampling (§4, supplementary A)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from aows_core.latency.sampling import (
    CoverageSampler,
    biased_configs,
    config_sets,
    coverage_counts,
    coverage_lower_bound,
    networks_to_cover,
    uniform_configs,
)
from aows_core.search.viterbi import viterbi
from aows_core.space import get_space, mobilenet_v1_space

PRESETS = ("mobilenet_v1_imagenet", "mobilenet_v1_fmnist")


@pytest.fixture(scope="module")
def imagenet():
    return get_space("mobilenet_v1_imagenet")


@pytest.fixture(scope="module")
def fmnist():
    return get_space("mobilenet_v1_fmnist")


def assert_valid(space, idx):
    sizes = np.array([len(c) for c in space.choices])
    assert idx.ndim == 2 and idx.shape[1] == space.n_nodes
    assert np.issubdtype(idx.dtype, np.integer)
    assert (idx >= 0).all() and (idx < sizes).all()
    for row in idx[:5]:  # round trip through widths
        assert (space.indices(space.channels_of(row)) == row).all()


# ---- uniform ------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
def test_uniform_valid_and_deterministic(preset):
    space = get_space(preset)
    a = uniform_configs(space, 300, 7)
    assert_valid(space, a)
    assert a.shape == (300, space.n_nodes)
    assert (a[:, 0] == 0).all() and (a[:, -1] == 0).all()
    assert (a == uniform_configs(space, 300, np.random.default_rng(7))).all()
    assert not (a == uniform_configs(space, 300, 8)).all()
    assert uniform_configs(space, 0, 0).shape == (0, space.n_nodes)


def test_uniform_marginals_are_uniform(imagenet):
    idx = uniform_configs(imagenet, 5000, 0)
    for j, c in enumerate(imagenet.choices):
        if len(c) == 1:
            continue
        obs = np.bincount(idx[:, j], minlength=len(c))
        assert chisquare(obs).pvalue > 1e-3, (j, obs)


# ---- counts and bounds --------------------------------------------------------------------
def test_coverage_counts_once_per_use(imagenet):
    idx = np.zeros((2, imagenet.n_nodes), dtype=np.int64)
    idx[1, 1:-1] = 3
    counts = coverage_counts(imagenet, idx)
    naive = np.zeros(imagenet.n_variables, dtype=np.int64)
    for row in idx:
        for i, tab in enumerate(imagenet.edge_tables):
            naive[tab[row[i], row[i + 1]]] += 1
    assert (counts == naive).all()
    # edges 7..11 share one Θ: the same-width variable is used five times by each of these networks
    assert counts[imagenet.edge_tables[7][0, 0]] == 5
    assert counts.sum() == 2 * imagenet.n_edges
    assert (coverage_counts(imagenet, np.zeros((0, imagenet.n_nodes), int)) == 0).all()


def test_lower_bound_on_presets(imagenet, fmnist):
    for R in range(1, 6):
        assert coverage_lower_bound(imagenet, R) == 196 * R  # largest unshared table, 14×14
        assert coverage_lower_bound(fmnist, R) == 36 * R  # 6×6


def test_networks_to_cover_prefix(fmnist):
    idx = biased_configs(fmnist, 2)
    assert networks_to_cover(fmnist, idx, 2) == len(idx)
    assert networks_to_cover(fmnist, idx[:-1], 2) is None
    n1 = networks_to_cover(fmnist, idx, 1)
    assert coverage_counts(fmnist, idx[:n1]).min() == 1 and coverage_counts(fmnist, idx[: n1 - 1]).min() == 0


# ---- coverage-biased sampling -------------------------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("R", [1, 2, 3])
def test_biased_covers_every_variable(preset, R):
    space = get_space(preset)
    idx = biased_configs(space, R)
    assert_valid(space, idx)
    assert coverage_counts(space, idx).min() >= R
    assert networks_to_cover(space, idx, R) == len(idx)  # stops as soon as the coverage is reached
    assert len(idx) >= coverage_lower_bound(space, R)


def test_default_space_within_10pct_of_bound(fmnist):
    for R in range(1, 6):
        n, lb = len(biased_configs(fmnist, R)), coverage_lower_bound(fmnist, R)
        print(f"default space R={R}: {n} networks, lower bound {lb}, ratio {n / lb:.3f}")
        assert n <= 1.1 * lb


def test_imagenet_full_coverage_at_the_bound(imagenet):
    biased = len(biased_configs(imagenet, 1))
    assert biased == coverage_lower_bound(imagenet, 1) == 196
    uniform = networks_to_cover(imagenet, uniform_configs(imagenet, 6000, 0), 1)
    assert uniform is not None
    print(f"ImageNet R=1: biased {biased}, uniform (seed 0) {uniform}, ratio {uniform / biased:.1f}x")
    assert uniform >= 4 * biased


def test_seeded_relabelling_still_reaches_the_bound(imagenet):
    a = biased_configs(imagenet, 1, seed=11)
    assert len(a) == 196 and coverage_counts(imagenet, a).min() >= 1
    assert (a == biased_configs(imagenet, 1, seed=11)).all()
    assert not np.array_equal(a, biased_configs(imagenet, 1))


def test_biased_is_deterministic_and_online(fmnist):
    a = biased_configs(fmnist, 3)
    assert (a == biased_configs(fmnist, 3)).all()
    # a fixed count is the same stream, cut or continued
    assert (biased_configs(fmnist, n=50) == a[:50]).all()
    longer = biased_configs(fmnist, n=len(a) + 20)
    assert (longer[: len(a)] == a).all() and coverage_counts(fmnist, longer).min() >= 3
    # resuming from already-profiled networks continues the same sequence
    assert (biased_configs(fmnist, 3, start=a[:100]) == a[100:]).all()
    assert biased_configs(fmnist, n=0).shape == (0, fmnist.n_nodes)
    assert biased_configs(fmnist, 2, start=a).shape == (0, fmnist.n_nodes)


def test_paper_criterion_is_optimised_exactly(fmnist):
    """Each proposal holds as many least-seen variables as the plain Iverson energy allows (supp. A)."""
    sampler = CoverageSampler(fmnist)
    for _ in range(150):
        counts = sampler.counts[: fmnist.n_variables].copy()
        M = counts.min()
        pairwise = [-(counts[tab] == M).astype(float) for tab in fmnist.edge_tables]
        unaries = [np.zeros(len(c)) for c in fmnist.choices]
        _, best = viterbi(unaries, pairwise)
        idx = sampler.propose()
        got = sum(counts[tab[idx[i], idx[i + 1]]] == M for i, tab in enumerate(fmnist.edge_tables))
        assert got == -best >= 1


def test_plain_iverson_ablation_covers(fmnist):
    idx = biased_configs(fmnist, 2, secondary=False)
    assert coverage_counts(fmnist, idx).min() >= 2 and len(idx) >= coverage_lower_bound(fmnist, 2)


def test_biased_rejects_bad_arguments(fmnist):
    with pytest.raises(ValueError):
        biased_configs(fmnist, None)
    with pytest.raises(ValueError):
        biased_configs(fmnist, n=-1)


small_spaces = st.builds(
    lambda res, nc, wm, fs, classes: mobilenet_v1_space(
        "small", resolution=res, in_channels=1, num_classes=classes, width_mult=wm, n_choices=nc, first_stride=fs
    ),
    res=st.sampled_from([4, 8, 12, 16, 28, 32]),
    nc=st.integers(2, 5),
    wm=st.sampled_from([0.125, 0.25, 0.5]),
    fs=st.sampled_from([1, 2]),
    classes=st.sampled_from([2, 10]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=small_spaces, R=st.integers(1, 3), seed=st.one_of(st.none(), st.integers(0, 2**16)))
def test_biased_covers_random_small_spaces(space, R, seed):
    idx = biased_configs(space, R, seed=seed)
    assert_valid(space, idx)
    assert coverage_counts(space, idx).min() >= R
    assert coverage_lower_bound(space, R) <= len(idx) <= R * space.n_variables
    assert (idx == biased_configs(space, R, seed=seed)).all()


# ---- the profiling sets -------------------------------------------------------------------
def test_config_sets(fmnist):
    sets = config_sets(fmnist, 0, 2, 30, 40)
    assert set(sets) == {"train", "lambda_val", "test"}
    assert len(sets["lambda_val"]) == 30 and len(sets["test"]) == 40
    for idx in sets.values():
        assert_valid(fmnist, idx)
    assert coverage_counts(fmnist, sets["train"]).min() >= 2
    assert len(sets["train"]) <= 1.1 * coverage_lower_bound(fmnist, 2)
    again = config_sets(fmnist, 0, 2, 30, 40)
    assert all((sets[k] == again[k]).all() for k in sets)
    assert not np.array_equal(sets["lambda_val"], sets["test"][:30])  # independent streams
    other = config_sets(fmnist, 1, 2, 30, 40)
    assert not np.array_equal(sets["test"], other["test"])
