"""Artifact I/O: explicit schemas, metadata, atomic writes, clear errors on bad files."""

import pyarrow as pa
import pytest

from aows_core import artifacts as io


def _write(path):
    io.write_records(
        [{"config_id": 0, "channels": [8, 16], "set": "train", "sampler": "biased"}],
        path, "configs", io.provenance(space_hash="abc"),
    )


def test_schema_and_metadata_roundtrip(tmp_path):
    _write(tmp_path / "c.parquet")
    table, meta = io.read_table(tmp_path / "c.parquet", "configs")
    assert table.schema.field("channels").type == pa.list_(pa.int32())
    assert meta["kind"] == "configs" and meta["space_hash"] == "abc" and meta["aows_version"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_missing_corrupt_and_wrong_kind_are_clear_errors(tmp_path):
    with pytest.raises(io.ArtifactError, match="no such file"):
        io.read_table(tmp_path / "nope.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(io.ArtifactError, match="not a readable parquet file.*rerun"):
        io.read_table(bad)
    _write(tmp_path / "c.parquet")
    with pytest.raises(io.ArtifactError, match="expected a 'lut' artifact, found 'configs'"):
        io.read_table(tmp_path / "c.parquet", "lut")


def test_failed_write_leaves_previous_artifact_intact(tmp_path):
    _write(tmp_path / "c.parquet")
    with pytest.raises(Exception):
        io.write_records([{"config_id": "not an int"}], tmp_path / "c.parquet", "configs", {})
    table, _ = io.read_table(tmp_path / "c.parquet", "configs")
    assert table.num_rows == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet"]


def test_inspect_prints_schema_metadata_and_rows(tmp_path):
    _write(tmp_path / "c.parquet")
    text = io.inspect(tmp_path / "c.parquet")
    assert "channels: list<element: int32>" in text and '"space_hash": "abc"' in text and "biased" in text


def test_artifacts_get_the_mode_the_umask_gives(tmp_path):
    """Regression: every parquet artifact was written with mode 0600 whatever the umask."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        _write(tmp_path / "c.parquet")
        assert stat.S_IMODE((tmp_path / "c.parquet").stat().st_mode) == 0o644
        os.umask(0o077)
        _write(tmp_path / "d.parquet")
        assert stat.S_IMODE((tmp_path / "d.parquet").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_a_file_that_is_not_parquet_is_named_without_advice_to_delete_it(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("seed: 0\n")
    with pytest.raises(io.ArtifactError, match="not a parquet file") as e:
        io.read_table(cfg, "lut")
    assert "delete" not in str(e.value)


def test_unwritable_output_is_refused_before_any_work(tmp_path, tiny_space):
    """Regression: an unwritable results folder gave a PermissionError traceback after profiling every network."""
    import subprocess
    import sys

    from conftest import write_uniform_configs

    write_uniform_configs(tiny_space, tmp_path / "c.parquet")
    (tmp_path / "results").write_text("a file where a folder should be")
    cmd = [sys.executable, "-m", "aows_core.cli", "profile", "--device", "cpu", "--configs", str(tmp_path / "c.parquet"),
           "--out", str(tmp_path / "results/latency/cpu.parquet"), "--resume-dir", str(tmp_path / "resume"), "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot create the folder" in r.stderr and "results/latency" in r.stderr
    assert not (tmp_path / "resume").exists()  # nothing was timed
