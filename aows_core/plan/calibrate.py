"""The plan's calibration: a few steps of each kind of work, timed here at the config's sizes (docs/planning.md).

Every figure is seconds of one unit of work on the CPUs (or GPU) the workflow gives it: a supernet step, an
estimation pass's configuration, a retraining step and a test image of the widest and narrowest networks, a scoring
call of the widest and narrowest sub-networks, a profiling job per timed device, and the start of
a job's process. Each is cached under a key of exactly what it depends on, so a changed epoch count or target costs
no new calibration and a changed batch size or device costs only its own.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..config import Settings

# Each unit is timed until this many seconds have passed or REPS repeats, after one untimed warm-up; its median.
MIN_SECONDS, REPS = 1.0, 5


def timed(call: Callable[[], Any], reps: int = REPS, min_seconds: float = MIN_SECONDS, warmup: bool = True) -> float:
    """Median seconds of `call` over up to `reps` timed runs (at least two, unless `reps` is one, until `min_seconds`
    have passed), after one warm-up."""
    if warmup:
        call()
    out, t_end = [], time.perf_counter() + min_seconds
    while len(out) < reps and (len(out) < min(2, reps) or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


class Calibration:
    """Cached unit costs: `get(name, key, measure)` returns the cached figure of (name, key) or measures it."""

    def __init__(self, path: str | Path, fresh: bool = False):
        self.path = Path(path)
        self.values: dict[str, float] = {}
        if self.path.exists() and not fresh:
            self.values = json.loads(self.path.read_text())
        self.measured: list[str] = []
        self.seconds = 0.0

    def get(self, name: str, key: Any, measure: Callable[[], float]) -> float:
        k = name + ":" + hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
        if k not in self.values:
            t0 = time.perf_counter()
            self.values[k] = float(measure())
            self.seconds += time.perf_counter() - t0
            self.measured.append(name)
            from ..artifacts import write_json

            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.values, self.path, indent=1, sort_keys=True)
        return self.values[k]


def host_key() -> dict[str, Any]:
    """What every figure depends on: the host's CPU and cores, Python's and torch's versions."""
    import platform

    import torch

    from ..devices.base import cpu_model, usable_cores

    return {"cpu": cpu_model(), "cores": usable_cores(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def process_start(torch_job: bool) -> float:
    """Seconds from a job's command to its first work: Python, and for a training or timing job torch with the
    compiler stack its first optimiser step loads."""
    code = "import aows_core.config, pandas, pyarrow.parquet" + (", torch, torch._dynamo" if torch_job else "")

    def run() -> None:
        subprocess.run([sys.executable, "-c", code], check=True)

    return timed(run, reps=1, warmup=False)  # this process has read the same files: they are in the page cache


def _inputs(settings: Settings, n: int, device: Any) -> tuple[Any, Any]:
    import torch

    space = settings.space
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, space.in_channels, *space.resolution, generator=g)
    y = torch.randint(0, space.num_classes, (n,), generator=g)
    return x.to(device), y.to(device)


def _accel(settings: Settings) -> Any:
    from ..training.accelerator import accelerator

    return accelerator(settings.train)


# A unit whose full size would take longer than this is timed at two smaller batches and extrapolated linearly
# (fixed cost plus cost per image), so the calibration stays short at large inputs.
BUDGET_S = 2.0


def scaled(run_at: Callable[[int], float], full: int, probe: int = 8) -> float:
    """Seconds of a unit at batch `full`: timed there when a probe at batch `probe` predicts under BUDGET_S, else
    timed at the batch that fits BUDGET_S and extrapolated along the line through the two timings."""
    if full <= probe:
        return run_at(full)
    t_probe = run_at(probe)
    if t_probe * full / probe <= BUDGET_S:
        return run_at(full)
    b = max(2 * probe, int(full * BUDGET_S * probe / (t_probe * full)))
    if b >= full:
        return run_at(full)
    t_b = run_at(b)
    return t_b + (full - b) * max(t_b - t_probe, 0.0) / (b - probe)


def supernet_step(settings: Settings, threads: int, batch: int) -> float:
    """One sandwich step of the supernet (§3: max, min and `n_random` per-sample random passes, one optimiser step)
    on `batch` images, `threads` torch threads."""
    import torch

    from ..nets.sandwich import SandwichOptions, defers, sandwich_step
    from ..nets.supernet import Supernet
    from ..nets.widths import widths_tensor
    from ..search.sampler import uniform_layer_indices

    torch.set_num_threads(threads)
    space, sn = settings.space, settings.supernet
    accel = _accel(settings)
    r = int(sn.n_random)
    model = Supernet(space, channels_last=bool(sn.channels_last)).to(accel.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=sn.momentum)
    opts = SandwichOptions(autocast=accel.autocast, scaler=accel.grad_scaler(), defer=defers(accel.device))
    x, y = _inputs(settings, batch, accel.device)
    rng = np.random.default_rng(0)

    def step() -> None:
        w = widths_tensor(space, uniform_layer_indices(space, r * batch, rng)).reshape(r, batch, space.n_layers)
        sandwich_step(model, x, y, w, opt, r, opts=opts).record()
        _sync(accel.device)

    return timed(step)


def estimation_pass(settings: Settings, threads: int, images: int, batch: int) -> tuple[float, float]:
    """An estimation pass (D26): (seconds of its fixed part, the widest network on the pool's `images` images in
    batches of `batch`; seconds per configuration, one batch each), timed on a pool of one batch."""
    import torch

    from ..nets.estimation import estimate_differences
    from ..nets.supernet import Supernet

    torch.set_num_threads(threads)
    space = settings.space
    accel = _accel(settings)
    model = Supernet(space, channels_last=bool(settings.supernet.channels_last)).to(accel.device).eval()
    rng = np.random.default_rng(1)
    k = 4
    configs = [space.layer_channels([int(rng.integers(len(c))) for c in space.layer_choices]) for _ in range(k)]

    def run_at(b: int, cs: list) -> float:
        x, y = _inputs(settings, b, accel.device)

        def call() -> None:
            with accel.autocast():
                estimate_differences(model, x, y, cs, b)
            _sync(accel.device)

        return timed(call, reps=3)

    widest = scaled(lambda b: run_at(b, []), batch)
    with_configs = scaled(lambda b: run_at(b, configs), batch)
    return images // batch * widest, max(with_configs - widest, 0.0) / k


def retrain_step(settings: Settings, channels: list[int], batch: int) -> float:
    """One retraining step (§7) of the network of `channels` on `batch` images."""
    import torch
    import torch.nn.functional as F

    from ..nets.network import Network

    rt = settings.retrain
    torch.set_num_threads(int(rt.threads))
    accel = _accel(settings)
    model = Network(settings.space, channels).to(accel.device)
    if bool(rt.channels_last):
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=rt.momentum, nesterov=rt.momentum > 0)
    x, y = _inputs(settings, batch, accel.device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with accel.autocast():
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        _sync(accel.device)

    return timed(step)


def test_batch(settings: Settings, channels: list[int], batch: int) -> float:
    """One forward of `batch` test images (§7's top-1) through the network of `channels`."""
    import torch

    from ..nets.network import Network

    torch.set_num_threads(int(settings.retrain.threads))
    accel = _accel(settings)
    model = Network(settings.space, channels).to(accel.device).eval()
    x, _ = _inputs(settings, batch, accel.device)

    def run() -> None:
        with torch.inference_mode(), accel.autocast():
            model(x)
        _sync(accel.device)

    return timed(run)


def score_call(settings: Settings, channels: list[int], n_eval: int, n_cal: int) -> float:
    """One scoring of the sub-network of `channels` from its input (§3, D22): BN recalibrated on `n_cal` images,
    evaluated on `n_eval`."""
    import torch

    from ..nets.scoring import SubnetScorer
    from ..nets.supernet import Supernet

    torch.set_num_threads(int(settings.greedy.threads))
    accel = _accel(settings)
    model = Supernet(settings.space, channels_last=bool(settings.supernet.channels_last)).to(accel.device)
    x, y = _inputs(settings, n_eval, accel.device)
    cal, _ = _inputs(settings, n_cal, accel.device)
    scorer = SubnetScorer(model, cal, x, y, int(settings.greedy.batch_size))

    def run() -> None:
        scorer._prefix, scorer._prefix_of = {}, None  # nothing cached: every block runs
        scorer.score(channels)

    return timed(run, reps=3)


def profiling_job(settings: Settings, device: str, configs: Sequence[Sequence[int]] = ()) -> tuple[float, list[float]]:
    """One profiling job on `device` under the timing protocol (§4, D27): a random network and the reference beside
    it, the network built and timed; (the mean seconds over a few random networks, the latency of each of `configs`
    as the protocol's statistic gives it)."""
    from ..devices import get_device
    from ..latency.protocol import pairing_of, time_network, timing_counts

    space, protocol = settings.space, settings.profiling
    dev = get_device(dict(settings.device(device)), space, settings.seed)
    try:
        counts, pairing = timing_counts(dev, protocol), pairing_of(dev, protocol, space)
        rng = np.random.default_rng(2)
        nets = [space.layer_channels([int(rng.integers(len(c))) for c in space.layer_choices]) for _ in range(4)]
        time_network(dev, nets[0], 0, counts, protocol.statistic, pairing)  # warm-up
        t0 = time.perf_counter()
        for k, ch in enumerate(nets[1:]):
            time_network(dev, ch, k + 1, counts, protocol.statistic, pairing)
        seconds = (time.perf_counter() - t0) / (len(nets) - 1)
        latencies = [float(time_network(dev, list(ch), len(nets) + k, counts, protocol.statistic,
                                        pairing)["latency_ms_raw"]) for k, ch in enumerate(configs)]
        return seconds, latencies
    finally:
        dev.close()


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize()
