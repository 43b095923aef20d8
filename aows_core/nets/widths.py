"""Per-sample widths of a supernet pass (§5): channel counts from choice indices, placed on the training device
with their per-node range read on the host, and the checks every slimmable supernet shares (docs/method.md D29)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ..space import SearchSpace


def widths_tensor(space: SearchSpace, idx, device=None) -> torch.Tensor:
    """(B, n_layers) int64 channel counts from choice indices of shape (B, n+1) (sampler output) or (B, n_layers)."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim != 2:
        raise ValueError(f"choice indices must be 2-d (B, n_layers) or (B, n+1), got shape {idx.shape}")
    idx = space.layer_columns(idx)  # (B, n+1) chain nodes → (B, n_layers)
    out = np.empty_like(idx)
    for i, ch in enumerate(space.layer_choices):
        col = idx[:, i]
        if col.size and (col.min() < 0 or col.max() >= len(ch)):
            raise ValueError(f"choice index out of range at layer {i}: allowed 0..{len(ch) - 1}")
        out[:, i] = np.asarray(ch, dtype=np.int64)[col]
    return torch.as_tensor(out, device=device)


class DeviceWidths(NamedTuple):
    """Per-sample widths on the training device with their per-layer range read on the host (§5): a masked pass
    then reads nothing back from the device (docs/method.md D29)."""

    values: torch.Tensor  # (B, n_layers) int64 channel counts, on the device of the batch
    lowest: tuple[int, ...]  # per layer, the batch's smallest width (validated on the host)
    widest: tuple[int, ...]  # per layer, the batch's largest width (what `truncate` computes up to)

    @property
    def shape(self) -> torch.Size:
        return self.values.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype


def host_to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host tensor on `device`; to CUDA through page-locked memory, so the copy does not wait for the stream (D29)."""
    device = torch.device(device)
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


def place_widths(widths: torch.Tensor, device: torch.device | str) -> list[DeviceWidths]:
    """(R, B, n_layers) host widths → R `DeviceWidths`: ranges read on the host, ONE non-blocking copy to the device."""
    if widths.dim() != 3:
        raise ValueError(f"widths must be (R, B, n_layers), got {tuple(widths.shape)}")
    host = widths.detach().to("cpu", torch.int64)
    lo, hi = (v.tolist() for v in torch.aminmax(host, dim=1)) if host.numel() else ([[]] * len(host), [[]] * len(host))
    on_device = host_to_device(host, device)
    return [DeviceWidths(on_device[r], tuple(lo[r]), tuple(hi[r])) for r in range(len(host))]
