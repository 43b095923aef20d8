"""Decisions: target strings, LUT range, the unaries and decisions artifacts, and bad input."""

import itertools
import re

import numpy as np
import pytest
import yaml
from stage_calls import decode

from aows_core import artifacts as io
from aows_core.config import SCHEMA_PATH, space_from_config, validate
from aows_core.devices.flops import variable_macs
from aows_core.latency import lut
from aows_core.search.results import InfeasibleTarget
from aows_core.search.targets import TARGET_PATTERN, latency_range, parse_target, resolve_target
from aows_core.space import mobilenet_v1_space

SMALL = {"space": {"preset": "mobilenet_v1_fmnist", "resolution": 8, "in_channels": 1, "num_classes": 4,
                   "width_mult": 0.25, "n_choices": 2}}


@pytest.fixture
def small():
    return space_from_config(validate(SMALL))


def write_lut(space, path, device="cpu", unit="ms", x=None):
    x = variable_macs(space) / 1e6 if x is None else x
    meta = io.provenance(space_name=space.name, space_hash=space.hash, device=device, unit=f"{unit} per forward",
                         unit_short=unit, fingerprint={"backend": "test"}, lam=0.0)
    io.write_records(lut.lut_records(space, x, np.ones(space.n_variables, int)), path, "lut", meta)
    return x


def write_unaries(space, path, rng, epochs=(0, 1), drop=()):
    rows = []
    for e in epochs:
        for layer, widths in enumerate(space.layer_choices):
            for j, w in enumerate(widths):
                count = 0 if (layer, j) in drop else int(rng.integers(1, 50))
                delta = None if count == 0 else float((len(widths) - j) * 0.1 + rng.normal(0, 0.01))
                rows.append({"layer": layer, "width": w, "delta": delta, "count": count, "epoch": e})
    io.write_records(rows, path, "unaries", io.provenance(space_name=space.name, space_hash=space.hash, method="ows"))
    return rows


def brute(space, x, u):
    for ch in itertools.product(*space.layer_choices):
        idx = space.indices(ch)
        lat = float(lut.predict(space, x, idx))
        obj = sum(u[i + 1][idx[i + 1]] for i in range(space.n_layers))
        yield ch, lat, obj


def test_target_grammar_and_schema_agree():
    assert parse_target("4.5ms").value == 4.5 and parse_target("325mflops").kind == "mflops"
    assert parse_target("range:0.3").kind == "range"
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    pattern = schema["properties"]["decode"]["properties"]["targets"]["items"]["pattern"]
    assert pattern == re.sub(r"\?P<\w+>", "?:", TARGET_PATTERN)
    for bad in ["4.5", "ms", "range:1.5", "4,5ms", "range:", "-1ms"]:
        with pytest.raises(ValueError, match="target"):
            parse_target(bad)


def test_range_targets_use_exact_extremes(small):
    x = variable_macs(small) / 1e6
    lo, hi, cl, ch = latency_range(small, x)
    lats = [lat for _, lat, _ in brute(small, x, [np.zeros(len(c)) for c in small.choices])]
    assert lo == pytest.approx(min(lats)) and hi == pytest.approx(max(lats))
    assert resolve_target("range:0.5", small, x, "ms") == pytest.approx((lo + hi) / 2)
    with pytest.raises(ValueError, match="in MMAC"):
        resolve_target("4ms", small, x, "MMAC")


def check_decode_stage_against_brute_force(cfg, space, tmp_path):
    """The decode stage's decisions at three targets are the brute-force constrained optima of Σδ (eq. 8)."""
    rng = np.random.default_rng(0)
    x = write_lut(space, tmp_path / "lut.parquet")
    rows = write_unaries(space, tmp_path / "u.parquet", rng)
    u = [np.zeros(1)] + [np.array([r["delta"] for r in rows if r["epoch"] == 1 and r["layer"] == l])
                         for l in range(space.n_layers)] + [np.zeros(1)]
    out = decode(cfg, "cpu", "ows", tmp_path / "u.parquet", tmp_path / "lut.parquet",
                 ["range:0.2", "range:0.6", "range:1"], tmp_path / "d.parquet")
    table, meta = io.read_table(tmp_path / "d.parquet", "decisions")
    assert table.schema.remove_metadata().equals(io.SCHEMAS["decisions"])
    every = list(brute(space, x, u))
    assert out[0]["gamma"] > 0  # the tightest target binds
    for r in out:
        feasible = [(obj, lat, ch) for ch, lat, obj in every if lat <= r["target_ms"] + 1e-9]
        assert r["predicted_latency_ms"] <= r["target_ms"] + 1e-9
        assert r["objective"] == pytest.approx(min(feasible)[0], abs=1e-9)
        assert r["exact"] and r["dual_bound"] <= r["objective"] + 1e-9 and r["epoch"] == 1
        assert r["unvisited_policy"] == "exclude"
        chosen = space.indices(r["channels"])  # the decision's own channels give its objective and latency
        assert r["objective"] == pytest.approx(sum(u[i][k] for i, k in enumerate(chosen)), abs=1e-9)
        assert r["predicted_latency_ms"] == pytest.approx(float(lut.predict(space, x, chosen)), abs=1e-9)


def test_decode_stage_is_the_brute_force_constrained_optimum(small, tmp_path):
    check_decode_stage_against_brute_force(validate(SMALL), small, tmp_path)  # same definition ⇒ same hash


@pytest.mark.parametrize("preset", ["mobilenet_v2_fmnist", "resnet_fmnist"])
def test_decode_stage_is_the_brute_force_constrained_optimum_on_a_residual_space(preset, tmp_path):
    """The same check on a residual space (D44): tied stream widths and inner widths, decoded as a compiled chain."""
    cfg = validate({"space": {**SMALL["space"], "preset": preset}})
    space = space_from_config(cfg)
    assert not space.is_chain and max(len(blocks) for blocks in space.tied()) > 1 and space.size <= 1024
    check_decode_stage_against_brute_force(cfg, space, tmp_path)


def test_bad_inputs_are_clear_errors(small, tmp_path):
    rng = np.random.default_rng(1)
    cfg = validate(SMALL)
    write_lut(small, tmp_path / "lut.parquet")
    write_unaries(small, tmp_path / "u.parquet", rng, drop={(0, 1)})
    args = ("cpu", "ows", tmp_path / "u.parquet", tmp_path / "lut.parquet")
    with pytest.raises(InfeasibleTarget, match=r"minimum"):
        decode(cfg, *args, ["0.000001ms"], tmp_path / "d.parquet")
    with pytest.raises(ValueError, match="malformed latency target"):
        decode(cfg, *args, ["fast"], tmp_path / "d.parquet")
    with pytest.raises(ValueError, match="no epoch 7"):
        decode(cfg, *args, ["range:0.5"], tmp_path / "d.parquet", epoch=7)
    strict = validate({**cfg, "decode": {"unvisited": "error"}})
    with pytest.raises(ValueError, match="never visited"):
        decode(strict, *args, ["range:0.5"], tmp_path / "d.parquet")
    # an unvisited width is excluded by default and recorded
    r = decode(cfg, *args, ["range:1"], tmp_path / "d.parquet")[0]
    assert r["channels"][0] != small.layer_choices[0][1]
    # NaN in a visited unary
    t, m = io.read_table(tmp_path / "u.parquet", "unaries")
    rows = t.to_pylist()
    rows[-1]["delta"] = float("nan")  # epoch 1, visited
    io.write_records(rows, tmp_path / "nan.parquet", "unaries", m)
    with pytest.raises(ValueError, match="visited unary at layer"):
        decode(cfg, "cpu", "ows", tmp_path / "nan.parquet", tmp_path / "lut.parquet", ["range:0.5"], tmp_path / "d.parquet")
    # unaries or LUT of another space
    other = mobilenet_v1_space("other", resolution=8, in_channels=1, num_classes=4, width_mult=0.25, n_choices=3)
    write_unaries(other, tmp_path / "o.parquet", rng)
    with pytest.raises(io.ArtifactError, match="unaries of space 'other'"):
        decode(cfg, "cpu", "ows", tmp_path / "o.parquet", tmp_path / "lut.parquet", ["range:0.5"], tmp_path / "d.parquet")
    write_lut(other, tmp_path / "olut.parquet")
    with pytest.raises(io.ArtifactError, match="latency table of space 'other'"):
        decode(cfg, "cpu", "ows", tmp_path / "u.parquet", tmp_path / "olut.parquet", ["range:0.5"], tmp_path / "d.parquet")
    # a LUT missing a variable, and one with a NaN entry
    lt, lm = io.read_table(tmp_path / "lut.parquet", "lut")
    io.write_table(lt.slice(1), tmp_path / "short.parquet", "lut", lm)
    with pytest.raises(ValueError, match="lacks|missing"):
        decode(cfg, "cpu", "ows", tmp_path / "u.parquet", tmp_path / "short.parquet", ["range:0.5"], tmp_path / "d.parquet")
    x = variable_macs(small) / 1e6
    x[2] = np.nan
    write_lut(small, tmp_path / "nanlut.parquet", x=x)
    with pytest.raises(ValueError, match="non-finite|not finite|NaN"):
        decode(cfg, "cpu", "ows", tmp_path / "u.parquet", tmp_path / "nanlut.parquet", ["range:0.5"], tmp_path / "d.parquet")
    with pytest.raises(io.ArtifactError, match="not 'gpu'"):
        decode(cfg, "gpu", "ows", tmp_path / "u.parquet", tmp_path / "lut.parquet", ["range:0.5"], tmp_path / "d.parquet")


def test_check_target_refuses_infeasible_with_the_minimum(small, tmp_path):
    from stage_calls import check_target

    cfg = validate(SMALL)
    x = write_lut(small, tmp_path / "lut.parquet")
    lo, hi, _, _ = latency_range(small, x)
    assert check_target(cfg, "cpu", tmp_path / "lut.parquet", "range:0.5", tmp_path / "ok.json") == pytest.approx((lo + hi) / 2)
    with pytest.raises(InfeasibleTarget, match=f"{lo:.4g} ms"):
        check_target(cfg, "cpu", tmp_path / "lut.parquet", f"{lo / 2:.6f}ms", tmp_path / "no.json")
    assert not (tmp_path / "no.json").exists()


def test_check_target_refuses_the_lut_of_another_device(small, tmp_path):
    """Regression: `check-target --device cpu` accepted the flops device's LUT and wrote "feasible" in MMAC."""
    from stage_calls import check_target

    cfg = validate(SMALL)
    write_lut(small, tmp_path / "lut.parquet", device="flops", unit="MMAC")
    with pytest.raises(io.ArtifactError, match="latency table of device 'flops', not 'cpu'"):
        check_target(cfg, "cpu", tmp_path / "lut.parquet", "range:0.5", tmp_path / "ok.json")
    assert not (tmp_path / "ok.json").exists()


def test_a_negative_lut_entry_is_refused(small, tmp_path):
    """Regression: a negative LUT entry was decoded into a negative latency."""
    x = variable_macs(small) / 1e6
    x[3] = -0.5
    write_lut(small, tmp_path / "lut.parquet", x=x)
    write_unaries(small, tmp_path / "u.parquet", np.random.default_rng(0))
    with pytest.raises(ValueError, match="negative latencies"):
        decode(validate(SMALL), "cpu", "ows", tmp_path / "u.parquet", tmp_path / "lut.parquet", ["range:0.5"],
               tmp_path / "d.parquet")
    assert not (tmp_path / "d.parquet").exists()


def test_unaries_with_a_negative_count_are_refused(small, tmp_path):
    """Regression: a negative count was read as an unvisited width."""
    write_lut(small, tmp_path / "lut.parquet")
    rows = write_unaries(small, tmp_path / "u.parquet", np.random.default_rng(0))
    rows[-1] = {**rows[-1], "count": -3}  # the last epoch, which decode reads
    io.write_records(rows, tmp_path / "neg.parquet", "unaries",
                     io.provenance(space_name=small.name, space_hash=small.hash, method="ows"))
    with pytest.raises(io.ArtifactError, match="count -3"):
        decode(validate(SMALL), "cpu", "ows", tmp_path / "neg.parquet", tmp_path / "lut.parquet", ["range:0.5"],
               tmp_path / "d.parquet")


@pytest.mark.parametrize("z, warned", [(None, True), (1.2, True), (7.5, False)])
def test_decisions_carry_the_width_signal_and_say_when_there_is_none(small, tmp_path, capsys, z, warned):
    """Issue 12: a decision records the signal-to-noise of the unaries it used and says plainly when no width
    signal is detectable (z < 3 standard errors, or unknown)."""
    import argparse

    from aows_core.stages import decode as stage

    rng = np.random.default_rng(3)
    write_lut(small, tmp_path / "lut.parquet")
    rows = write_unaries(small, tmp_path / "u.parquet", rng)
    meta = io.provenance(space_name=small.name, space_hash=small.hash, method="ows", width_signal_z=z)
    io.write_records(rows, tmp_path / "u.parquet", "unaries", meta)
    out = decode(validate(SMALL), "cpu", "ows", tmp_path / "u.parquet", tmp_path / "lut.parquet", ["range:0.5"],
                 tmp_path / "d.parquet")
    table, dmeta = io.read_table(tmp_path / "d.parquet", "decisions")
    assert table.column("width_signal_z").to_pylist() == [z]
    assert (dmeta["width_signal_note"] is not None) == warned
    stage.report(out, argparse.Namespace())
    assert ("no width signal detectable" in capsys.readouterr().out) == warned


def test_a_target_that_does_not_bind_is_said(small, tmp_path, capsys):
    """A target above the least-Σδ network's latency (γ = 0) decides that network whatever the target: the report
    says so (a regression: on an OpenVINO device two `range:` targets decided one network and nothing said it)."""
    import argparse

    from aows_core.stages import decode as stage

    write_lut(small, tmp_path / "lut.parquet")
    write_unaries(small, tmp_path / "u.parquet", np.random.default_rng(4))
    out = decode(validate(SMALL), "cpu", "ows", tmp_path / "u.parquet", tmp_path / "lut.parquet",
                 ["range:0.05", "range:1.0"], tmp_path / "d.parquet")
    stage.report(out, argparse.Namespace())
    said = capsys.readouterr().out
    loose = next(r for r in out if r["target"] == "range:1.0")
    assert loose["gamma"] == 0 and "range:1.0 does not bind (γ = 0)" in said
    assert ("range:0.05 does not bind" in said) == (next(r for r in out if r["target"] == "range:0.05")["gamma"] == 0)
