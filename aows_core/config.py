"""Configuration: schema validation with defaults, per-stage settings and their hashes.

The schema lives in `aows_core/schemas/config.schema.yaml` (`workflow/schemas/` links to it).
The Snakefile and the `aows` command validate with this same function, so a wrong key or value
fails in the same way at parse time and when a stage is called directly. Imports nothing heavy.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from . import __version__

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"

# Which top-level sections each stage reads: its params hash covers exactly these.
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "sample": ("seed", "space", "sampling"),
    "profile": ("seed", "space", "profiling"),
    "fit_lut": ("space", "lut"),
    "validate_lut": ("space",),
    "check_target": ("space",),
    "decode": ("space", "decode"),
    "train_ows": ("seed", "space", "data", "supernet"),
    "train_aows": ("seed", "space", "data", "supernet", "aows"),
    "greedy": ("seed", "space", "data", "supernet", "greedy"),
    "decide_baseline": ("space",),
    "retrain": ("seed", "space", "data", "retrain"),
    "export": ("seed", "space", "data"),
    "proxy": ("seed", "space", "data", "supernet", "greedy"),
    "pareto": ("space",),
    "measure": ("seed", "space", "profiling", "measure"),
}


class ConfigError(ValueError):
    """A configuration key or value the schema refuses."""


def load_schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _fill_defaults(schema: Mapping, instance: Any) -> None:
    """Insert every default the schema declares, recursively, into `instance` (in place)."""
    if not isinstance(instance, dict) or schema.get("type") not in ("object", None):
        return
    props = schema.get("properties", {})
    for key, sub in props.items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        if key in instance:
            _fill_defaults(sub, instance[key])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key, value in instance.items():
            if key not in props:
                _fill_defaults(extra, value)


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def validate(config: Mapping | None) -> dict:
    """A validated copy of `config` with every default filled; ConfigError names the bad key."""
    cfg = copy.deepcopy(dict(config or {}))
    schema = load_schema()
    _fill_defaults(schema, cfg)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:10]:
            if e.validator == "additionalProperties":
                extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
                allowed = sorted(e.schema.get("properties", {}))
                lines.append(f"config key {_path(e)}: unknown key(s) {extra}; allowed keys: {allowed}")
            else:
                lines.append(f"config key {_path(e)}: {e.message}")
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    return cfg


def load(path: str | Path | None = None, inline_json: str | None = None) -> dict:
    """Load and validate a config file (YAML) or an inline JSON string; neither gives all defaults."""
    if inline_json is not None:
        raw = json.loads(inline_json)
    elif path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        raw = yaml.safe_load(p.read_text()) or {}
    else:
        raw = {}
    return validate(raw)


# Target and seed lists: each job's target (seed) is its wildcard, so adding one never reruns the others.
TARGET_KEYS = ("targets", "device_targets", "seeds")


def _without_targets(section: Any) -> Any:
    if not isinstance(section, Mapping):
        return section
    return {k: v for k, v in section.items() if k not in TARGET_KEYS}


def stage_settings(config: Mapping, stage: str, device: str | None = None) -> dict:
    """The part of a validated config that `stage` reads (plus the named device's settings)."""
    out = {k: _without_targets(config[k]) for k in STAGE_SECTIONS[stage]}
    if device is not None:
        if device not in config["devices"]:
            raise ConfigError(f"unknown device {device!r}; configured devices: {sorted(config['devices'])}")
        out["devices"] = {device: config["devices"][device]}
    return out


def settings_hash(settings: Mapping) -> str:
    """Hash of a stage's settings and aows's version: Snakemake reruns a stage when it changes."""
    blob = json.dumps({"settings": settings, "aows": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def device_targets(config: Mapping, device: str) -> list[str]:
    """The target strings configured for a device (its own list, else the common one)."""
    return list(config["decode"]["device_targets"].get(device, config["decode"]["targets"]))


def aows_targets(config: Mapping, device: str) -> list[str]:
    """The targets that get an AOWS supernet on a device."""
    return list(config["aows"]["device_targets"].get(device, config["aows"]["targets"]))


def retrain_seeds(config: Mapping) -> list[int]:
    """The seeds every finalist is retrained with (retrain.seeds, else the top-level seed)."""
    return list(config["retrain"]["seeds"] or [config["seed"]])


def space_from_config(config: Mapping):
    """The SearchSpace a validated config describes."""
    from .space import get_space

    s = dict(config["space"])
    return get_space(s.pop("preset"), **s)
