"""The Snakemake workflow: lint, formatting, dry-runs, and a tiny end-to-end run on the synthetic device."""

import json
import re
import shutil
import subprocess

import pytest
import torch
import yaml
from tiny_workflow import (
    RETRAINED,
    ROOT,
    SNAKEFILE,
    TINY,
    copy_run,
    planned,
    smk,
)

from aows_core import artifacts as io

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop

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


@pytest.mark.parametrize("preset", ["mobilenet_v1_imagenet", "mobilenet_v2_imagenet", "resnet18_imagenet",
                                    "resnet50_imagenet"])
def test_dry_run_imagenet_preset(preset, tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"space": {"preset": preset}}))
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
        "results/decisions/synth/aows/range:0.5.parquet": "decisions",
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
    # every finalist of a device is in its table: ows, greedy and uniform at every target of the device (its decode
    # targets and its AOWS targets), AOWS at its own; flops has one decode target of its own and no AOWS target
    rows = io.read_table(wd / "results/pareto_synth.parquet", "pareto")[0].to_pylist()
    assert {(r["method"], r["target"]) for r in rows} == {
        *((m, t) for m in ("ows", "greedy", "uniform") for t in ("range:0.3", "range:0.8", "range:0.5")), ("aows", "range:0.5")}
    rows = io.read_table(wd / "results/pareto_flops.parquet", "pareto")[0].to_pylist()
    assert {(r["method"], r["target"]) for r in rows} == {(m, "range:0.3") for m in ("ows", "greedy", "uniform")}
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
    # synth: 3 methods × 3 targets + aows; flops: 3 methods × 1 target
    assert len(finalists) == (10 + 3) * len(retrain_seeds(validate(TINY)))
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
    assert log.count("(Rule: retrain_net)") == len(nets) < len(finalists)  # … trained once (jobs that finished)

    # Greedy and uniform both decide the largest network at a target above it: with two retraining seeds, that
    # network trains once per seed for the four (method, seed) results.
    wd = copy_run(tiny_run, tmp_path / "seeds")
    cfg = json.loads(json.dumps(TINY))
    cfg["decode"]["device_targets"]["flops"].append("100000mflops")
    cfg["retrain"]["seeds"] = [0, 1]
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    space = space_from_config(validate(cfg))
    assert not (wd / f"results/retrain/nets/{net_key(space.max_config)}").exists()
    wanted = [f"results/retrain/flops/{m}/100000mflops/seed{s}/result.parquet"
              for m in ("greedy", "uniform") for s in (0, 1)]
    r = smk(wd, *wanted, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    # one job trains the network for both seeds (retrain.seeds_in_one_job, D52)
    assert out.count("rule retrain_net:") == 1 and out.count("localrule retrain:") == 4, out[-3000:]
    net = net_key(space.max_config)
    assert (wd / f"results/logs/retrain_net_{net}.log").read_text().count("test top-1") == 2
    rows = [_finalist_results(wd)[w][0] for w in wanted]
    assert all(r["channels"] == space.max_config for r in rows)
    for seed in (0, 1):
        a, b = (r for r in rows if r["seed"] == seed)
        assert {**a, "method": "uniform"} == b  # one training, two finalists
    assert rows[0]["test_correct"] != rows[1]["test_correct"] or rows[0]["final_train_loss"] != rows[1]["final_train_loss"]
    # one job per network and seed: the same files, planned as two jobs
    cfg["retrain"]["seeds_in_one_job"] = False
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = smk(wd, "-n", *wanted).stdout  # the changed setting reruns the retraining
    assert out.count("rule retrain_net:") == 2 and f"retrain_net_{net}_seed1.log" in out, out[-3000:]


def test_decisions_meet_their_targets(tiny_run):
    for path in (tiny_run / "results/decisions").glob("*/*/*.parquet"):
        (row,) = io.read_table(path, "decisions")[0].to_pylist()
        assert row["predicted_latency_ms"] <= row["target_ms"] * (1 + 1e-9)
        assert row["exact"] == (row["method"] in ("ows", "aows"))


def test_infeasible_target_fails_before_any_training(tiny_run, tmp_path):
    cfg = json.loads(json.dumps(TINY))
    cfg["aows"]["targets"] = ["0.00001ms"]
    cfg["devices"] = {"synth": TINY["devices"]["synth"]}
    cfg["decode"]["device_targets"] = cfg["aows"]["device_targets"] = {}  # flops's: no such device here
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))

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
    for spec in cfg["devices"].values():  # how a device is reached (D53) reruns nothing
        spec.update(timeout_s=7.5, worker="python3 elsewhere/aows_worker.py")
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
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


def test_a_killed_run_completes_with_rerun_incomplete_without_redoing_finished_stages(pareto_run):
    """The quick start's run was SIGKILLed mid-training and completed with --rerun-incomplete (tiny_runs). That it
    ends with the artifacts of an uninterrupted run is test_golden's check of the tiny run it grew into."""
    killed = json.loads((pareto_run / "killed.json").read_text())
    # the kill landed mid-training: it ended Snakemake, the OWS supernet had written a resume checkpoint, not its model
    assert killed["killed_by_signal"] and not killed["model_written"] and killed["checkpoint"] is not None
    epoch, step = killed["checkpoint"]
    steps = TINY["data"]["train_subset"] // TINY["supernet"]["batch_size"]  # an epoch's steps
    total = TINY["supernet"]["epochs"] * steps
    assert 0 < epoch * steps + step < total
    # the rerun's job resumed from that checkpoint (its progress bar starts there), not from step 0
    assert killed["resumed_at"] == [epoch * steps + step, total]
    # the jobs that had finished before the kill (sampling, at least) were not redone, their outputs kept
    assert "results/latency/configs.parquet" in killed["finished"] and killed["kept"] and killed["redone"] == []
    assert (pareto_run / "results/pareto_synth.pdf").exists()
    assert [p for p in (pareto_run / "results/.resume").rglob("*") if p.is_file()] == []


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


def _rows(path) -> str:
    """A table's rows but for its wall-clock columns, as comparable text (NaN equals NaN)."""
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return json.dumps(t.drop_columns([c for c in t.column_names if c in WALL_CLOCK]).to_pylist(), default=str)


def test_a_changed_setting_reruns_exactly_its_jobs_and_equals_a_fresh_run(tiny_run, tmp_path):
    """Regression: raising supernet.epochs (and a retraining setting) on a finished run failed on the old resume
    state after Snakemake had deleted the old outputs. On a copy of the tiny run, other supernet and retraining
    settings plan exactly their jobs; a finalist retrained under them, then under TINY's again, ends with the table
    and weights of tiny_run, the fresh run of TINY. (The supernet stage's own test of settings changed under its
    resume state: tests/stages/test_train.py.)"""
    wd = copy_run(tiny_run, tmp_path / "changed")
    other = {**TINY, "supernet": {**TINY["supernet"], "batch_size": 128}, "retrain": {**TINY["retrain"], "batch_size": 128}}
    (wd / "config.yaml").write_text(yaml.safe_dump(other))
    plan = planned(smk(wd, "-n", "results/pareto_synth.pdf").stdout)
    # retrain_net: the networks of the unchanged uniform decisions (the others are known once decided)
    assert set(plan) == {"train_ows", "train_aows", "greedy_trajectory", "decode", "decide_baseline", "retrain_net",
                         "retrain", "measure", "proxy", "pareto"}, plan
    assert plan["decide_baseline"] == 3  # greedy reads the new trajectory; uniform reads only the LUT
    finalist = "results/retrain/synth/uniform/range:0.3/seed0"
    uniform = wd / "results/decisions/synth/uniform/range:0.3.parquet"
    lut = wd / "results/lut/synth/lut.parquet"
    before = {p: p.stat().st_mtime_ns for p in (uniform, lut)}
    retrained = {}
    for settings in (other, TINY):
        (wd / "config.yaml").write_text(yaml.safe_dump(settings))
        assert planned(smk(wd, "-n", f"{finalist}/result.parquet").stdout) == {"retrain_net": 1, "retrain": 1}
        r = smk(wd, f"{finalist}/result.parquet", check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        retrained[settings is TINY] = _rows(wd / finalist / "result.parquet")
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert [p for p in (wd / "results/.resume").rglob("*") if p.is_file()] == []
    assert retrained[True] == _rows(tiny_run / finalist / "result.parquet") != retrained[False]
    weights = lambda p: torch.load(p, weights_only=False)["model"]
    wa, wb = weights(wd / finalist / "model.pt"), weights(tiny_run / finalist / "model.pt")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wb)


def test_a_forced_rerun_of_profile_times_every_network_again(tiny_run, tmp_path):
    """Regression: `--forcerun profile` replayed the finished session's journal and timed nothing."""
    wd = copy_run(tiny_run, tmp_path / "forced")
    old, _ = io.read_table(wd / "results/latency/synth.parquet", "latency")
    # the target first: `--forcerun` takes every rule name after it, a target there would be read as one
    r = smk(wd, "results/latency/synth.parquet", "--forcerun", "profile", check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    new, meta = io.read_table(wd / "results/latency/synth.parquet", "latency")
    assert new.column("job").to_pylist() == old.column("job").to_pylist()
    # every network timed again, none replayed from a journal: the session's bar starts at job 0 (a resumed one
    # starts at the jobs it replays), and every start time lies within this session's wall time (a replayed one
    # is measured from the old session's first job, long before)
    log = (wd / "results/logs/profile_synth.log").read_text()
    start = re.search(r"profile synth:\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)", log)
    assert start is not None and int(start.group(1)) == 0, log[-2000:]
    t = new.column("t_start_s").to_pylist()
    assert min(t) == 0 and max(t) <= meta["session_wall_s"], (max(t), meta["session_wall_s"])
    assert t != old.column("t_start_s").to_pylist()  # timed anew, not the old session's times
    assert not (wd / "results/.resume/profile_synth.jsonl").exists()
    out = r.stdout + r.stderr
    assert out.count("rule profile:") == 1 and "rule fit_lut:" not in out  # that job, and only that one


def test_an_infeasible_target_stops_a_fresh_run_before_any_training(tmp_path):
    """Regression: on a fresh run, the OWS supernet and the greedy trajectory trained before check_target failed."""
    cfg = {**TINY, "devices": {"synth": TINY["devices"]["synth"]}, "decode": {"targets": TINY["decode"]["targets"]},
           "aows": {**TINY["aows"], "targets": ["0.001ms"], "device_targets": {}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    r = smk(tmp_path, "decisions", check=False)
    assert r.returncode != 0
    assert "below the smallest latency" in (tmp_path / "results/logs/check_target_synth_0.001ms.log").read_text()
    assert not (tmp_path / "results/supernet").exists()
    assert not list((tmp_path / "results/logs").glob("train_*")) and not list((tmp_path / "results/logs").glob("greedy*"))


def test_an_added_target_reruns_neither_the_ows_supernet_nor_the_greedy_trajectory(tiny_run):
    cfg = json.loads(json.dumps(TINY))
    cfg["decode"]["device_targets"]["synth"] = ["range:0.3", "range:0.8", "1000ms"]  # an absolute one: checked
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

    # ows, greedy, uniform at synth's two decode targets and flops's one, for every retraining seed
    assert plan["retrain"] == 3 * (2 + 1) * len(retrain_seeds(validate(TINY)))


def test_a_model_file_and_its_weights_are_inputs_of_the_first_stages(tmp_path):
    """A `space.model: file.py:function` and its `space.weights` file are inputs of the profile's configurations and
    the OWS supernet (D48), so that editing the network or retraining it reruns the run."""
    shutil.copy(ROOT / "examples" / "my_cnn.py", tmp_path / "my_cnn.py")
    from aows_core.tracing import load_model

    torch.save(load_model(str(tmp_path / "my_cnn.py") + ":my_cnn").state_dict(), tmp_path / "trained.pt")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"space": {"model": "my_cnn.py:my_cnn", "weights": "trained.pt"},
         "devices": {"synth": {"backend": "synthetic"}}}))
    out = smk(tmp_path, "-n", "results/supernet/ows/model.pt", "results/latency/configs.parquet").stdout
    jobs = {m.group(1): m.group(2) for m in re.finditer(r"rule (\w+):\n((?:    .*\n)+)", out)}
    assert "my_cnn.py" in jobs["sample_configs"] and "my_cnn.py" in jobs["train_ows"], out[-2000:]
    assert "trained.pt" in jobs["train_ows"] and "trained.pt" not in jobs["sample_configs"]
