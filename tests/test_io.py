"""Artifact I/O: explicit schemas, metadata, atomic writes, clear errors on bad files."""

import pyarrow as pa
import pytest

from aows_core import io


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
