"""`aows <stage>`: the command line, a dispatcher over the stage registry (`aows_core.stages`)."""

from __future__ import annotations

import argparse
import sys
from functools import partial

from . import __version__, stages


def _load_config(args: argparse.Namespace) -> dict:
    from .config import load

    return load(args.config, args.config_json, getattr(args, "device_reach", None))


def build_parser() -> argparse.ArgumentParser:
    """`aows` with one subcommand per stage module, in `stages.COMMANDS` order."""
    ap = argparse.ArgumentParser(prog="aows", description="Hardware-aware network width search (AOWS).")
    ap.add_argument("--version", action="version", version=f"aows {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for stage in stages.modules():
        p = sub.add_parser(stage.COMMAND, help=stage.HELP, **stage.PARSER_KWARGS)
        stage.add_arguments(p)
        p.set_defaults(stage=stage)
    return ap


# Arguments naming what a stage writes: checked writable before any work starts.
OUTPUT_FILES = ("out", "report", "predictions", "plot")
OUTPUT_FOLDERS = ("out_dir", "resume_dir", "plots_dir")


def main(argv: list[str] | None = None) -> int:
    """Parse, check the outputs are writable, load the config, run the stage, print its report; 2 on errors."""
    args = build_parser().parse_args(argv)
    stage = args.stage
    try:
        from .artifacts import check_writable

        check_writable([getattr(args, a) for a in OUTPUT_FILES if getattr(args, a, None)],
                       [getattr(args, a) for a in OUTPUT_FOLDERS if getattr(args, a, None)])
        config = _load_config(args) if getattr(stage, "needs_config", lambda a: True)(args) else None
        if getattr(stage, "KEEPS_FREED_MEMORY", False):
            from .memory import keep_freed_memory

            keep_freed_memory()
        if getattr(stage, "launch", None) and stage.launch(config, args):
            return 0
        inputs, outputs, options = getattr(stage, "from_args", partial(stages.from_args, stage))(args)
        stage.report(stage.run(config, inputs, outputs, **options), args)
    except (ValueError, RuntimeError, OSError) as e:  # OSError: missing files, permissions, a full disk
        print(f"aows {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
