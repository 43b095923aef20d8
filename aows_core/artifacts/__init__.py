"""The only code that touches the project's files: schemas, parquet with provenance, typed readers, atomic writes.

The public names of the submodules are available here (`from aows_core import artifacts as io`), loaded
on first use: importing the package itself imports neither pyarrow nor torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "schemas": ("META_KEY", "CHANNELS", "SCHEMAS"),
    "parquet": ("ArtifactError", "provenance", "write_table", "write_records", "read_table", "inspect", "notice",
                "check_writable"),
    "atomic": ("atomic_write", "copy_file", "write_text", "write_json", "save_onnx", "save_figure"),
    "readers": ("SPACE_WORDING", "DEVICE_WORDING", "require_space", "require_device", "read_configs", "read_latency",
                "read_lut", "require_fitted_on", "read_unaries", "write_decisions", "read_decisions", "read_decision", "decision_channels",
                "read_trajectory", "read_by_finalist"),
    "torchfiles": ("to_cpu", "save_torch", "load_torch", "current_names", "read_supernet_state", "read_network",
                   "read_epoch_checkpoint"),
    "journal": ("Journal",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, for type checkers and editors
    from .atomic import atomic_write, copy_file, save_figure, save_onnx, write_json, write_text  # noqa: F401
    from .journal import Journal  # noqa: F401
    from .parquet import (  # noqa: F401
        ArtifactError,
        check_writable,
        inspect,
        notice,
        provenance,
        read_table,
        write_records,
        write_table,
    )
    from .readers import (  # noqa: F401
        DEVICE_WORDING,
        SPACE_WORDING,
        decision_channels,
        read_by_finalist,
        read_configs,
        read_decision,
        read_decisions,
        read_latency,
        read_lut,
        read_trajectory,
        read_unaries,
        require_device,
        require_fitted_on,
        require_space,
        write_decisions,
    )
    from .schemas import CHANNELS, META_KEY, SCHEMAS  # noqa: F401
    from .torchfiles import (  # noqa: F401
        current_names,
        load_torch,
        read_epoch_checkpoint,
        read_network,
        read_supernet_state,
        save_torch,
        to_cpu,
    )
