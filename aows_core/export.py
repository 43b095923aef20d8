"""Export of a retrained finalist: ONNX (BN folded, checked against PyTorch) and a state dict with its configuration.

The ONNX graph is the one the `onnxruntime` device times (`devices.onnxruntime.onnx_from_weights`,
symbolic batch), filled with the network's folded weights. Before anything is written, ONNX Runtime
and PyTorch (eval mode) run the same test images; the export is refused if their logits differ by
more than `atol + rtol·|torch|` anywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from .config import space_from_config


class ExportMismatch(RuntimeError):
    """ONNX Runtime's outputs differ from PyTorch's beyond the tolerance."""


def export(config: Mapping[str, Any], model_path: str | os.PathLike, out_dir: str | os.PathLike, *, n_check: int = 256,
           rtol: float = 1e-3, atol: float = 1e-4) -> dict[str, Any]:
    """Stage: write model.onnx, state_dict.pt and export.json for a retrained network (its retrain model.pt)."""
    import onnx
    import onnxruntime as ort

    from .data import DataSpec, test_batches
    from .devices.onnxruntime import onnx_from_weights
    from .models import MobileNetV1, folded_state

    space = space_from_config(config)
    state = torch.load(model_path, map_location="cpu", weights_only=False)
    if state.get("space_hash") != space.hash:
        raise ValueError(f"{model_path} holds a network of space {state.get('space_hash')}, not {space.hash}")
    channels = [int(c) for c in state["channels"]]
    net = MobileNetV1(space, channels, init=False)
    net.load_state_dict(state["model"])
    net.eval()

    proto = onnx_from_weights(space, channels, folded_state(net), batch=None)
    onnx.checker.check_model(proto)
    d = config["data"]
    spec = DataSpec(name=d["dataset"], root=d["root"], download=d["download"], seed=int(config["seed"]))
    x = next(iter(test_batches(spec, batch_size=n_check)))[0].contiguous()
    with torch.no_grad():
        ref = net(x).numpy()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    err = np.abs(got - ref)
    bound = atol + rtol * np.abs(ref)
    if not (err <= bound).all():
        raise ExportMismatch(f"ONNX Runtime and PyTorch logits differ by up to {err.max():.3g} "
                             f"(tolerance {atol} + {rtol}·|logit|) on {len(x)} test images; not exported")
    agree = float((got.argmax(1) == ref.argmax(1)).mean())

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / ".model.onnx.tmp"
    onnx.save(proto, tmp)
    os.replace(tmp, out_dir / "model.onnx")
    torch.save({"space": space.to_dict(), "space_hash": space.hash, "channels": channels, "model": state["model"]},
               out_dir / "state_dict.pt")
    report = {"channels": channels, "checked_images": int(len(x)), "max_abs_diff": float(err.max()),
              "rtol": rtol, "atol": atol, "top1_agreement": agree, "opset": proto.opset_import[0].version,
              "bn": "folded into the convolutions", "input": [None, *x.shape[1:]]}
    (out_dir / "export.json").write_text(json.dumps(report, indent=2))
    return report
