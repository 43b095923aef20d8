"""Residual spaces compiled to a chain (aows_core.search.graph, docs/method.md D44) against brute force."""

import itertools
import time

import numpy as np
import pytest

from aows_core.config import AowsSettings
from aows_core.latency.sampling import biased_configs, coverage_counts, coverage_lower_bound
from aows_core.search.chain import Chain
from aows_core.search.decisions import decide
from aows_core.search.graph import MAX_STATES, SpaceChain, space_chain, space_latency_chain
from aows_core.search.results import InfeasibleTarget
from aows_core.search.sampler import AOWSSampler
from aows_core.search.targets import DeviceTable, check_feasible, latency_range, lut_tables
from aows_core.space import Block, SearchSpace, Stage, Theta, build_space, get_space

RESIDUAL_PRESETS = ("mobilenet_v2_fmnist", "resnet_fmnist", "mobilenet_v2_imagenet", "resnet18_imagenet",
                    "resnet50_imagenet")


# ---------------------------------------------------------------------------------------------
# random small tied spaces and brute force
# ---------------------------------------------------------------------------------------------
def random_space(rng: np.random.Generator, max_size: int = 4000, min_size: int = 30) -> SearchSpace:
    """A tiny residual space from random stages (tied streams, inner widths, shortcuts, node 0's own dw layer)."""
    while True:
        first = rng.choice(["conv", "ir1", "ir2", "basic", "bottleneck"])
        stages = [_stage(first, rng, first=True)]
        for _ in range(rng.integers(1, 4)):
            stages.append(_stage(rng.choice(["ir2", "basic", "bottleneck", "dwsep"]), rng))
        sp = build_space("rand", stages, resolution=8, in_channels=int(rng.choice([1, 8])), num_classes=2,
                         n_choices=int(rng.integers(2, 4)))
        if not sp.is_chain and min(min_size, max_size) <= sp.size <= max_size:
            return sp


def _stage(kind: str, rng: np.random.Generator, first: bool = False) -> Stage:
    width = int(rng.choice([8, 16, 24, 32]))
    reps = 1 if first else int(rng.integers(1, 4))
    stride = int(rng.integers(1, 3))
    if kind in ("ir1", "ir2"):
        return Stage("inverted_residual", width, reps, stride, expand=1 if kind == "ir1" else 2)
    return Stage(kind, width, reps, stride)


def random_instance(rng: np.random.Generator, sp: SearchSpace, ties: bool = False, forbid: bool = False):
    """Unaries (n+1 arrays, zeros on the end nodes; +inf on a few choices if `forbid`) and per-edge LUT tables."""
    work = np.array([ci * co for _, ci, co in sp.variables], dtype=float) / 256  # wider is usually slower
    x = work * rng.uniform(0.5, 1.5, sp.n_variables) + rng.uniform(0.0, 0.2, sp.n_variables)
    if ties:
        x = np.ceil(x * 4)
    u = [np.zeros(1)]
    for c in sp.choices[1:-1]:
        d = rng.integers(-3, 4, len(c)).astype(float) if ties else rng.normal(size=len(c))
        d -= rng.uniform(0, 2) * np.arange(len(c))  # wider is usually better: most targets bind
        if forbid and len(c) > 1 and rng.random() < 0.3:
            d[rng.integers(len(c))] = np.inf
        u.append(d)
    u.append(np.zeros(1))
    return u, lut_tables(sp, x), x


class Brute:
    """Every configuration of a space with its Σδ and latency, computed independently of the decoders."""

    def __init__(self, sp: SearchSpace, u, tables):
        self.paths = np.array(list(itertools.product(*[range(len(c)) for c in sp.choices])), dtype=np.int64)
        D = np.zeros(len(self.paths))
        for v, d in enumerate(u):
            D += d[self.paths[:, v]]
        L = np.zeros(len(self.paths))
        for (s, t), tab in zip(sp.edges, tables):
            L += tab[self.paths[:, s], self.paths[:, t]]
        ok = np.isfinite(D)
        self.paths, self.D, self.L = self.paths[ok], D[ok], L[ok]
        self.sp = sp

    def opt(self, target: float, ftol: float) -> float:
        ok = self.L <= target + ftol
        return float(self.D[ok].min())

    def gibbs(self, gamma: float, T: float) -> tuple[np.ndarray, float]:
        e = -(self.D + gamma * self.L) / T
        m = e.max()
        w = np.exp(e - m)
        return w / w.sum(), float(m + np.log(w.sum()))

    def hull(self, ftol: float) -> np.ndarray:
        """Lower convex hull of (L, Σδ) from the min-latency point to the unconstrained optimum."""
        lo = self.L.min()
        D_lo = self.D[self.L <= lo + ftol].min()
        D_top = self.D.min()
        L_top = self.L[self.D <= D_top].min()
        keep = (self.L >= lo - ftol) & (self.L <= L_top + ftol)
        pts = sorted(set(zip(self.L[keep].tolist(), self.D[keep].tolist())))
        hull: list[tuple[float, float]] = []
        for q in [(lo, D_lo)] + [p for p in pts if p[0] > lo + ftol]:
            while hull and q[0] <= hull[-1][0] + ftol and q[1] < hull[-1][1]:  # same latency: keep the lower Σδ
                hull.pop()
            if hull and q[0] <= hull[-1][0] + ftol:
                continue
            while len(hull) >= 2:
                (x0, y0), (x1, y1) = hull[-2], hull[-1]
                if (x1 - x0) * (q[1] - y0) - (y1 - y0) * (q[0] - x0) <= 1e-12:
                    hull.pop()
                else:
                    break
            hull.append(q)
        return np.array([h for h in hull if h[0] <= L_top + ftol])


def close(a: float, b: float, scale: float = 1.0) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b), scale)


# ---------------------------------------------------------------------------------------------
# the decoders against brute force
# ---------------------------------------------------------------------------------------------
def test_decoders_equal_brute_force_on_random_tied_spaces():
    """(a) exact mode = the constrained optimum; Lagrangian and hull answers bounded by it; (b) Lagrangian
    solutions = brute-force minima of Σδ + γL; (d) infeasible targets refused; (f) min/max latency and the hull."""
    decodes = failures = 0
    rng = np.random.default_rng(44)
    for seed in range(150):
        sp = random_space(rng)
        ties, forbid = seed % 5 == 3, seed % 4 == 1
        u, tables, _ = random_instance(rng, sp, ties=ties, forbid=forbid)
        ch = SpaceChain(sp.edges, u, tables)
        bf = Brute(sp, u, tables)
        ftol = ch.ftol
        scale = ch.compiled.d_scale + ch.compiled.l_scale
        # (f) extremes
        assert close(ch.latency(ch.min_latency()), bf.L.min(), scale)
        assert close(ch.latency(ch.max_latency()), bf.L.max(), scale)
        assert close(ch.objective(ch.unconstrained()), bf.D.min(), scale)
        # (b) Lagrangian subproblems at random γ, every tie rule
        for gamma in [0.0, *rng.exponential(2.0, 3)]:
            E = bf.D + gamma * bf.L
            for tie in (None, "low", "high"):
                p = ch.solve(gamma, tie)
                assert abs(ch.energy(p, gamma) - E.min()) <= ch.tol(gamma) + 1e-12
        # (a) constrained decodes at targets across the range, exact and Lagrangian
        lo, hi = bf.L.min(), bf.L.max()
        targets = [lo, hi, *(lo + rng.random(5) * (hi - lo)), *rng.choice(bf.L, 2)]
        for t in targets:
            opt = bf.opt(t, ftol)
            for exact in (True, False):
                decodes += 1
                r = ch.decode(t, exact=exact)
                ok = r.latency <= t + ftol and r.objective == ch.objective(r.path) and r.latency == ch.latency(r.path)
                ok &= r.dual_bound <= opt + ch.tol(r.gamma) + 1e-12
                ok &= close(r.objective, opt, scale) if exact else r.objective >= opt - 1e-9 * scale
                failures += not ok
        for r, t in zip(ch.decode_many(targets), targets):
            decodes += 1
            opt = bf.opt(t, ftol)
            failures += not (r.latency <= t + ftol and r.objective >= opt - 1e-9 * scale
                             and r.dual_bound <= opt + ch.tol(r.gamma) + 1e-12)
        # (d) a target below the fastest network
        with pytest.raises(InfeasibleTarget) as err:
            ch.decode(lo - 0.1 * (abs(lo) + 1))
        assert close(err.value.min_latency, lo, scale)
        decodes += 1
        # (f) the hull's vertices are the brute-force lower hull (continuous, tie-free instances)
        if not ties:
            h, ref = ch.hull(), bf.hull(ftol)
            assert h.latencies.size == len(ref), (seed, h.latencies, ref)
            assert np.allclose(h.latencies, ref[:, 0], rtol=1e-9, atol=1e-12)
            assert np.allclose(h.objectives, ref[:, 1], rtol=1e-9, atol=1e-12)
    print(f"{decodes} decodes, {failures} failures")
    assert decodes >= 1000 and failures == 0, (decodes, failures)


def test_marginals_equal_gibbs_marginals():
    """(c) node and edge marginals, log Z and the entropy = those of exp(−E_γ/T) by enumeration (≤ 1e-8)."""
    rng = np.random.default_rng(7)
    for seed in range(40):
        sp = random_space(rng)
        u, tables, _ = random_instance(rng, sp, forbid=seed % 3 == 0)
        ch = SpaceChain(sp.edges, u, tables)
        bf = Brute(sp, u, tables)
        for gamma, T in [(0.0, 1.0), (float(rng.exponential(2)), float(rng.uniform(0.05, 2))), (-0.5, 0.3)]:
            w, log_z = bf.gibbs(gamma, T)
            m = ch.marginals(gamma, T)
            assert abs(m.log_z - log_z) <= 1e-8 * max(1, abs(log_z))
            hs = []
            for v, c in enumerate(sp.choices):
                p = np.bincount(bf.paths[:, v], weights=w, minlength=len(c))
                assert np.abs(m.probs[v] - p).max() <= 1e-8
                allowed = int(np.isfinite(u[v]).sum())
                if allowed > 1:
                    q = p[p > 0]
                    hs.append(-(q * np.log(q)).sum() / np.log(allowed))
            assert abs(m.mean_entropy() - (np.mean(hs) if hs else 0.0)) <= 1e-8
            for e, (s, d) in enumerate(sp.edges):
                P = np.zeros((len(sp.choices[s]), len(sp.choices[d])))
                np.add.at(P, (bf.paths[:, s], bf.paths[:, d]), w)
                assert np.abs(m.pairwise(e) - P).max() <= 1e-8


def test_joint_and_per_node_sampling_frequencies():
    """(c) FFBS draws configurations with their Gibbs probabilities; per-node draws follow the node marginals."""
    rng = np.random.default_rng(3)
    for _ in range(3):
        sp = random_space(rng, max_size=400)
        u, tables, _ = random_instance(rng, sp)
        ch = SpaceChain(sp.edges, u, tables)
        bf = Brute(sp, u, tables)
        w, _ = bf.gibbs(0.7, 0.8)
        m = ch.marginals(0.7, 0.8)
        N = 40_000
        J = m.sample(N, rng, "joint")
        code = np.ravel_multi_index(J.T, [len(c) for c in sp.choices])
        ref = np.ravel_multi_index(bf.paths.T, [len(c) for c in sp.choices])
        freq = np.bincount(code, minlength=int(ref.max()) + 1)[ref] / N
        assert np.abs(freq - w).max() < 5 * np.sqrt(w.max() / N) + 1e-3
        assert set(code.tolist()) <= set(ref.tolist())  # never a forbidden (disagreeing) configuration
        P = m.sample(N, rng, "per_node")
        for v, c in enumerate(sp.choices):
            assert np.abs(np.bincount(P[:, v], minlength=len(c)) / N - m.probs[v]).max() < 0.02


def test_chain_spaces_compile_to_the_same_chain():
    """(e) on a chain space the compiled SpaceChain gives exactly Chain's answers; space_chain returns a Chain."""
    rng = np.random.default_rng(11)
    decodes = 0
    for seed in range(30):
        k = rng.integers(2, 5, size=rng.integers(2, 6))
        choices = ((3,), *(tuple(8 * (j + 1) for j in range(int(n))) for n in k), (2,))
        thetas = tuple(Theta(8, 8, 1, 3, "conv") for _ in range(len(choices) - 2)) + (Theta(8, 8, 1, 1, "linear"),)
        sp = SearchSpace("chain", choices, thetas)
        assert sp.is_chain
        u, tables, x = random_instance(rng, sp, ties=seed % 3 == 0)
        a, b = Chain(u, tables), SpaceChain(sp.edges, u, tables)
        assert isinstance(space_chain(sp, u, tables), Chain)
        assert isinstance(space_latency_chain(sp, tables), Chain)
        assert b.compiled.has_forbid is False
        for g in [0.0, *rng.exponential(1.0, 3)]:
            for tie in (None, "low", "high"):
                assert a.solve(g, tie).tolist() == b.solve(g, tie).tolist()
        lo, hi = a.latency(a.min_latency()), a.latency(a.max_latency())
        for t in [lo, *(lo + rng.random(4) * (hi - lo)), hi]:
            for exact in (False, True):
                ra, rb = a.decode(t, exact=exact), b.decode(t, exact=exact)
                decodes += 1
                assert ra.path.tolist() == rb.path.tolist()
                assert (ra.objective, ra.latency, ra.gamma, ra.dual_bound, ra.gap, ra.exact, ra.method) == (
                    rb.objective, rb.latency, rb.gamma, rb.dual_bound, rb.gap, rb.exact, rb.method)
        ha, hb = a.hull(), b.hull()
        assert (ha.paths == hb.paths).all() and (ha.latencies == hb.latencies).all()
        assert (ha.objectives == hb.objectives).all() and (ha.slopes == hb.slopes).all()
        ma, mb = a.marginals(0.3, 0.5), b.marginals(0.3, 0.5)
        assert all((p == q).all() for p, q in zip(ma.probs, mb.probs)) and ma.mean_entropy() == mb.mean_entropy()
        for mode in ("per_node", "joint"):
            sa = ma.sample(50, np.random.default_rng(seed), mode)
            sb = mb.sample(50, np.random.default_rng(seed), mode)
            assert (sa == sb).all()
        na, nb = a.negated(), b.negated()
        assert na.decode(-hi).path.tolist() == nb.decode(-hi).path.tolist()
    assert decodes >= 300


def test_chain_forbidden_transitions_against_brute_force():
    """Chain(forbid=...): every decoder and the marginals see only allowed transitions (D44's building block)."""
    rng = np.random.default_rng(9)
    for seed in range(60):
        ks = [1, *rng.integers(1, 5, int(rng.integers(1, 5))), 1]
        u = [np.zeros(1), *(rng.normal(size=k) - np.arange(k) for k in ks[1:-1]), np.zeros(1)]
        L = [rng.uniform(0.1, 1.0, (a, b)) * (1 + np.arange(a)[:, None] + np.arange(b)) for a, b in zip(ks, ks[1:])]
        F = [rng.random(t.shape) < 0.4 for t in L]
        paths = np.array(list(itertools.product(*[range(k) for k in ks])))
        ok = ~np.any([F[i][paths[:, i], paths[:, i + 1]] for i in range(len(L))], axis=0)
        if not ok.any():
            with pytest.raises(ValueError, match="no allowed path"):
                Chain(u, L, forbid=F)
            continue
        ch, paths = Chain(u, L, forbid=F), paths[ok]
        D, Lat = ch.objective(paths), ch.latency(paths)
        assert ch.has_forbid == any(f.any() for f in F)
        assert np.isclose(ch.latency(ch.min_latency()), Lat.min()) and np.isclose(ch.latency(ch.max_latency()), Lat.max())
        for t in rng.choice(Lat, 3):
            r = ch.decode(t, exact=True)
            assert not any(F[i][r.path[i], r.path[i + 1]] for i in range(len(L)))
            assert np.isclose(r.objective, D[Lat <= t + ch.ftol].min()) and r.latency <= t + ch.ftol
        g, T = float(rng.exponential(1.0)), float(rng.uniform(0.2, 2.0))
        w = np.exp(-(D + g * Lat) / T)
        w /= w.sum()
        m = ch.marginals(g, T)
        for i, k in enumerate(ks):
            assert np.abs(m.probs[i] - np.bincount(paths[:, i], weights=w, minlength=k)).max() <= 1e-10
        for i in range(len(L)):
            P = np.zeros(L[i].shape)
            np.add.at(P, (paths[:, i], paths[:, i + 1]), w)
            assert np.abs(m.pairwise(i) - P).max() <= 1e-10
        J = m.sample(200, rng, "joint")
        assert not np.any([F[i][J[:, i], J[:, i + 1]] for i in range(len(L))])
    assert Chain(u, L, forbid=[np.zeros(t.shape, bool) for t in L]).has_forbid is False


def test_hand_built_space_with_blocks():
    """A hand-built tied space (SearchSpace with Blocks): a stage whose two blocks write one stream node."""
    th = lambda kind, k=1: Theta(8, 8, 1, k, kind)  # noqa: E731
    choices = ((1,), (8, 16), (8, 16, 24), (8, 16), (8, 24), (2,))
    edges = ((0, 1), (1, 2), (2, 3), (1, 3), (3, 3), (3, 4), (4, 3), (3, 3), (3, 5))
    thetas = (th("conv", 3), th("conv"), th("pconv"), th("pconv"), th("add"), th("conv"), th("pconv"), th("add"),
              th("linear"))
    blocks = (Block("conv", 0, 1, -1, 1, (0,)), Block("basic", 1, 3, 2, 1, (1, 2), 3, 4),
              Block("basic", 3, 3, 4, 1, (5, 6), -1, 7), Block("classifier", 3, 5, -1, 1, (8,)))
    sp = SearchSpace("hand", choices, thetas, (), edges, blocks)
    assert sp.tied()[3] == [1, 2]
    rng = np.random.default_rng(5)
    for _ in range(20):
        u, tables, _ = random_instance(rng, sp)
        ch, bf = space_chain(sp, u, tables), Brute(sp, u, tables)
        assert isinstance(ch, SpaceChain)
        t = float(rng.choice(bf.L))
        assert close(ch.decode(t, exact=True).objective, bf.opt(t, ch.ftol))


def test_state_size_guard_names_the_node():
    n = 9  # every node reaches every later one: node 6's state holds nodes 1..6, 8**6 joint choices (> 200,000)
    choices = ((1,), *[tuple(range(1, 9))] * (n - 2), (1,))
    edges = tuple((0, j) for j in range(1, n)) + tuple((i, j) for i in range(1, n - 1) for j in range(i + 1, n))
    u = [np.zeros(len(c)) for c in choices]
    tables = [np.zeros((len(choices[s]), len(choices[d]))) for s, d in edges]
    assert 8 ** 6 > MAX_STATES
    with pytest.raises(ValueError, match="node 6"):
        SpaceChain(edges, u, tables)
    few = tuple((i, j) for i in range(6) for j in range(i + 1, 7)) + ((6, 7), (7, 8))  # node 5: 8**5 states
    tables = [np.zeros((len(choices[s]), len(choices[d]))) for s, d in few]
    with pytest.raises(ValueError, match="node 5: .* exceed"):  # the states fit, the K × K transitions do not
        SpaceChain(few, u, tables)


# ---------------------------------------------------------------------------------------------
# consumers on residual spaces
# ---------------------------------------------------------------------------------------------
def test_lut_tables_mask_the_off_diagonal_of_one_width_layers():
    sp = get_space("mobilenet_v2_fmnist")
    x = np.arange(1.0, sp.n_variables + 1)
    for (s, d), tab, t in zip(sp.edges, sp.edge_tables, lut_tables(sp, x)):
        assert t.shape == tab.shape
        if s == d:
            assert (t[~np.eye(len(t), dtype=bool)] == 0.0).all() and (np.diagonal(t) == x[np.diagonal(tab)]).all()
        else:
            assert (t == x[tab]).all()


def test_range_feasibility_decisions_and_sampler_on_a_residual_space():
    rng = np.random.default_rng(2)
    sp = random_space(rng, max_size=2000)
    u, tables, x = random_instance(rng, sp)
    bf = Brute(sp, u, tables)
    lo, hi, fastest, slowest = latency_range(sp, x)
    assert close(lo, bf.L.min()) and close(hi, bf.L.max())
    assert close(space_latency_chain(sp, tables).latency(sp.indices(fastest)), lo)
    with pytest.raises(InfeasibleTarget):
        check_feasible(f"{lo * 0.5:.6f}ms", sp, x, "ms", "cpu")
    rows = decide(sp, u, DeviceTable(x, "ms", device="cpu"), ["range:0.4"], method="aows")
    t, ftol = lo + 0.4 * (hi - lo), space_chain(sp, u, tables).ftol
    assert close(rows[0]["objective"], bf.opt(t, ftol)) and rows[0]["predicted_latency_ms"] <= t + ftol


@pytest.mark.parametrize("mode", ["per_node", "joint"])
def test_aows_sampler_on_a_residual_space_draws_the_gibbs_marginals(mode):
    """§6 on a tied space (D44): the sampler's γ is the dual optimum (eq. lagrange; from the slow side for a target
    that does not bind, D31) and the per-node frequencies of its draws are the Gibbs marginals of exp(−E_γ/T),
    enumerated, within five binomial standard errors (plus three draws, for probabilities near 0 or 1)."""
    rng = np.random.default_rng(2)
    sp = random_space(rng, max_size=2000, min_size=500)
    u, tables, x = random_instance(rng, sp)
    bf = Brute(sp, u, tables)
    assert max(len(blocks) for blocks in sp.tied()) > 1
    lo, hi = bf.L.min(), bf.L.max()
    slopes = np.linspace(0.0, 4.0 * (np.ptp(bf.D) + 1.0) / max(hi - lo, 1e-12), 4001)
    N, T = 20_000, 1.0
    for quantile, binding in ((0.2, True), (0.9, False)):
        target = float(np.quantile(bf.L, quantile))
        s = AOWSSampler(sp, x, target, AowsSettings(sampling=mode, temperature_scale=1.0))
        out = s.sample(u, T, N, np.random.default_rng(11))
        assert out.shape == (N, sp.n_nodes) and s.binding is binding and s.last["effective_temperature"] == T
        # γ maximises the dual: g(γ) = min_c Σδ + γ(L − L_T) when binding, min_c Σδ + γ'(L_T − L) at γ' = −γ if not
        side = 1.0 if binding else -1.0
        dual = lambda g: float((bf.D + g * side * (bf.L - target)).min())  # noqa: E731
        assert side * s.gamma >= 0 and dual(side * s.gamma) >= max(dual(g) for g in slopes) - 1e-9 * (1 + np.ptp(bf.D))
        w, _ = bf.gibbs(s.gamma, T)
        for v, c in enumerate(sp.choices):
            p = np.bincount(bf.paths[:, v], weights=w, minlength=len(c))
            freq = np.bincount(out[:, v], minlength=len(c)) / N
            se = np.sqrt(np.clip(p * (1 - p), 0.0, None) / N)
            assert (np.abs(freq - p) <= 5 * se + 3 / N).all(), (quantile, v, freq, p)
        if mode == "joint":  # whole configurations too, each within five standard errors of its Gibbs probability
            shape = [len(c) for c in sp.choices]
            freq = np.bincount(np.ravel_multi_index(out.T, shape), minlength=sp.size)[
                np.ravel_multi_index(bf.paths.T, shape)] / N
            assert (np.abs(freq - w) <= 5 * np.sqrt(w * (1 - w) / N) + 3 / N).all()
        assert 0.05 < s.last["entropy"] < 0.99  # neither a single path nor uniform: the check has power


@pytest.mark.parametrize("preset", ["mobilenet_v2_fmnist", "resnet_fmnist"])
def test_coverage_sampling_covers_residual_spaces(preset):
    sp = get_space(preset)
    idx = biased_configs(sp, 1, seed=0)
    assert coverage_counts(sp, idx).min() >= 1
    assert len(idx) >= coverage_lower_bound(sp, 1)
    assert len(idx) <= 2 * coverage_lower_bound(sp, 1)


@pytest.mark.parametrize("preset", RESIDUAL_PRESETS)
def test_presets_compile_and_decode(preset):
    sp = get_space(preset)
    rng = np.random.default_rng(1)
    u, tables, _ = random_instance(rng, sp)
    t0 = time.perf_counter()
    ch = space_chain(sp, u, tables)
    assert isinstance(ch, SpaceChain)
    lo, hi = ch.latency(ch.min_latency()), ch.latency(ch.max_latency())
    target = lo + 0.4 * (hi - lo)
    r = ch.decode(target)
    elapsed = time.perf_counter() - t0
    p = r.path
    D = sum(float(d[k]) for d, k in zip(u, p))
    L = sum(float(tab[p[s], p[d]]) for (s, d), tab in zip(sp.edges, tables))
    assert r.latency <= target + ch.ftol
    assert close(r.objective, D) and close(r.latency, L)
    assert r.dual_bound <= r.objective + ch.tol(r.gamma)
    print(f"{preset}: compile + decode {elapsed:.3f} s, largest state {int(ch.layout.sizes.max())}")
