#!/usr/bin/env python3
"""Write docs/torchvision.md: which of torchvision's classification CNNs `space.model` traces (D48), and what a user
sees for the others.

    python3 scripts/torchvision_table.py           # (re)write the page
    python3 scripts/torchvision_table.py --check   # exit 1, saying what to run, when the committed page differs

Each model is built on the meta device (shapes only) with 10 classes and traced on 3×224×224 inputs. A traced one
lists its searchable widths, how many are tied across residual blocks, and the full network's MACs and parameters as
aows counts them (`devices.flops`), each asserted equal to the count of forward hooks on torchvision's own module (a
convolution costs kernel × in/groups × out × output size, a Linear in × out). Its supernet, with random weights and
BatchNorm statistics, is then checked in eval mode on 3×32×32 images: masked to each of CONFIGS configurations (the
widest, the narrowest, random ones) it gives the reduced network's logits, and the reduced network of one random
configuration exported to ONNX gives them in ONNX Runtime; the largest differences are in the table. A refused
one shows the error's first sentence.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAGE = ROOT / "docs" / "torchvision.md"
MODELS = ("resnet18", "resnet34", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "mobilenet_v2",
          "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b1", "regnet_x_400mf",
          "regnet_y_400mf", "mnasnet0_5", "mnasnet1_0", "shufflenet_v2_x1_0", "densenet121", "googlenet",
          "convnext_tiny", "squeezenet1_1", "vgg11_bn", "alexnet")


def counted(model) -> tuple[int, int]:
    """(MACs of one 3×224×224 image, parameters) of torchvision's module, by forward hooks on Conv2d and Linear."""
    import torch
    from torch import nn

    macs = [0]

    def hook(m, _inp, out) -> None:
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            macs[0] += kh * kw * (m.in_channels // m.groups) * m.out_channels * out.shape[2] * out.shape[3]
        else:
            macs[0] += m.in_features * m.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    device = next(model.parameters()).device
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, 224, 224, device=device))
    for h in handles:
        h.remove()
    return macs[0], sum(p.numel() for p in model.parameters())


CONFIGS = 20
CHECK_HW = 32
CHECK_HW_OF = {"alexnet": 64}  # its 11×11/4 stem and three 3×3/2 pools leave nothing of a 32×32 image
MASKED_TOL, ONNX_TOL = 1e-5, 1e-4  # on logits of standard deviation 1: float32 summation order, no more


def agreement(space) -> tuple[float, float]:
    """(max |masked − reduced| over CONFIGS configurations, max |ONNX Runtime − torch| of one reduced network) of a
    space traced on small images (CHECK_HW², or CHECK_HW_OF), in eval mode."""
    import numpy as np
    import torch

    from aows_core.nets.network import fold, folded_state
    from aows_core.nets.onnx import check_agreement, onnx_from_weights
    from aows_core.nets.supernet import Supernet

    sys.path.insert(0, str(ROOT / "tests" / "nets"))
    from net_cases import randomise  # the tests' random BatchNorm statistics and gates

    torch.manual_seed(0)
    sup = randomise(Supernet(space)).eval()
    rng = np.random.default_rng(0)
    configs = [space.max_config, space.min_config]
    configs += [[int(rng.choice(c)) for c in space.layer_choices] for _ in range(CONFIGS - 2)]
    hw = space.thetas[0].in_h
    x = torch.randn(CONFIGS, 3, hw, hw, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        last = [m for m in sup.classifier.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))][-1]
        last.weight /= sup(x).std()  # logits of standard deviation 1 at full width
        mixed = sup(x, torch.tensor(configs))
        masked = max(float((mixed[k] - sup.subnet(ch)(x[k:k + 1])[0]).abs().max()) for k, ch in enumerate(configs))
        net = fold(sup.subnet(configs[2]).eval())
        err, _ = check_agreement(onnx_from_weights(space, configs[2], folded_state(sup.subnet(configs[2]).eval())),
                                 net, x[:4], rtol=1e-3, atol=1e-3)
    return masked, float(err.max())


def build(name: str):
    """torchvision's `name` with 10 classes, on the meta device where its constructor allows."""
    import torch
    import torchvision

    kwargs = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
    try:
        with torch.device("meta"):
            return torchvision.models.get_model(name, num_classes=10, **kwargs)
    except NotImplementedError:  # a constructor that computes its widths from tensors (RegNet)
        return torchvision.models.get_model(name, num_classes=10, **kwargs)


def row(name: str) -> str:
    from aows_core.devices.flops import network_macs, network_params
    from aows_core.tracing import TraceError, trace_space

    model = build(name)
    try:
        space = trace_space(model, (3, 224, 224), name).space
    except TraceError as e:
        return f"| `{name}` | refused | {str(e).split('; ')[0].replace('|', '/')} |"
    macs, params = network_macs(space, space.base_config), network_params(space, space.base_config)
    assert (macs, params) == counted(model), (name, macs, params, counted(model))
    tied = sum(len(t) > 1 for t in space.tied())
    kept = sum(len(c) == 1 for c in space.layer_choices)
    widths = f"{space.n_layers - kept} searched widths ({tied} tied across blocks{f', {kept} kept' if kept else ''})"
    hw = CHECK_HW_OF.get(name, CHECK_HW)
    masked, exported = agreement(trace_space(model, (3, hw, hw), name).space)
    assert masked <= MASKED_TOL and exported <= ONNX_TOL, (name, masked, exported)
    return (f"| `{name}` | traced | {widths}, {macs / 1e6:.0f} MMAC, "
            f"{params / 1e6:.2f} M parameters, as torchvision's hooks count them; masked = reduced within "
            f"{MASKED_TOL:.0e} ({CONFIGS} configurations), ONNX Runtime = torch within {ONNX_TOL:.0e} |").replace("e-0", "e-")


def page() -> str:
    rows = [row(n) for n in MODELS]
    traced = sum("| traced |" in r for r in rows)
    return "\n".join([
        "# torchvision's CNNs as search spaces",
        "",
        "Generated by `python3 scripts/torchvision_table.py` (checked by tests/nets/test_torchvision_table.py): each",
        "model with 10 classes, traced on 3×224×224 inputs as `space.model: torchvision:<name>` traces it",
        "(docs/method.md D48, D49, D54, D55, [extending.md](extending.md)). A traced model's MACs and parameters at",
        "full width are asserted equal to those forward hooks count on torchvision's module; its supernet (random",
        "weights and",
        f"BatchNorm statistics, eval mode, 3×{CHECK_HW}×{CHECK_HW} images, AlexNet's 3×64×64) masked to each of "
        f"{CONFIGS} configurations gives the",
        "reduced network's logits, and one reduced network exported to ONNX gives them in ONNX Runtime. Widths a",
        "concatenation joins are kept at their traced width (docs/method.md D55). A refused one shows the first",
        f"sentence of the error a user sees. {traced} of {len(rows)} trace today.",
        "",
        "| model | | |",
        "|---|---|---|",
        *rows,
        "",
    ])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    text = page()
    if a.check:
        old = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(PAGE), "now"))
            print("\ndocs/torchvision.md is stale: run python3 scripts/torchvision_table.py")
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
