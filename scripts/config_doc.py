#!/usr/bin/env python3
"""Write docs/configuration.md from the configuration schema (workflow/schemas/config.schema.yaml).

    python3 scripts/config_doc.py           # (re)write the page
    python3 scripts/config_doc.py --check   # exit 1, saying what to run, when the committed page differs

Every key of the schema is listed with its dotted path, type, default and description, grouped by top-level
section: first the settings a user sets (USER_KEYS below, the one place that draws the line; config.yaml sets
only these), then the research knobs, whose defaults are the method's. The schema is read with
aows_core.config.load_schema, the loader the Snakefile and `aows` validate with.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aows_core.config import load_schema  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
SCHEMA_NAME = "workflow/schemas/config.schema.yaml"

# The settings a user sets: the seed, the search space's input, the data, the devices, the targets, where and in what
# precision training runs, the budgets (epochs, training batch sizes, subset sizes, retraining seeds) and the
# parallelism (threads, processes, nodes). `*` stands for any device name. Every other key is a research knob: the
# timing protocol (profiling), the latency table's fit (lut), sampling, verification, measurement, the estimation
# sizes, the optimisers' recipes. config.yaml sets only these keys (tests/test_configuration_doc.py).
USER_KEYS: tuple[str, ...] = (
    "seed",
    "space.preset", "space.resolution", "space.in_channels", "space.num_classes", "space.model", "space.model_kwargs",
    "space.weights", "space.fixed",
    "data.dataset", "data.root", "data.download", "data.train_subset", "data.search_val", "data.calibration",
    "data.num_workers",
    "devices", "devices.*.backend", "devices.*.batch_size", "devices.*.threads", "devices.*.inter_op_threads",
    "devices.*.channels_last", "devices.*.graph_optimization", "devices.*.cuda_device",
    "decode.targets", "decode.device_targets",
    "aows.targets", "aows.device_targets", "aows.warmup_epochs",
    "train.device", "train.precision",
    "supernet.epochs", "supernet.batch_size", "supernet.threads", "supernet.processes", "supernet.nodes",
    "greedy.processes",
    "retrain.epochs", "retrain.batch_size", "retrain.train_subset", "retrain.augment", "retrain.seeds",
    "retrain.threads", "retrain.processes", "retrain.nodes",
)

USER_TITLE = "Settings you set"
ADVANCED_TITLE = "Advanced settings (research knobs; defaults are the method's)"


# ------------------------------------------------------------------------------------------- the schema's keys
def schema_keys(schema: Mapping[str, Any] | None = None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(dotted key, schema node) of every key, in the schema's order; a map's entries (devices) as `*`."""
    schema = load_schema() if schema is None else schema

    def walk(node: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        for key, sub in node.get("properties", {}).items():
            path = f"{prefix}{key}"
            yield path, sub
            yield from walk(sub, f"{path}.")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and "properties" in extra:
            yield from walk(extra, f"{prefix}*.")

    yield from walk(schema, "")


def resolve(dotted: str, schema: Mapping[str, Any] | None = None) -> Mapping[str, Any] | None:
    """The schema node of a dotted key (any name, e.g. `devices.cpu.threads`, where the schema takes any), or None."""
    node: Any = load_schema() if schema is None else schema
    for part in dotted.split("."):
        props = node.get("properties", {}) if isinstance(node, Mapping) else {}
        extra = node.get("additionalProperties") if isinstance(node, Mapping) else None
        if part in props:
            node = props[part]
        elif isinstance(extra, Mapping):
            node = extra
        else:
            return None
    return node


def config_keys(config: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> list[str]:
    """The dotted keys (schema_keys' spelling) a config file sets: each key of a section, each setting of a device."""
    schema = load_schema() if schema is None else schema
    out: list[str] = []

    def walk(value: Any, node: Mapping[str, Any], prefix: str) -> None:
        if not isinstance(value, Mapping):
            return
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                if "properties" not in props[key]:  # a section is not a key; a map (devices) is
                    out.append(f"{prefix}{key}")
                walk(sub, props[key], f"{prefix}{key}.")
            elif isinstance(extra, Mapping):
                if "properties" in extra:  # a device's settings
                    walk(sub, extra, f"{prefix}*.")
                # else an entry of a map of values (decode.device_targets.cpu): the map is the key
            else:
                out.append(f"{prefix}{key}")  # unknown: validation refuses it; listed so a check names it

    walk(config, schema, "")
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------------------------ formatting
def _flow(value: Any) -> str:
    """A value as one line of YAML flow style."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**9, allow_unicode=True).strip()
    return text[:-3].strip() if text.endswith("\n...") or text.endswith("...") else text


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _num(x: Any) -> str:
    return json.dumps(x)


BOUNDS = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"))


def type_text(node: Mapping[str, Any]) -> str:
    """The type of a key with its constraints, e.g. `integer ≥ 1`, `one of: fp32, bf16, fp16`, `integer or null`."""
    if "oneOf" in node:
        return " or ".join(type_text(alt) for alt in node["oneOf"])
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    if "enum" in node:
        values = [v for v in node["enum"] if v is not None]
        if len(node["enum"]) == 1:
            return f"`{_flow(values[0])}`"
        text = "one of: " + ", ".join(_flow(v) for v in values)
        return text + (", null" if None in node["enum"] else "")
    parts = []
    for t in types:
        if t == "string" and "pattern" in node and node["pattern"] == "^all$":
            parts.append("`all`")
        elif t == "string" and "pattern" in node and node["pattern"] == "^auto$":
            parts.append("`auto`")
        elif t == "array":
            items = node.get("items", {})
            inner = "target" if "pattern" in items and "range:" in items["pattern"] else type_text(items)
            parts.append(f"list of {inner}" if inner else "list")
        elif t == "object" and isinstance(node.get("additionalProperties"), Mapping) and \
                "properties" not in node["additionalProperties"]:
            parts.append(f"map: device → {type_text(node['additionalProperties'])}")
        elif t == "object" and isinstance(node.get("additionalProperties"), Mapping):
            parts.append("map: name → settings")
        elif t in ("integer", "number"):
            bounds = []
            for key, sign in BOUNDS:
                if key in node and not isinstance(node[key], bool):
                    bounds.append(f"{sign} {_num(node[key])}")
            parts.append(f"{t} {', '.join(bounds)}".strip())
        else:
            parts.append(t)
    return " or ".join(parts)


def default_text(node: Mapping[str, Any]) -> str:
    if "default" not in node:
        return "(required)"
    return f"`{_flow(node['default'])}`"


def display_key(dotted: str) -> str:
    return dotted.replace("*", "<name>")


def readers(schema: Mapping[str, Any]) -> dict[str, str]:
    """{`devices.*.<setting>`: the note naming the backends that read it} for the settings some backends ignore
    (the device classes' declarations, `x-backends`)."""
    declared = schema["properties"]["devices"]["additionalProperties"]["x-backends"]
    by_key: dict[str, list[str]] = {}
    for name, backend in declared.items():
        for key in backend["settings"]:
            by_key.setdefault(key, []).append(name)
    return {f"devices.*.{key}": "Read by " + ", ".join(f"`{n}`" for n in names) + "."
            for key, names in by_key.items() if len(names) < len(declared)}


def _table(rows: list[tuple[str, Mapping[str, Any]]], notes: Mapping[str, str] | None = None) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, node in rows:
        text = " ".join(t for t in (node.get("description", ""), (notes or {}).get(key, "")) if t)
        lines.append(f"| `{display_key(key)}` | {_cell(type_text(node))} | {_cell(default_text(node))} | "
                     f"{_cell(text)} |")
    return lines


def _intro(schema: Mapping[str, Any], section: str, also: Sequence[str] = ()) -> list[str]:
    """A section's description as a paragraph (not for a key that is its own row, e.g. `seed`, `devices`)."""
    node = schema["properties"][section]
    text = " ".join(([_cell(node.get("description", ""))] if "properties" in node else []) + list(also))
    return [text, ""] if text else []


def render(schema: Mapping[str, Any] | None = None) -> str:
    """The page: the intro, then per top-level section the user keys, then per section the research knobs."""
    schema = load_schema() if schema is None else schema
    keys = list(schema_keys(schema))
    known = {k for k, _ in keys}
    keys = [(k, n) for k, n in keys if "properties" not in n or "." in k]  # a section is a heading, not a row
    unknown = sorted(set(USER_KEYS) - known)
    if unknown:
        raise SystemExit(f"scripts/config_doc.py: USER_KEYS names keys the schema lacks: {unknown}")
    sections = list(schema["properties"])
    notes = readers(schema)

    out = [
        "<!-- Generated by scripts/config_doc.py from " + SCHEMA_NAME + "; do not edit by hand.",
        "     After changing the schema run `python3 scripts/config_doc.py` (a test checks this page is current). -->",
        "",
        "# Configuration",
        "",
        f"Every key aows reads, from its JSON schema (`{SCHEMA_NAME}`), with its type, default and meaning. "
        "The configuration is checked when the Snakefile is parsed and whenever `aows` is called: an unknown key, a "
        "value of the wrong type or range, or a malformed target stops the run before any job, naming the key.",
        "",
        "- `config.yaml` (the repository's root) is the embedded default run. It sets only keys of "
        f"[{USER_TITLE}](#settings-you-set), each at its schema default; every other key keeps its default.",
        "- **One rule for your own file**: `snakemake --configfile my.yaml ...` reads `my.yaml` over `config.yaml`, "
        "each section key by key, and a map of names it gives (`devices`, `decode.device_targets`, "
        "`aows.device_targets`) replaces the default's whole (its `devices` with their per-device targets); several "
        "files apply in order. The presets in `configs/` are such files, complete.",
        "- `snakemake ... --config 'supernet={epochs: 8}'` is one more layer after the files, by the same rule "
        "(numbers are read as numbers).",
        "- `aows inspect my.yaml` checks a file and prints it with every default filled in.",
        "",
        "Targets (`decode.targets`, `aows.targets` and their per-device `device_targets`) are strings: `4.5ms` "
        "(absolute, devices timed in ms), `325mflops` (the `flops` device, millions of multiply-accumulates) or "
        "`range:0.3` (0 = the device's fastest network, 1 = its slowest, under its latency table). "
        "`devices.<name>` stands for any device name.",
        "",
        f"## {USER_TITLE}",
        "",
    ]
    user = set(USER_KEYS)
    for section in dict.fromkeys(k.split(".")[0] for k in USER_KEYS):  # in USER_KEYS' order: seed, space, data, ...
        rows = [(k, n) for k, n in keys if k.split(".")[0] == section and k in user]
        out += [f"### {section}", "", *_intro(schema, section), *_table(rows, notes), ""]
    out += [f"## {ADVANCED_TITLE}", "",
            "The method's settings: change them to study the method, not to run it on your data or device. "
            "Sections that hold user keys too list only the rest here.", ""]
    for section in sections:
        rows = [(k, n) for k, n in keys if k.split(".")[0] == section and k not in user]
        if not rows:
            continue
        shared = any(k.split(".")[0] == section for k in user)
        also = [f"User keys of this section: [above](#{section})."] if shared else []
        out += [f"### {section} (advanced)", "", *_intro(schema, section, also), *_table(rows, notes), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when docs/configuration.md differs from what the schema generates")
    args = parser.parse_args(argv)
    text = render()
    rel = PAGE.relative_to(ROOT)
    if args.check:
        current = PAGE.read_text() if PAGE.exists() else ""
        if current == text:
            print(f"{rel} is current with {SCHEMA_NAME}")
            return 0
        diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), f"{rel} (committed)",
                                         f"{rel} (generated)", lineterm="", n=1))
        print("\n".join(diff[:40] + (["..."] if len(diff) > 40 else [])))
        print(f"{rel} is out of date with {SCHEMA_NAME} (or scripts/config_doc.py); "
              f"run: python3 scripts/config_doc.py", file=sys.stderr)
        return 1
    PAGE.write_text(text)
    print(f"wrote {rel}: {sum(1 for _ in schema_keys())} keys, {len(USER_KEYS)} of them user keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
