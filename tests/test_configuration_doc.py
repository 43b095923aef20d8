"""docs/configuration.md and config.yaml against the schema: the page is the generated one, config.yaml holds the user
keys at the schema's defaults, and every config key the documentation names exists."""

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from aows_core.config import load, load_schema, validate

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config.yaml"

_spec = importlib.util.spec_from_file_location("config_doc", ROOT / "scripts" / "config_doc.py")
config_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(config_doc)

# Keys (dotted, with the device's name under devices) that config.yaml sets to another value than the schema's
# default, each with the reason. None: the schema's defaults are the embedded default run, and config.yaml spells out
# its user keys at those defaults. A deliberate override of the default run goes here, with its reason as a comment.
DELIBERATE_OVERRIDES: dict[str, str] = {
    # the default run's retraining budget: the run within 20 minutes on 2 cores (docs/method.md D52); a library
    # default of 5000 would cut every other config's retraining, and the schema's null keeps the search's images
    "retrain.train_subset": "5000",
}

# The sections that are research knobs through and through (the timing protocol, the latency table's fit, sampling,
# verification, measurement): none of their keys is a user key.
RESEARCH_SECTIONS = {"profiling", "lut", "sampling", "verify", "measure"}


def _differences(a, b, prefix=""):
    """Dotted keys where two validated configs differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in _differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]


def _get(config, dotted):
    for part in dotted.split("."):
        config = config[part]
    return config


def _set(config, dotted, value):
    *head, last = dotted.split(".")
    for part in head:
        config = config[part]
    config[last] = value


# ---------------------------------------------------------------------------------------------- (a) the page
def test_committed_configuration_page_is_the_generated_one():
    assert (ROOT / "docs" / "configuration.md").read_text() == config_doc.render(), (
        "docs/configuration.md differs from what the schema generates; run: python3 scripts/config_doc.py")


def test_check_mode_says_what_to_run_when_the_page_is_stale(tmp_path, monkeypatch, capsys):
    page = tmp_path / "configuration.md"
    monkeypatch.setattr(config_doc, "PAGE", page)
    monkeypatch.setattr(config_doc, "ROOT", tmp_path)
    page.write_text(config_doc.render())
    assert config_doc.main(["--check"]) == 0
    page.write_text(config_doc.render().replace("| `seed` |", "| `sede` |"))
    assert config_doc.main(["--check"]) == 1
    assert "run: python3 scripts/config_doc.py" in capsys.readouterr().err


def test_the_page_lists_every_schema_key_once_with_the_user_keys_first():
    text = config_doc.render()
    advanced = text.index("## " + config_doc.ADVANCED_TITLE)
    for key, node in config_doc.schema_keys():
        if "properties" in node and "." not in key:
            continue  # a section: a heading, not a row
        row = f"| `{config_doc.display_key(key)}` |"
        assert text.count(row) == 1, key
        assert (text.index(row) < advanced) == (key in config_doc.USER_KEYS), key


def test_the_user_keys_exist_and_leave_the_research_knobs_out():
    known = {k for k, _ in config_doc.schema_keys()}
    user = set(config_doc.USER_KEYS)
    assert user <= known, sorted(user - known)
    assert {"seed", "space.preset", "data.dataset", "data.root", "decode.targets", "aows.targets", "train.device",
            "train.precision", "supernet.epochs", "retrain.epochs", "retrain.seeds", "data.train_subset"} <= user
    assert not [k for k in user if k.split(".")[0] in RESEARCH_SECTIONS or "estimate" in k]


# ------------------------------------------------------------------------------------------- (b) config.yaml
def test_config_yaml_sets_the_schema_defaults_but_the_named_overrides():
    raw = yaml.safe_load(CONFIG.read_text())
    expected = validate({})
    for key in DELIBERATE_OVERRIDES:
        _set(expected, key, _get(validate(raw), key))
    differ = _differences(load(CONFIG), expected)
    assert not differ, (f"config.yaml sets {differ} to other values than the schema's defaults: change config.yaml "
                        "(or the schema's default), or name the key in DELIBERATE_OVERRIDES with the reason")
    defaults = validate({})
    stale = [k for k in DELIBERATE_OVERRIDES if _get(load(CONFIG), k) == _get(defaults, k)]
    assert not stale, f"DELIBERATE_OVERRIDES names keys config.yaml leaves at their default: {stale}"


# ------------------------------------------------------------------------------------------ (c) user keys only
def test_config_yaml_sets_only_user_keys_each_commented():
    raw = yaml.safe_load(CONFIG.read_text())
    keys = config_doc.config_keys(raw)
    advanced = [k for k in keys if k not in config_doc.USER_KEYS]
    assert not advanced, (f"config.yaml sets {advanced}, which are not user keys of docs/configuration.md: leave "
                          "research knobs to the schema's defaults (or add the key to scripts/config_doc.py USER_KEYS)")
    assert {"data.dataset", "data.root"} <= set(keys)
    text = CONFIG.read_text()
    assert "docs/configuration.md" in text.split("\n\n")[0], "config.yaml's top comment links docs/configuration.md"
    bare = [line for line in text.splitlines() if re.match(r"^\s*[A-Za-z_]\w*:\s*[^\s#]", line) and "#" not in line]
    assert not bare, f"config.yaml lines without a comment: {bare}"


# ----------------------------------------------------------------------------- (d) keys named in the documentation
FILE_SUFFIXES = {"py", "md", "yaml", "yml", "pdf", "png", "svg", "parquet", "json", "jsonl", "smk", "csv", "tsv",
                 "onnx", "txt", "html", "pt", "toml", "sh", "log", "lock"}


def _named_keys(text: str, sections) -> set[str]:
    """Dotted config keys (`section.key...`, section a top-level one) named inside backticks."""
    key = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, sections)) + r")((?:\.[A-Za-z_<][A-Za-z0-9_<>-]*)+)")
    out = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        for m in key.finditer(span):
            name = m.group(1) + m.group(2)
            if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES:
                out.add(name)
    return out


def test_named_keys_are_found():
    assert _named_keys("set `data.root`, `supernet={epochs: 8}`, `--config 'profiling.repeats: 3'`, `train.py`",
                       ["data", "supernet", "profiling", "train"]) == {"data.root", "profiling.repeats"}


def test_every_config_key_named_in_the_documentation_exists():
    schema = load_schema()
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]
    missing = {}
    for page in pages:
        for name in _named_keys(page.read_text(), list(schema["properties"])):
            if config_doc.resolve(name, schema) is None:
                missing.setdefault(name, []).append(str(page.relative_to(ROOT)))
    assert not missing, f"config keys named in the documentation that the schema lacks: {missing}"


@pytest.mark.parametrize("name, exists", [("devices.cpu.threads", True), ("decode.device_targets.cpu", True),
                                          ("profiling.statistic", True), ("profiling.pairing", False)])
def test_resolve_follows_named_entries(name, exists):
    assert (config_doc.resolve(name) is not None) is exists


def test_config_keys_name_maps_and_device_settings_not_sections():
    raw = {"decode": {"device_targets": {"cpu": ["2ms"]}}, "profiling": {"repeats": 3},
           "devices": {"gpu": {"backend": "torch-cuda", "cuda_device": "cuda:1"}}}
    assert config_doc.config_keys(raw) == ["decode.device_targets", "profiling.repeats", "devices",
                                           "devices.*.backend", "devices.*.cuda_device"]
