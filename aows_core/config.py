"""Configuration: schema validation with defaults, per-stage settings and their hashes.

The schema lives in `aows_core/schemas/config.schema.yaml` (`workflow/schemas/` links to it); its `devices` entry
is generated from the device classes' declarations (scripts/device_schema.py), read here as `Backend`s.
The Snakefile and the `aows` command validate with this same function, so a wrong key or value
fails in the same way at parse time and when a stage is called directly. Imports nothing heavy.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import jsonschema
import yaml

from . import __version__

if TYPE_CHECKING:
    from .space import SearchSpace

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"

# Which top-level sections each stage reads: its params hash covers exactly these. `train` (device and
# precision, D29) belongs to the stages that run a network in training or evaluation, and to no other.
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "sample": ("seed", "space", "sampling"),
    "profile": ("seed", "space", "profiling"),
    "fit_lut": ("space", "lut"),
    "validate_lut": ("space",),
    "check_target": ("space",),
    "decode": ("seed", "space", "decode", "profiling", "lut", "verify"),
    "train_ows": ("seed", "space", "data", "supernet", "train"),
    "train_aows": ("seed", "space", "data", "supernet", "aows", "train"),
    "greedy": ("seed", "space", "data", "supernet", "greedy", "train"),
    "decide_baseline": ("seed", "space", "profiling", "lut", "verify"),
    "retrain": ("seed", "space", "data", "retrain", "train"),
    "relabel": ("space",),
    "export": ("seed", "space", "data"),
    "proxy": ("seed", "space", "data", "supernet", "greedy", "train"),
    "pareto": ("space",),
    "measure": ("seed", "space", "profiling", "measure"),
}


TARGET_RE = re.compile(r"^(?:(?P<ms>\d+(?:\.\d+)?)ms|(?P<mflops>\d+(?:\.\d+)?)mflops|range:(?P<range>\d+(?:\.\d+)?))$")
# The same grammar as a JSON-schema pattern (config.schema.yaml uses it for every target list).
TARGET_PATTERN = TARGET_RE.pattern


class ConfigError(ValueError):
    """A configuration key or value the schema refuses."""


# The unit each kind of target is in: an absolute target's device unit, None for a relative one (`range:`).
TARGET_UNITS: dict[str, str | None] = {"ms": "ms", "mflops": "MMAC", "range": None}


@dataclass(frozen=True)
class Target:
    """A parsed target string: kind ∈ {ms, mflops, range} and its number."""

    text: str
    kind: str
    value: float

    @property
    def unit(self) -> str | None:
        """The unit an absolute target is in (None for a relative one)."""
        return TARGET_UNITS[self.kind]

    @property
    def is_relative(self) -> bool:
        """A share r of a device's latency range (`range:r`), not a number in its unit."""
        return self.unit is None

    def resolve(self, lo: float, hi: float) -> float:
        """The target in its device's unit, given the range [L_min, L_max] a relative target is a share of: an absolute
        target's number, or L_min + r·(L_max − L_min)."""
        return lo + self.value * (hi - lo) if self.is_relative else self.value


def parse_target(text: str) -> Target:
    """Parse `4.5ms`, `325mflops` or `range:0.3`; anything else is an error saying what is accepted."""
    m = TARGET_RE.match(str(text).strip())
    if not m:
        raise ValueError(
            f"malformed latency target {text!r}; write an absolute target like '4.5ms' (ms devices) or "
            f"'325mflops' (the flops device), or a relative one like 'range:0.3' (0 = fastest, 1 = slowest network)"
        )
    kind = next(k for k, v in m.groupdict().items() if v is not None)
    target = Target(str(text).strip(), kind, float(m.group(kind)))
    if target.is_relative and not 0.0 <= target.value <= 1.0:
        raise ValueError(f"relative target {text!r} must lie in range:0 … range:1 (0 = fastest, 1 = slowest network)")
    return target


# ------------------------------------------------------------------------------------------ device backends
@dataclass(frozen=True)
class Backend:
    """A device backend as the config layer knows it, declared by its class (aows_core/devices) in its own file.

    The classes' declarations are written into the schema (`devices` → `x-backends`, by scripts/device_schema.py,
    checked by a test), so that validating a config and planning the workflow import no device; a class registered at
    run time (`aows_core.devices.register`, e.g. one defined outside aows_core) is added by `register_backend`."""

    name: str
    unit: str  # the unit of its latency table: absolute targets must be in it (or relative, `range:`)
    gpu: bool = False  # it times on a GPU: cluster profiles place its timing jobs on GPU nodes
    analytic: bool = False  # counted, not timed: one exact value per network (flops)
    settings: tuple[str, ...] = ("batch_size",)  # the device settings it reads (devices.<name>.<key>)


def device_schema(backends: Sequence[Backend], settings: Mapping[str, Mapping[str, Any]]) -> dict:
    """The schema of one entry of `devices` for these backends: `backend` (one of their names), every setting any of
    them reads (`settings`: key → its schema; a backend ignores the others'), and the declarations (`x-backends`)."""
    missing = sorted({k for b in backends for k in b.settings} - set(settings))
    if missing:
        raise ValueError(f"device settings {missing} are read by a backend but have no schema")
    listing = ", ".join(f"`{b.name}` ({b.unit}{', counted' if b.analytic else ''}{', on a GPU' if b.gpu else ''})"
                        for b in backends)
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["backend"],
        "properties": {
            "backend": {"type": "string", "enum": [b.name for b in backends],
                        "description": f"Which backend times the networks: {listing}."},
            **{key: dict(node) for key, node in settings.items()},
        },
        "x-backends": {b.name: {"unit": b.unit, "gpu": b.gpu, "analytic": b.analytic, "settings": list(b.settings)}
                       for b in backends},
    }


def schema_backends(schema: Mapping[str, Any]) -> dict[str, Backend]:
    """The backends a schema declares (its devices' `x-backends`), by name."""
    declared = schema["properties"]["devices"]["additionalProperties"]["x-backends"]
    return {name: Backend(name, d["unit"], bool(d["gpu"]), bool(d["analytic"]), tuple(d["settings"]))
            for name, d in declared.items()}


# Backends registered in this process (aows_core.devices.register): name → (declaration, its settings' schemas).
_REGISTERED: dict[str, tuple[Backend, dict[str, dict]]] = {}


def register_backend(backend: Backend, settings: Mapping[str, Mapping[str, Any]]) -> None:
    """Make a backend configurable in this process: the schema gains its name and settings, the unit checks its
    unit. A registered declaration replaces the schema file's of the same name."""
    _REGISTERED[backend.name] = (backend, {k: dict(v) for k, v in settings.items()})


def unregister_backend(name: str) -> None:
    """Forget a backend registered in this process (the schema file's, if it has one, applies again)."""
    _REGISTERED.pop(name, None)


def load_schema() -> dict:
    """The configuration schema: the schema file, with the backends and presets registered in this process."""
    from .space import PRESETS

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    presets = schema["properties"]["space"]["properties"]["preset"]["enum"]
    presets.extend(p for p in PRESETS if p not in presets)
    if _REGISTERED:
        entry = schema["properties"]["devices"]["additionalProperties"]
        declared = schema_backends(schema)
        nodes = {k: v for k, v in entry["properties"].items() if k != "backend"}
        for backend, settings in _REGISTERED.values():
            declared[backend.name] = backend
            nodes.update(settings)
        read = {k for b in declared.values() for k in b.settings}
        entry = device_schema(list(declared.values()), {k: v for k, v in nodes.items() if k in read})
        schema["properties"]["devices"]["additionalProperties"] = entry
    return schema


def backends() -> dict[str, Backend]:
    """Every configurable backend, by name: the schema's and those registered in this process."""
    return schema_backends(load_schema())


def device_backends(config: Mapping[str, Any]) -> dict[str, Backend]:
    """The backend of each configured device (a validated config's `devices`), by device name; `gpu` as the device
    uses it here: none when it is timed on another machine (`remote`), one for ONNX Runtime's CUDA or TensorRT
    provider."""
    from aows_worker import GPU_PROVIDERS

    declared = backends()
    out = {}
    for device, spec in config["devices"].items():
        b = declared[spec["backend"]]
        gpu = b.gpu or any(p in str(spec.get("providers", "")) for p in GPU_PROVIDERS)
        out[device] = dataclasses.replace(b, gpu=gpu and not spec.get("remote"))
    return out


def gpu_devices(backend_of: Mapping[str, Backend]) -> list[str]:
    """The devices (of `device_backends`) whose backend times on a GPU: cluster profiles place their timing jobs on
    GPU nodes."""
    return sorted(device for device, backend in backend_of.items() if backend.gpu)


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


def _coerce_strings(schema: Mapping, instance: Any) -> Any:
    """Numbers, booleans and lists given as strings (Snakemake's `--config 'section={key: 7}'` passes nested
    values as YAML strings) read as YAML where the schema wants another type; anything else is left as is."""
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if isinstance(instance, str) and types and types != ["string"]:
        try:
            value = yaml.safe_load(instance)
        except yaml.YAMLError:
            return instance
        kinds = {"integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict,
                 "null": type(None)}
        if not isinstance(value, str) and any(
                isinstance(value, kinds[t]) and not (t in ("integer", "number") and isinstance(value, bool))
                for t in types if t in kinds):
            return value
        return instance
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                instance[key] = _coerce_strings(sub, value)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [_coerce_strings(schema["items"], v) for v in instance]
    return instance


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def validate(config: Mapping | None) -> dict:
    """A validated copy of `config` with every default filled; ConfigError names the bad key."""
    cfg = copy.deepcopy(dict(config or {}))
    schema = load_schema()
    cfg = _coerce_strings(schema, cfg)
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
    lines = _target_errors(cfg, schema_backends(schema)) + _train_errors(cfg) + _subset_errors(cfg)
    if lines:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    return cfg


def _target_errors(cfg: Mapping, declared: Mapping[str, Backend]) -> list[str]:
    """Every device has a target, and every target parses and is in its device's unit (or relative)."""
    lines = []
    for section in ("decode", "aows"):
        for dev in cfg[section]["device_targets"]:
            if dev not in cfg["devices"]:
                lines.append(f"config key {section}.device_targets.{dev}: no device {dev!r} is configured; "
                             f"configured devices: {sorted(cfg['devices'])}")
    for dev, spec in cfg["devices"].items():
        unit = declared[spec["backend"]].unit
        lists = {
            (f"{s}.device_targets.{dev}" if dev in cfg[s]["device_targets"] else f"{s}.targets"):
            (cfg[s]["device_targets"][dev] if dev in cfg[s]["device_targets"] else cfg[s]["targets"])
            for s in ("decode", "aows")
        }
        if not any(lists.values()):
            lines.append(f"device {dev!r} has no latency target: {' and '.join(lists)} are empty; give it at least "
                         f"one (e.g. decode.targets: ['range:0.5']). An empty aows list alone means no AOWS supernet")
        for key, targets in lists.items():
            for t in targets:
                try:
                    target = parse_target(t)
                except ValueError as e:
                    lines.append(f"config key {key}: {e}")
                    continue
                if target.unit is not None and target.unit != unit:
                    lines.append(
                        f"config key {key}: target {t!r} is in {target.unit}, but device {dev!r} "
                        f"(backend {spec['backend']}) is timed in {unit}; use "
                        f"{'an ms target' if unit == 'ms' else 'a mflops target'} such as "
                        f"{'4.5ms' if unit == 'ms' else '325mflops'}, a relative one such as 'range:0.5', or a "
                        f"per-device list under {key.split('.')[0]}.device_targets.{dev}")
    return list(dict.fromkeys(lines))


# Images of the official training split of the datasets whose size is known before reading them.
TRAIN_IMAGES = {"fashion_mnist": 60_000, "cifar10": 50_000}


def _subset_errors(cfg: Mapping) -> list[str]:
    """data.train_subset and retrain.train_subset fit in the training split (built-in datasets: checked before any
    work starts; an ImageFolder is checked when it is read)."""
    d = cfg["data"]
    total = TRAIN_IMAGES.get(d["dataset"])
    if total is None:
        return []
    left, lines = total - d["search_val"], []
    for key, n in (("data.train_subset", d["train_subset"]), ("retrain.train_subset", cfg["retrain"]["train_subset"])):
        if isinstance(n, int) and n > left:
            lines.append(f"config key {key}: {n} images exceed the {left} of the training split ({d['dataset']}: "
                         f"{total} less data.search_val = {d['search_val']}); lower it, or use "
                         f"{'null' if key.startswith('data') else 'all'} for the whole split")
    return lines


def retrain_subset(config: Mapping[str, Any]) -> int | None:
    """The training images the finalists retrain on: retrain.train_subset (null → data.train_subset; all → None)."""
    return RetrainSettings.from_mapping(config["retrain"]).images(DataSettings.from_mapping(config["data"]))


def _train_errors(cfg: Mapping) -> list[str]:
    """Device and precision pairs that no machine can train in (D29); `auto` is resolved, and checked, by the stage."""
    t, lines = cfg["train"], []
    if t["precision"] == "fp16" and t["device"] == "cpu":
        lines.append("config key train.precision: fp16 trains on CUDA only (float16 autocast with a gradient scaler); "
                     "on the CPU use train.precision: bf16 (or fp32), or set train.device to auto or cuda")
    for key in ("supernet", "retrain"):
        n = cfg[key]["processes"]
        if t["precision"] == "fp16" and n > 1:
            lines.append(f"config key train.precision: fp16 with {key}.processes = {n} is not supported (the gradient "
                         "scaler has not been checked on several GPUs); use train.precision: bf16 or "
                         f"{key}.processes: 1")
        nodes = cfg[key]["nodes"]
        if n % nodes:
            lines.append(f"config key {key}.nodes: {key}.processes = {n} do not divide over {nodes} nodes; set "
                         f"{key}.processes to a multiple of {key}.nodes (processes counts every node's)")
    return lines


def read_file(path: str | Path) -> dict:
    """One config file's mapping of sections, unvalidated (an empty file is {}); a clear error naming the file."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {p} is not valid YAML; fix the syntax:\n{e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {p} is not a text (YAML) file ({e})") from e
    return _mapping(raw, f"config file {p}")


def _mapping(raw: Any, where: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} holds a {type(raw).__name__}, not a mapping of sections; a config looks like "
                          f"`seed: 0`, `space: {{preset: ...}}`, `devices: {{...}}` (see config.yaml)")
    return raw


def load(path: str | Path | None = None, inline_json: str | None = None, reach: str | None = None) -> dict:
    """Load and validate a config file (YAML) or an inline JSON string; neither gives all defaults. `reach`: JSON of
    devices' REACH_KEYS settings by device name (`device_reach`), set on the config's devices before validation."""
    raw = _json(inline_json, "--config-json") if inline_json is not None else read_file(path) if path else {}
    if reach is not None:
        devices = dict(raw.get("devices") or {})
        for name, keys in _json(reach, "--device-reach").items():
            if name not in devices or not isinstance(keys, dict) or set(keys) - set(REACH_KEYS):
                raise ConfigError(f"--device-reach {name!r}: {keys!r}; it takes a mapping of {list(REACH_KEYS)} for "
                                  f"each of the config's devices {sorted(devices)}")
            devices[name] = {**devices[name], **keys}
        raw = {**raw, "devices": devices}
    return validate(raw)


def _json(text: str, what: str) -> dict:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what} is not valid JSON ({e})") from e
    return _mapping(raw, what)


# The maps whose keys a user names: a later layer that gives one replaces the earlier one whole.
NAMED_MAPS = (("devices",), ("decode", "device_targets"), ("aows", "device_targets"))


def layered(*layers: Mapping[str, Any] | None) -> dict:
    """Configuration layers merged in order — config.yaml, each `--configfile`, then `--config` (README, "Your data"):
    a section merges key by key; a value, a list or a map of names (NAMED_MAPS: `devices`, `device_targets`) that a
    later layer gives replaces the earlier one whole, and a layer's `devices` drops the earlier per-device targets."""
    out: dict = {}
    for layer in layers:
        layer = layer or {}
        if "devices" in layer:  # new devices: the earlier per-device targets named the devices they replace
            out = {k: ({s: v for s, v in sec.items() if s != "device_targets"} if k in ("decode", "aows")
                       and isinstance(sec, Mapping) else sec) for k, sec in out.items()}
        out = _over(out, layer, ())
    return out


def workflow_config(configfiles: Sequence[str | Path] = (), overrides: Mapping[str, Any] | None = None,
                    root: str | Path = ".") -> dict:
    """The validated config a workflow run in `root` reads: config.yaml (when there), each `--configfile` in order,
    then `--config` (`overrides`), merged by `layered` (the one rule for a user's own file, README)."""
    base = Path(root) / "config.yaml"
    files = ([base] if base.exists() else []) + [Path(f) for f in configfiles]
    return validate(layered(*[read_file(f) for f in files], dict(overrides or {})))


def _over(base: Mapping[str, Any], top: Mapping[str, Any], path: tuple[str, ...]) -> dict:
    merged = dict(base)
    for key, value in top.items():
        at = (*path, key)
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping) and at not in NAMED_MAPS:
            merged[key] = _over(merged[key], value, at)
        else:
            merged[key] = _plain(value)
    return merged


# Target and seed lists: each job's target (seed) is its wildcard, so adding one never reruns the others.
TARGET_KEYS = ("targets", "device_targets", "seeds")


def _without_targets(section: Any) -> Any:
    if not isinstance(section, Mapping):
        return section
    return {k: v for k, v in section.items() if k not in TARGET_KEYS}


def stage_settings(config: Mapping, stage: str, device: str | None = None) -> dict:
    """The part of a validated config that `stage` reads (plus the named device's settings but REACH_KEYS)."""
    out = {k: _without_targets(config[k]) for k in STAGE_SECTIONS[stage]}
    if device is not None:
        out["devices"] = {device: {k: v for k, v in _device(config, device).items() if k not in REACH_KEYS}}
    return out


# A device's settings of how a job reaches it, not of what it times: the time a request may take and the worker's
# command (D53). They are passed beside a stage's settings (`--device-reach`), so that changing them reruns nothing.
REACH_KEYS = ("timeout_s", "worker")


def device_reach(config: Mapping, device: str) -> dict:
    """The REACH_KEYS settings of `device`, by device name (what `--device-reach` takes)."""
    return {device: {k: v for k, v in _device(config, device).items() if k in REACH_KEYS}}


def _device(config: Mapping, device: str) -> Mapping:
    if device not in config["devices"]:
        raise ConfigError(f"unknown device {device!r}; configured devices: {sorted(config['devices'])}")
    return config["devices"][device]


# Settings a resume checkpoint need not match: the global batch, the sample and configuration streams and the
# checkpointed state do not depend on them, so a killed job resumes with another process count, accumulating
# gradients over smaller passes where fewer processes hold the batch, BN synchronised over them or not (D30), and
# whether its seeds share one job (D52).
RESUMABLE_ACROSS = ("processes", "nodes", "micro_batch", "sync_bn", "seeds_in_one_job")


def resume_settings(config: Mapping, stage: str) -> dict:
    """`stage_settings` less the keys a job may change between a checkpoint and its resumption (processes, passes)."""
    out = stage_settings(config, stage)
    return {k: ({kk: vv for kk, vv in v.items() if kk not in RESUMABLE_ACROSS} if isinstance(v, Mapping) else v)
            for k, v in out.items()}


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


def net_key(channels: Sequence[int]) -> str:
    """The name of a network in the workflow's paths: its widths joined by '-' (e.g. `16-32-64`).

    Retraining is keyed by it (results/retrain/nets/{net}/seed{seed}/): finalists that decided the same
    widths, whatever their method, target or device, share one training per seed."""
    if not channels:
        raise ValueError("a network needs at least one searchable width")
    return "-".join(str(int(c)) for c in channels)


def parse_net_key(text: str) -> list[int]:
    """The widths a network name (`net_key`) or a comma-separated list names."""
    parts = re.split(r"[-,]", str(text).strip())
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"malformed network {text!r}; write its searchable widths as 16-32-64 or 16,32,64")
    return [int(p) for p in parts]


def space_from_config(config: Mapping):
    """The SearchSpace a validated config describes (a stage reads it once, with the rest: `resolve`)."""
    return SpaceSettings.from_mapping(config["space"]).build(config["data"]["dataset"])


# ---------------------------------------------------------------------------------------- methods
SUPERNET_METHODS = ("aows", "ows")
BASELINE_METHODS = ("greedy", "uniform")
METHODS = SUPERNET_METHODS + BASELINE_METHODS  # the order of the results tables


# ------------------------------------------------------------------------------------ data settings
DATASETS = ("fashion_mnist", "cifar10", "imagefolder")
DEFAULT_ROOTS: dict[str, str | None] = {
    "fashion_mnist": "/usr/share/datasets/fashion-mnist",
    "cifar10": None,
    "imagefolder": None,
}


# Each dataset's images as a network reads them (channels, height = width): the input a traced model is traced on.
DATASET_INPUT: dict[str, tuple[int, int]] = {"fashion_mnist": (1, 28), "cifar10": (3, 32), "imagefolder": (3, 224)}


class DataError(ValueError):
    """A dataset that is missing, misplaced, corrupt, or does not match the search space."""



@dataclass(frozen=True)
class DataSpec:
    """What to load and how: dataset, root, split sizes, batch size, seed and loader options."""

    name: str = "fashion_mnist"
    root: str | None = None  # None → DEFAULT_ROOTS[name]
    download: bool = False  # torchvision download of fashion_mnist / cifar10 into root, if missing
    search_val: int = 5000  # images held out of the official train set to score the search
    calibration: int = 2000  # images of the train split used for BatchNorm recalibration
    train_subset: int | None = None  # keep the first N of a seeded permutation of the train split
    batch_size: int = 128  # global training batch (all ranks together)
    seed: int = 0  # the splits (train_subset, search_val, calibration); also the batches unless train_seed is set
    train_seed: int | None = None  # batch order and augmentation only (None → seed): retraining with another seed
    channels_last: bool = False
    num_workers: int = 0  # DataLoader workers (imagefolder only)
    prefetch_factor: int = 2  # batches each worker loads ahead (imagefolder with workers)
    augment: bool = True  # crop + flip on training batches
    image_size: int | None = None  # imagefolder crop size (None → 224); fixed by the data otherwise

    def __post_init__(self) -> None:
        """Check names and ranges early, naming the offending key."""
        if self.name not in DATASETS:
            raise DataError(f"data.name: unknown dataset {self.name!r}; choose one of {', '.join(DATASETS)}")
        for key in ("search_val", "calibration", "num_workers"):
            if int(getattr(self, key)) < 0:
                raise DataError(f"data.{key} must be ≥ 0, got {getattr(self, key)}")
        if self.batch_size < 1:
            raise DataError(f"data.batch_size must be ≥ 1, got {self.batch_size}")
        if self.prefetch_factor < 1:
            raise DataError(f"data.prefetch_factor must be ≥ 1, got {self.prefetch_factor}")
        if self.train_subset is not None and self.train_subset < 1:
            raise DataError(f"data.train_subset must be ≥ 1 or null, got {self.train_subset}")
        if self.image_size is not None and self.name != "imagefolder":
            raise DataError(f"data.image_size only applies to imagefolder; {self.name} images have a fixed size")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], **overrides: Any) -> "DataSpec":
        """Build from a config mapping (e.g. config['data']); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        merged = {**dict(mapping), **overrides}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise DataError(f"data: unknown key(s) {unknown}; known keys are {sorted(known)}")
        return cls(**merged)

    @property
    def resolved_root(self) -> Path:
        """The root to read: data.root, or the dataset's default root."""
        root = self.root if self.root is not None else DEFAULT_ROOTS[self.name]
        if root is None:
            raise DataError(f"dataset {self.name!r} has no default location: set data.root to its folder")
        return Path(os.path.expanduser(str(root)))

    @property
    def batch_seed(self) -> int:
        """The seed of the training batches' order and augmentation: train_seed, else seed."""
        return self.seed if self.train_seed is None else int(self.train_seed)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the settings (for provenance metadata); train_seed only when set, so a spec
        with one seed records exactly what it did before train_seed existed."""
        d = asdict(self)
        if d["train_seed"] is None:
            del d["train_seed"]
        return d



def data_spec(config: Mapping[str, Any], section: str | None = "supernet", train_seed: int | None = None) -> DataSpec:
    """The DataSpec of a validated config: training batches of `section` ("supernet" or "retrain"), or
    (section None) just the dataset, for reading test images. The splits always come from the top-level
    seed; `train_seed` (a retraining seed) reseeds only the batches' order and augmentation."""
    batches = None if section is None else SECTIONS[section].from_mapping(config[section])
    return _data_spec(int(config["seed"]), DataSettings.from_mapping(config["data"]), batches, train_seed)


def _data_spec(seed: int, d: "DataSettings", batches: "SupernetSettings | RetrainSettings | None",
               train_seed: int | None) -> DataSpec:
    """`data_spec` from the resolved sections: the dataset of `d`, the batches of `batches` (None: the dataset only)."""
    if batches is None:
        return DataSpec(name=d.dataset, root=d.root, download=d.download, seed=seed)
    return DataSpec(
        name=d.dataset, root=d.root, download=d.download, search_val=d.search_val, calibration=d.calibration,
        batch_size=batches.batch_size, train_subset=batches.images(d), seed=seed,
        train_seed=None if train_seed is None or int(train_seed) == seed else int(train_seed),
        channels_last=batches.channels_last, num_workers=d.num_workers, prefetch_factor=d.prefetch_factor,
        augment=batches.augment,
    )


# ------------------------------------------------------------------------------------ resolved settings
# Each section of the schema as a frozen object, built once from a validated config at a stage's boundary (`resolve`);
# lower layers take these objects, never the config dict. Their fields are the schema's properties, with its defaults
# (tests/test_config.py checks both), so that a test or a library user can build one directly. Values are kept as the
# validated config holds them (lists as tuples, mappings read-only); `to_dict` gives the section back as a plain dict
# (provenance metadata, the timing protocol's identity). The Snakemake rules' settings hashes (`stage_settings`,
# `settings_hash`) and the resume identities stay computed from the config dict.
def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _no_targets() -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({})


class Section:
    """A config section as a frozen dataclass (mixin of the sections below)."""

    name: ClassVar[str]  # the schema's key of the section

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]):
        """The section of a validated config (`config[name]`); an unknown key is refused, naming the allowed ones."""
        known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(mapping) - set(known))
        if unknown:
            raise ConfigError(f"config key {cls.name}: unknown key(s) {unknown}; allowed keys: {sorted(known)}")
        return cls(**{k: _frozen(v) for k, v in mapping.items()})

    def to_dict(self) -> dict[str, Any]:
        """The section as the validated config holds it (plain lists and dicts)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    def replace(self, **changes: Any):
        """A copy with some fields changed."""
        return dataclasses.replace(self, **{k: _frozen(v) for k, v in changes.items()})  # type: ignore[type-var]


class _Targets:
    """The target lists of a section (`targets`, `device_targets`)."""

    targets: tuple[str, ...]
    device_targets: Mapping[str, tuple[str, ...]]

    def targets_for(self, device: str) -> list[str]:
        """The target strings of a device: its own list, else the common one."""
        return list(self.device_targets.get(device, self.targets))


@dataclass(frozen=True)
class SpaceSettings(Section):
    """`space`: a preset and the parameters that override it (None keeps the preset's)."""

    name: ClassVar[str] = "space"
    preset: str = "mobilenet_v1_fmnist"
    resolution: int | None = None
    in_channels: int | None = None
    num_classes: int | None = None
    width_mult: float | None = None
    first_stride: int | None = None
    n_choices: int | None = None
    model: str | None = None
    model_kwargs: Mapping[str, Any] = field(default_factory=dict)
    weights: str | None = None
    importance: str = "bn"
    fixed: tuple[str, ...] = ()

    def build(self, dataset: str = "fashion_mnist") -> SearchSpace:
        """The SearchSpace these settings describe: the preset's, or `model` traced on the dataset's input shape."""
        from .space import get_space

        if self.model is None:
            params = self.to_dict()
            if self.weights is not None:
                raise ConfigError("config key space.weights initialises a traced space.model; a preset is trained "
                                  "from scratch (set space.model, or remove space.weights)")
            for key in ("model", "model_kwargs", "fixed", "weights", "importance"):
                params.pop(key)
            return get_space(params.pop("preset"), **params)
        return self.traced(dataset)[0].space

    def traced(self, dataset: str = "fashion_mnist") -> tuple[Any, Any]:
        """(`model` traced into a space, the module): `aows_core.tracing`, on space.in_channels × space.resolution²
        inputs, else the dataset's image shape; `weights` checked against the module and loaded into it (`module`:
        the module's own). Traced once per dataset: a stage's space and initial state share it."""
        if dataset in self._traces:
            return self._traces[dataset]
        from .tracing import TRACED_N_CHOICES, load_model, read_weights, trace_space

        for key in ("width_mult", "first_stride"):
            if getattr(self, key) is not None:
                raise ConfigError(f"config key space.{key} applies to a preset; a traced space.model has the widths "
                                  f"and strides of its module (remove space.{key})")
        channels, resolution = DATASET_INPUT[dataset]
        shape = (self.in_channels or channels, self.resolution or resolution, self.resolution or resolution)
        model = load_model(self.model, self.model_kwargs)
        if self.weights not in (None, MODULE_WEIGHTS):
            model.load_state_dict(read_weights(self.weights, model))
        traced = trace_space(model, shape, _traced_name(self.model), fixed=self.fixed,
                             n_choices=self.n_choices or TRACED_N_CHOICES, model_name=self.model)
        if self.num_classes is not None and traced.space.num_classes != self.num_classes:
            raise ConfigError(f"space.model {self.model!r} has {traced.space.num_classes} classes, space.num_classes "
                              f"says {self.num_classes}: pass num_classes in space.model_kwargs")
        self._traces[dataset] = traced, model
        return traced, model

    @cached_property
    def _traces(self) -> dict[str, tuple[Any, Any]]:
        return {}

    def initial_state(self, dataset: str = "fashion_mnist") -> dict[str, Any] | None:
        """The supernet's initial weights: `weights` loaded into `model`, its channels ordered by `importance`
        (`aows_core.tracing:ordered_state`); None without weights (trained from scratch)."""
        if self.model is None or self.weights is None:
            return None
        from .tracing import ordered_state, trained_state

        traced, model = self.traced(dataset)
        return ordered_state(traced.space, trained_state(traced, model), self.importance)


MODULE_WEIGHTS = "module"  # space.weights: the weights the module carries as its function returns it


def _traced_name(model: str) -> str:
    """A traced space's name: the model's name (its function's)."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", model.rpartition(":")[2]).strip("_") or "traced"


@dataclass(frozen=True)
class DataSettings(Section):
    """`data`: the dataset and its splits (§7)."""

    name: ClassVar[str] = "data"
    dataset: str = "fashion_mnist"
    root: str | None = None
    download: bool = False
    search_val: int = 1000
    calibration: int = 256
    train_subset: int | None = 10000
    num_workers: int = 0
    prefetch_factor: int = 2


@dataclass(frozen=True)
class SamplingSettings(Section):
    """`sampling`: which configurations are profiled (§4, supplementary A)."""

    name: ClassVar[str] = "sampling"
    coverage: int = 8
    lambda_val: int = 100
    test: int = 200
    anchors: bool = True


@dataclass(frozen=True)
class ProfilingSettings(Section):
    """`profiling`: the timing protocol (§4, D27), shared by profile, verify and measure."""

    name: ClassVar[str] = "profiling"
    repeats: int = 30
    min_time_ms: float = 110
    warmup: int = 1
    statistic: str = "min"
    chunks: int = 5
    reference_share: float = 0.4
    max_noise: str | float = "auto"
    retime: float = 0.1
    spell_retime: float = 0.2
    retest: int = 50
    checkpoint_every: int = 10


@dataclass(frozen=True)
class LutSettings(Section):
    """`lut`: the grids and ridge of the latency table's fit (§4, D38, D39)."""

    name: ClassVar[str] = "lut"
    lambdas: tuple[float, ...] = (0.0, 1.0e-4, 1.0e-3, 1.0e-2, 1.0e-1, 1.0, 10.0)
    smoothness: tuple[float, ...] = (0.0, 1.0, 10.0, 100.0)
    link_knots: tuple[float, ...] = (0.8, 0.9, 0.95)
    ridge: float = 1.0e-6


@dataclass(frozen=True)
class DecodeSettings(Section, _Targets):
    """`decode`: the targets and the constrained decode (§5)."""

    name: ClassVar[str] = "decode"
    targets: tuple[str, ...] = ("range:0.1", "range:0.25", "range:0.4")
    device_targets: Mapping[str, tuple[str, ...]] = field(default_factory=_no_targets)
    exact: bool = True
    unvisited: str = "exclude"


@dataclass(frozen=True)
class VerifySettings(Section):
    """`verify`: every decision timed on its device and the table refitted around it (D36)."""

    name: ClassVar[str] = "verify"
    max_rounds: int = 8
    tolerance: float = 0.025
    rounds: int = 5
    margin: str | float = "auto"
    weight: int = 20


@dataclass(frozen=True)
class TrainSettings(Section):
    """`train`: where and in what precision the training stages run (D29)."""

    name: ClassVar[str] = "train"
    device: str = "auto"
    precision: str = "fp32"
    deterministic: bool = False


@dataclass(frozen=True)
class SupernetSettings(Section):
    """`supernet`: slimmable supernet training with the sandwich rule (§3, §5, §6)."""

    name: ClassVar[str] = "supernet"
    epochs: int = 6
    batch_size: int = 128
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 4.0e-5
    label_smoothing: float = 0.0
    n_random: int = 1
    channels_last: bool = True
    augment: bool = True
    threads: int = 2
    unaries: str = "frozen"
    estimate_configs: int = 800
    estimate_batch: int = 128
    estimate_images: int = 1024
    checkpoint_every: int = 50
    processes: int = 1
    sync_bn: bool = False
    nodes: int = 1

    def images(self, data: DataSettings) -> int | None:
        """The training images of the search: data.train_subset (None: the whole split)."""
        return data.train_subset


@dataclass(frozen=True)
class AowsSettings(Section, _Targets):
    """`aows`: adaptive sampling (§6, supplementary B)."""

    name: ClassVar[str] = "aows"
    targets: tuple[str, ...] = ("range:0.1", "range:0.25", "range:0.4")
    device_targets: Mapping[str, tuple[str, ...]] = field(default_factory=_no_targets)
    warmup_epochs: int = 4
    sampling: str = "per_node"
    unbound: str = "target"
    temperature_scale: str | float = "auto"
    refresh: int = 34
    estimate_configs: int = 80
    final_configs: int = 400
    threads: int = 1
    window: int = 2000
    unvisited: str = "pessimistic"


@dataclass(frozen=True)
class GreedySettings(Section):
    """`greedy`: the AutoSlim baseline's scoring (§3)."""

    name: ClassVar[str] = "greedy"
    n_eval: int = 500
    n_cal: int = 128
    batch_size: int = 250
    threads: int = 1
    processes: int = 1


@dataclass(frozen=True)
class RetrainSettings(Section):
    """`retrain`: retraining a decided network from scratch (§7), or from space.weights (`init`, D48)."""

    name: ClassVar[str] = "retrain"
    epochs: int = 2
    batch_size: int = 128
    lr: float = 0.1
    warmup_epochs: float = 0.5
    momentum: float = 0.9
    weight_decay: float = 4.0e-5
    label_smoothing: float = 0.1
    train_subset: int | str | None = None
    threads: int = 1
    checkpoint_every: int = 50
    eval_batch_size: int = 500
    processes: int = 1
    sync_bn: bool = False
    nodes: int = 1
    micro_batch: int | None = None
    channels_last: bool = True
    augment: bool = False
    seeds: tuple[int, ...] | None = (0, 1, 2)
    seeds_in_one_job: bool = True
    init: str = "scratch"

    def images(self, data: DataSettings) -> int | None:
        """The training images the finalists retrain on: train_subset (None → data.train_subset; all → None)."""
        n = self.train_subset
        return data.train_subset if n is None else None if n == "all" else int(n)


@dataclass(frozen=True)
class MeasureSettings(Section):
    """`measure`: timing the finalists on their device (§7)."""

    name: ClassVar[str] = "measure"
    rounds: int = 5
    settle_s: float = 240
    on_fingerprint_mismatch: str = "error"


SECTIONS: dict[str, type[Section]] = {c.name: c for c in (
    SpaceSettings, DataSettings, SamplingSettings, ProfilingSettings, LutSettings, DecodeSettings, VerifySettings,
    TrainSettings, SupernetSettings, AowsSettings, GreedySettings, RetrainSettings, MeasureSettings)}
"""Every section of the schema but `seed` and `devices`, by its key."""


@dataclass(frozen=True)
class Settings:
    """A validated config resolved once, at a stage's boundary (`resolve`): the seed, the search space (built once),
    the devices' settings and one frozen object per section. Lower layers take this object or the sections they need."""

    seed: int
    space: SearchSpace  # built from `space:` (`SpaceSettings.build`)
    devices: Mapping[str, Mapping[str, Any]]
    space_section: SpaceSettings = SpaceSettings()
    data: DataSettings = DataSettings()
    sampling: SamplingSettings = SamplingSettings()
    profiling: ProfilingSettings = ProfilingSettings()
    lut: LutSettings = LutSettings()
    decode: DecodeSettings = DecodeSettings()
    verify: VerifySettings = VerifySettings()
    train: TrainSettings = TrainSettings()
    supernet: SupernetSettings = SupernetSettings()
    aows: AowsSettings = AowsSettings()
    greedy: GreedySettings = GreedySettings()
    retrain: RetrainSettings = RetrainSettings()
    measure: MeasureSettings = MeasureSettings()

    def device(self, name: str) -> dict[str, Any]:
        """The settings of the device `name` (`devices.<name>`, a plain dict: the device classes read it)."""
        if name not in self.devices:
            raise ConfigError(f"unknown device {name!r}; configured devices: {sorted(self.devices)}")
        return _plain(self.devices[name])

    def initial_state(self) -> dict[str, Any] | None:
        """The supernet's initial weights from `space.weights` (`SpaceSettings.initial_state`), or None."""
        return self.space_section.initial_state(self.data.dataset)

    def data_spec(self, section: str | None = "supernet", train_seed: int | None = None) -> DataSpec:
        """`data_spec` of these settings: the batches of `section` ("supernet" or "retrain"), or (None) the dataset."""
        batches = None if section is None else getattr(self, section)
        return _data_spec(self.seed, self.data, batches, train_seed)


def resolve(config: Mapping[str, Any]) -> Settings:
    """The Settings of a validated config (`validate`, `load`): each section once, the space built once."""
    sections = {key: cls.from_mapping(config[key]) for key, cls in SECTIONS.items() if key != "space"}
    if sections["retrain"].init == "weights" and config["space"].get("weights") is None:
        raise ConfigError("config key retrain.init: weights fine-tunes the finalists from space.weights, which is not "
                          "set: set space.weights (and space.model), or retrain.init: scratch")
    space = SpaceSettings.from_mapping(config["space"])  # its trace is kept for initial_state (D48)
    return Settings(seed=int(config["seed"]), space=space.build(config["data"]["dataset"]),
                    devices=_frozen(config["devices"]), space_section=space, **sections)  # type: ignore[arg-type]
