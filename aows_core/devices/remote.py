"""The channel to a timing worker on another machine (§4 profiles on the target device): a command prefix
(`ssh pi@jetson`, `docker exec box`, `srun -p edge`) starts `aows_worker.py` there; requests and replies are JSON
lines over its stdin/stdout (aows_worker's docstring). Every request has a deadline: a worker that does not answer
in time is killed and the request is an error, never a hang; a worker that dies is `WorkerLost`, which the device
answers by starting it again (docs/devices.md)."""

from __future__ import annotations

import base64
import json
import os
import select
import shlex
import subprocess
import tempfile
import time
from typing import Any

import aows_worker

CONNECT_TIMEOUT_S = 120.0  # seconds to reach the worker and start its runtime (an ssh asking for a password waits)


class WorkerLost(RuntimeError):
    """The worker died or closed its end of the channel."""


class WorkerRefused(RuntimeError):
    """The worker answered a request with an error (a wrong version, a missing runtime, a graph it cannot build)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class Channel:
    """One worker process reached by `command` (a list of argv words), answering one request at a time."""

    def __init__(self, command: list[str], timeout_s: float):
        self.command, self.timeout_s = list(command), float(timeout_s)
        self.proc: subprocess.Popen | None = None
        self._buf = b""
        self._err = tempfile.TemporaryFile()

    def start(self) -> None:
        """Start the worker (its stderr kept for error messages)."""
        self.close()
        self._buf = b""
        self._err.seek(0)
        self._err.truncate()
        try:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                         bufsize=0)
        except OSError as e:
            raise WorkerLost(f"could not start the timing worker with {shlex.join(self.command)!r}: {e}") from None
        os.set_blocking(self.proc.stdin.fileno(), False)

    def stderr_tail(self, n: int = 1500) -> str:
        """The last characters the worker (or the command reaching it) wrote to stderr."""
        self._err.seek(0)
        return self._err.read().decode(errors="replace")[-n:].strip()

    def request(self, message: dict[str, Any], what: str, timeout_s: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its reply (`what` names it in errors); a refusal raises WorkerRefused."""
        if self.proc is None or self.proc.poll() is not None:
            raise WorkerLost(self._lost(what))
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        self._send(json.dumps(message).encode() + b"\n", what, deadline, timeout_s)
        reply = self._read_line(what, deadline, timeout_s)
        try:
            reply = json.loads(reply)
        except ValueError:
            raise WorkerLost(f"{what}: the worker answered something that is not a reply: {reply[:200]!r} — "
                             f"does the command print to stdout before it starts the worker?") from None
        if not reply.get("ok"):
            raise WorkerRefused(f"{what}: {reply.get('error')}", str(reply.get("kind")))
        return reply

    def _timeout(self, what: str, timeout_s: float) -> TimeoutError:
        self.kill()
        return TimeoutError(f"{what} did not answer within {timeout_s:g} s (the device's timeout_s); the worker "
                            f"({shlex.join(self.command)}) was stopped")

    def _send(self, data: bytes, what: str, deadline: float, timeout_s: float) -> None:
        """Write `data` to the worker before `deadline` (a worker that stops reading is a timeout, not a hang)."""
        fd, view = self.proc.stdin.fileno(), memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise self._timeout(what, timeout_s)
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except OSError:
                raise WorkerLost(self._lost(what)) from None

    def _read_line(self, what: str, deadline: float, timeout_s: float) -> bytes:
        """The next line the worker writes, before `deadline` (else the worker is killed and TimeoutError raised)."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise self._timeout(what, timeout_s)
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerLost(self._lost(what))
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _lost(self, what: str) -> str:
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        tail = self.stderr_tail()
        return (f"{what}: the timing worker ({shlex.join(self.command)}) is gone (exit status {code})"
                + (f"; it said:\n{tail}" if tail else ""))

    def kill(self) -> None:
        """Stop the worker at once."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Say goodbye and stop the worker."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.write(self.proc.stdin.fileno(), b'{"op": "bye"}\n')
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        self.proc = None


class Remote:
    """A runtime on another machine behind a Channel: the same `load` → run interface as the in-process runtime."""

    def __init__(self, remote: str, worker: str, timeout_s: float, runtime: str, options: dict[str, Any], pool, x,
                 output_shape):
        try:
            command = shlex.split(remote) + shlex.split(worker)
        except ValueError as e:
            raise ValueError(f"the device's remote {remote!r} and worker {worker!r} are not a command line ({e}); "
                             f"quote them as a shell would") from None
        self.channel = Channel(command, timeout_s)
        self.hello = {"op": "hello", "version": aows_worker.VERSION, "runtime": runtime, "options": options}
        self.setup = {"op": "setup", "pool": base64.b64encode(pool.tobytes()).decode(),
                      "input": base64.b64encode(x.tobytes()).decode(), "input_shape": list(x.shape),
                      "output_shape": list(output_shape)}
        self.fingerprint: dict[str, Any] | None = None
        self.connect()

    def connect(self) -> None:
        """Start the worker, check its version and runtime, hand it the weight pool; its fingerprint must not change
        between connections (the same device)."""
        self.channel.start()
        what = f"connecting to the timing worker ({shlex.join(self.channel.command)})"
        try:
            reply = self.channel.request(self.hello, what, min(self.channel.timeout_s, CONNECT_TIMEOUT_S))
        except WorkerRefused as e:
            self.channel.close()
            if e.kind == "version":
                raise WorkerRefused(f"{e}. Install this workstation's worker on the device: "
                                    f"{aows_worker.INSTALL['numpy']} && cat > aows_worker.py < aows_worker.py "
                                    f"(through the device's remote command; docs/devices.md)", e.kind) from None
            raise
        if reply.get("version") != aows_worker.VERSION:
            self.channel.close()
            raise WorkerRefused(f"{what}: the worker is version {reply.get('version')!r}, this workstation's is "
                                f"{aows_worker.VERSION!r}; install this one on the device (docs/devices.md)", "version")
        fp = reply["fingerprint"]
        if self.fingerprint is not None and fp != self.fingerprint:
            self.channel.close()
            raise WorkerRefused(f"{what}: the device answering now is not the one timed before "
                                f"({fp} ≠ {self.fingerprint})", "fingerprint")
        self.fingerprint = fp
        self.channel.request(self.setup, "handing the weight pool to the timing worker")

    def load(self, model: bytes, externals: list, what: str):
        """The network of `model` built on the device: (run(repeats, warmup, min_time_s) → (ms, timed s), close)."""
        reply = self.channel.request({"op": "load", "model": base64.b64encode(model).decode(),
                                      "externals": [[n, int(o), list(s)] for n, o, s in externals]}, f"building {what}")
        net = reply["net"]

        def run(repeats: int, warmup: int, min_time_s: float):
            import numpy as np

            r = self.channel.request({"op": "time", "net": net, "repeats": repeats, "warmup": warmup,
                                      "min_time_s": min_time_s}, f"timing {what}")
            return np.asarray(r["ms"], dtype=np.float64), float(r["timed_s"])

        def close() -> None:
            if self.channel.proc is not None and self.channel.proc.poll() is None:
                self.channel.request({"op": "close", "net": net}, f"releasing {what}")

        run.net, run.what = net, what
        return run, close

    def alternate(self, timers: list, counts: list, warmup: int, chunks: int) -> list:
        """A paired measurement in one request (aows_worker.alternate on the device), so that nothing wakes the
        device between its chunks: [[each timer's ms] per chunk], each timer's timed seconds counted."""
        import numpy as np

        runs = [t.run for t in timers]
        r = self.channel.request({"op": "paired", "nets": [run.net for run in runs], "warmup": warmup,
                                  "chunks": chunks, "counts": [[int(n), float(t)] for n, t in counts]},
                                 f"timing {runs[0].what} beside {runs[-1].what}")
        chunked = [[np.asarray(ms, dtype=np.float64) for ms in chunk] for chunk in r["ms"]]
        for k, t in enumerate(timers):
            t.timed_s += sum(float(c[k].sum()) for c in chunked) / 1e3
        return chunked

    def close(self) -> None:
        """Stop the worker."""
        self.channel.close()
