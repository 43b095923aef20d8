"""Configuration: schema defaults, refusal of unknown keys and bad values, per-stage hashes."""

import json

import pytest
import yaml

from aows_core.config import SCHEMA_PATH, ConfigError, device_reach, load, settings_hash, stage_settings, validate


def test_every_schema_property_has_description_and_default():
    schema = yaml.safe_load(SCHEMA_PATH.read_text())

    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            assert "description" in sub, f"{path}.{key} lacks a description"
            if key != "backend":
                assert "default" in sub, f"{path}.{key} lacks a default"
            walk(sub, f"{path}.{key}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")

    walk(schema, "config")


def test_defaults_fill_everything():
    cfg = validate({})
    assert cfg["space"]["preset"] == "mobilenet_v1_fmnist"
    assert cfg["devices"]["cpu"]["threads"] == 1 and cfg["devices"]["cpu"]["graph_optimization"] == "all"
    assert cfg["profiling"]["repeats"] == 30 and 0 in cfg["lut"]["lambdas"]


def test_repository_config_is_valid():
    cfg = load("config.yaml")
    assert set(cfg["devices"]) == {"cpu", "onnxruntime", "flops"}


@pytest.mark.parametrize(
    "raw, needle",
    [
        ({"sede": 1}, r"unknown key\(s\) \['sede'\]"),
        ({"profiling": {"repeat": 3}}, r"profiling: unknown key\(s\) \['repeat'\]"),
        ({"profiling": {"repeats": 0}}, "profiling.repeats"),
        ({"devices": {"gpu": {"backend": "tensorrt"}}}, "devices.gpu.backend"),
        ({"devices": {"gpu": {"batch_size": 4}}}, "'backend' is a required property"),
        ({"space": {"preset": "resnet50"}}, "space.preset"),
    ],
)
def test_bad_config_names_the_key(raw, needle):
    with pytest.raises(ConfigError, match=needle):
        validate(raw)


def test_stage_hash_changes_only_with_the_stage_settings():
    a = validate({})
    b = validate({"lut": {"ridge": 1e-5}})
    assert settings_hash(stage_settings(a, "profile", "cpu")) == settings_hash(stage_settings(b, "profile", "cpu"))
    assert settings_hash(stage_settings(a, "fit_lut")) != settings_hash(stage_settings(b, "fit_lut"))
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        stage_settings(a, "profile", "tpu")


def test_how_a_device_is_reached_stays_out_of_the_stage_settings_and_comes_back_beside_them():
    """D53: a device's timeout_s and worker leave the stage's settings (its hash unchanged, so Snakemake reruns
    nothing), and `load` with `--device-reach` gives the stage the device exactly as configured."""
    spec = {"backend": "onnxruntime", "remote": "ssh pi@edge", "worker": "python3 w/aows_worker.py", "timeout_s": 30.0}
    a = validate({"devices": {"edge": spec}})
    b = validate({"devices": {"edge": {**spec, "worker": "python3 aows_worker.py", "timeout_s": 900.0}}})
    assert settings_hash(stage_settings(a, "profile", "edge")) == settings_hash(stage_settings(b, "profile", "edge"))
    moved = validate({"devices": {"edge": {**spec, "remote": "ssh pi@other"}}})  # another machine: another device
    assert settings_hash(stage_settings(a, "profile", "edge")) != settings_hash(stage_settings(moved, "profile", "edge"))
    got = load(inline_json=json.dumps(stage_settings(a, "measure", "edge")), reach=json.dumps(device_reach(a, "edge")))
    assert got["devices"] == a["devices"]
    for bad in ({"edge": {"remote": "ssh x"}}, {"gpu": {"timeout_s": 5}}, {"edge": 5}):
        with pytest.raises(ConfigError, match="--device-reach"):
            load(inline_json=json.dumps(stage_settings(a, "measure", "edge")), reach=json.dumps(bad))


def test_config_yaml_is_exactly_the_schema_defaults_but_its_retraining_budget():
    """config.yaml sets its user keys to the schema's defaults, so a complete preset read over it (the one rule,
    `layered`) is the preset over the defaults; the one exception is the default run's retraining images (D52,
    tests/test_configuration_doc.py's DELIBERATE_OVERRIDES)."""
    assert load("config.yaml") == validate({"retrain": {"train_subset": 5000}})


def test_a_users_file_merges_sections_key_by_key_and_replaces_the_maps_of_names_it_gives():
    """The one rule for `--configfile` (README): config.yaml, then the user's files, then --config."""
    from aows_core.config import layered

    default = yaml.safe_load(open("config.yaml"))
    mine = {"devices": {"ort4": {"backend": "onnxruntime", "threads": 4}},
            "decode": {"device_targets": {"ort4": ["2ms"]}}, "supernet": {"epochs": 3}}
    cfg = validate(layered(default, mine, {"supernet": {"batch_size": 64}}))
    assert set(cfg["devices"]) == {"ort4"} and cfg["devices"]["ort4"]["threads"] == 4  # replaced, not added to
    assert cfg["decode"]["targets"] == default["decode"]["targets"]  # a section merged key by key
    assert cfg["decode"]["device_targets"] == {"ort4": ["2ms"]}
    assert (cfg["supernet"]["epochs"], cfg["supernet"]["batch_size"]) == (3, 64)  # two layers on one section
    assert cfg["aows"] == validate(default)["aows"]
    # a later map of device targets replaces an earlier one; a list is replaced, never appended to
    two = layered({"aows": {"device_targets": {"a": ["1ms"]}, "targets": ["range:0.1"]}},
                  {"aows": {"device_targets": {"b": ["2ms"]}, "targets": ["range:0.2"]}})
    assert two == {"aows": {"device_targets": {"b": ["2ms"]}, "targets": ["range:0.2"]}}
    assert layered(None, {}) == {}
    # a file's devices replace the earlier devices with their per-device targets (a preset over an edited
    # config.yaml), unless it gives its own
    edited = {"decode": {"device_targets": {"cpu": ["2ms"]}, "targets": ["range:0.2"]}}
    preset = {"devices": {"gpu": {"backend": "torch-cuda"}}}
    assert layered(edited, preset)["decode"] == {"targets": ["range:0.2"]}
    validate(layered(default, edited, preset))  # no target left for a device that is gone
    assert layered(edited, {**preset, "decode": {"device_targets": {"gpu": ["1ms"]}}})["decode"]["device_targets"] \
        == {"gpu": ["1ms"]}


def test_backend_units_agree_with_the_device_registry():
    """The schema file alone (no device imported, as the Snakefile reads it) declares what the classes declare;
    tests/devices/test_registry.py checks the whole entry."""
    import subprocess
    import sys

    code = ("import sys, json; from aows_core.config import backends; "
            "print(json.dumps({n: b.unit for n, b in backends().items()})); print('aows_core.devices' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    from aows_core.devices import builtin

    assert json.loads(out[0]) == {n: c.unit for n, c in builtin().items()} and out[1] == "False"


@pytest.mark.parametrize(
    "raw, needle",
    [
        # regressions: these passed the schema and the dry-run, and failed after profiling or training
        ({"decode": {"targets": ["range:1.5"]}}, r"decode.targets: relative target 'range:1.5' must lie in range:0"),
        ({"decode": {"targets": ["325mflops"]}}, r"decode.targets: target '325mflops' is in MMAC, but device 'cpu'"),
        ({"aows": {"device_targets": {"flops": ["4ms"]}}}, r"aows.device_targets.flops: target '4ms' is in ms, but "
                                                            r"device 'flops'"),
        ({"decode": {"targets": []}, "aows": {"targets": []}},
         r"device 'cpu' has no latency target: decode.targets and aows.targets are empty"),
        ({"decode": {"device_targets": {"gpu": ["2ms"]}}}, r"decode.device_targets.gpu: no device 'gpu' is configured"),
    ],
)
def test_targets_that_cannot_fit_their_device_are_refused_when_the_config_is_read(raw, needle):
    with pytest.raises(ConfigError, match=needle):
        validate(raw)


def test_an_empty_aows_target_list_means_no_aows():
    from aows_core.config import aows_targets, device_targets

    cfg = validate({"aows": {"targets": []}})
    assert aows_targets(cfg, "cpu") == [] and device_targets(cfg, "cpu")
    cfg = validate({"decode": {"targets": []}})  # the AOWS targets are every method's targets then
    assert aows_targets(cfg, "cpu")


@pytest.mark.parametrize(
    "text, needle",
    [("seed: [0\n", "is not valid YAML; fix the syntax"), ("- 1\n- 2\n", "holds a list, not a mapping of sections")],
)
def test_a_config_file_that_is_not_a_yaml_mapping_is_a_clear_error(tmp_path, text, needle):
    """Regression: a non-YAML config gave a raw scanner traceback, a YAML list an unrelated TypeError."""
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load(tmp_path / "c.yaml")


def test_inspect_of_a_config_validates_it_instead_of_advising_to_delete_it(tmp_path):
    """Regression: `aows inspect config.yaml` said the file was a damaged artifact to delete."""
    import subprocess

    r = subprocess.run(["aows", "inspect", "config.yaml"], capture_output=True, text=True)
    assert r.returncode == 0 and "valid aows configuration" in r.stdout and "train_subset: 10000" in r.stdout
    (tmp_path / "c.yaml").write_text("profiling: {repeat: 3}\n")
    r = subprocess.run(["aows", "inspect", str(tmp_path / "c.yaml")], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown key(s) ['repeat']" in r.stderr and "delete" not in r.stderr


def test_command_line_overlays_read_numbers_as_numbers():
    """Snakemake passes nested `--config 'supernet={epochs: 7}'` values as strings; the schema's types decide."""
    cfg = validate({"seed": "3", "supernet": {"epochs": "7", "lr": "0.1"}, "data": {"train_subset": "null"}})
    assert (cfg["seed"], cfg["supernet"]["epochs"], cfg["supernet"]["lr"]) == (3, 7, 0.1)
    assert cfg["data"]["train_subset"] is None
    with pytest.raises(ConfigError, match="supernet.epochs"):
        validate({"supernet": {"epochs": "seven"}})


def test_retrain_train_subset_resolves_against_the_search_subset():
    from aows_core.config import data_spec
    from aows_core.data import split_indices

    base = {"data": {"train_subset": 2000, "search_val": 500, "calibration": 64}}
    search = data_spec(validate(base))
    assert data_spec(validate(base), "retrain").train_subset == 2000  # null: the search's images
    assert data_spec(validate({**base, "retrain": {"train_subset": "all"}}), "retrain").train_subset is None
    spec = data_spec(validate({**base, "retrain": {"train_subset": "5000"}}), "retrain")  # a --config string
    assert spec.train_subset == 5000
    # N ≥ data.train_subset: a superset of the search's training images; the held-out images do not move
    a, b = split_indices(60_000, search), split_indices(60_000, spec)
    assert set(a["train"]) < set(b["train"]) and len(b["train"]) == 5000
    assert (a["search_val"] == b["search_val"]).all() and not set(b["train"]) & set(a["search_val"])


def test_augmentation_is_set_per_training_stage():
    """supernet.augment and retrain.augment reach the training batches of their own stage only (D33)."""
    from dataclasses import replace

    import torch

    from aows_core.config import data_spec
    from aows_core.data import load_splits

    cfg = validate({"data": {"train_subset": 256, "search_val": 64, "calibration": 32},
                    "supernet": {"batch_size": 32}, "retrain": {"batch_size": 32, "augment": False}})
    assert data_spec(cfg, "supernet").augment and not data_spec(cfg, "retrain").augment
    plain = next(load_splits(data_spec(cfg, "retrain")).train_batches(0))[0]
    # the same images, order and seed with crop + flip: only augmentation tells the batches apart
    flipped = next(load_splits(replace(data_spec(cfg, "retrain"), augment=True)).train_batches(0))[0]
    assert plain.shape == flipped.shape and not torch.equal(plain, flipped)
    assert torch.equal(plain, next(load_splits(data_spec(cfg, "retrain")).train_batches(0))[0])


@pytest.mark.parametrize("raw, needle", [
    ({"retrain": {"train_subset": "most"}}, r"retrain.train_subset: 'most' does not match"),
    ({"retrain": {"train_subset": 0}}, r"retrain.train_subset: 0 is less than the minimum"),
    ({"retrain": {"train_subset": 59_500}}, r"retrain.train_subset: 59500 images exceed the 59000 .* use all"),
    ({"data": {"train_subset": 59_500}}, r"data.train_subset: 59500 images exceed the 59000 .* use null"),
])
def test_a_training_subset_larger_than_the_split_is_refused_when_the_config_is_read(raw, needle):
    with pytest.raises(ConfigError, match=needle):
        validate(raw)


def test_each_settings_section_has_exactly_the_schema_properties_and_defaults():
    """The frozen section objects (`config.SECTIONS`) cannot drift from the schema: same fields, same defaults."""
    from dataclasses import fields

    from aows_core.config import SECTIONS, Settings, load_schema

    props = load_schema()["properties"]
    assert set(SECTIONS) == set(props) - {"seed", "devices"}
    # `space` is the space built from the section, `space_section` the section itself (its model's weights, D48)
    assert {f.name for f in fields(Settings)} == set(props) | {"space_section"} and Settings.__dataclass_fields__["space"]
    for key, cls in SECTIONS.items():
        schema = props[key]["properties"]
        assert [f.name for f in fields(cls)] == list(schema), key
        default = cls().to_dict()
        assert default == {k: v["default"] for k, v in schema.items()}, key
        assert cls.from_mapping(validate({})[key]) == cls(), key


def test_settings_are_resolved_once_and_give_the_config_back():
    from dataclasses import FrozenInstanceError

    from aows_core.config import SECTIONS, data_spec, resolve, space_from_config

    cfg = load("config.yaml")
    s = resolve(cfg)
    assert s.seed == cfg["seed"] and s.space.hash == space_from_config(cfg).hash
    for key in SECTIONS:
        if key != "space":
            assert getattr(s, key).to_dict() == cfg[key], key
    assert s.device("cpu") == cfg["devices"]["cpu"]
    for section in ("supernet", "retrain", None):
        assert s.data_spec(section) == data_spec(cfg, section)
    assert s.data_spec("retrain", train_seed=3) == data_spec(cfg, "retrain", train_seed=3)
    assert s.decode.targets_for("cpu") == cfg["decode"]["targets"]
    with pytest.raises(FrozenInstanceError):
        s.supernet.epochs = 3  # type: ignore[misc]
    with pytest.raises(ConfigError, match="unknown device 'gpu'"):
        s.device("gpu")
    with pytest.raises(ConfigError, match=r"config key lut: unknown key\(s\) \['lambda'\]"):
        SECTIONS["lut"].from_mapping({"lambda": [1.0]})
