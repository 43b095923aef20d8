"""Typed readers: one space check and one device check for every artifact kind, the torch files, the journal."""

import json

import numpy as np
import pytest
import torch

from aows_core import artifacts as io
from aows_core.latency.lut import lut_records
from aows_core.space import mobilenet_v1_space


@pytest.fixture
def other():
    return mobilenet_v1_space("other", resolution=8, in_channels=1, num_classes=4, width_mult=0.25, n_choices=4)


def _meta(space, **kw):
    return io.provenance(space=space, **kw)


def test_provenance_names_the_space_and_device_and_keeps_a_space_dict(tiny_space):
    meta = io.provenance(space=tiny_space, device="cpu", seed=3)
    assert (meta["space_name"], meta["space_hash"], meta["device"], meta["seed"]) == ("tiny", tiny_space.hash, "cpu", 3)
    assert meta["aows_version"] and meta["python"] and meta["platform"]
    assert io.provenance(space=tiny_space.to_dict())["space"] == tiny_space.to_dict()  # as the configs and latency files


@pytest.mark.parametrize("kind", sorted(io.SPACE_WORDING))
def test_every_kind_is_refused_for_another_space_in_one_wording(kind, tiny_space, other):
    verb, remedy = io.SPACE_WORDING[kind]
    io.require_space({"space_hash": tiny_space.hash}, tiny_space, "f", kind)
    with pytest.raises(io.ArtifactError) as e:
        io.require_space({"space_name": "other", "space_hash": other.hash}, tiny_space, "f.parquet", kind)
    assert str(e.value) == (f"f.parquet {verb} space 'other' (hash {other.hash}), not the configured 'tiny' "
                            f"(hash {tiny_space.hash}); {remedy}")
    with pytest.raises(ValueError, match="space 'other'"):  # a torch file names its space in a dict
        io.require_space({"space": other.to_dict(), "space_hash": other.hash}, tiny_space, "m.pt", kind)


def test_the_device_check_names_both_devices(tiny_space):
    io.require_device({"device": "cpu"}, "cpu", "f", "lut")
    io.require_device({"device": "cpu"}, None, "f", "lut")
    with pytest.raises(io.ArtifactError, match="latency table of device 'flops', not 'cpu'; pass results/lut/cpu/lut.parquet"):
        io.require_device({"device": "flops", "fingerprint": {"backend": "flops"}}, "cpu", "f", "lut")
    with pytest.raises(io.ArtifactError, match=r"timings of device 'synth' \(fingerprint .*\), not 'cpu'"):
        io.require_device({"device": "synth", "fingerprint": {"cpu": "x"}}, "cpu", "f", "latency")


def test_configs_and_latency_readers(tiny_space, other, tmp_path):
    from conftest import write_uniform_configs

    write_uniform_configs(tiny_space, tmp_path / "c.parquet")
    table, meta = io.read_configs(tmp_path / "c.parquet", tiny_space)
    assert table.num_rows == 60 and meta["kind"] == "configs"
    with pytest.raises(io.ArtifactError, match="sampled from space 'tiny'"):
        io.read_configs(tmp_path / "c.parquet", other)
    row = {"job": 0, "config_id": 0, "channels": tiny_space.max_config, "role": "sample", "set": "train",
           "t_start_s": 0.0, **{k: 1.0 for k in ("latency_ms", "latency_ms_raw", "drift_factor", "median_ms", "mean_ms",
                                                  "min_ms", "p10_ms", "p90_ms", "std_ms")}, "n_repeats": 3}
    io.write_records([row], tmp_path / "l.parquet", "latency", _meta(tiny_space, device="synth", fingerprint={"a": 1}))
    assert io.read_latency(tmp_path / "l.parquet", tiny_space, "synth")[0].num_rows == 1
    with pytest.raises(io.ArtifactError, match="timings of device 'synth'"):
        io.read_latency(tmp_path / "l.parquet", tiny_space, "cpu")
    with pytest.raises(io.ArtifactError, match="profiled on space"):
        io.read_latency(tmp_path / "l.parquet", other)


def test_read_lut_checks_space_device_and_completeness(tiny_space, other, tmp_path):
    x = np.arange(1, tiny_space.n_variables + 1, dtype=float)
    io.write_records(lut_records(tiny_space, x, np.ones(tiny_space.n_variables, int)), tmp_path / "lut.parquet", "lut",
                     _meta(tiny_space, device="cpu", unit="ms"))
    got, meta = io.read_lut(tmp_path / "lut.parquet", tiny_space, "cpu")
    assert np.array_equal(got, x) and meta["device"] == "cpu"
    assert np.array_equal(io.read_lut(tmp_path / "lut.parquet", tiny_space)[0], x)
    with pytest.raises(io.ArtifactError, match="latency table of space 'tiny'"):
        io.read_lut(tmp_path / "lut.parquet", other)
    with pytest.raises(io.ArtifactError, match="not 'gpu'"):
        io.read_lut(tmp_path / "lut.parquet", tiny_space, "gpu")
    table, meta = io.read_table(tmp_path / "lut.parquet", "lut")
    io.write_table(table.slice(1), tmp_path / "short.parquet", "lut", meta)
    with pytest.raises(io.ArtifactError, match="refit the table"):
        io.read_lut(tmp_path / "short.parquet", tiny_space)


def _unaries(space, path, epochs=(0, 1), count=5, delta=0.5):
    rows = [{"layer": layer, "width": w, "delta": delta + e + 0.01 * j, "count": count, "epoch": e}
            for e in epochs for layer, ws in enumerate(space.layer_choices) for j, w in enumerate(ws)]
    io.write_records(rows, path, "unaries", _meta(space, method="ows"))
    return rows


def test_read_unaries_pads_the_end_nodes_and_picks_the_epoch(tiny_space, other, tmp_path):
    _unaries(tiny_space, tmp_path / "u.parquet")
    u, meta, epoch = io.read_unaries(tmp_path / "u.parquet", tiny_space)
    assert epoch == 1 and meta["method"] == "ows"
    assert len(u) == tiny_space.n_nodes and u[0].tolist() == [0.0] and u[-1].tolist() == [0.0]
    assert u[1].tolist() == pytest.approx([1.5 + 0.01 * j for j in range(len(tiny_space.layer_choices[0]))])
    assert io.read_unaries(tmp_path / "u.parquet", tiny_space, 0)[2] == 0
    with pytest.raises(ValueError, match="no epoch 7"):
        io.read_unaries(tmp_path / "u.parquet", tiny_space, 7)
    with pytest.raises(io.ArtifactError, match="unaries of space 'tiny'"):
        io.read_unaries(tmp_path / "u.parquet", other)
    _unaries(tiny_space, tmp_path / "unvisited.parquet", count=0)
    assert np.isnan(io.read_unaries(tmp_path / "unvisited.parquet", tiny_space)[0][1]).all()
    _unaries(tiny_space, tmp_path / "neg.parquet", count=-3)
    with pytest.raises(io.ArtifactError, match="count -3"):
        io.read_unaries(tmp_path / "neg.parquet", tiny_space)


def test_decisions_round_trip_and_are_refused_for_another_space_or_device(tiny_space, other, tmp_path):
    row = {"method": "ows", "device": "cpu", "target": "range:0.5", "target_ms": 1.0, "unit": "ms",
           "channels": tiny_space.max_config, "predicted_latency_ms": 1.0, "objective": 0.0, "gamma": 0.0,
           "dual_bound": 0.0, "gap": 0.0, "exact": True, "unvisited_policy": "exclude", "epoch": 1}
    io.write_decisions([row], tmp_path / "d.parquet", {"space_name": tiny_space.name, "space_hash": tiny_space.hash})
    (got,) = io.read_decisions([tmp_path / "d.parquet"], tiny_space, "cpu")
    assert got["source"] == str(tmp_path / "d.parquet") and got["channels"] == tiny_space.max_config
    one, meta = io.read_decision(tmp_path / "d.parquet", tiny_space)
    assert one["target"] == "range:0.5" and meta["aows_version"]
    with pytest.raises(io.ArtifactError, match="decision for device 'cpu', not 'gpu'"):
        io.read_decisions([tmp_path / "d.parquet"], tiny_space, "gpu")
    with pytest.raises(io.ArtifactError, match="decided on space"):
        io.read_decision(tmp_path / "d.parquet", other)
    io.write_decisions([row, {**row, "target": "range:0.2"}], tmp_path / "two.parquet", {"space_hash": tiny_space.hash})
    with pytest.raises(io.ArtifactError, match="holds 2 decisions"):
        io.read_decision(tmp_path / "two.parquet", tiny_space)
    assert set(io.read_by_finalist([tmp_path / "two.parquet"], "decisions")) == {("ows", "range:0.5"), ("ows", "range:0.2")}


def test_trajectory_reader(tiny_space, other, tmp_path):
    rows = [{"step": 0, "channels": tiny_space.max_config, "lowered_layer": -1, "errors": 1, "error": 0.1,
             "cross_entropy": 0.2, "candidates": 0}]
    io.write_records(rows, tmp_path / "t.parquet", "greedy_trajectory", _meta(tiny_space))
    assert io.read_trajectory(tmp_path / "t.parquet", tiny_space)[0].column("channels").to_pylist() == [tiny_space.max_config]
    with pytest.raises(io.ArtifactError, match="belongs to space"):
        io.read_trajectory(tmp_path / "t.parquet", other)


def test_torch_files_are_atomic_on_the_cpu_and_checked(tiny_space, other, tmp_path):
    state = {"space": tiny_space.to_dict(), "space_hash": tiny_space.hash, "channels": tiny_space.max_config,
             "model": {"w": torch.ones(2)}, "completed_epochs": 2}
    io.save_torch(state, tmp_path / "sub" / "model.pt")
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["model.pt"]
    assert torch.equal(io.read_supernet_state(tmp_path / "sub/model.pt", tiny_space)["w"], torch.ones(2))
    assert io.read_network(tmp_path / "sub/model.pt", tiny_space)["channels"] == tiny_space.max_config
    assert io.read_epoch_checkpoint(tmp_path / "sub/model.pt", tiny_space, 2)["completed_epochs"] == 2
    with pytest.raises(ValueError, match="trained on space 'tiny'"):
        io.read_supernet_state(tmp_path / "sub/model.pt", other)
    with pytest.raises(ValueError, match="holds a network of space"):
        io.read_network(tmp_path / "sub/model.pt", other)
    with pytest.raises(io.ArtifactError, match="not the OWS checkpoint after 3 epochs"):
        io.read_epoch_checkpoint(tmp_path / "sub/model.pt", tiny_space, 3)
    io.save_torch({"space_hash": tiny_space.hash}, tmp_path / "bare.pt")
    with pytest.raises(io.ArtifactError, match="not a supernet model file"):
        io.read_supernet_state(tmp_path / "bare.pt", tiny_space)
    nested = io.to_cpu({"a": [torch.zeros(1)], "b": (torch.ones(1), 3)})
    assert nested["b"][1] == 3 and isinstance(nested["b"], tuple)


def _journal(path, fingerprint="fp", plan="p1", sync_every=1):
    return io.Journal(path, {"plan": plan, "fingerprint": fingerprint, "space": "h"}, sync_every)


def test_journal_resumes_a_clean_prefix_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "resume" / "profile_x.jsonl"
    j = _journal(path)
    for k in range(3):
        j.append({"job": k, "t": k})
    j.close()
    path.write_text(path.read_text() + '{"job": 3, "t"')  # killed mid-write
    j = _journal(path)
    assert [r["job"] for r in j.rows] == [0, 1, 2]
    j.close()
    assert json.loads(path.read_text().splitlines()[0])["plan"] == "p1"
    j.remove()
    assert list((tmp_path / "resume").iterdir()) == []


@pytest.mark.parametrize("change, why", [({"fingerprint": "other machine"}, "another device fingerprint"),
                                         ({"plan": "p2"}, "other settings")])
def test_journal_of_another_machine_or_plan_is_set_aside_with_a_notice(tmp_path, capfd, change, why):
    path = tmp_path / "profile_x.jsonl"
    j = _journal(path)
    j.append({"job": 0})
    j.close()
    lines = path.read_text().splitlines()
    j = _journal(path, **{"fingerprint": "fp", "plan": "p1", **change})
    assert j.rows == []
    j.close()
    stale = path.with_name(path.name + ".stale")
    assert stale.read_text().splitlines() == lines
    err = capfd.readouterr().err
    assert why in err and "afresh" in err and str(stale) in err
    j.remove()
    assert not path.exists() and not stale.exists()


def test_journal_with_an_unreadable_header_is_set_aside(tmp_path, capfd):
    path = tmp_path / "profile_x.jsonl"
    path.write_text('{"plan": "torn\n{"job": 0}\n')
    _journal(path).close()
    assert "unreadable header" in capfd.readouterr().err
    assert path.with_name(path.name + ".stale").exists()


def test_provenance_keeps_an_explicit_none_device():
    """An OWS run has no device: its metadata says device None, as before the redesign."""
    assert io.provenance(device=None)["device"] is None
    assert "device" not in io.provenance() and "space" not in io.provenance()
