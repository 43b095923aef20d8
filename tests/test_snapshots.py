"""Snapshot tests: the command line and every artifact schema, frozen as JSON under tests/snapshots/.

They exist to prove that a reorganisation of `aows_core` leaves the user-facing surface unchanged:

- `cli.json`: for the top-level parser and every `aows <stage>` subcommand of
  `aows_core.cli.build_parser()`, each argument in declaration order: option strings (or the dest of
  a positional), dest, action kind, required, nargs, choices, default, type name, const, metavar,
  mutually exclusive group, help text; plus the subcommand names, their one-line help and
  description. Only `aows_core.cli.build_parser` is used, so this survives any move of the stages;
  which function a subcommand dispatches to (`set_defaults(func=...)`) is deliberately not recorded.
- `help.json`: the rendered `aows --help` and `aows <stage> --help` text at COLUMNS=100, a list of
  lines per command. argparse's layout changes between Python minor versions, so this comparison is
  skipped (not failed) on a Python other than the one that wrote the file; the structured
  `cli.json` is compared everywhere.
- `schemas.json`: every artifact schema, {kind: [[field, str(type), nullable], ...]} in field order.

A difference fails with a unified diff of the stored and the current JSON.

Regenerate, after a deliberate change to the CLI or a schema (review the diff before committing):

    python tests/test_snapshots.py --update
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import os
import pkgutil
import sys
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
HELP_COLUMNS = "100"


def collect_schemas() -> dict:
    """Every artifact schema, {kind: pyarrow.Schema}.

    THE ONLY PLACE TO EDIT WHEN SCHEMAS MOVE. Since the redesign (issue 11) every kind is declared in
    the one static table `aows_core.artifacts.SCHEMAS`; no module adds a kind by being imported.
    `test_schema_helper_sees_every_kind` checks nothing is missed.
    """
    from aows_core.artifacts import SCHEMAS

    return dict(SCHEMAS)


# --------------------------------------------------------------------------------------------
# extraction


def _jsonable(v):
    """JSON-friendly value for defaults / choices / const (argparse.SUPPRESS stays a string)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, type) or callable(v):
        return getattr(v, "__name__", repr(v))
    return repr(v)


def _action_kind(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The `action=` name argparse registers for this action's class (e.g. 'store_true')."""
    for name, cls in parser._registries.get("action", {}).items():
        if name is not None and type(action) is cls:
            return name
    return type(action).__name__


def _describe_parser(parser: argparse.ArgumentParser) -> dict:
    from aows_core import __version__

    groups = parser._mutually_exclusive_groups
    args = []
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            continue  # described as "subcommands"
        mutex = next((i for i, g in enumerate(groups) if a in g._group_actions), None)
        d = {
            "option_strings": list(a.option_strings) if a.option_strings else [a.dest],
            "dest": a.dest,
            "action": _action_kind(parser, a),
            "required": bool(a.required),
            "nargs": _jsonable(a.nargs),
            "choices": _jsonable(list(a.choices)) if a.choices is not None else None,
            "default": _jsonable(a.default),
            "type": getattr(a.type, "__name__", None) if a.type is not None else None,
            "const": _jsonable(a.const),
            "metavar": _jsonable(a.metavar),
            "mutually_exclusive_group": mutex,
            "mutually_exclusive_group_required": bool(groups[mutex].required) if mutex is not None else None,
            "help": a.help,
        }
        if isinstance(a, argparse._VersionAction):
            d["version"] = (a.version or "").replace(__version__, "{__version__}")
        args.append(d)
    return {"prog": parser.prog, "description": parser.description, "epilog": parser.epilog, "arguments": args}


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


def cli_snapshot() -> dict:
    from aows_core.cli import build_parser

    parser = build_parser()
    sub = _subparsers(parser)
    help_of = {c.dest: c.help for c in sub._choices_actions}
    return {
        "parser": _describe_parser(parser),
        "subcommand_dest": sub.dest,
        "subcommand_required": bool(sub.required),
        "subcommand_names": list(sub.choices),
        "subcommands": {
            name: {"help": help_of.get(name), **_describe_parser(p)} for name, p in sub.choices.items()
        },
    }


def help_snapshot() -> dict:
    """`aows --help` and `aows <stage> --help`, rendered at COLUMNS=HELP_COLUMNS (caller sets the env)."""
    from aows_core.cli import build_parser

    parser = build_parser()
    out = {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "columns": int(HELP_COLUMNS),
           "help": {"aows": parser.format_help().splitlines()}}
    for name, p in _subparsers(parser).choices.items():
        out["help"][f"aows {name}"] = p.format_help().splitlines()
    return out


def schema_snapshot() -> dict:
    return {
        kind: [[f.name, str(f.type), bool(f.nullable)] for f in schema]
        for kind, schema in sorted(collect_schemas().items())
    }


# --------------------------------------------------------------------------------------------
# serialisation and comparison


def _scalar(x) -> bool:
    return x is None or isinstance(x, (bool, int, float, str))


def _short_list(x) -> bool:
    return isinstance(x, list) and all(_scalar(y) for y in x) and len(json.dumps(x, ensure_ascii=False)) <= 100


def _dump(obj, indent: int = 0) -> str:
    """JSON with one leaf record per line (a schema field, a CLI argument, a help line): reviewable diffs."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    record = isinstance(obj, dict) and all(_scalar(v) or _short_list(v) for v in obj.values())
    if not obj or _scalar(obj) or _short_list(obj) or record:
        return json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_dump(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    items = [f"{inner}{_dump(v, indent + 1)}" for v in obj]
    return "[\n" + ",\n".join(items) + f"\n{pad}]"


def _current(name: str) -> dict:
    if name == "cli.json":
        return cli_snapshot()
    if name == "help.json":
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = HELP_COLUMNS
        try:
            return help_snapshot()
        finally:
            if old is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = old
    if name == "schemas.json":
        return schema_snapshot()
    raise KeyError(name)


FILES = ("cli.json", "help.json", "schemas.json")


def _compare(name: str, current: dict) -> None:
    path = SNAPSHOTS / name
    if not path.exists():
        pytest.fail(f"{path} is missing; create it with `python tests/test_snapshots.py --update`")
    stored = json.loads(path.read_text(encoding="utf-8"))
    current = json.loads(json.dumps(current))  # tuples → lists, as stored
    if stored == current:
        return
    diff = "".join(
        difflib.unified_diff(
            _dump(stored).splitlines(keepends=True),
            _dump(current).splitlines(keepends=True),
            fromfile=f"tests/snapshots/{name} (stored)",
            tofile=f"{name} (current code)",
        )
    )
    pytest.fail(
        f"{name} differs from the snapshot. If the change is deliberate, run "
        f"`python tests/test_snapshots.py --update` and commit the new file.\n{diff}",
        pytrace=False,
    )


# --------------------------------------------------------------------------------------------
# tests


def test_cli_snapshot():
    _compare("cli.json", _current("cli.json"))


def test_help_text_snapshot():
    path = SNAPSHOTS / "help.json"
    if path.exists():
        recorded = json.loads(path.read_text(encoding="utf-8")).get("python")
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if recorded != here:
            pytest.skip(f"help.json was rendered by Python {recorded}; argparse's layout differs on {here}")
    _compare("help.json", _current("help.json"))


def test_schema_snapshot():
    _compare("schemas.json", _current("schemas.json"))


def test_schema_helper_sees_every_kind():
    """Importing every module of the package adds no artifact kind that collect_schemas() missed."""
    import aows_core

    for m in pkgutil.walk_packages(aows_core.__path__, "aows_core."):
        importlib.import_module(m.name)
    stored = json.loads((SNAPSHOTS / "schemas.json").read_text(encoding="utf-8"))
    assert sorted(collect_schemas()) == sorted(stored), "a module registers a schema that collect_schemas() does not import"


def _update() -> None:
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        text = _dump(json.loads(json.dumps(_current(name)))) + "\n"
        path = SNAPSHOTS / name
        old = path.read_text(encoding="utf-8") if path.exists() else None
        path.write_text(text, encoding="utf-8")
        print(f"{'unchanged' if old == text else 'wrote'} {path}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_snapshots.py --update   (rewrites tests/snapshots/*.json)")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import aows_core

    print(f"aows_core from {Path(aows_core.__file__).parent}")
    _update()
