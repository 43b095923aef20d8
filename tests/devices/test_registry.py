"""A device is one file: the registry, the schema's device entry, the units and SPEC_DEFAULTS all derive from the
device classes' declarations, and the schema file holds exactly what the classes declare."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jsonschema
import pytest
import yaml

from aows_core import config
from aows_core.devices import DEVICES, SPEC_DEFAULTS, Device, Setting, builtin, builtin_schema, register
from aows_core.devices.base import THREADS

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("device_schema", ROOT / "scripts" / "device_schema.py")
device_schema = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(device_schema)

# What latency files made before the declarations were recorded: each backend's fingerprint keys, in order, and the
# settings' defaults. A change here makes every existing latency file of that backend refused (or read differently).
KEYS = {
    "torch-cpu": ("batch_size", "threads", "inter_op_threads", "channels_last"),
    "onnxruntime": ("batch_size", "threads", "inter_op_threads", "graph_optimization"),
    "torch-cuda": ("batch_size", "threads", "inter_op_threads", "channels_last", "cuda_device", "timing", "precision"),
    "flops": ("batch_size",),
    "synthetic": ("batch_size", "noise", "drift", "nonadditive", "interference", "regime_dwell", "spill", "spill_at",
                  "launch_floor"),
}
DEFAULTS = {"batch_size": 1, "threads": 1, "inter_op_threads": 1, "channels_last": False, "graph_optimization": "all",
            "cuda_device": "cuda:0", "timing": "graph", "precision": "fp32", "noise": 0.02, "drift": 0.15,
            "nonadditive": 0.02, "interference": 0.0, "regime_dwell": 3.0, "spill": 0.0, "spill_at": 0.7,
            "launch_floor": 0.0}


def test_the_schema_file_holds_the_classes_declarations():
    text = config.SCHEMA_PATH.read_text()
    assert device_schema.render(text) == text, "stale device entry; run: python3 scripts/device_schema.py"
    entry = yaml.safe_load(text)["properties"]["devices"]["additionalProperties"]
    assert entry == builtin_schema()


def test_check_mode_says_what_to_run_when_the_entry_is_stale(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "schemas" / "config.schema.yaml"
    stale.parent.mkdir()
    stale.write_text(config.SCHEMA_PATH.read_text().replace("enum: [flops, ", "enum: ["))
    monkeypatch.setattr(device_schema, "SCHEMA_PATH", stale)
    monkeypatch.setattr(device_schema, "ROOT", tmp_path)
    assert device_schema.main(["--check"]) == 1
    assert "run: python3 scripts/device_schema.py" in capsys.readouterr().err
    assert device_schema.main([]) == 0 and device_schema.main(["--check"]) == 0


def test_registry_schema_and_units_agree():
    classes = builtin()
    schema = config.load_schema()
    entry = schema["properties"]["devices"]["additionalProperties"]
    assert set(classes) == set(entry["properties"]["backend"]["enum"]) == set(config.backends()) >= set(KEYS)
    for name, cls in classes.items():
        declared = config.backends()[name]
        assert declared == cls.declaration() and declared.unit == cls.unit and declared.gpu == cls.gpu
        assert set(declared.settings) <= set(entry["properties"])
        target = {"ms": "4.5ms", "MMAC": "325mflops"}[declared.unit]  # an absolute target in the device's unit
        config.validate({"devices": {"d": {"backend": name}}, "decode": {"targets": [target]}})


def test_fingerprint_keys_and_defaults_are_those_latency_files_were_made_with():
    assert {n: builtin()[n].keys for n in KEYS} == KEYS
    for name, keys in KEYS.items():  # settings added since enter the fingerprint only as the runtime reports them
        cls = builtin()[name]
        assert tuple(k for k in cls.settings if k not in cls.untracked) == keys, name
    assert {k: SPEC_DEFAULTS[k] for k in DEFAULTS} == DEFAULTS and set(SPEC_DEFAULTS) >= set(DEFAULTS)
    assert config.validate({})["devices"]["cpu"].items() >= {"backend": "torch-cpu", **DEFAULTS}.items()


def test_every_setting_default_satisfies_its_own_schema():
    for cls in builtin().values():
        for key, setting in cls.settings.items():
            jsonschema.validate(setting.default, setting.schema())
            assert setting.description, (cls.name, key)


def test_only_a_gpu_backend_places_its_jobs_on_gpu_nodes():
    assert {n for n, c in builtin().items() if c.gpu} & set(KEYS) == {"torch-cuda"}
    assert {n for n, c in builtin().items() if c.analytic} & set(KEYS) == {"flops"}
    cfg = config.validate({"devices": {"gpu": {"backend": "onnxruntime"}, "cuda": {"backend": "torch-cpu"},
                                       "fast": {"backend": "torch-cuda"}}})
    declared = config.device_backends(cfg)
    assert config.gpu_devices(declared) == ["fast"]  # by backend, never by the device's name
    assert declared["cuda"].unit == "ms" and not declared["gpu"].gpu and declared["fast"].gpu


def test_a_setting_key_means_one_thing_for_every_backend():
    before = dict(DEVICES), dict(SPEC_DEFAULTS)

    class Other(Device):
        name = "other-threads"
        settings = {**Device.settings, "threads": Setting(4, "integer", "Threads, but another default.", minimum=1)}

    with pytest.raises(ValueError, match="declares setting 'threads' unlike"):
        register(Other)

    class Same(Device):
        name = "torch-cpu"
        settings = {**Device.settings, "threads": THREADS}

    with pytest.raises(ValueError, match="'torch-cpu' is registered already"):
        register(Same)
    with pytest.raises(TypeError, match="Setting"):
        register(type("Bare", (Device,), {"name": "bare", "settings": {"batch_size": 1}}))
    assert (dict(DEVICES), dict(SPEC_DEFAULTS)) == before and "other-threads" not in config.backends()
