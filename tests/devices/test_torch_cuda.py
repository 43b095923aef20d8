"""`torch-cuda` timed as a deployment runs: CUDA-graph replay (default) or eager, in fp32/fp16/bf16; both settings
define the target, so a latency file of another form, or of the form before these settings existed, is refused.

The settings' validation and the refusal run on the CPU (the device is mocked where it would need a GPU); the graph,
timing and precision tests need a GPU and skip without one."""

from __future__ import annotations

import pytest
import torch

from aows_core.config import ConfigError, validate
from aows_core.devices import get_device
from aows_core.devices.base import Device, normalise_spec, spec_differences
from aows_core.devices.torch_cpu import TorchCPU
from aows_core.devices.torch_cuda import TIMING_FORMS, TorchCUDA, timing_flags
from aows_core.latency.protocol import MeasureError
from aows_core.space import get_space
from aows_core.stages.measure import check_session

FMNIST = get_space("mobilenet_v1_fmnist")
cuda = pytest.mark.cuda  # skipped without a GPU (tests/conftest.py); scripts/gpu_check.sh runs these
# The torch-cuda settings a latency file recorded before `timing` and `precision` existed (the schema filled the rest).
OLD_SPEC = {"backend": "torch-cuda", "batch_size": 256, "threads": 1, "inter_op_threads": 1, "channels_last": False,
            "cuda_device": "cuda:0", "graph_optimization": "all", "noise": 0.02, "drift": 0.15, "nonadditive": 0.02}


def spec(**kw):
    return {"backend": "torch-cuda", "batch_size": 4, "threads": 1, **kw}


def mocked(cls: type[Device], config_spec: dict) -> Device:
    """A device of `cls` holding only its settings (what the settings check reads), built without a GPU."""
    dev = object.__new__(cls)
    dev.spec = normalise_spec(config_spec)
    return dev


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


# ---- settings (CPU) --------------------------------------------------------------------------
def test_schema_knows_timing_and_precision():
    """Defaults graph and fp32; the other values validate; anything else is refused naming the key."""
    cfg = validate({"devices": {"gpu": {"backend": "torch-cuda"}}})
    assert cfg["devices"]["gpu"]["timing"] == "graph" and cfg["devices"]["gpu"]["precision"] == "fp32"
    cfg = validate({"devices": {"gpu": {"backend": "torch-cuda", "timing": "eager", "precision": "bf16"}}})
    assert (cfg["devices"]["gpu"]["timing"], cfg["devices"]["gpu"]["precision"]) == ("eager", "bf16")
    for key, bad in (("timing", "lazy"), ("precision", "int8")):
        with pytest.raises(ConfigError, match=key):
            validate({"devices": {"gpu": {"backend": "torch-cuda", key: bad}}})


@pytest.mark.parametrize("key,bad", [("timing", "lazy"), ("precision", "fp8")])
def test_device_refuses_unknown_values_before_looking_for_a_gpu(key, bad):
    with pytest.raises(ValueError, match=rf"torch-cuda: {key} must be one of .*{bad!r}"):
        get_device(spec(**{key: bad}), FMNIST, 0)


def test_timing_and_precision_enter_the_fingerprint():
    """Both are device keys, so the base fingerprint (and with it every table's identity) differs by them."""
    assert {"timing", "precision"} <= set(TorchCUDA.keys)
    prints = {(t, p): Device.fingerprint(mocked(TorchCUDA, spec(timing=t, precision=p)))
              for t in ("graph", "eager") for p in ("fp32", "fp16", "bf16")}
    assert len({repr(sorted(fp.items())) for fp in prints.values()}) == 6
    assert prints[("graph", "bf16")]["timing"] == "graph" and prints[("graph", "bf16")]["precision"] == "bf16"
    assert TIMING_FORMS["graph"] != TIMING_FORMS["eager"] and "cuda-graph" in TIMING_FORMS["graph"]


def test_old_torch_cuda_latency_file_is_refused_naming_the_setting():
    """A file profiled before `timing` existed was timed eagerly: the default graph timing refuses it, naming the
    setting and the fix, even where fingerprint mismatches are only flagged."""
    dev = mocked(TorchCUDA, {**OLD_SPEC})
    assert spec_differences(dev, OLD_SPEC, OLD_SPEC) == [("timing", "eager", "graph")]
    protocol = validate({})["profiling"]
    lmeta = {"device_spec": OLD_SPEC, "protocol": {**protocol, "pairing": "paired"}, "fingerprint": {"old": True}}
    with pytest.raises(MeasureError, match=r"timing 'eager' → 'graph'.*profile and fit it again"):
        check_session(dev, OLD_SPEC, lmeta, protocol, "lat.parquet", {"new": True}, "flag")
    # timing: eager is the form the file holds: its settings agree (the fingerprint still decides)
    eager = {**OLD_SPEC, "timing": "eager"}
    assert spec_differences(mocked(TorchCUDA, eager), eager, OLD_SPEC) == []
    # another precision is another target
    now = {**OLD_SPEC, "timing": "graph", "precision": "bf16"}
    then = {**OLD_SPEC, "timing": "graph", "precision": "fp16"}
    assert spec_differences(mocked(TorchCUDA, now), now, then) == [("precision", "fp16", "bf16")]


def test_torch_cpu_settings_are_unchanged():
    """torch-cpu reads neither key: its old latency files (without them) still agree with today's settings."""
    assert not {"timing", "precision"} & set(TorchCPU.keys) and TorchCPU.legacy == {}
    old = {**OLD_SPEC, "backend": "torch-cpu", "batch_size": 1}
    now = {**old, "timing": "graph", "precision": "fp16"}
    assert spec_differences(mocked(TorchCPU, now), now, old) == []


# ---- on a GPU ----------------------------------------------------------------------------------
@cuda
def test_graph_replay_equals_the_eager_forward():
    """The captured graph computes the network: a replay rewrites its output, equal to an eager forward of the same
    network (same cuDNN algorithms)."""
    dev = get_device(spec(), FMNIST, 0)
    for channels in (FMNIST.max_config, FMNIST.min_config):
        fwd = dev.forward(channels)
        out = fwd()
        assert out.shape == (4, FMNIST.num_classes) and out.dtype == torch.float32
        with timing_flags(), torch.no_grad():
            ref = dev.factory(channels)(dev.x)
        expected = out.clone()
        out.zero_()
        again = fwd()
        torch.cuda.synchronize()
        assert again.data_ptr() == out.data_ptr() and relative_error(again, expected) < 1e-6
        assert relative_error(again, ref) < 1e-3
        fwd.close()
        with pytest.raises(RuntimeError, match="closed"):
            fwd()


@cuda
@pytest.mark.parametrize("timing", ["graph", "eager"])
def test_timing_returns_positive_samples(timing):
    """Both forms time the network (paired with the reference, two graphs alive at once) in positive ms."""
    before = torch.backends.cudnn.benchmark
    dev = get_device(spec(timing=timing), FMNIST, 0)
    m = dev.measure(FMNIST.max_config, 5, 1, 0)
    assert m.samples.shape == (5,) and (m.samples > 0).all() and m.timed_s > 0 and m.overhead_s > 0
    p = dev.measure_paired(FMNIST.max_config, FMNIST.min_config, 6, 1, chunks=2)
    assert all((c > 0).all() for c in p.network + p.reference) and len(p.network) == 2
    fp = dev.fingerprint()
    assert fp["timing"] == timing and fp["form"] == TIMING_FORMS[timing] and fp["cudnn_benchmark"] is True
    assert torch.backends.cudnn.benchmark == before  # the process's own flag is restored after timing


@cuda
@pytest.mark.parametrize("precision,dtype,tolerance", [("fp16", torch.float16, 0.01), ("bf16", torch.bfloat16, 0.05)])
def test_precision_casts_weights_and_input(precision, dtype, tolerance):
    """The network runs in the inference precision (input and weights cast), close to its fp32 output."""
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    low = get_device(spec(precision=precision), FMNIST, 0)
    full = get_device(spec(), FMNIST, 0)
    assert low.x.dtype == dtype and low.factory.pool.dtype == dtype and full.x.dtype == torch.float32
    out, ref = low.forward(FMNIST.max_config)(), full.forward(FMNIST.max_config)()
    torch.cuda.synchronize()
    assert out.dtype == dtype and torch.isfinite(out.float()).all()
    assert relative_error(out, ref) < tolerance
    assert (low.measure(FMNIST.max_config, 3, 1, 0).samples > 0).all()
    assert low.fingerprint()["precision"] == precision
