"""Launching data-parallel training (docs/method.md D30): torchrun on one node, srun + torchrun's c10d
rendezvous on every node of a multi-node SLURM allocation; `--print-launch` is the launch's dry run."""

import json
import os
import socket
import subprocess
import sys

import pytest

from aows_core.config import net_key, space_from_config, validate
from aows_core.stages import launch_command

CFG = {"space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
       "data": {"train_subset": 128, "search_val": 64, "calibration": 64},
       "retrain": {"epochs": 1, "batch_size": 32, "threads": 1, "eval_batch_size": 2000, "processes": 2}}


def test_forwarded_options_keep_lists_and_flags():
    """What a relaunch under torchrun passes on: a list option (aows proxy --decisions a b) as its values, a set
    flag as itself, unset options not at all."""
    import argparse

    from aows_core.stages import forward_options

    args = argparse.Namespace(decisions=["a.parquet", "b.parquet"], quiet=True, seed=None, out="o", verbose=False)
    assert forward_options(args, ("decisions", "quiet", "seed", "out", "verbose")) == [
        "--decisions", "a.parquet", "b.parquet", "--quiet", "--out", "o"]


def test_one_node_is_a_standalone_torchrun():
    cmd = launch_command("retrain", {"a": 1}, ["--quiet"], 4, 2, {})
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    assert cmd[5] == "4" and cmd[-4:] == ["retrain", "--config-json", '{"a": 1}', "--quiet"]
    # one node inside a SLURM job: the same
    assert launch_command("retrain", {}, [], 4, 2, {"SLURM_JOB_ID": "9"}, nodes=1)[3] == "--standalone"


def test_several_nodes_start_one_torchrun_per_node_inside_a_slurm_job():
    env = {"SLURM_JOB_ID": "123", "AOWS_RDZV_HOST": "gpu-a01"}
    cmd = launch_command("train-supernet", {}, ["--method", "ows"], 8, 6, env, nodes=2)
    t = cmd.index(sys.executable)
    assert cmd[:t] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=24", "--kill-on-bad-exit=1"]
    run = cmd[t:]
    for flag, value in (("--nnodes", "2"), ("--nproc-per-node", "4"), ("--rdzv-backend", "c10d"),
                        ("--rdzv-endpoint", "gpu-a01:29500"), ("--rdzv-id", "aows-123")):
        assert run[run.index(flag) + 1] == value, flag
    assert "--standalone" not in run
    assert run[-7:] == ["-m", "aows_core.cli", "train-supernet", "--config-json", "{}", "--method", "ows"]
    default_host = launch_command("retrain", {}, [], 2, 1, {"SLURM_JOB_ID": "5"}, nodes=2)
    assert f"{socket.gethostname()}:29500" in default_host
    with pytest.raises(ValueError, match="do not divide over 3 nodes"):
        launch_command("retrain", {}, [], 8, 1, env, nodes=3)
    with pytest.raises(ValueError, match="inside a SLURM job of 2 nodes"):
        launch_command("retrain", {}, [], 8, 1, {}, nodes=2)
    # the config refuses the same before any job
    with pytest.raises(ValueError, match="retrain.nodes"):
        validate({"retrain": {"processes": 3, "nodes": 2}})


def test_print_launch_is_a_dry_run(tmp_path):
    space = space_from_config(validate(CFG))
    env = {**os.environ, "SLURM_JOB_ID": "77", "AOWS_RDZV_HOST": "head"}
    base = [sys.executable, "-m", "aows_core.cli", "retrain", "--channels", net_key(space.min_config),
            "--out-dir", str(tmp_path / "out"), "--resume-dir", str(tmp_path / "r"), "--print-launch"]
    two_nodes = {**CFG, "retrain": {**CFG["retrain"], "nodes": 2}}
    r = subprocess.run(base + ["--config-json", json.dumps(two_nodes)], env=env, capture_output=True, text=True,
                       check=True)
    assert r.stdout.startswith("srun --nodes=2 ") and "--nproc-per-node 1" in r.stdout and "head:29500" in r.stdout
    assert "--print-launch" not in r.stdout and not (tmp_path / "out/result.parquet").exists()  # printed, not run
    one = {**CFG, "retrain": {**CFG["retrain"], "processes": 1}}
    r = subprocess.run(base + ["--config-json", json.dumps(one)], capture_output=True, text=True, check=True)
    assert "nothing to launch" in r.stdout and not (tmp_path / "out/result.parquet").exists()


@pytest.mark.slow
def test_the_multi_node_launch_trains_with_two_agents_meeting_at_the_rendezvous(tmp_path):
    """The torchrun half of a two-node SLURM launch, run twice on this machine as the two nodes' agents would:
    they meet at the c10d rendezvous, form a world of two, and the retraining finishes and evaluates."""
    space = space_from_config(validate(CFG))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {"SLURM_JOB_ID": "4242", "AOWS_RDZV_HOST": "127.0.0.1", "AOWS_RDZV_PORT": port}
    argv = ["--channels", net_key(space.min_config), "--out-dir", str(tmp_path / "out"), "--resume-dir",
            str(tmp_path / "r"), "--quiet"]
    cfg = validate({**CFG, "retrain": {**CFG["retrain"], "nodes": 2}})
    cmd = launch_command("retrain", cfg, argv, 2, 1, env, nodes=2)
    agent = cmd[cmd.index(sys.executable):]  # what srun runs on each node
    run_env = {**os.environ, "OMP_NUM_THREADS": "1"}
    agents = [subprocess.Popen(agent, env=run_env) for _ in range(2)]
    assert [a.wait(timeout=300) for a in agents] == [0, 0]
    from aows_core import artifacts as io

    rows, meta = io.read_table(tmp_path / "out/result.parquet", "retrain")
    assert meta["processes"] == 2 and rows.column("test_n").to_pylist()[0] == 10000
