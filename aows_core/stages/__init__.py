"""Stages: one module per `aows <stage>` command and Snakemake rule.

Each stage module declares COMMAND, HELP, PARSER_KWARGS, INPUTS, OUTPUTS, `add_arguments(p)`,
`run(config, inputs, outputs, **options)` and `report(result, args)`; optional hooks are
`needs_config(args)`, `from_args(args)` and `launch(config, args)` (the training stages relaunch themselves
as data-parallel processes through `torchrun`). Stages are the only layer that wires artifacts (I/O) to the
algorithms, and the only one that reads the config dict: `run` resolves it once (`config.resolve`: one frozen
object per section, the space built once) and passes the Settings, or the sections it needs, down. This package
imports no stage module until `modules()`.
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType
from typing import Any, Mapping, Sequence

COMMANDS = ("space", "sample", "profile", "fit_lut", "validate_lut", "decode", "check_target", "train_supernet",
            "greedy", "decide_baseline", "retrain", "relabel", "export", "measure", "proxy", "pareto", "inspect", "plan")
"""The stage modules, in the order of `aows --help`."""


def modules() -> list[ModuleType]:
    """Every stage module, imported now (building the parser needs them)."""
    return [importlib.import_module(f"{__name__}.{name}") for name in COMMANDS]


def add_config(p: argparse.ArgumentParser, timing: bool = False) -> None:
    """`--config` / `--config-json`, shared by every stage that reads the configuration; a stage `timing` on its
    device also takes `--device-reach`."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--config", help="config YAML (validated by the schema; defaults fill the rest)")
    g.add_argument("--config-json", help="config as inline JSON (what the Snakemake rules pass)")
    if timing:
        p.add_argument("--device-reach", help="JSON of devices' timeout_s and worker by device name, set on the "
                                              "config's devices (the Snakemake rules pass them apart, so changing "
                                              "them reruns nothing: docs/method.md D53)")


_NOT_OPTIONS = {"config", "config_json", "device_reach", "command", "stage", "quiet", "print_launch"}


def from_args(stage: ModuleType, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Parsed arguments → (inputs, outputs, options) of `stage.run`: keys are the argparse dests."""
    inputs = {k: getattr(args, k) for k in stage.INPUTS}
    outputs = {k: getattr(args, k) for k in stage.OUTPUTS}
    skip = {*stage.INPUTS, *stage.OUTPUTS, *_NOT_OPTIONS}
    options = {k: v for k, v in vars(args).items() if k not in skip}
    if hasattr(args, "quiet"):
        options["progress"] = not args.quiet
    return inputs, outputs, options


def forward_options(args: argparse.Namespace, dests: Sequence[str]) -> list[str]:
    """The command-line options that give `dests` their parsed values (None and False left out)."""
    out: list[str] = []
    for dest in dests:
        value = getattr(args, dest)
        if value is None or value is False:
            continue
        values = [] if value is True else [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        out += [f"--{dest.replace('_', '-')}", *values]
    return out


def launch_command(command: str, config: Mapping[str, Any], argv: Sequence[str], processes: int, threads: int,
                   env: Mapping[str, str], nodes: int = 1) -> list[str]:
    """The command that runs `aows <command> --config-json CONFIG ARGV` as `processes` data-parallel processes.

    One node: `torch.distributed.run --standalone`. `nodes` = K > 1 (`supernet.nodes`, `retrain.nodes`): inside a
    SLURM job of K nodes, `srun` starts one torchrun per node with processes/K processes and processes/K ×
    `threads` CPUs each; they meet through torchrun's c10d rendezvous at this host (the batch script's node,
    the allocation's first; AOWS_RDZV_HOST / AOWS_RDZV_PORT override) under the SLURM job's id, so a retry of
    the job meets afresh (docs/method.md D30)."""
    import json
    import socket
    import sys

    run = [sys.executable, "-m", "torch.distributed.run"]
    tail = ["-m", "aows_core.cli", command, "--config-json", json.dumps(config), *argv]
    if nodes <= 1:
        return [*run, "--standalone", "--nproc-per-node", str(processes), *tail]
    if processes % nodes:
        raise ValueError(f"{processes} processes do not divide over {nodes} nodes")
    if not env.get("SLURM_JOB_ID"):
        raise ValueError(f"{nodes} nodes are launched with srun inside a SLURM job of {nodes} nodes: run the rule "
                         "through workflow/profiles/slurm with nodes, tasks and mpi set for it (docs/training.md, "
                         "'Several processes and GPUs'), or set the nodes to 1")
    per_node = processes // nodes
    host = env.get("AOWS_RDZV_HOST") or socket.gethostname()
    srun = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", f"--cpus-per-task={per_node * int(threads)}",
            "--kill-on-bad-exit=1"]
    return [*srun, *run, "--nnodes", str(nodes), "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{host}:{env.get('AOWS_RDZV_PORT', '29500')}", "--rdzv-id",
            f"aows-{env['SLURM_JOB_ID']}", *tail]


def torchrun(command: str, config: Mapping[str, Any], argv: Sequence[str], processes: int, threads: int,
             nodes: int = 1, print_only: bool = False) -> None:
    """Run `aows <command> --config-json CONFIG ARGV` as `processes` data-parallel processes over `nodes` nodes
    (`launch_command`: this node, or every node of a SLURM job), OMP_NUM_THREADS = `threads` unless set; an error if any
    fails. `print_only`: print the command instead (the launch's dry run)."""
    import os
    import shlex
    import subprocess

    cmd = launch_command(command, config, argv, processes, threads, os.environ, nodes)
    if print_only:
        print(shlex.join(cmd))
        return
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
    rc = subprocess.run(cmd, env=env).returncode
    if rc:
        raise RuntimeError(f"torchrun with {processes} processes exited with status {rc} (see the ranks' errors above)")
