"""`aows inspect`: an artifact's schema, provenance and first rows; or a config YAML, validated."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

COMMAND = "inspect"
HELP = "print an artifact's schema, provenance and first rows"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("file",)
OUTPUTS: tuple[str, ...] = ()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--rows", type=int, default=5)


def needs_config(args: argparse.Namespace) -> bool:
    """The file to inspect may itself be a config; no other is read."""
    return False


def run(config: Mapping[str, Any] | None, inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        rows: int = 5) -> str:
    """The text to show: a config YAML validated with every default filled in, or an artifact's summary."""
    path = inputs["file"]
    if str(path).endswith((".yaml", ".yml")):  # a config: validate it and show it with every default
        import yaml

        from ..config import load

        cfg = load(path)
        return f"# {path}: a valid aows configuration; with the schema's defaults filled in:\n" + yaml.safe_dump(
            cfg, sort_keys=False)
    from .. import artifacts

    return artifacts.inspect(path, rows=rows)


def report(text: str, args: argparse.Namespace) -> None:
    print(text)
