"""The Snakemake workflow: lint, formatting, dry-runs, and a tiny end-to-end run on the synthetic device."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from aows_core import io
from aows_core import greedy, measure, pareto, proxy, retrain, train  # noqa: F401  (register their artifact schemas)

ROOT = Path(__file__).resolve().parents[1]
SNAKEFILE = ROOT / "workflow" / "Snakefile"

TINY = {
    "seed": 0,
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "devices": {
        "synth": {"backend": "synthetic", "noise": 0.01, "drift": 0.1},
        "flops": {"backend": "flops"},
    },
    "sampling": {"coverage": 2, "lambda_val": 20, "test": 40},
    "profiling": {"repeats": 5, "retest": 10, "reference_every": 10},
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
    return wd


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
    out = subprocess.run(["aows", "inspect", str(wd / "results/lut/synth/lut.parquet")], capture_output=True, text=True)
    assert "c_in: int32" in out.stdout and '"space_hash"' in out.stdout


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
    out = smk(wd, "-n", "all").stdout
    for rule in ("decode", "decide_baseline", "retrain", "measure", "pareto"):
        assert f"rule {rule}:" in out, rule
    for rule in ("sample_configs", "profile", "fit_lut", "train_ows", "train_aows", "greedy_trajectory"):
        assert f"rule {rule}:" not in out, rule
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
