"""aows's timing worker: times ONNX networks where they deploy (§4 profiles whole networks on the target device).

One file, Python ≥ 3.9 with numpy and the runtime (ONNX Runtime or OpenVINO); no torch, no aows. The workstation
starts it through a command prefix (`ssh pi@jetson`, `docker exec box`, …: a device's `remote` setting) and talks
to it in JSON lines over its stdin/stdout, one reply per request: ONNX models (base64), a weight pool and timing
requests — never pickles or code. The local `onnxruntime` and `openvino` devices run the same classes in-process,
so a network is timed the same way on both sides (docs/devices.md).

Install on the device (one command, from the project's folder on the workstation):

    ssh pi@jetson 'python3 -m pip install --user numpy onnxruntime && cat > aows_worker.py' < aows_worker.py
"""

from __future__ import annotations

import base64
import json
import os
import platform
import sys
import tempfile
import time
from typing import Any, Callable

VERSION = "0.3.0/1"  # aows's version / the protocol's: the workstation refuses a worker of another
MAX_MESSAGE = 256 << 20  # bytes of one request line; a longer one is refused and skipped
MAX_REPEAT_FACTOR = 20
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")  # ONNX Runtime providers that compute on a GPU
POOL_FILE = "aows-timing-pool"  # the external-data file an ONNX graph of the timing factory names
INSTALL = {
    "numpy": "python3 -m pip install --user numpy",
    "onnxruntime": "python3 -m pip install --user onnxruntime",
    "openvino": "python3 -m pip install --user openvino",
}


class WorkerError(Exception):
    """A request the worker refuses: its reply's `error`, with a `kind` the workstation acts on."""

    def __init__(self, message: str, kind: str = "request"):
        super().__init__(message)
        self.kind = kind


def timed_loop(call: Callable[[], Any], repeats: int, warmup: int, min_time_s: float):
    """Per-repeat ns of `call`: `warmup` untimed calls, then `repeats` timed ones, extended (up to
    MAX_REPEAT_FACTOR × repeats) until the timed passes add up to `min_time_s`, so that fast networks
    are not dominated by their construction overhead."""
    import numpy as np

    clock = time.perf_counter_ns
    for _ in range(warmup):
        call()
    cap = repeats * MAX_REPEAT_FACTOR if min_time_s > 0 else repeats
    out = np.empty(cap, dtype=np.float64)
    need = min_time_s * 1e9
    total = 0.0
    r = 0
    while r < cap and (r < repeats or total < need):
        a = clock()
        call()
        out[r] = clock() - a
        total += out[r]
        r += 1
    return out[:r]


def run_timed(run: Callable, repeats: int, warmup: int, min_time_s: float):
    """(per-repeat ms, seconds inside timed passes) of a loaded network, the garbage collector paused meanwhile."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        ns = run(repeats, warmup, min_time_s)
    finally:
        if enabled:
            gc.enable()
    return ns / 1e6, float(ns.sum()) / 1e9


def alternate(runs: list, counts: list, warmup: int, chunks: int) -> list:
    """[[each run's result] per chunk]: the runs timed in `chunks` alternating chunks, run k as run(n_k, warmup,
    seconds_k) for counts[k] = (n_k, seconds_k) — a paired measurement (a network and the reference, D27)."""
    return [[run(n, warmup, t) for run, (n, t) in zip(runs, counts)] for _ in range(chunks)]


def _import(name: str):
    """The module `name`, or a WorkerError naming the command that installs it on this machine."""
    try:
        return __import__(name)
    except ImportError as e:
        raise WorkerError(f"{name} is not installed on {platform.node()} ({sys.executable}): {e}. Install it there "
                          f"with: {INSTALL.get(name, f'python3 -m pip install --user {name}')}", "runtime") from None


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo, else platform.processor())."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_fingerprint() -> dict[str, Any]:
    """Machine facts: CPU model, cores, architecture, OS (not the host name or affinity)."""
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "system": platform.system()}


class Runtime:
    """A deployment runtime on this machine: builds networks from ONNX bytes whose weights lie in one pool."""

    name = ""

    def __init__(self, options: dict[str, Any]):
        self.options = dict(options)
        self.np = _import("numpy")
        self.pool = self.x = None
        self.output_shape: tuple[int, ...] = ()

    def setup(self, pool, x, output_shape) -> None:
        """The weight pool (float32, the graphs' external data), the timed input batch and the output's shape."""
        self.pool, self.x, self.output_shape = pool, x, tuple(output_shape)

    def fingerprint(self) -> dict[str, Any]:
        """What makes two timings comparable on this side: the machine, the runtime and its version."""
        return host_fingerprint()

    def load(self, model: bytes, externals: list) -> Callable[[int, int, float], Any]:
        """The network of ONNX `model` (external initialisers [(name, offset, shape)] in the pool), ready to time:
        `run(repeats, warmup, min_time_s)` → per-repeat ns."""
        raise NotImplementedError


class OnnxRuntime(Runtime):
    """ONNX Runtime: one InferenceSession per network, weights as external OrtValues over the pool (no copy),
    input and output bound once (IOBinding), sequential execution, denormals flushed."""

    name = "onnxruntime"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.ort = _import("onnxruntime")
        self.providers = list(options.get("providers") or ["CPUExecutionProvider"])
        available = self.ort.get_available_providers()
        missing = [p for p in self.providers if p not in available]
        if missing:
            raise WorkerError(f"onnxruntime {self.ort.__version__} on {platform.node()} lacks the execution "
                              f"provider(s) {missing}; this build offers {available}: set the device's `providers` "
                              f"to some of those, or install a build with them (onnxruntime-gpu, "
                              f"onnxruntime-openvino, …)", "runtime")
        self.provider_options = [dict(options.get("provider_options", {}).get(p, {})) for p in self.providers]
        if "TensorrtExecutionProvider" in self.providers:  # engines cached for the session (a reference rebuilt once)
            trt = self.provider_options[self.providers.index("TensorrtExecutionProvider")]
            trt.setdefault("trt_engine_cache_enable", "True")
            trt.setdefault("trt_engine_cache_path", tempfile.mkdtemp(prefix="aows-trt-"))
        # Inputs and outputs live where the first provider computes (a GPU's memory for CUDA and TensorRT).
        self.io_device = "cuda" if self.providers[0] in GPU_PROVIDERS else "cpu"
        self._values: dict[tuple[str, int, tuple[int, ...]], Any] = {}

    def setup(self, pool, x, output_shape) -> None:
        super().setup(pool, x, output_shape)
        self._values.clear()
        ov = self.ort.OrtValue.ortvalue_from_numpy
        self._x = ov(x, self.io_device, 0)
        self._y = ov(self.np.zeros(self.output_shape, self.np.float32), self.io_device, 0)

    def fingerprint(self) -> dict[str, Any]:
        options = {p: {k: v for k, v in o.items() if k != "trt_engine_cache_path"}
                   for p, o in zip(self.providers, self.provider_options) if o}
        return {**super().fingerprint(), "onnxruntime": self.ort.__version__, "provider": ",".join(self.providers),
                **({"provider_options": options} if options else {})}

    def session_options(self):
        """SessionOptions of the timing protocol (threads, sequential, optimisation level, denormals flushed)."""
        ort, o = self.ort, self.options
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(o.get("threads", 1))
        so.inter_op_num_threads = int(o.get("inter_op_threads", 1))
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        level = o.get("graph_optimization", "all")
        so.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
        so.log_severity_level = 3
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
        return so

    def session(self, model: bytes, externals: list):
        """An InferenceSession of `model`, its external initialisers views of the pool."""
        so = self.session_options()
        names, values = [], []
        for name, offset, shape in externals:
            shape = tuple(int(d) for d in shape)
            key = (name, int(offset), shape)
            value = self._values.get(key)
            if value is None:
                n = 1
                for d in shape:
                    n *= d
                view = self.pool[int(offset): int(offset) + n].reshape(shape)
                value = self._values[key] = self.ort.OrtValue.ortvalue_from_numpy(view)
            names.append(name)
            values.append(value)
        so.add_external_initializers(names, values)
        return self.ort.InferenceSession(model, so, providers=self.providers, provider_options=self.provider_options)

    def load(self, model: bytes, externals: list) -> Callable[[int, int, float], Any]:
        sess = self.session(model, externals)
        binding = sess.io_binding()
        binding.bind_ortvalue_input(sess.get_inputs()[0].name, self._x)
        binding.bind_ortvalue_output(sess.get_outputs()[0].name, self._y)
        run_once = sess.run_with_iobinding
        return lambda repeats, warmup, min_time_s: timed_loop(lambda: run_once(binding), repeats, warmup, min_time_s)


class OpenVino(Runtime):
    """OpenVINO: the ONNX graph read with its weights from the pool file, compiled for the device plugin with the
    configured hint, threads and inference precision; one infer request, its input tensor set once."""

    name = "openvino"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.ov = _import("openvino")
        self.core = self.ov.Core()
        self.target = str(options.get("ov_device", "CPU"))
        if self.target not in self.core.available_devices:
            raise WorkerError(f"OpenVINO {self.ov.__version__} on {platform.node()} has no device {self.target!r}; "
                              f"it offers {self.core.available_devices}", "runtime")
        self.dir = tempfile.mkdtemp(prefix="aows-ov-")

    def setup(self, pool, x, output_shape) -> None:
        super().setup(pool, x, output_shape)
        with open(os.path.join(self.dir, POOL_FILE), "wb") as f:
            f.write(pool.tobytes())

    def config(self) -> dict[str, Any]:
        """The compile configuration the device's settings name."""
        o = self.options
        return {"PERFORMANCE_HINT": str(o.get("performance_hint", "LATENCY")),
                "INFERENCE_NUM_THREADS": int(o.get("threads", 1)), "NUM_STREAMS": 1,
                "INFERENCE_PRECISION_HINT": str(o.get("inference_precision", "f32"))}

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "openvino": self.ov.__version__, "ov_device": self.target,
                "ov_device_name": self.core.get_property(self.target, "FULL_DEVICE_NAME"), "config": self.config()}

    def load(self, model: bytes, externals: list) -> Callable[[int, int, float], Any]:
        path = os.path.join(self.dir, "model.onnx")
        with open(path, "wb") as f:
            f.write(model)
        compiled = self.core.compile_model(self.core.read_model(path), self.target, self.config())
        request = compiled.create_infer_request()
        request.set_input_tensor(self.ov.Tensor(self.x, shared_memory=True))
        infer = request.infer
        return lambda repeats, warmup, min_time_s: timed_loop(infer, repeats, warmup, min_time_s)


RUNTIMES = {c.name: c for c in (OnnxRuntime, OpenVino)}


class Worker:
    """The worker's state: its runtime and the networks loaded, answering one request at a time."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self.nets: dict[int, Callable] = {}
        self.next_id = 0

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request (a WorkerError becomes {"ok": false, ...})."""
        op = req.get("op")
        if op == "hello":
            return self.hello(req)
        if self.runtime is None:
            raise WorkerError(f"request {op!r} before hello")
        if op == "setup":
            np = self.runtime.np
            shape = [int(d) for d in req["input_shape"]]
            self.runtime.setup(np.frombuffer(base64.b64decode(req["pool"]), np.float32),
                               np.frombuffer(base64.b64decode(req["input"]), np.float32).reshape(shape).copy(),
                               req["output_shape"])
            return {"ok": True}
        if op == "load":
            t0 = time.perf_counter()
            run = self.runtime.load(base64.b64decode(req["model"]), req.get("externals", []))
            self.next_id += 1
            self.nets[self.next_id] = run
            return {"ok": True, "net": self.next_id, "build_s": time.perf_counter() - t0}
        if op == "time":
            run = self._net(req.get("net"))
            ms, timed = run_timed(run, int(req["repeats"]), int(req.get("warmup", 0)), float(req.get("min_time_s", 0)))
            return {"ok": True, "ms": ms.tolist(), "timed_s": timed}
        if op == "paired":  # the chunks in one request: nothing wakes this machine between them
            runs = [self._net(n) for n in req["nets"]]
            timed = [lambda n, w, t, run=run: run_timed(run, n, w, t) for run in runs]
            chunks = alternate(timed, req["counts"], int(req.get("warmup", 0)), int(req["chunks"]))
            return {"ok": True, "ms": [[ms.tolist() for ms, _ in c] for c in chunks]}
        if op == "close":
            self.nets.pop(req.get("net"), None)
            return {"ok": True}
        raise WorkerError(f"unknown request {op!r}")

    def _net(self, net: Any) -> Callable:
        if net not in self.nets:
            raise WorkerError(f"no network {net!r} is loaded")
        return self.nets[net]

    def hello(self, req: dict[str, Any]) -> dict[str, Any]:
        """Check the workstation's version, start the runtime and report this side's fingerprint."""
        if req.get("version") != VERSION:
            raise WorkerError(f"the workstation speaks aows worker {req.get('version')!r}, this worker is {VERSION!r} "
                              f"({os.path.abspath(__file__)})", "version")
        name = req.get("runtime")
        if name not in RUNTIMES:
            raise WorkerError(f"unknown runtime {name!r}; this worker offers {sorted(RUNTIMES)}", "runtime")
        self.runtime = RUNTIMES[name](dict(req.get("options", {})))
        self.nets.clear()
        fp = {**self.runtime.fingerprint(), "python": platform.python_version(), "numpy": self.runtime.np.__version__}
        return {"ok": True, "version": VERSION, "fingerprint": fp}


def read_line(stream, limit: int = MAX_MESSAGE) -> bytes | None:
    """One line of at most `limit` bytes (None at end of input); a longer line is read to its end, dropped and
    refused with a WorkerError, so the channel stays in step."""
    line = stream.readline(limit + 1)
    if not line:
        return None
    if len(line) > limit and not line.endswith(b"\n"):
        while True:
            rest = stream.readline(1 << 20)
            if not rest or rest.endswith(b"\n"):
                break
        raise WorkerError(f"a request longer than {limit} bytes was refused", "oversized")
    return line


def serve(stdin=None, stdout=None, limit: int = MAX_MESSAGE) -> None:
    """Answer requests (one JSON object per line, at most `limit` bytes) until end of input or {"op": "bye"}; a bad
    request is answered with an error and the worker goes on."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    worker = Worker()
    while True:
        try:
            line = read_line(stdin, limit)
            if line is None:
                return
            try:
                req = json.loads(line)
            except ValueError as e:
                raise WorkerError(f"not a JSON request ({e}): {line[:60]!r}", "garbage") from None
            if not isinstance(req, dict):
                raise WorkerError(f"a request is a JSON object, got {type(req).__name__}", "garbage")
            if req.get("op") == "bye":
                return
            reply = worker.handle(req)
        except WorkerError as e:
            reply = {"ok": False, "kind": e.kind, "error": str(e)}
        except Exception as e:  # a runtime's own failure (a graph it cannot build): answered, not fatal
            reply = {"ok": False, "kind": "runtime-error", "error": f"{type(e).__name__}: {e}"}
        stdout.write(json.dumps(reply).encode() + b"\n")
        stdout.flush()


def main(argv: list[str] | None = None) -> None:
    """Serve on this process's stdin/stdout; whatever a library prints goes to stderr, not into the channel."""
    import argparse

    ap = argparse.ArgumentParser(description="aows's timing worker: JSON requests on stdin, replies on stdout.")
    ap.add_argument("--max-message", type=int, default=MAX_MESSAGE, help="bytes of the longest request accepted")
    ap.add_argument("--version", action="version", version=VERSION)
    args = ap.parse_args(argv)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, out, args.max_message)


if __name__ == "__main__":
    main()
