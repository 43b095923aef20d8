"""`aows export`: ONNX (checked against PyTorch) and state dict of a retrained network."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "export"
HELP = "ONNX (checked against PyTorch) and state dict of a retrained network"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("model",)
OUTPUTS = ("out_dir",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--model", required=True, help="a retrained model.pt")
    p.add_argument("--out-dir", required=True)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, n_check: int = 256,
        rtol: float = 1e-3, atol: float = 1e-4) -> dict[str, Any]:
    """Write model.onnx, state_dict.pt and export.json (all atomic), the ONNX graph checked against PyTorch, both
    recording the test images' preprocessing (`aows_core.data.describe_preprocessing`; in model.onnx as the JSON text
    of metadata key `aows.preprocessing`); for a traced `space.model`, module_state_dict.pt too: the finalist under the
    user's module's own names, checked to compute the same logits once `aows_core.tracing:narrowed` loads it into the
    module (D49)."""
    import json
    from pathlib import Path

    import onnx

    from .. import artifacts
    from ..config import resolve
    from ..data import PREPROCESSING_KEY, describe_preprocessing, test_batches
    from ..nets.network import Network, folded_state
    from ..nets.onnx import check_agreement, onnx_from_weights

    settings = resolve(config)
    space = settings.space
    state = artifacts.read_network(inputs["model"], space)
    channels = [int(c) for c in state["channels"]]
    net = Network(space, channels, init=False)
    net.load_state_dict(state["model"])
    net.eval()

    data = settings.data_spec(None)
    preprocessing = describe_preprocessing(data)
    proto = onnx_from_weights(space, channels, folded_state(net), batch=None)
    proto.metadata_props.add(key=PREPROCESSING_KEY, value=json.dumps(preprocessing))
    onnx.checker.check_model(proto)
    x = next(iter(test_batches(data, batch_size=n_check)))[0].contiguous()
    err, agree = check_agreement(proto, net, x, rtol, atol)

    out_dir = Path(outputs["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    artifacts.save_onnx(proto, out_dir / "model.onnx")
    artifacts.save_torch({"space": space.to_dict(), "space_hash": space.hash, "channels": channels,
                          "model": state["model"]}, out_dir / "state_dict.pt")
    report = {"channels": channels, "checked_images": int(len(x)), "max_abs_diff": float(err.max()),
              "rtol": rtol, "atol": atol, "top1_agreement": agree, "opset": proto.opset_import[0].version,
              "bn": "folded into the convolutions", "input": [None, *x.shape[1:]], "preprocessing": preprocessing}
    if settings.space_section.model is not None:
        report["module"] = _module_state(settings, net, x[:8], out_dir / "module_state_dict.pt")
    artifacts.write_json(report, out_dir / "export.json", indent=2)
    return report


def _module_state(settings: Any, net: Any, x: Any, path: Any) -> dict[str, Any]:
    """Write the finalist's weights under the user's module's names, checked in the module against `net`."""
    import torch

    from .. import artifacts
    from ..tracing import module_state, narrowed

    traced, model = settings.space_section.traced(settings.data.dataset)
    state = module_state(traced, model, net.state_dict())
    with torch.no_grad():
        diff = float((narrowed(model, state)(x) - net(x)).abs().max())
    if diff > 1e-3:
        raise RuntimeError(f"the finalist in {settings.space_section.model}'s own module differs from the network by "
                           f"{diff:.3g} on test images; not exported")
    artifacts.save_torch(state, path)
    return {"model": settings.space_section.model, "model_kwargs": dict(settings.space_section.model_kwargs),
            "state_dict": path.name, "max_abs_diff": diff,
            "load": "aows_core.tracing.narrowed(<the module>, <this state dict>)"}


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"wrote {args.out_dir}/model.onnx and state_dict.pt: ONNX Runtime vs PyTorch max |Δlogit| "
          f"{r['max_abs_diff']:.2g} on {r['checked_images']} test images, top-1 agreement {100 * r['top1_agreement']:.1f} %")
