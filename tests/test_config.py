"""Configuration: schema defaults, refusal of unknown keys and bad values, per-stage hashes."""

import pytest
import yaml

from aows_core.config import ConfigError, load, settings_hash, stage_settings, validate
from aows_core.config import SCHEMA_PATH


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
