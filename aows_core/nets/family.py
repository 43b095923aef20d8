"""One import for the networks of any space (§3, §7; docs/method.md D44): MobileNet-v1 for a chain, else residual.

A chain space (`space.is_chain`) keeps `nets.mobilenet.MobileNetV1` / `nets.slimmable.SlimmableMobileNetV1` and
their timing factory; every other space gets `nets.residual`'s classes.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..space import SearchSpace
from . import mobilenet, residual
from .slimmable import SlimmableMobileNetV1

Network = mobilenet.MobileNetV1 | residual.ResidualNet
Supernet = SlimmableMobileNetV1 | residual.SlimmableResidualNet


def network(space: SearchSpace, channels: Sequence[int], bn: bool = True, init: bool = True, device=None) -> Network:
    """The fixed-width network of `channels` (`bn=False`: the deployment form)."""
    cls = mobilenet.MobileNetV1 if space.is_chain else residual.ResidualNet
    return cls(space, channels, bn=bn, init=init, device=device)


def supernet(space: SearchSpace, channels_last: bool = False, device=None) -> Supernet:
    """The slimmable supernet of `space` (§3, §5)."""
    cls = SlimmableMobileNetV1 if space.is_chain else residual.SlimmableResidualNet
    return cls(space, channels_last=channels_last, device=device)


def timing_factory(space: SearchSpace, seed: int = 0, device: str | torch.device = "cpu",
                   channels_last: bool = False) -> mobilenet.TimingFactory:
    """The deployment-form timing networks of `space` (§4): `.prebuild()`, then `factory(channels)`."""
    cls = mobilenet.TimingFactory if space.is_chain else residual.ResidualTimingFactory
    return cls(space, seed=seed, device=device, channels_last=channels_last)


def folded_state(net: nn.Module) -> dict[str, torch.Tensor]:
    """The deployment-form state dict of a fixed-width network (BN folded into its convolutions)."""
    if isinstance(net, residual.ResidualNet):
        return residual.folded_state(net)
    return mobilenet.folded_state(net)


def fold(net: nn.Module) -> Network:
    """The deployment form of a fixed-width network, in eval mode (the same outputs as net.eval())."""
    if isinstance(net, residual.ResidualNet):
        return residual.fold_bn(net)
    return mobilenet.fold_bn(net)
