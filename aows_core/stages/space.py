"""`aows space`: print a search space (a preset's, or the configured one)."""

from __future__ import annotations

import argparse
import json as _json
from typing import Any, Mapping

from . import add_config

COMMAND = "space"
HELP = "print a search space"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--preset", help="preset name (default: the config's space)")
    g.add_argument("--model", help="a network to trace: torchvision:<name>, timm:<name> or <module or file.py>:<function>")
    p.add_argument("--input", default="3,224,224", help="C,H,W of the input --model is traced on (default 3,224,224)")
    p.add_argument("--model-kwargs", default="{}", help="JSON keyword arguments of --model's function")
    p.add_argument("--fixed", nargs="*", default=[], help="modules of --model whose output keeps its width")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_config(p)


def needs_config(args: argparse.Namespace) -> bool:
    """The configuration is read only when no preset or model is named."""
    return not (args.preset or args.model)


def run(config: Mapping[str, Any] | None, inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        preset: str | None = None, model: str | None = None, json: bool = False, **trace: Any) -> dict[str, Any]:
    """The space's description (`SearchSpace.describe`) with its multiplier-1.0 network's MACs and parameters; a
    traced `model`'s (on `trace`'s input, model_kwargs and fixed) records each layer's modules."""
    from ..config import resolve
    from ..devices.flops import network_macs, network_params
    from ..space import get_space

    if model:
        traced = _traced(model, trace.get("input", "3,224,224"), trace.get("model_kwargs", "{}"),
                         trace.get("fixed") or [])
        space, modules = traced.space, traced.modules
    else:
        space, modules = (get_space(preset) if preset else resolve(config).space), None
    base = space.base_config
    d = {**space.describe(), "base_config": base, "base_macs": network_macs(space, base),
         "base_params": network_params(space, base)}
    if modules is not None:
        for e, mods in zip(d["edges"], modules):
            e["modules"] = dict(mods)
    return d


def _traced(model: str, shape: str, model_kwargs: str, fixed: list[str]) -> Any:
    """`--model` traced on the `--input` shape."""
    from ..tracing import TraceError, load_model, trace_space

    try:
        dims = tuple(int(v) for v in shape.split(","))
        kwargs = _json.loads(model_kwargs)
    except ValueError:
        dims, kwargs = (), None
    if len(dims) != 3 or not isinstance(kwargs, dict):
        raise TraceError(f"--input {shape!r} must be C,H,W and --model-kwargs {model_kwargs!r} a JSON object")
    return trace_space(load_model(model, kwargs), dims, model.rpartition(":")[2], fixed=fixed, model_name=model)


def report(d: dict[str, Any], args: argparse.Namespace) -> None:
    if args.json:
        print(_json.dumps(d, indent=2))
    else:
        kept = sum(len(n["choices"]) == 1 for n in d["nodes"][1:-1])
        widths = f"{d['n_layers']} searchable widths" + (f" ({kept} of one width)" if kept else "")
        print(f"{d['name']} (hash {d['hash']}): {widths}, {d['resolution']} input, "
              f"{d['n_variables']} latency variables for {d['n_slots']} slots, {d['size']:.3e} configurations")
        print(f"  multiplier 1.0: {d['base_macs'] / 1e6:.1f} MMAC, {d['base_params'] / 1e6:.3f} M parameters")
        for n in d["nodes"][1:-1]:
            tied = f", tied across blocks {n['written_by_blocks']}" if n["tied"] else ""
            print(f"  layer {n['node'] - 1:2d} ({n['role']}{tied}): {n['choices']}")
        if d["edges"] and "modules" in d["edges"][0]:
            print("  traced layers (edge, kind, node → node, module):")
            w = max(len(e["kind"]) for e in d["edges"])
            for e in d["edges"]:
                m = e["modules"]
                where = m.get("conv") or m.get("linear") or next(iter(m.values()), "").rpartition(".")[0] \
                    if m else f"({e['kind'].split(':')[0]})"
                print(f"  {e['edge']:4d} {e['kind']:{w}s} {e['src']:3d} → {e['dst']:<3d} {where}")
