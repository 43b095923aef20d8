"""Adding a device touches one file: tests/devices/macs_clock.py, imported here, is configured, profiled, fitted and
decided on through the library (sample → profile → fit → decode, verified on the device) with no other edit."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from stage_calls import decode, fit_lut, profile, sample

from aows_core import artifacts as io
from aows_core.config import ConfigError, backends, space_from_config, validate
from aows_core.devices import DEVICES, SPEC_DEFAULTS, get_device, unregister
from aows_core.latency.lut import lut_vector, predict

FILE = Path(__file__).with_name("macs_clock.py")
SMALL = {"preset": "mobilenet_v1_fmnist", "resolution": 8, "in_channels": 1, "num_classes": 4, "width_mult": 0.25,
         "n_choices": 2}


@pytest.fixture
def toy():
    """The device file imported (which registers it), and unregistered after the test."""
    spec = importlib.util.spec_from_file_location("macs_clock", FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["macs_clock"] = module
    spec.loader.exec_module(module)
    try:
        yield module.MacsClock
    finally:
        unregister("toy-macs")
        sys.modules.pop("macs_clock", None)


def toy_config(**settings):
    return validate({
        "seed": 3,
        "space": SMALL,
        "devices": {"toy": {"backend": "toy-macs", **settings}},
        "sampling": {"coverage": 16, "lambda_val": 10, "test": 10},
        "profiling": {"repeats": 3, "retest": 4},
        "decode": {"targets": ["range:0.5"]},
        "verify": {"max_rounds": 2, "rounds": 1},
    })


def test_importing_the_file_makes_the_backend_configurable(toy):
    assert DEVICES["toy-macs"] is toy
    declared = backends()["toy-macs"]
    assert (declared.unit, declared.gpu, declared.analytic) == ("ms", False, False)
    assert declared.settings == ("batch_size", "ms_per_mmac", "layer_ms")
    assert SPEC_DEFAULTS["ms_per_mmac"] == 0.05
    cfg = toy_config(ms_per_mmac=0.1)
    assert cfg["devices"]["toy"]["layer_ms"] == 0.01  # the class's default, filled by the schema
    with pytest.raises(ConfigError, match="devices.toy.ms_per_mmac"):
        toy_config(ms_per_mmac=0)  # its Setting's bound is the schema's
    with pytest.raises(ConfigError, match=r"in MMAC, but device 'toy' \(backend toy-macs\) is timed in ms"):
        validate({"devices": {"toy": {"backend": "toy-macs"}}, "decode": {"targets": ["300mflops"]}})


def test_unregistered_it_is_refused(toy):
    unregister("toy-macs")
    assert "toy-macs" not in DEVICES and "ms_per_mmac" not in SPEC_DEFAULTS
    with pytest.raises(ConfigError, match="devices.toy.backend"):
        toy_config()


def test_profile_fit_decode_on_the_one_file_device(toy, tmp_path):
    cfg = toy_config()
    space = space_from_config(cfg)
    sample(cfg, tmp_path / "configs.parquet")
    profile(cfg, "toy", tmp_path / "configs.parquet", tmp_path / "lat.parquet", tmp_path / "resume", progress=False)
    fit_lut(cfg, "toy", tmp_path / "lat.parquet", tmp_path / "lut.parquet", tmp_path / "fit.parquet")

    # eq. lat holds exactly on this device: the table reproduces the networks it was fitted on, and predicts the
    # held-out ones as far as this small sample spans them
    device = get_device(cfg["devices"]["toy"], space, cfg["seed"])
    lut, meta = io.read_table(tmp_path / "lut.parquet", "lut")
    assert meta["unit_short"] == "ms" and meta["fingerprint"]["form"] == "toy-macs/v1"
    x = lut_vector(space, lut)
    timed = io.read_table(tmp_path / "lat.parquet", "latency")[0].to_pylist()
    assert {r["set"] for r in timed} == {"train", "lambda_val", "test"}
    for r in timed:
        truth = device.latency(r["channels"])
        assert r["latency_ms"] == pytest.approx(truth, rel=1e-9)  # no noise, no drift: the reference ratio is 1
        predicted = float(predict(space, x, space.indices(r["channels"])))
        assert predicted == pytest.approx(truth, rel=1e-4 if r["set"] == "train" else 0.05)

    # unaries that prefer wide layers: the decision is the widest network under the target, verified on the device
    rows = [{"layer": layer, "width": w, "delta": -float(j), "count": 10, "epoch": 0}
            for layer, widths in enumerate(space.layer_choices) for j, w in enumerate(widths)]
    io.write_records(rows, tmp_path / "unaries.parquet", "unaries",
                     io.provenance(space_name=space.name, space_hash=space.hash, method="ows"))
    (decision,) = decode(cfg, "toy", "ows", tmp_path / "unaries.parquet", tmp_path / "lut.parquet", ["range:0.5"],
                         tmp_path / "decision.parquet", latency=tmp_path / "lat.parquet")
    assert decision["device"] == "toy" and decision["unit"] == "ms"
    assert decision["predicted_latency_ms"] <= decision["target_ms"] * (1 + 1e-9)
    assert decision["channels"] != list(space.min_config)  # the target binds: wider than the narrowest network
    verification = io.read_table(tmp_path / "decision.parquet", "decisions")[1]["verification"]
    (check,) = verification["targets"]
    assert verification["verified"] and check["converged"] and check["networks_timed"] >= 1  # timed on the device
    tolerance = cfg["verify"]["tolerance"]
    assert device.latency(decision["channels"]) == pytest.approx(decision["predicted_latency_ms"], rel=tolerance)
