"""Torch files: checkpoints and model files, written atomically on the CPU and read with one space check.

torch is imported inside the functions, so importing this module stays light. Files hold only dicts,
tensors and numpy arrays (never an aows_core class), so they load whatever the module layout.
"""

from __future__ import annotations

import os
from typing import Any

from ..space import SearchSpace
from .atomic import atomic_write
from .parquet import ArtifactError
from .readers import require_space


def to_cpu(obj: Any) -> Any:
    """obj with every tensor on the CPU (checkpoints written on a GPU load anywhere)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        out = type(obj)((k, to_cpu(v)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata  # state_dict versions
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def save_torch(obj: Any, path: str | os.PathLike) -> None:
    """`torch.save` of obj (moved to the CPU), atomic: temp file then rename."""
    import torch

    atomic_write(path, lambda tmp: torch.save(to_cpu(obj), tmp))


def load_torch(path: str | os.PathLike) -> Any:
    """A torch file loaded onto the CPU (full pickle: our own checkpoints hold optimiser and numpy state)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def current_names(model: dict[str, Any], space: SearchSpace, path: str | os.PathLike, rerun: str) -> dict[str, Any]:
    """A model state dict in today's parameter names (docs/method.md D45). A MobileNet-v1 file written before the one
    network path names edge i's modules ``features.{i}.{j}``: they are renamed, edge by edge in registration order,
    to ``layers.{i}.…`` (the same tensors); a file that does not map is refused naming the stage to rerun."""
    if not any(k.startswith("features.") for k in model):
        return model
    from ..nets.network import Network

    ref = list(Network(space, space.max_config, init=False, device="meta").state_dict())
    out: dict[str, Any] = {}
    for i in range(space.n_edges - 1):
        old = [k for k in model if k.startswith(f"features.{i}.")]
        new = [k for k in ref if k.startswith(f"layers.{i}.")]
        if len(old) != len(new):
            raise ArtifactError(f"{path} holds a network of an older layout whose edge {i} has {len(old)} tensors "
                                f"where today's has {len(new)}; rerun {rerun}")
        out.update(zip(new, (model[k] for k in old)))
    out.update((k, v) for k, v in model.items() if k.startswith("classifier."))
    if len(out) != len(model):
        raise ArtifactError(f"{path} holds a network of an older layout that does not map onto today's; rerun {rerun}")
    return out


def read_supernet_state(path: str | os.PathLike, space: SearchSpace) -> dict[str, Any]:
    """The weights of a supernet's model.pt, refused if it belongs to another space."""
    state = load_torch(path)
    if not isinstance(state, dict) or "model" not in state:
        raise ArtifactError(f"{path} is not a supernet model file (no 'model' entry); rerun the supernet training")
    require_space(state, space, path, "supernet")
    return current_names(state["model"], space, path, "the supernet training")


def read_network(path: str | os.PathLike, space: SearchSpace) -> dict[str, Any]:
    """A retrained network's model.pt ({'channels', 'model', 'space_hash', ...}), refused if of another space."""
    state = load_torch(path)
    if not isinstance(state, dict):
        raise ArtifactError(f"{path} is not a retrained model file; pass the model.pt of a retraining")
    require_space(state, space, path, "network")
    if "model" not in state or "channels" not in state:
        raise ArtifactError(f"{path} is not a retrained model file (no 'model' and 'channels' entries); rerun the retraining")
    return {**state, "model": current_names(state["model"], space, path, "the retraining")}


def read_epoch_checkpoint(path: str | os.PathLike, space: SearchSpace, completed_epochs: int) -> dict[str, Any]:
    """The OWS checkpoint after `completed_epochs` epochs (AOWS's warm start, supplementary B), of this space."""
    state = load_torch(path)
    if not isinstance(state, dict):
        raise ArtifactError(f"{path} is not an OWS epoch checkpoint; pass out/checkpoints/after_<W>.pt of the OWS run")
    require_space(state, space, path, "epoch_checkpoint")
    if state.get("completed_epochs") != completed_epochs:
        raise ArtifactError(
            f"{path} is not the OWS checkpoint after {completed_epochs} epochs of this space "
            f"(space {state.get('space_hash')}, after {state.get('completed_epochs')} epochs)"
        )
    return {**state, "model": current_names(state["model"], space, path, "the OWS supernet training")}
