"""A device in one file: `toy-macs`, a clock that reads the network's multiply-accumulates.

Its latency is a deterministic function of the configuration: batch_size × (ms_per_mmac × MMAC + layer_ms per
layer), the same value every pass. Each layer's share depends only on the layer's two widths, so eq. lat (§4) holds
exactly and a latency table fitted on it predicts every network. Everything aows needs to profile, fit, decode and
verify on it is here: the class declares its backend name, unit and settings and `@register` makes it configurable
(docs/extending.md). tests/devices/test_one_file_device.py imports this file and runs it end to end.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from aows_core.devices.base import Device, Setting, Timer, register
from aows_core.devices.flops import network_macs


@register
class MacsClock(Device):
    """ms per forward of a batch, from the network's MACs (no machine, no noise)."""

    name = "toy-macs"
    unit = "ms"
    settings = {
        **Device.settings,
        "ms_per_mmac": Setting(0.05, "number", "Milliseconds per million multiply-accumulates.", exclusive_minimum=0),
        "layer_ms": Setting(0.01, "number", "Milliseconds every layer costs whatever its widths.", minimum=0),
    }

    def fingerprint(self) -> dict[str, Any]:
        """The settings (super) and the form: nothing of the machine changes its values."""
        return {**super().fingerprint(), "form": "toy-macs/v1"}

    def latency(self, channels: Sequence[int]) -> float:
        """The value every pass of the network of `channels` takes (ms)."""
        mmac = network_macs(self.space, channels) / 1e6
        per_image = self.spec["ms_per_mmac"] * mmac + self.spec["layer_ms"] * len(self.space.edges)
        return self.batch_size * per_image

    def open(self, channels: Sequence[int], job: int = 0) -> Timer:
        """`repeats` equal values; the seconds they represent count as timed."""
        value = self.latency(channels)
        return Timer(lambda repeats, warmup, min_time_s: (np.full(repeats, value), value * repeats / 1e3))
