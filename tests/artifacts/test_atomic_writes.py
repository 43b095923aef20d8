"""The one atomic writer and the static schema table."""

import json
import os
import stat
import subprocess
import sys

import pytest

from aows_core import artifacts as io


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    io.write_json({"a": 1}, tmp_path / "r.json")

    def boom(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        io.atomic_write(tmp_path / "r.json", boom)
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize("fsync", [False, True])
def test_files_get_the_mode_the_umask_gives(tmp_path, fsync):
    old = os.umask(0o022)
    try:
        io.write_text("x", tmp_path / "a.txt", fsync=fsync)
        assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
        os.umask(0o077)
        io.write_json([1], tmp_path / "sub" / "b.json", indent=2)
        assert stat.S_IMODE((tmp_path / "sub" / "b.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)
    assert (tmp_path / "sub" / "b.json").read_text() == json.dumps([1], indent=2)


def test_a_figure_is_saved_as_pdf_and_png_and_closed(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    io.save_figure(fig, tmp_path / "plots" / "f.pdf")
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["f.pdf", "f.png"]
    assert (tmp_path / "plots" / "f.pdf").read_bytes()[:4] == b"%PDF"
    assert (tmp_path / "plots" / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert not plt.fignum_exists(fig.number)


def test_an_onnx_model_is_written_atomically(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    io.save_onnx(helper.make_model(graph), tmp_path / "model.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    onnx.checker.check_model(onnx.load(tmp_path / "model.onnx"))


def test_the_schema_table_is_static_and_read_only():
    assert len(io.SCHEMAS) == 17
    with pytest.raises(TypeError):
        io.SCHEMAS["new"] = io.SCHEMAS["lut"]
    with pytest.raises(AttributeError):
        io.SCHEMAS.setdefault("new", io.SCHEMAS["lut"])
    for kind in ("greedy_trajectory", "measure", "pareto", "configurations", "training_curves", "proxy_check", "proxy",
                 "retrain", "train_metrics"):  # once registered by importing their modules
        assert kind in io.SCHEMAS


def test_importing_the_package_loads_no_heavy_library():
    code = ("import sys, aows_core.artifacts as a\n"
            "print(sorted({'pyarrow', 'torch', 'pandas', 'matplotlib', 'onnx'} & set(sys.modules)))\n"
            "a.read_table\nprint('pyarrow' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["[]", "True"]


def test_every_public_name_resolves():
    for name in io.__all__:
        assert getattr(io, name) is not None
    with pytest.raises(AttributeError):
        io.no_such_name  # noqa: B018
