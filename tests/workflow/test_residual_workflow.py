"""A residual space (ResNet) through the whole workflow on the synthetic device: every method decided, retrained,
measured, exported and plotted (docs/method.md D44)."""

import json

import pytest
import yaml
from tiny_workflow import TINY, smk

from aows_core import artifacts as io
from aows_core.space import get_space

pytestmark = pytest.mark.slow

# TINY's settings at a fraction of its data and estimation sizes: the test checks that a residual space goes through
# every stage (methods, widths, roles, export), not what it learns
CONFIG = {**TINY, "space": {"preset": "resnet_fmnist", "n_choices": 3, "width_mult": 0.5},
          "devices": {"synth": {"backend": "synthetic", "noise": 0.01, "drift": 0.1}},
          "data": {"train_subset": 128, "search_val": 32, "calibration": 32},
          "supernet": {**TINY["supernet"], "estimate_configs": 20, "estimate_images": 64},
          "greedy": {**TINY["greedy"], "n_eval": 32, "n_cal": 32},
          "decode": {"targets": ["range:0.4"]},
          "aows": {**TINY["aows"], "targets": ["range:0.4"], "device_targets": {}, "estimate_configs": 10,
                   "final_configs": 20}}
EXPORT = "results/export/synth/aows/range:0.4/seed0/model.onnx"


def test_a_resnet_space_runs_end_to_end(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    r = smk(tmp_path, "results/pareto_synth.pdf", EXPORT, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    space = get_space("resnet_fmnist", n_choices=3, width_mult=0.5)
    rows, meta = io.read_table(tmp_path / "results/pareto_synth.parquet", "pareto")
    rows = rows.to_pylist()
    assert {r["method"] for r in rows} == {"aows", "ows", "greedy", "uniform"}
    for row in rows:  # every finalist is a configuration of the space, predicted and measured
        space.indices(row["channels"])
        assert row["predicted_ms"] > 0 and row["measured_ms"] > 0
    _, cmeta = io.read_table(tmp_path / "results/plots/synth/configurations.parquet", "configurations")
    assert cmeta["layer_roles"] == space.roles()[1:-1] and "inner" in cmeta["layer_roles"]
    report = json.loads((tmp_path / EXPORT).with_name("export.json").read_text())
    assert report["top1_agreement"] == 1.0 and report["max_abs_diff"] < 1e-3
