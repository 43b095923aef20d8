"""Device registry and backends: exact FLOPs, ONNX ≡ torch, measurement shapes, synthetic ground truth."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from aows_core.devices import DEVICES, Device, builtin, get_device
from aows_core.devices.flops import edge_macs, network_macs, variable_macs
from aows_core.devices.onnxruntime import GraphFactory
from aows_core.devices.torch_cuda import TorchCUDA
from aows_core.nets.network import Network, fold, folded_state
from aows_core.nets.onnx import onnx_from_weights, param_shapes
from aows_core.space import get_space

FMNIST = get_space("mobilenet_v1_fmnist")
IMAGENET = get_space("mobilenet_v1_imagenet")
# Every built-in backend that needs no GPU (a new device file is covered by the tests below without an edit here).
CPU_BACKENDS = sorted(n for n, c in builtin().items() if not c.gpu)


def random_config(space, rng):
    return [int(rng.choice(c)) for c in space.layer_choices]


def spec(backend, **kw):
    return {"backend": backend, "batch_size": 1, "threads": 1, **kw}


def available(backend):
    if not DEVICES[backend].is_available():
        pytest.skip(f"{backend} cannot run on this machine")


# ---- registry ------------------------------------------------------------------------------
def test_registry_names():
    assert set(builtin()) >= {"torch-cpu", "torch-cuda", "onnxruntime", "flops", "synthetic"}
    assert set(CPU_BACKENDS) >= {"torch-cpu", "onnxruntime", "flops", "synthetic"}
    assert all(issubclass(c, Device) and c.name == n for n, c in DEVICES.items())


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError) as e:
        get_device({"backend": "tensorrt"}, FMNIST, 0)
    for name in DEVICES:
        assert name in str(e.value)


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="threadz"):
        get_device({"backend": "flops", "threadz": 2}, FMNIST, 0)


# ---- flops ---------------------------------------------------------------------------------
@pytest.mark.parametrize("space", [FMNIST, IMAGENET], ids=["fmnist", "imagenet"])
def test_flops_match_flop_counter(space):
    rng = np.random.default_rng(11)
    configs = [space.min_config, space.max_config] + [random_config(space, rng) for _ in range(4)]
    dev = get_device({"backend": "flops", "batch_size": 2}, space, 0)
    for cfg in configs:
        m = Network(space, cfg, init=False, device="meta").eval()
        with FlopCounterMode(display=False) as fc:
            m(torch.empty(2, space.in_channels, *space.resolution, device="meta"))
        macs = network_macs(space, cfg)
        assert fc.get_total_flops() == 2 * 2 * macs  # 2 FLOPs per MAC, batch 2
        meas = dev.measure(cfg, 1, 0, 0)
        assert meas.samples.tolist() == [2 * macs / 1e6]


def test_flops_decompose_over_edges_and_variables():
    cfg = random_config(FMNIST, np.random.default_rng(2))
    full = FMNIST.full(cfg)
    per_edge = [edge_macs(FMNIST, full[i], full[i + 1], i) for i in range(FMNIST.n_edges)]
    assert sum(per_edge) == network_macs(FMNIST, cfg)
    table = variable_macs(FMNIST)
    ids = FMNIST.variable_ids(FMNIST.indices(cfg))
    assert int(table[ids].sum()) == network_macs(FMNIST, cfg)


def test_flops_is_analytic():
    dev = get_device({"backend": "flops"}, FMNIST, 0)
    assert dev.analytic and dev.unit == "MMAC"
    assert not get_device(spec("synthetic"), FMNIST, 0).analytic


# ---- onnx ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(2))
def test_onnx_graph_matches_torch(seed):
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    cfg = random_config(FMNIST, rng)
    m = Network(FMNIST, cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
    folded = fold(m)
    proto = onnx_from_weights(FMNIST, cfg, folded_state(m))
    onnx.checker.check_model(proto)
    x = torch.randn(3, 1, 28, 28, generator=g)
    with torch.no_grad():
        ref = folded(x).numpy()
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"input": x.numpy()})[0]
    assert out.shape == (3, 10)
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-4)


def test_timing_graph_is_the_same_network():
    """External pool initialisers compute what an embedded-weight graph of the same values computes."""
    import onnxruntime as ort

    dev = get_device(spec("onnxruntime", graph_optimization="disable"), FMNIST, 0)
    cfg = random_config(FMNIST, np.random.default_rng(5))
    pool, off = dev.graphs.pool, dev.graphs.offsets
    state = {n: pool[off[n] : off[n] + int(np.prod(s))].reshape(s) for n, s in param_shapes(FMNIST, cfg)}
    proto = onnx_from_weights(FMNIST, cfg, state, batch=1)
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": dev.x})[0]
    out = dev.session(cfg).run(None, {"input": dev.x})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
    assert np.isfinite(out).all() and np.abs(out).max() > 0
    # fully optimised sessions share the pool's OrtValues and leave them intact
    opt = get_device(spec("onnxruntime", graph_optimization="all"), FMNIST, 0)
    for other in (FMNIST.max_config, cfg, FMNIST.min_config):
        opt.measure(other, 2, 1, 0)
    out = opt.session(cfg).run(None, {"input": opt.x})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_graph_factory_caches_edges():
    gf = GraphFactory(FMNIST, batch=1)
    cfg = random_config(FMNIST, np.random.default_rng(6))
    b1, e1 = gf(cfg)
    b2, e2 = gf(cfg)
    assert b1 == b2 and e1 == e2
    assert [(n, s) for n, _, s in e1] == [(n, tuple(s)) for n, s in param_shapes(FMNIST, cfg)]
    assert all(gf.offsets[n] == o for n, o, _ in e1)


# ---- every backend -------------------------------------------------------------------------
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_measure_returns_positive_samples(backend):
    available(backend)
    dev = get_device(spec(backend), FMNIST, 0)
    repeats = 1 if dev.analytic else 5
    m = dev.measure(FMNIST.min_config, repeats, 1, 3)
    assert m.samples.dtype == np.float64 and m.samples.shape == (repeats,)
    assert (m.samples > 0).all() and np.isfinite(m.samples).all()
    assert m.timed_s >= 0 and m.overhead_s >= 0
    fp = dev.fingerprint()
    assert fp["backend"] == backend and json.loads(json.dumps(fp)) == fp
    assert fp == get_device(spec(backend), FMNIST, 0).fingerprint()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_measure_rejects_config_outside_space(backend):
    available(backend)
    dev = get_device(spec(backend), FMNIST, 0)
    cfg = list(FMNIST.max_config)
    cfg[5] = 7
    with pytest.raises(ValueError, match=r"layer 5.*allowed widths"):
        dev.measure(cfg, 2, 0, 0)


def test_real_backends_time_wider_networks_slower():
    """The minimum over interleaved rounds (D42's statistic): another process on the cores only adds time, so a burst
    of it during one network's timings cannot invert the order (regression: the medians of one round each did)."""
    for backend in ("torch-cpu", "onnxruntime"):
        dev = get_device(spec(backend), FMNIST, 0)
        lo, hi = [], []
        for _ in range(3):
            lo.extend(dev.measure(FMNIST.min_config, 7, 1, 0).samples)
            hi.extend(dev.measure(FMNIST.max_config, 7, 1, 0).samples)
        assert min(hi) > 1.5 * min(lo), backend


def test_fingerprint_records_settings():
    fp = get_device(spec("torch-cpu", threads=1), FMNIST, 0).fingerprint()
    assert {"cpu_model", "cpu_count", "torch", "threads", "batch_size"} <= set(fp)
    fp = get_device(spec("onnxruntime"), FMNIST, 0).fingerprint()
    assert {"cpu_model", "onnxruntime", "graph_optimization", "inter_op_threads"} <= set(fp)
    a = get_device(spec("synthetic"), FMNIST, 0).fingerprint()
    assert a != get_device(spec("synthetic"), FMNIST, 1).fingerprint()
    assert a != get_device(spec("synthetic", noise=0.05), FMNIST, 0).fingerprint()


# ---- torch-cuda ----------------------------------------------------------------------------
def test_torch_cuda_without_gpu_fails_clearly():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert not TorchCUDA.is_available()
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        get_device(spec("torch-cuda"), FMNIST, 0)


@pytest.mark.cuda
def test_torch_cuda_measures():
    dev = get_device(spec("torch-cuda"), FMNIST, 0)
    m = dev.measure(FMNIST.max_config, 5, 1, 0)
    assert m.samples.shape == (5,) and (m.samples > 0).all()
    assert m.timed_s > 0 and "gpu" in dev.fingerprint()


# ---- synthetic -----------------------------------------------------------------------------
def test_synthetic_deterministic_in_seed_and_job():
    cfg = random_config(FMNIST, np.random.default_rng(8))
    a = get_device(spec("synthetic"), FMNIST, 3)
    b = get_device(spec("synthetic"), FMNIST, 3)
    np.testing.assert_array_equal(a.measure(cfg, 10, 2, 17).samples, b.measure(cfg, 10, 0, 17).samples)
    assert not np.array_equal(a.measure(cfg, 10, 0, 17).samples, a.measure(cfg, 10, 0, 18).samples)
    c = get_device(spec("synthetic"), FMNIST, 4)
    assert not np.array_equal(a.true_table(), c.true_table())


def test_synthetic_additive_part_is_table_path_sum():
    dev = get_device(spec("synthetic", nonadditive=0.0), FMNIST, 0)
    table = dev.true_table()
    assert table.shape == (FMNIST.n_variables,) and (table > 0).all()
    rng = np.random.default_rng(9)
    for _ in range(5):
        cfg = random_config(FMNIST, rng)
        ids = FMNIST.variable_ids(FMNIST.indices(cfg))
        assert dev.true_latency(cfg) == pytest.approx(table[ids].sum(), rel=1e-12)
    na = get_device(spec("synthetic", nonadditive=0.02), FMNIST, 0)
    cfg = random_config(FMNIST, rng)
    add = na.additive_latency(cfg)
    assert add == pytest.approx(dev.additive_latency(cfg))
    assert abs(na.true_latency(cfg) / add - 1) <= 0.02 + 1e-12


def test_synthetic_noise_and_drift():
    dev = get_device(spec("synthetic", noise=0.02, drift=0.15), FMNIST, 0)
    cfg = FMNIST.max_config
    truth = dev.true_latency(cfg)
    for job in (0, 50, 400):
        s = dev.measure(cfg, 200, 0, job).samples
        ratio = np.median(s) / (truth * dev.drift_factor(job))
        assert abs(ratio - 1) < 0.01
        assert 0.01 < np.std(np.log(s)) < 0.03
    d = np.array([dev.drift_factor(j) for j in range(2000)])
    assert d.min() >= 0.85 - 1e-9 and d.max() <= 1.15 + 1e-9 and d.max() - d.min() > 0.1
    flat = get_device(spec("synthetic", noise=0.0, drift=0.0), FMNIST, 0)
    assert np.allclose(flat.measure(cfg, 3, 0, 99).samples, flat.true_latency(cfg))


def test_synthetic_mostly_monotone_in_width():
    table = get_device(spec("synthetic"), FMNIST, 0).true_table()
    index = {v: k for k, v in enumerate(FMNIST.variables)}
    ok = total = 0
    for (t, ci, co), k in index.items():
        wider = [index[(t, ci, c)] for c in FMNIST.choices[1 + FMNIST.thetas.index(t)] if c > co and (t, ci, c) in index]
        for w in wider[:1]:
            total += 1
            ok += table[w] > table[k]
    assert ok / total > 0.9


def test_every_space_is_timed_in_one_form():
    """One network path (D45): the fingerprint's form names how a network is timed, the same for every space."""
    from aows_core.devices.torch_cpu import TIMING_FORM
    from aows_core.space import get_space

    forms = {get_device({"backend": "torch-cpu", "batch_size": 1, "threads": 1}, get_space(p, n_choices=2))
             .fingerprint()["form"] for p in ("mobilenet_v1_fmnist", "resnet_fmnist", "mobilenet_v2_fmnist")}
    assert forms == {TIMING_FORM} and "mobilenet" not in TIMING_FORM


@pytest.mark.parametrize("preset", ["resnet_fmnist", "mobilenet_v2_fmnist"])
def test_onnxruntime_times_a_residual_network_torch_computes_and_wider_is_slower(preset):
    """The onnxruntime device on a residual space (basic blocks; inverted residuals): the graph it times, fed the
    timing pool's weights, computes what torch's deployment-form network of those weights computes (residual adds,
    projected shortcuts, strides, ReLU6), unoptimised and fully optimised; and its latency grows with width."""
    space = get_space(preset)
    assert not space.is_chain
    opt = _onnx_graphs_compute_torchs(space)
    assert network_macs(space, space.max_config) > 10 * network_macs(space, space.min_config)
    lo = np.median(opt.measure(space.min_config, 7, 1, 0).samples)
    hi = np.median(opt.measure(space.max_config, 7, 1, 0).samples)
    assert hi > 1.5 * lo, (lo, hi)


@pytest.mark.parametrize("model", ["plain_net", "fire_net"])
def test_onnxruntime_times_a_traced_network_torch_computes(model):
    """The same for a user's network traced (D54, D55): convolutions without BN and of other paddings, max-pools,
    a flatten classifier of three layers over an uneven adaptive pool; concatenated branches, max-pools of their own,
    a convolutional classifier."""
    from pathlib import Path

    from aows_core.tracing import load_model, trace_space

    path = Path(__file__).parents[1] / "fixtures" / "user_models.py"
    _onnx_graphs_compute_torchs(trace_space(load_model(f"{path}:{model}", {"width": 32}), (1, 28, 28)).space)


def _onnx_graphs_compute_torchs(space):
    """The onnxruntime device's graphs of three configurations, unoptimised and fully optimised, compute torch's
    deployment-form network of the timing pool's weights; the optimised device."""
    fast = get_device(spec("onnxruntime", graph_optimization="disable"), space, 0)
    opt = get_device(spec("onnxruntime", graph_optimization="all"), space, 0)
    pool, off = fast.graphs.pool, fast.graphs.offsets
    x = torch.from_numpy(fast.x)
    outs = []
    for cfg in (space.min_config, space.max_config, random_config(space, np.random.default_rng(7))):
        net = Network(space, cfg, bn=False, init=False).eval()
        state = {n: torch.from_numpy(pool[off[n] : off[n] + int(np.prod(s))].reshape(s).copy())
                 for n, s in param_shapes(space, cfg)}
        net.load_state_dict(state, strict=True)  # every parameter of the torch network comes from the pool
        with torch.no_grad():
            ref = net(x).numpy()
        scale = float(np.abs(ref).max())
        assert ref.shape == (1, space.num_classes) and scale > 0
        out = fast.session(cfg).run(None, {"input": fast.x})[0]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * scale)
        np.testing.assert_allclose(opt.session(cfg).run(None, {"input": opt.x})[0], ref, rtol=1e-3, atol=1e-3 * scale)
        outs.append(out)
    assert not np.allclose(outs[0], outs[1])  # the widths reach the graph
    return opt
