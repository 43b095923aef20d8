"""Devices that time ONNX graphs in a deployment runtime (ONNX Runtime, OpenVINO), here or on another machine.

The graphs come from one `GraphFactory` (nets.onnx's graphs, weights external in one pool); the runtime builds and
times them through `aows_worker`'s classes — in this process, or in a worker started on the device by the `remote`
command prefix (devices.remote), so both sides time a network the same way (§4; docs/devices.md).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

import aows_worker

from ..nets import TIMING_WEIGHT_STD, WEIGHT_ALIGN
from ..nets.onnx import OPSET, _io, _model, edge_graph, param_shapes
from ..space import SearchSpace
from .base import Device, Setting, Timer, usable_cores

TIMING_FORM = "deploy(bn-folded)/onnx-opset17/external-initializers/iobinding/v2"
REMOTE = Setting("", "string", "Command prefix that reaches the device the runtime is timed on (`ssh pi@jetson`, "
                 "`docker exec box`, `srun -p edge`): aows starts its timing worker there and talks to it over the "
                 "command's stdin/stdout (docs/devices.md). Empty: time on this machine.")
WORKER = Setting("python3 aows_worker.py", "string", "With `remote`: the command that starts the timing worker on the "
                 "device (docs/devices.md installs it there). Changing it reruns nothing (docs/method.md D53).")
TIMEOUT = Setting(600.0, "number", "With `remote`: seconds one request (building or timing a network) may take before "
                  "it is an error naming the network. Changing it reruns nothing (docs/method.md D53).",
                  exclusive_minimum=0)
RETRIES = 3  # restarts of a remote worker lost during one measurement before the stage stops (a rerun resumes)


class GraphFactory:
    """Serialized timing graphs of one space, their weights external initialisers in one pool of small normal values
    (each tensor's (name, offset, shape) in float32 elements; ONNX external data `POOL_FILE` at that offset)."""

    def __init__(self, space: SearchSpace, batch: int, seed: int = 0):
        from onnx import helper

        self.space = space
        self.batch = int(batch)
        self.offsets: dict[str, int] = {}
        off = 0
        for name, shape in param_shapes(space, space.max_config):
            self.offsets[name] = off
            off += math.ceil(math.prod(shape) / WEIGHT_ALIGN) * WEIGHT_ALIGN
        rng = np.random.default_rng([int(seed), 0x0A05])
        self.pool = rng.standard_normal(off, dtype=np.float32) * np.float32(TIMING_WEIGHT_STD)
        inputs, outputs = _io(space, self.batch)
        self._head = _model(helper.make_graph([], space.name, inputs, outputs))
        self._edges: dict[tuple[int, int, int], tuple[bytes, list[tuple[str, int, tuple[int, ...]]]]] = {}

    def _edge(self, i: int, c_in: int, c_out: int) -> tuple[bytes, list[tuple[str, int, tuple[int, ...]]]]:
        """Cached (serialized GraphProto fragment, external initialisers) of edge i."""
        key = (i, c_in, c_out)
        hit = self._edges.get(key)
        if hit is not None:
            return hit
        from onnx import GraphProto, TensorProto

        nodes, params = edge_graph(self.space, i, c_in, c_out)
        frag = GraphProto()
        frag.node.extend(nodes)
        externals = []
        for name, shape in params:
            tp = frag.initializer.add()
            tp.name = name
            tp.data_type = TensorProto.FLOAT
            tp.dims.extend(shape)
            tp.data_location = TensorProto.EXTERNAL
            start = self.offsets[name]
            for k, v in (("location", aows_worker.POOL_FILE), ("offset", str(4 * start)),
                         ("length", str(4 * math.prod(shape)))):
                loc = tp.external_data.add()
                loc.key, loc.value = k, v
            externals.append((name, start, tuple(int(d) for d in shape)))
        hit = self._edges[key] = (frag.SerializeToString(), externals)
        return hit

    def prebuild(self) -> "GraphFactory":
        """Serialise every edge (i, c_i, c_{i+1}) of the space now (one-time setup)."""
        for i, (s, d) in enumerate(self.space.edges):
            for c_in in self.space.choices[s]:
                for c_out in self.space.choices[d] if s != d else (c_in,):
                    self._edge(i, c_in, c_out)
        return self

    def __call__(self, channels: Sequence[int]) -> tuple[bytes, list[tuple[str, int, tuple[int, ...]]]]:
        """(model bytes, external initialisers (name, pool offset, shape)) of a configuration."""
        from onnx import ModelProto

        self.space.indices(channels)
        full = self.space.full(channels)
        parts = [self._edge(i, full[s], full[d]) for i, (s, d) in enumerate(self.space.edges)]
        model = ModelProto()
        model.CopyFrom(self._head)
        # Concatenated serialized messages merge: repeated fields (node, initializer) append in order.
        model.graph.MergeFromString(b"".join(p[0] for p in parts))
        return model.SerializeToString(), [e for p in parts for e in p[1]]


class Local:
    """The runtime in this process (aows_worker's class, called directly)."""

    def __init__(self, runtime: str, options: dict[str, Any], pool: np.ndarray, x: np.ndarray, output_shape):
        try:
            self.runtime = aows_worker.RUNTIMES[runtime](options)
        except aows_worker.WorkerError as e:
            raise ValueError(str(e)) from None
        self.runtime.setup(pool, x, output_shape)
        self.fingerprint = self.runtime.fingerprint()

    def load(self, model: bytes, externals: list, what: str):
        """(run(repeats, warmup, min_time_s) → (ms, timed s), close) of the network of `model`."""
        run = self.runtime.load(model, externals)
        return (lambda repeats, warmup, min_time_s: aows_worker.run_timed(run, repeats, warmup, min_time_s)), None

    def alternate(self, timers: list[Timer], counts: list[tuple[int, float]], warmup: int,
                  chunks: int) -> list[list[np.ndarray]]:
        """The timers in alternating chunks, back to back in this process."""
        return aows_worker.alternate(timers, counts, warmup, chunks)

    def close(self) -> None:
        """Nothing is held beyond the runtime."""


class RuntimeDevice(Device):
    """A device that times the space's ONNX graphs (BN folded) in a deployment runtime; `remote` puts the runtime on
    another machine. Subclasses name the runtime and map their settings to its options."""

    runtime: ClassVar[str] = ""
    # How the device is reached enters the fingerprint as the runtime (here or remote) describes itself.
    untracked = ("remote", "worker", "timeout_s")

    def __init__(self, spec: Mapping[str, Any], space: SearchSpace, seed: int = 0):
        super().__init__(spec, space, seed)
        self.threads = int(self.spec["threads"])
        if self.threads < 1:
            raise ValueError(f"device {self.name!r}: threads must be ≥ 1, got {self.threads}")
        self.remote = str(self.spec["remote"]).strip()
        if not self.remote and self.threads > usable_cores():
            warnings.warn(f"{self.name}: {self.threads} threads on {usable_cores()} usable cores", stacklevel=2)
        self.graphs = GraphFactory(space, self.batch_size, self.seed).prebuild()  # one-time, well under a second
        rng = np.random.default_rng([self.seed, 0x1A])
        self.x = rng.standard_normal(self.input_shape, dtype=np.float32)
        out = (self.batch_size, space.num_classes)
        if self.remote:
            from .remote import Remote

            self.backend: Any = Remote(self.remote, str(self.spec["worker"]), float(self.spec["timeout_s"]),
                                       self.runtime, self.options(), self.graphs.pool, self.x, out)
        else:
            self.backend = Local(self.runtime, self.options(), self.graphs.pool, self.x, out)

    def options(self) -> dict[str, Any]:
        """The runtime's options (aows_worker's), from this device's settings."""
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        """Backend settings, the timing machine (the device's own when remote) and the runtime's build."""
        remote = {"remote": self.remote} if self.remote else {}
        return {**super().fingerprint(), **remote, **self.backend.fingerprint, "opset": OPSET, "form": TIMING_FORM}

    def open(self, channels: Sequence[int], job: int = 0) -> Timer:
        """The network of `channels`, built by the runtime with bound input and output (ms per forward)."""
        model, externals = self.graphs(channels)
        run, close = self.backend.load(model, externals, f"network {list(channels)}")
        return Timer(run, close)

    def _alternate(self, timers: list[Timer], counts: list[tuple[int, float]], warmup: int,
                   chunks: int) -> list[list[np.ndarray]]:
        """The paired measurement's chunks, as the backend runs them (remote: in one request)."""
        return self.backend.alternate(timers, counts, warmup, chunks)

    def measure(self, *args: Any, **kwargs: Any):
        return self._again_if_lost(super().measure, *args, **kwargs)

    def measure_paired(self, *args: Any, **kwargs: Any):
        return self._again_if_lost(super().measure_paired, *args, **kwargs)

    def _again_if_lost(self, measure, *args: Any, **kwargs: Any):
        """`measure`, started again whole on a fresh worker when the remote one was lost (RETRIES times)."""
        from .remote import WorkerLost

        for attempt in range(RETRIES + 1):
            try:
                return measure(*args, **kwargs)
            except WorkerLost as e:
                if not self.remote or attempt == RETRIES:
                    raise WorkerLost(f"{e}\nGave up after {attempt} restarts of the worker; what was timed is kept: "
                                     f"running the stage again resumes from its journal.") from None
                warnings.warn(f"{self.name}: {e}; starting the worker again", stacklevel=2)
                self.backend.connect()

    def close(self) -> None:
        self.backend.close()
