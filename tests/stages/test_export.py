"""Export: the ONNX graph of a finalist computes what PyTorch computes; bad input is refused."""

import json

import onnx
import onnxruntime as ort
import pytest
import torch
from stage_calls import export

from aows_core.config import space_from_config, validate
from aows_core.nets.network import Network
from aows_core.nets.onnx import ExportMismatch

CFG = {"space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25}}


@pytest.fixture(scope="module")
def finalist(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    cfg = validate(CFG)
    space = space_from_config(cfg)
    channels = [c[1] for c in space.layer_choices]
    torch.manual_seed(0)
    net = Network(space, channels)
    with torch.no_grad():  # non-trivial BN statistics, so folding matters
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
    torch.save({"space_hash": space.hash, "channels": channels, "model": net.state_dict()}, d / "model.pt")
    return cfg, space, channels, net, d


def test_onnx_matches_pytorch_and_the_state_dict_rebuilds_the_network(finalist):
    cfg, space, channels, net, d = finalist
    rep = export(cfg, d / "model.pt", d / "out")
    assert rep["max_abs_diff"] <= 1e-3 and rep["top1_agreement"] == 1.0
    proto = onnx.load(d / "out/model.onnx")
    onnx.checker.check_model(proto)
    x = torch.randn(3, 1, 28, 28)  # symbolic batch: any batch size runs
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        want = net.eval()(x).numpy()
    assert got.shape == (3, 10) and abs(got - want).max() < 1e-3
    sd = torch.load(d / "out/state_dict.pt", weights_only=False)
    again = Network(space_from_config(cfg), sd["channels"], init=False)
    again.load_state_dict(sd["model"])
    assert sd["channels"] == channels and torch.equal(again.eval()(x), net.eval()(x))
    assert json.loads((d / "out/export.json").read_text())["channels"] == channels


def test_a_mismatch_beyond_tolerance_writes_nothing(finalist, tmp_path):
    cfg, _, _, _, d = finalist
    with pytest.raises(ExportMismatch, match="differ"):
        export(cfg, d / "model.pt", tmp_path / "out", rtol=0.0, atol=0.0)
    assert not (tmp_path / "out").exists()


def test_a_network_of_another_space_is_refused(finalist, tmp_path):
    cfg, _, _, _, d = finalist
    other = validate({"space": {**CFG["space"], "n_choices": 4}})
    with pytest.raises(ValueError, match="holds a network of space"):
        export(other, d / "model.pt", tmp_path / "out")
