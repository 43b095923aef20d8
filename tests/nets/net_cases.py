"""Spaces of every preset family and helpers shared by the network tests (one network path, D44, D45)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torchvision
from torch import nn

from aows_core.kinds.units import Dense, Excitation, Unit
from aows_core.space import Stage, build_space, get_space
from aows_core.tracing import load_model, trace_space

# Every edge kind of a residual space: a ResNet stem with max-pool (convpool), a dwsep layer, bottleneck blocks
# whose first block projects its shortcut (stride 1, then 2) and identity blocks, at a tiny resolution.
TINY_BOTTLENECK = build_space(
    "tiny_bottleneck",
    [Stage("conv", 16, stride=2, pool=True), Stage("dwsep", 16), Stage("bottleneck", 32, 2, 1),
     Stage("bottleneck", 64, 2, 2)],
    resolution=16, in_channels=3, num_classes=5, n_choices=4,
)
# A user's own module traced (D48): a biased stem conv, residual stages with and without projection, a depthwise
# layer before a pointwise one (tests/fixtures/user_models.py).
TRACED_USER = trace_space(load_model(str(Path(__file__).parents[1] / "fixtures" / "user_models.py") + ":small_net",
                                     {"width": 8}), (1, 28, 28), "traced_user", n_choices=4).space
# torchvision's MNASNet traced (D48): inverted residuals whose sums a ReLU network leaves unactivated (`sum`).
TRACED_MNASNET = trace_space(torchvision.models.mnasnet0_5(num_classes=5), (3, 32, 32), "traced_mnasnet",
                             n_choices=3).space
# The example of one's own network (examples/my_cnn.py, D49): a Hardswish stem, grouped convolutions,
# squeeze-and-excitation, a SiLU head: units of their own activations beside the space's ReLU.
TRACED_EXAMPLE = trace_space(load_model(str(Path(__file__).parents[2] / "examples" / "my_cnn.py") + ":my_cnn",
                                        {"width": 8}), (1, 28, 28), "traced_example", n_choices=4).space
# A network in AlexNet's and VGG's style (D54): BN-less convolutions with biases, one with a bias before its BN, other
# paddings and max-pools, a flatten classifier of three Linear layers.
TRACED_PLAIN = trace_space(load_model(str(Path(__file__).parents[1] / "fixtures" / "user_models.py") + ":plain_net",
                                      {"width": 16}), (1, 28, 28), "traced_plain", n_choices=4).space
# A network in SqueezeNet's style (D55): Fire modules joined by concatenation, max-pools of their own, a
# convolutional classifier.
TRACED_FIRE = trace_space(load_model(str(Path(__file__).parents[1] / "fixtures" / "user_models.py") + ":fire_net",
                                     {"width": 32}), (1, 28, 28), "traced_fire", n_choices=4).space
FAMILIES = {"mobilenet_v1_fmnist": get_space("mobilenet_v1_fmnist"), "mobilenet_v2_fmnist": get_space("mobilenet_v2_fmnist"),
            "resnet_fmnist": get_space("resnet_fmnist"), "tiny_bottleneck": TINY_BOTTLENECK, "traced_user": TRACED_USER,
            "traced_mnasnet": TRACED_MNASNET, "traced_example": TRACED_EXAMPLE, "traced_plain": TRACED_PLAIN, "traced_fire": TRACED_FIRE}


def random_configs(space, n: int, seed: int = 0) -> list[list[int]]:
    """n configurations: the max, the min, then uniform ones."""
    rng = np.random.default_rng(seed)
    out = [space.max_config, space.min_config]
    out += [[int(rng.choice(c)) for c in space.layer_choices] for _ in range(n - 2)]
    return out[:n]


def images(space, n: int, seed: int = 1) -> torch.Tensor:
    h, w = space.resolution
    return torch.randn(n, space.in_channels, h, w, generator=torch.Generator().manual_seed(seed))


def randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BN running statistics and affine parameters (non-zero shifts: D10), a classifier with O(1) logits;
    in a "relu6" space BN gains 4× larger, so that ReLU6 saturates (3–12 % of activations above 6); a
    squeeze-and-excitation's gates open to about 0.9 (D49). A module of
    another kind (a user's, D48) gets its BNs and its convolutions' own biases randomised, so does a network's conv
    with a bias (a unit without BN, D54)."""
    g = torch.Generator().manual_seed(seed)
    gain = 4.0 if getattr(model, "space", None) is not None and model.space.act == "relu6" else 1.0
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.3)
                m.running_var.copy_(torch.rand(n, generator=g) * 1.5 + 0.5)
                m.weight.copy_(gain * (0.5 + 0.5 * torch.rand(n, generator=g)))
                m.bias.copy_(0.3 * torch.randn(n, generator=g))
            elif isinstance(m, Excitation):  # gates near 0.9 rather than 0.5, so that logits stay of order 1
                m.fc2.bias.copy_(2.5 + 0.5 * torch.randn(m.fc2.bias.shape, generator=g))
            elif isinstance(m, nn.Conv2d) and m.bias is not None and getattr(model, "space", None) is None:
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))
            elif isinstance(m, Unit) and m.conv.bias is not None:  # a unit without BN or with its conv's own bias
                m.conv.bias.copy_(0.3 * torch.randn(m.conv.bias.shape, generator=g))
        if getattr(model, "space", None) is None:
            return model
        for lin in model.modules():  # hidden layers (fc, D56) and the classifier: logits of order 1
            if isinstance(lin, nn.Linear):
                gain = 2.0 ** 0.5 if isinstance(lin, Dense) else 1.0  # variance-preserving through its ReLU
                lin.weight.copy_(gain * torch.randn(lin.weight.shape, generator=g) / lin.weight.shape[1] ** 0.5)
    return model
