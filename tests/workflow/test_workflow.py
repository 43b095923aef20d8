"""The Snakemake workflow: lint, formatting, dry-runs, and a tiny end-to-end run on the synthetic device."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import torch

from aows_core import artifacts as io

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop

ROOT = Path(__file__).resolve().parents[2]
SNAKEFILE = ROOT / "workflow" / "Snakefile"

TINY = {
    "seed": 0,
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "devices": {
        "synth": {"backend": "synthetic", "noise": 0.01, "drift": 0.1},
        "flops": {"backend": "flops"},
    },
    "sampling": {"coverage": 2, "lambda_val": 20, "test": 40},
    "profiling": {"repeats": 5, "retest": 10},
    "lut": {"lambdas": [0.0, 1e-3, 1e-1]},
    "decode": {"targets": ["range:0.3", "range:0.8"]},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 2, "batch_size": 64},
    "aows": {"warmup_epochs": 1, "targets": ["range:0.5"]},
    "greedy": {"n_eval": 64, "n_cal": 64, "batch_size": 64},
    "retrain": {"epochs": 1, "batch_size": 64, "eval_batch_size": 2000},
}
RETRAINED = ["results/retrain/synth/aows/range:0.5/seed0/result.parquet",
             "results/retrain/flops/greedy/range:0.3/seed0/result.parquet",
             "results/export/synth/aows/range:0.5/seed0/model.onnx"]


def smk(workdir, *args, check=True):
    cmd = ["snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    wd = tmp_path_factory.mktemp("wf")
    (wd / "config.yaml").write_text(yaml.safe_dump(TINY))
    r = smk(wd, "all", "latency_models", "decisions", *RETRAINED)
    assert r.returncode == 0, r.stderr[-3000:]
    (wd / "tiny_run.log").write_text(r.stdout + r.stderr)  # the jobs it ran
    return wd


def planned(stdout):
    """{rule: number of jobs} of a dry run's job table."""
    counts, table = {}, False
    for line in stdout.splitlines():
        if line.startswith("job ") and "count" in line:
            table = True
        elif table and line.strip() and not line.startswith("---"):
            name, *rest = line.split()
            if name == "total":
                break
            counts[name] = int(rest[0])
    return counts


def copy_run(src, dst):
    """A finished run elsewhere (results, Snakemake's records, config), modification times kept."""
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_lint_and_format_are_clean():
    lint = subprocess.run(["snakemake", "-s", str(SNAKEFILE), "--lint"], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = subprocess.run(["snakefmt", "--check", str(ROOT / "workflow")], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


@pytest.mark.parametrize("profile", ["default", "slurm", "cluster-generic"])
def test_dry_run_default_config_and_profiles(profile, tmp_path):
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    r = smk(tmp_path, "-n", "--profile", str(ROOT / "workflow" / "profiles" / profile))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "validate_lut" in r.stdout


def test_dry_run_imagenet_preset(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"space": {"preset": "mobilenet_v1_imagenet"}}))
    r = smk(tmp_path, "-n")
    assert r.returncode == 0, r.stderr[-2000:]


def test_bad_config_key_fails_at_parse_time(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"profiling": {"repetitions": 3}}))
    r = smk(tmp_path, "-n", check=False)
    assert r.returncode != 0 and "unknown key(s) ['repetitions']" in r.stdout + r.stderr


def test_tiny_end_to_end_run_writes_every_artifact(tiny_run):
    wd = tiny_run
    kinds = {
        "results/latency/configs.parquet": "configs",
        "results/latency/synth.parquet": "latency",
        "results/latency/flops.parquet": "latency",
        "results/lut/synth/lut.parquet": "lut",
        "results/lut/synth/fit.parquet": "lut_fit",
        "results/lut/synth/validation.parquet": "lut_validation",
        "results/lut/synth/predictions.parquet": "lut_predictions",
        "results/lut/flops/lut.parquet": "lut",
        "results/supernet/ows/unaries.parquet": "unaries",
        "results/supernet/ows/metrics.parquet": "train_metrics",
        "results/supernet/aows/synth/range:0.5/unaries.parquet": "unaries",
        "results/decisions/synth/ows/range:0.3.parquet": "decisions",
        "results/decisions/flops/aows/range:0.5.parquet": "decisions",
        "results/supernet/ows/greedy_trajectory.parquet": "greedy_trajectory",
        "results/decisions/synth/greedy/range:0.5.parquet": "decisions",
        "results/decisions/flops/uniform/range:0.3.parquet": "decisions",
        RETRAINED[0]: "retrain",
        RETRAINED[1]: "retrain",
        "results/measure/synth.parquet": "measure",
        "results/measure/flops.parquet": "measure",
        "results/proxy/synth.parquet": "proxy",
        "results/pareto_synth.parquet": "pareto",
        "results/pareto_flops.parquet": "pareto",
        "results/plots/synth/latency.parquet": "pareto",
        "results/plots/synth/configurations.parquet": "configurations",
        "results/plots/synth/training.parquet": "training_curves",
        "results/plots/flops/proxy.parquet": "proxy_check",
    }
    for rel, kind in kinds.items():
        table, meta = io.read_table(wd / rel, kind)
        assert table.schema.remove_metadata().equals(io.SCHEMAS[kind]), rel
        assert meta["aows_version"] and table.num_rows > 0
    assert (wd / "results/lut/synth/validation.pdf").stat().st_size > 1000
    for dev in ("synth", "flops"):
        assert (wd / f"results/pareto_{dev}.pdf").stat().st_size > 1000 and (wd / f"results/pareto_{dev}.png").exists()
        for plot in ("latency", "configurations", "training", "proxy"):
            assert (wd / f"results/plots/{dev}/{plot}.pdf").stat().st_size > 1000
    # every finalist of a device is in its table: 4 methods × 2 decode targets + aows at its 1 target ... deduplicated
    rows = io.read_table(wd / "results/pareto_flops.parquet", "pareto")[0].to_pylist()
    assert {(r["method"], r["target"]) for r in rows} == {
        *((m, t) for m in ("ows", "greedy", "uniform") for t in ("range:0.3", "range:0.8", "range:0.5")), ("aows", "range:0.5")}
    assert all(r["meets_target_predicted"] for r in rows)
    assert all(r["measured_ms"] == pytest.approx(r["predicted_ms"], rel=1e-9) for r in rows)  # flops: exact
    assert (wd / "results/lut/synth/validation.png").exists()
    v = io.read_table(wd / "results/lut/flops/validation.parquet", "lut_validation")[0].to_pylist()
    assert v[0]["model"] == "lut" and v[0]["rmse_ms"] < 1e-3 * v[0]["n"]  # flops are exactly additive
    vmeta = io.read_table(wd / "results/lut/flops/validation.parquet", "lut_validation")[1]
    assert vmeta["adequacy"]["verdict"] == "at_noise"  # D34: exact, not model-limited
    assert "verdict" in io.read_table(wd / "results/pareto_synth.parquet", "pareto")[1]["lut_adequacy"]
    out = subprocess.run(["aows", "inspect", str(wd / "results/lut/synth/lut.parquet")], capture_output=True, text=True)
    assert "c_in: int32" in out.stdout and '"space_hash"' in out.stdout


def _finalist_results(wd):
    """{results/retrain/{device}/{method}/{target}/seed{s}/result.parquet: (row, metadata)} of a run."""
    return {str(p.relative_to(wd)): (io.read_table(p, "retrain")[0].to_pylist()[0], io.read_table(p, "retrain")[1])
            for p in sorted((wd / "results/retrain").glob("*/*/*/seed*/result.parquet"))}


def test_finalists_that_decided_one_network_share_one_training_per_seed(tiny_run, tmp_path):
    """Issue 12, defect 4: identical (channels, seed) finalists were each retrained. Every finalist's result is its
    network's (results/retrain/nets/{widths}/seed{s}/), trained once per seed whichever methods, targets and devices
    decided it."""
    from aows_core.config import net_key, retrain_seeds, space_from_config, validate

    finalists = _finalist_results(tiny_run)
    assert len(finalists) == 2 * 10 * len(retrain_seeds(validate(TINY)))  # (3 methods × 3 targets + aows) × 2 devices
    nets = {}
    for rel, (row, meta) in finalists.items():
        device, method, target, seed = rel.split("/")[2:6]
        assert (row["device"], row["method"], row["target"], f"seed{row['seed']}") == (device, method, target, seed)
        net = f"results/retrain/nets/{net_key(row['channels'])}/{seed}"
        assert meta["trained"] == f"{net}/result.parquet" and meta["decision"].endswith(f"{method}/{target}.parquet")
        trained = io.read_table(tiny_run / meta["trained"], "retrain")[0].to_pylist()[0]
        assert {**trained, "method": method, "device": device, "target": target} == row
        assert (tiny_run / rel).with_name("model.pt").read_bytes() == (tiny_run / net / "model.pt").read_bytes()
        nets.setdefault(net, []).append(rel)
    trained = {str(p.parent.relative_to(tiny_run)) for p in (tiny_run / "results/retrain/nets").glob("*/*/result.parquet")}
    assert trained == set(nets)  # no network trained that no finalist decided
    assert max(map(len, nets.values())) >= 2  # twins (uniform at range:0.5 and range:0.8, at least) …
    log = (tiny_run / "tiny_run.log").read_text()
    assert log.count("rule retrain_net:") == len(nets) < len(finalists)  # … trained once

    # Greedy and uniform both decide the largest network at a target above it: with two retraining seeds, that
    # network trains once per seed for the four (method, seed) results.
    wd = copy_run(tiny_run, tmp_path / "seeds")
    cfg = json.loads(json.dumps(TINY))
    cfg["decode"]["device_targets"] = {"flops": [*TINY["decode"]["targets"], "100000mflops"]}
    cfg["retrain"]["seeds"] = [0, 1]
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    space = space_from_config(validate(cfg))
    assert not (wd / f"results/retrain/nets/{net_key(space.max_config)}").exists()
    wanted = [f"results/retrain/flops/{m}/100000mflops/seed{s}/result.parquet"
              for m in ("greedy", "uniform") for s in (0, 1)]
    r = smk(wd, *wanted, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert out.count("rule retrain_net:") == 2 and out.count("localrule retrain:") == 4, out[-3000:]
    rows = [_finalist_results(wd)[w][0] for w in wanted]
    assert all(r["channels"] == space.max_config for r in rows)
    for seed in (0, 1):
        a, b = (r for r in rows if r["seed"] == seed)
        assert {**a, "method": "uniform"} == b  # one training, two finalists
    assert rows[0]["test_correct"] != rows[1]["test_correct"] or rows[0]["final_train_loss"] != rows[1]["final_train_loss"]


def test_decisions_meet_their_targets(tiny_run):
    for path in (tiny_run / "results/decisions").glob("*/*/*.parquet"):
        (row,) = io.read_table(path, "decisions")[0].to_pylist()
        assert row["predicted_latency_ms"] <= row["target_ms"] * (1 + 1e-9)
        assert row["exact"] == (row["method"] in ("ows", "aows"))


def test_infeasible_target_fails_before_any_training(tiny_run, tmp_path):
    cfg = json.loads(json.dumps(TINY))
    cfg["aows"]["targets"] = ["0.00001ms"]
    cfg["devices"] = {"synth": TINY["devices"]["synth"]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    import shutil

    shutil.copytree(tiny_run / "results/lut", tmp_path / "results/lut")
    shutil.copytree(tiny_run / "results/latency", tmp_path / "results/latency")
    r = smk(tmp_path, "decisions", check=False)
    assert r.returncode != 0
    assert "below the smallest latency" in (tmp_path / "results/logs/check_target_synth_0.00001ms.log").read_text()
    assert not (tmp_path / "results/supernet").exists()


def test_second_run_does_nothing_and_a_setting_reruns_only_its_stages(tiny_run):
    wd = tiny_run
    r = smk(wd, "-n", "all", "latency_models", "decisions", *RETRAINED)
    assert "Nothing to be done" in r.stdout + r.stderr
    cfg = json.loads(json.dumps(TINY))
    cfg["lut"]["ridge"] = 1e-5
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    r = smk(wd, "-n", "all", "decisions")
    out = r.stdout
    assert "fit_lut" in out and "validate_lut" in out
    assert "rule profile:" not in out and "rule sample_configs:" not in out and "rule train_ows:" not in out
    # changing only the OWS targets reruns only decode, retrain, measure and the results
    cfg = json.loads(json.dumps(TINY))
    cfg["decode"]["targets"] = ["range:0.3", "range:0.6"]
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    plan = planned(smk(wd, "-n", "all").stdout)
    for rule in ("decode", "decide_baseline", "retrain", "measure", "pareto"):
        assert rule in plan, rule
    for rule in ("sample_configs", "profile", "fit_lut", "train_ows", "train_aows", "greedy_trajectory"):
        assert rule not in plan, rule
    (wd / "config.yaml").write_text(yaml.safe_dump(TINY))


def test_a_killed_run_completes_with_rerun_incomplete_without_redoing_finished_stages(tiny_run, tmp_path):
    import os
    import signal
    import shutil
    import time

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    for d in ("latency", "lut"):
        shutil.copytree(tiny_run / "results" / d, tmp_path / "results" / d)
    lut = tmp_path / "results/lut/synth/lut.parquet"
    before = lut.stat().st_mtime_ns
    cmd = ["snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp_path), "--cores", "1", "results/pareto_synth.pdf"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = tmp_path / "results/logs/train_ows.log"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and "supernet ows" in log.read_text()):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole job tree, mid-training: no clean-up runs
    proc.wait()
    assert not (tmp_path / "results/supernet/ows/model.pt").exists()
    smk(tmp_path, "--unlock")  # a SIGKILLed Snakemake leaves its lock (a Ctrl-C would release it)
    r = smk(tmp_path, "--rerun-incomplete", "results/pareto_synth.pdf", check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lut.stat().st_mtime_ns == before  # profiling and the LUT were not redone
    assert "rule profile:" not in r.stdout and "rule fit_lut:" not in r.stdout
    assert (tmp_path / "results/pareto_synth.pdf").exists()


def test_report_holds_every_plot_with_its_caption(tiny_run):
    r = smk(tiny_run, "--report", "results/report.html", "all")
    assert r.returncode == 0, r.stderr[-2000:]
    html = (tiny_run / "results/report.html").read_text()
    for name in ("pareto_synth.pdf", "pareto_flops.pdf", "configurations.pdf", "proxy.pdf", "training.pdf", "latency.pdf"):
        assert name in html, name
    assert "Kendall" in html and "Wilson" in html  # captions


def test_a_finished_job_leaves_no_resume_state(tiny_run):
    left = [p for p in (tiny_run / "results/.resume").rglob("*") if p.is_file()]
    assert left == []


# Columns that hold wall-clock time (or a rate over it): the only ones two identical runs may differ in.
WALL_CLOCK = {"seconds", "images_per_s", "train_seconds", "t_start_s", "timed_s", "overhead_s", "solve_s"}
CHANGED = {**TINY, "supernet": {**TINY["supernet"], "epochs": 3}, "retrain": {**TINY["retrain"], "epochs": 2}}


def _tables(wd):
    import pyarrow.parquet as pq

    out = {}
    for path in sorted((wd / "results").rglob("*.parquet")):
        t = pq.read_table(path).replace_schema_metadata(None)
        out[str(path.relative_to(wd))] = t.drop_columns([c for c in t.column_names if c in WALL_CLOCK])
    return out


def test_a_changed_setting_reruns_exactly_its_jobs_and_equals_a_fresh_run(tiny_run, tmp_path):
    """Regression: raising supernet.epochs (and a retraining setting) on a finished run failed on the old resume
    state after Snakemake had deleted the old outputs."""
    wd = copy_run(tiny_run, tmp_path / "changed")
    (wd / "config.yaml").write_text(yaml.safe_dump(CHANGED))
    target = "results/pareto_synth.pdf"
    plan = planned(smk(wd, "-n", target).stdout)
    # retrain_net: the networks of the unchanged uniform decisions (the others are known once decided)
    assert set(plan) == {"train_ows", "train_aows", "greedy_trajectory", "decode", "decide_baseline", "retrain_net",
                         "retrain", "measure", "proxy", "pareto"}, plan
    assert plan["decide_baseline"] == 3  # greedy reads the new trajectory; uniform reads only the LUT
    uniform = wd / "results/decisions/synth/uniform/range:0.3.parquet"
    lut, before = wd / "results/lut/synth/lut.parquet", {}
    before = {p: p.stat().st_mtime_ns for p in (uniform, lut)}
    r = smk(wd, target, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert [p for p in (wd / "results/.resume").rglob("*") if p.is_file()] == []
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text(yaml.safe_dump(CHANGED))
    r = smk(fresh, target, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = _tables(wd), _tables(fresh)
    assert set(b) <= set(a)
    same = lambda x, y: x == y or (x != x and y != y)  # NaN (a one-seed spread, a constant proxy) equals NaN
    differ = {name: [c for c in table.column_names
                     if not all(map(same, a[name].column(c).to_pylist(), table.column(c).to_pylist()))]
              for name, table in b.items()}
    assert {k: v for k, v in differ.items() if v} == {}
    weights = lambda p: torch.load(p, weights_only=False)["model"]
    for rel in ("results/supernet/ows/model.pt", "results/supernet/aows/synth/range:0.5/model.pt",
                "results/retrain/synth/aows/range:0.5/seed0/model.pt"):
        wa, wb = weights(wd / rel), weights(fresh / rel)
        assert all(torch.equal(wa[k], wb[k]) for k in wb), rel


def test_a_forced_rerun_of_profile_times_every_network_again(tiny_run, tmp_path):
    """Regression: `--forcerun profile` replayed the finished session's journal and timed nothing."""
    wd = copy_run(tiny_run, tmp_path / "forced")
    old, _ = io.read_table(wd / "results/latency/synth.parquet", "latency")
    r = smk(wd, "--forcerun", "profile", "results/latency/synth.parquet", check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    new, _ = io.read_table(wd / "results/latency/synth.parquet", "latency")
    assert new.num_rows == old.num_rows
    assert new.column("t_start_s").to_pylist() != old.column("t_start_s").to_pylist()  # timed anew
    assert not (wd / "results/.resume/profile_synth.jsonl").exists()


def test_an_infeasible_target_stops_a_fresh_run_before_any_training(tmp_path):
    """Regression: on a fresh run, the OWS supernet and the greedy trajectory trained before check_target failed."""
    cfg = {**TINY, "devices": {"synth": TINY["devices"]["synth"]}, "aows": {**TINY["aows"], "targets": ["0.001ms"]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    r = smk(tmp_path, "decisions", check=False)
    assert r.returncode != 0
    assert "below the smallest latency" in (tmp_path / "results/logs/check_target_synth_0.001ms.log").read_text()
    assert not (tmp_path / "results/supernet").exists()
    assert not list((tmp_path / "results/logs").glob("train_*")) and not list((tmp_path / "results/logs").glob("greedy*"))


def test_an_added_target_reruns_neither_the_ows_supernet_nor_the_greedy_trajectory(tiny_run):
    cfg = json.loads(json.dumps(TINY))
    cfg["decode"]["device_targets"] = {"synth": ["range:0.3", "range:0.8", "1000ms"]}  # an absolute one: checked
    (tiny_run / "config.yaml").write_text(yaml.safe_dump(cfg))
    try:
        plan = planned(smk(tiny_run, "-n", "all").stdout)
    finally:
        (tiny_run / "config.yaml").write_text(yaml.safe_dump(TINY))
    assert plan["check_target"] == 1 and plan["targets_feasible"] == 1 and plan["decode"] == 1
    for rule in ("train_ows", "greedy_trajectory", "train_aows", "profile", "fit_lut"):
        assert rule not in plan, rule


def test_config_overlays_on_the_command_line_and_an_empty_aows_list(tmp_path):
    """`--config 'section={key: value}'` overlays keys (numbers read as numbers); `aows.targets: []` = no AOWS."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    r = smk(tmp_path, "-n", "all", "--config", "aows={targets: []}", "supernet={epochs: 3}")
    assert r.returncode == 0, r.stderr[-2000:]
    plan = planned(r.stdout)
    assert "train_aows" not in plan and plan["train_ows"] == 1 and plan["proxy"] == 2
    from aows_core.config import retrain_seeds, validate

    # ows, greedy, uniform at the two decode targets, on both devices, for every retraining seed
    assert plan["retrain"] == 2 * 3 * 2 * len(retrain_seeds(validate(TINY)))


# ---------------------------------------------------------------------------- the README's commands
README = (ROOT / "README.md").read_text()


def readme_commands():
    """Every shell command the README shows (indented blocks and inline code), in order."""
    found = re.findall(r"^    ((?:snakemake|aows|python3?|bash) .*)$", README, re.M)
    found += re.findall(r"`((?:snakemake|aows|python3?|bash) [^`]*)`", README)
    return list(dict.fromkeys(c.strip() for c in found))


def _workdir(tmp_path, config=None):
    """A folder laid out like the repository for commands run verbatim: workflow/, configs/, config.yaml."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in ("workflow", "configs", "envs", "bench"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "config.yaml").write_text(config or (ROOT / "config.yaml").read_text())
    return tmp_path


def test_readme_commands_run_verbatim_or_dry_run(tiny_run, tmp_path):
    """Fast commands run verbatim; the long ones (the default run, the ImageNet preset, the cluster profiles)
    dry-run; `aows` stage templates name real subcommands. The setup script is CI's own first step and the test
    command is this suite."""
    import shlex

    default = _workdir(tmp_path / "default")
    finished = tiny_run
    for name in ("workflow", "bench"):
        if not (finished / name).exists():
            (finished / name).symlink_to(ROOT / name)
    ran = []
    for cmd in readme_commands():
        for part in (p.strip() for p in cmd.split("&&")):
            if part == "bash scripts/setup.sh" or part.startswith("python3 -m pytest"):
                continue
            argv = shlex.split(part)
            if argv[0] == "aows":
                if argv[1] == "<stage>":
                    continue
                if argv[1] == "space":  # verbatim, for every preset NAME
                    for name in ("mobilenet_v1_fmnist", "mobilenet_v1_imagenet"):
                        r = subprocess.run([a.replace("NAME", name) for a in argv], capture_output=True, text=True)
                        assert r.returncode == 0 and json.loads(r.stdout)["name"], (part, r.stderr)
                # the stages table's templates (`aows profile --device D`): the subcommand exists
                r = subprocess.run(["aows", argv[1], "--help"], capture_output=True, text=True)
            elif argv[0].startswith("python"):  # bench/stage_times.py over a finished run's benchmarks
                r = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=finished)
            elif "--report" in argv:  # fast: verbatim, on a finished run
                r = subprocess.run(argv, capture_output=True, text=True, cwd=finished)
            elif "--rulegraph" in argv:  # fast: verbatim, on the default config (plans, runs nothing)
                r = subprocess.run(argv, capture_output=True, text=True, cwd=default)
            else:  # a run of minutes to days: planned, not run
                argv = ["2" if a == "N" else a for a in argv]
                r = subprocess.run([*argv, "-n"], capture_output=True, text=True, cwd=default)
            assert r.returncode == 0, (part, r.stdout[-1500:], r.stderr[-1500:])
            ran.append(part)
    assert any("--report" in p for p in ran) and any("imagenet_paper" in p for p in ran)
    assert any("profiles/slurm" in p for p in ran) and "snakemake --cores 2 results/pareto_cpu.pdf" in ran
    assert (finished / "results/report.html").exists()


def test_readme_python_examples_run(tiny_run):
    """The README's pandas examples, on the tiny run (its devices are `synth` and `flops`, not `cpu`)."""
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for code in blocks:
        code = code.replace("cpu", "synth")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tiny_run)
        assert r.returncode == 0, (code, r.stderr[-1500:])
