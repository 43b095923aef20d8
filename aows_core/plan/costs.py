"""Seconds of every planned job, alone on its CPUs: the work the config asks of it (steps, configurations, networks
timed) times the calibration's unit costs (docs/planning.md). Each rule's model names the settings that move it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

import numpy as np

from ..config import Settings
from . import calibrate as cb
from .calibrate import Calibration
from .graph import PlannedJob

# Verification (D36) times 1.5 networks per decision, each in 1.9 × `verify.rounds` paired timings (two more at a time
# while they spread): five default runs with the session margin, 2026-11-29, timed 20, 14, 17, 15 and 22 networks
# over 12 decisions (the rounds measured before the margin: 210 and 260 for 24 and 26 networks).
VERIFIED_PICKS = 1.5
VERIFIED_ROUNDS = 1.9

# The calibrated networks every unit is priced through: the narrowest, the middle and the widest.
WHICH = ("min", "mid", "max")

# A profile times this share of its networks again (D27, D47: at most `profiling.retime` + `profiling.spell_retime`
# of them): six runs of the default and the presets, 2026-11-29, re-timed 0.8, 3.1, 4.5, 7.0, 10.9 and 30 % (the last
# the whole budget, in a session disturbed for minutes); priced at the whole budget the profile came out 1.24–1.29×.
RETIMED_SHARE = 0.06

# `aows pareto`: its plots take about as long as two more job starts (16 s on the default's 2-core machine, where a
# job starts in 5 s).
PLOT_STARTS = 2.0


@dataclass(frozen=True)
class Facts:
    """What the config asks, counted before anything runs: training steps per epoch, test images, profiling jobs
    per device, finalists per device."""

    supernet_steps: int
    retrain_steps: int
    test_images: int
    profile_jobs: Mapping[str, int]
    finalists: Mapping[str, int]


def facts(settings: Settings, finalists: Mapping[str, int], images: tuple[int, int] | None = None) -> Facts:
    """Count the work from the config alone: the dataset's training and test images from its files (or `images`,
    for a dataset not here yet), the profiled networks by sampling them as the sample stage does."""
    from ..data import dataset_info
    from ..data.splits import split_indices
    from ..latency.protocol import profile_plan
    from ..latency.sampling import config_rows

    if images is None:
        ds = settings.data_spec(None)
        try:
            info = dataset_info(ds.name, ds.root, ds.download, ds.image_size)
        except (OSError, ValueError) as e:
            raise ValueError(f"{e}\nTo plan before the images are here, give their number: aows plan --images "
                             "TRAIN,TEST (e.g. 1281167,50000 for ImageNet)") from None
        images = (info.n_train, info.n_test)
    steps = {}
    for section in ("supernet", "retrain"):
        spec = settings.data_spec(section)
        steps[section] = len(split_indices(images[0], spec)["train"]) // int(spec.batch_size)
    rows, _ = config_rows(settings.space, settings.seed, settings.sampling)
    configs = {"config_id": [r["config_id"] for r in rows], "channels": [r["channels"] for r in rows],
               "set": [r["set"] for r in rows]}
    jobs = {}
    for name in settings.devices:
        analytic = _analytic(settings, name)
        n = len(profile_plan(settings.space, configs, settings.profiling, settings.seed, analytic))
        budget = math.ceil(float(settings.profiling.retime) * n) + math.ceil(float(settings.profiling.spell_retime) * n)
        jobs[name] = n if analytic else n + min(budget, math.ceil(RETIMED_SHARE * n))
    return Facts(steps["supernet"], steps["retrain"], int(images[1]), jobs, dict(finalists))


def _analytic(settings: Settings, device: str) -> bool:
    from ..config import device_backends

    return bool(device_backends({"devices": settings.devices})[device].analytic)


class Costs:
    """Seconds of a job from its rule (`seconds`), with the settings that move each rule (`MOVERS`)."""

    def __init__(self, settings: Settings, cal: Calibration, f: Facts):
        self.s, self.cal, self.f = settings, cal, f
        self.host = cb.host_key()

    def unit(self, name: str, key: dict, measure: Callable[[], float]) -> float:
        return self.cal.get(name, {"host": self.host, **key}, measure)

    # ---- unit costs, each keyed by what it depends on ----
    def _space_key(self) -> dict:
        s = self.s
        return {"space": s.space.hash, "train": s.train.to_dict()}

    def start(self, torch_job: bool = True) -> float:
        return self.unit("start", {"torch": torch_job}, lambda: cb.process_start(torch_job))

    def supernet_step(self, threads: int) -> float:
        sn = self.s.supernet
        b = max(1, int(sn.batch_size) // int(sn.processes))  # each process's share of the global batch
        key = {**self._space_key(), "threads": threads, "batch": b, "n_random": int(sn.n_random),
               "channels_last": bool(sn.channels_last)}
        return self.unit("supernet_step", key, lambda: cb.scaled(lambda n: cb.supernet_step(self.s, threads, n), b))

    def estimation(self, threads: int, configs: int) -> float:
        """An estimation pass of `configs` configurations (D26): the widest network on the pool, then one batch each."""
        sn = self.s.supernet
        images = min(int(sn.estimate_images), self.f.supernet_steps * int(sn.batch_size))
        batch = min(int(sn.estimate_batch), images)
        key = {**self._space_key(), "threads": threads, "images": images, "batch": batch}
        pair: list[tuple[float, float]] = []

        def part(i: int) -> Callable[[], float]:
            def measure() -> float:
                if not pair:
                    pair.append(cb.estimation_pass(self.s, threads, images, batch))
                return pair[0][i]
            return measure

        fixed = self.unit("estimation_fixed", key, part(0))
        return fixed + configs * self.unit("estimation_config", key, part(1))

    def retrain_step(self, which: str) -> float:
        rt, space = self.s.retrain, self.s.space
        ch = _config(space, which)
        b = max(1, int(rt.batch_size) // int(rt.processes))
        key = {**self._space_key(), "which": which, "threads": int(rt.threads), "channels_last": bool(rt.channels_last),
               "batch": b}
        return self.unit("retrain_step", key, lambda: cb.scaled(lambda n: cb.retrain_step(self.s, ch, n), b))

    def test_image(self, which: str) -> float:
        rt, space = self.s.retrain, self.s.space
        ch = _config(space, which)
        b = int(rt.eval_batch_size)
        key = {**self._space_key(), "which": which, "threads": int(rt.threads), "batch": b}
        return self.unit("test_image", key, lambda: cb.scaled(lambda n: cb.test_batch(self.s, ch, n), b) / b)

    def score_call(self, which: str) -> float:
        g, space = self.s.greedy, self.s.space
        ch = _config(space, which)
        n_eval, n_cal = int(g.n_eval), int(g.n_cal)
        key = {**self._space_key(), "which": which, "threads": int(g.threads), "n_eval": n_eval, "n_cal": n_cal,
               "batch": int(g.batch_size)}
        return self.unit("score_call", key, lambda: cb.scaled(
            lambda n: cb.score_call(self.s, ch, n, max(1, round(n * n_cal / n_eval))), n_eval))

    def _timing_units(self, device: str) -> tuple[float, list[float]]:
        """A profiling job's seconds on `device` and the latency of the narrowest, middle and widest network there."""
        key = {"space": self.s.space.hash, "device": self.s.device(device),
               "protocol": {k: getattr(self.s.profiling, k) for k in ("repeats", "warmup", "min_time_ms", "chunks",
                                                                       "reference_share", "statistic")}}
        both: list[tuple[float, list[float]]] = []

        def part(i: int | None) -> Callable[[], float]:
            def measure() -> float:
                if not both:
                    both.append(cb.profiling_job(self.s, device, [_config(self.s.space, w) for w in WHICH]))
                return both[0][0] if i is None else both[0][1][i]
            return measure

        job = self.unit("profiling_job", key, part(None))
        return job, [self.unit("network_latency", {**key, "which": w}, part(i)) for i, w in enumerate(WHICH)]

    def profiling_job(self, device: str) -> float:
        return 0.0 if _analytic(self.s, device) else self._timing_units(device)[0]

    @cached_property
    def which_macs(self) -> list[float]:
        """MACs per image of the narrowest, middle and widest network (WHICH)."""
        return [float(_macs(self.s.space, _config(self.s.space, w)).sum()) for w in WHICH]

    def finalist_macs(self, target: str | None, device: str) -> float:
        """MACs per image of a finalist at `target` on `device`: the network on the line through the narrowest,
        middle and widest network whose latency there is the target (`range:r`: r of the way from the narrowest's
        latency to the widest's), linear in MACs between them; without a target or device, the middle network."""
        from ..config import parse_target

        macs = self.which_macs
        if not target or device not in self.s.devices:
            return macs[1]
        t = parse_target(target)
        if _analytic(self.s, device):  # a counted device: its latency is the network's MMAC
            lat = [m / 1e6 for m in macs]
        else:
            lat = self._timing_units(device)[1]
        goal = lat[0] + t.value * (lat[2] - lat[0]) if t.is_relative else t.value
        order = np.argsort(lat)
        return float(np.interp(goal, np.asarray(lat)[order], np.asarray(macs)[order]))

    # ---- jobs ----
    def seconds(self, job: PlannedJob) -> float:
        """Seconds of `job` alone on its CPUs."""
        model = getattr(self, "_" + job.rule, None)
        return model(job) if model is not None else self.start()

    def _targets_feasible(self, job: PlannedJob) -> float:
        return 0.0

    def _train_ows(self, job: PlannedJob) -> float:
        from ..training.supernet import training_threads

        s, sn = self.s, self.s.supernet
        t = training_threads(sn, s.aows, "ows")
        final = self.estimation(t, int(sn.estimate_configs)) if sn.unaries == "frozen" else 0.0
        return self.start() + int(sn.epochs) * self.f.supernet_steps * self.supernet_step(t) + final

    def _train_aows(self, job: PlannedJob) -> float:
        from ..training.supernet import training_threads

        sn, aw = self.s.supernet, self.s.aows
        t = training_threads(sn, aw, "aows")
        steps = (int(sn.epochs) - int(aw.warmup_epochs)) * self.f.supernet_steps
        est = 0.0
        if sn.unaries == "frozen":  # a refresh every aows.refresh steps, then the final pass
            est = (math.ceil(steps / int(aw.refresh)) * self.estimation(t, int(aw.estimate_configs))
                   + self.estimation(t, int(aw.final_configs)))
        return self.start() + steps * self.supernet_step(t) + est

    def _greedy_trajectory(self, job: PlannedJob) -> float:
        """The widest network scored, then each step's candidates (every layer still above its narrowest, lowered
        once, §3): a candidate runs the blocks from its layer on (the rest is cached). The trajectory is unknown
        before the supernet exists: the plan shrinks every layer in proportion (the widest relative width first),
        which on the default run's actual trajectory costs 1.17× what that trajectory did."""
        space = self.s.space
        counts = [len(c) for c in space.layer_choices]
        cur = [n - 1 for n in counts]
        total = self.score_call("max")
        while any(cur):
            movable = [i for i, k in enumerate(cur) if k > 0]
            for i in movable:
                m = _macs(space, space.layer_channels([k - (j == i) for j, k in enumerate(cur)]))
                total += self.scoring(m.sum()) * _suffix_share(space, m, i + 1)
            cur[max(movable, key=lambda i: (cur[i] / (counts[i] - 1), -i))] -= 1
        return self.start() + total

    @cached_property
    def scoring_points(self) -> list[tuple[float, float]]:
        """(MACs, seconds) of the calibrated scorings: the narrowest, the middle (every layer at its middle choice)
        and the widest network."""
        return self._points(self.score_call)

    def scoring(self, macs: float) -> float:
        """One scoring from the input (§3, D22) of a network of `macs` MACs: through `scoring_points`, linear in MACs
        between them (a depthwise network's scoring grows slower than its MACs: on the MobileNet-v2 preset the two
        ends alone priced its greedy trajectory and proxies at 0.7 of their time alone)."""
        return _through(self.scoring_points, macs)

    def _proxy(self, job: PlannedJob) -> float:
        """Every finalist (`finalist_macs`) and the Σδ check's random networks (D25), scored on
        data.search_val images with BN recalibrated on data.calibration."""
        from ..search.decisions import check_configs

        g, d, space = self.s.greedy, self.s.data, self.s.space
        scale = (int(d.search_val) + int(d.calibration)) / (int(g.n_eval) + int(g.n_cal))
        device = job.wildcards.get("device", "")
        finalists = [self.finalist_macs(t, device) for t in self.s.decode.targets_for(device)]
        finalists *= max(1, round(self.f.finalists.get(device, 0) / max(len(finalists), 1)))
        checks = [_macs(space, space.layer_channels(i)).sum() for i in check_configs(space, self.s.seed)]
        return self.start() + scale * sum(self.scoring(m) for m in finalists + checks)

    def _profile(self, job: PlannedJob) -> float:
        dev = job.wildcards["device"]
        return self.start() + self.f.profile_jobs[dev] * self.profiling_job(dev)

    def _verified(self, device: str) -> float:
        v = self.s.verify
        if int(v.max_rounds) == 0:
            return 0.0
        return VERIFIED_PICKS * VERIFIED_ROUNDS * int(v.rounds) * self.profiling_job(device)

    def _decode(self, job: PlannedJob) -> float:
        return self.start() + self._verified(job.wildcards["device"])

    def _decide_baseline(self, job: PlannedJob) -> float:
        return self.start() + self._verified(job.wildcards["device"])

    def _measure(self, job: PlannedJob) -> float:
        dev = job.wildcards["device"]
        rounds = 1 if _analytic(self.s, dev) else int(self.s.measure.rounds)
        return self.start() + self.f.finalists.get(dev, 0) * rounds * self.profiling_job(dev)

    def _retrain_net(self, job: PlannedJob) -> float:
        """Epochs of steps and the test split's forward of the finalist's network (`finalist_macs`), each priced
        through the narrowest, middle and widest network's, linear in MACs between them; for every seed after one
        start where the seeds share a job (D52)."""
        rt = self.s.retrain
        m = self.finalist_macs(job.wildcards.get("target"), job.wildcards.get("device", ""))
        step = _through(self._points(self.retrain_step), m)
        image = _through(self._points(self.test_image), m)
        seeds = 1 if "seed" in job.wildcards else len(rt.seeds or (0,))
        return self.start() + seeds * (int(rt.epochs) * self.f.retrain_steps * step + self.f.test_images * image)

    def _points(self, unit: Callable[[str], float]) -> list[tuple[float, float]]:
        """(MACs, seconds) of `unit` for the narrowest, middle and widest network."""
        return [(m, unit(w)) for m, w in zip(self.which_macs, WHICH)]

    def _retrain(self, job: PlannedJob) -> float:
        return self.start(torch_job=False)  # the finalist's label on its network's training

    def _pareto(self, job: PlannedJob) -> float:
        return (1 + PLOT_STARTS) * self.start()


def _macs(space, channels) -> np.ndarray:
    """MACs per image of every edge of the network of `channels`."""
    from ..devices.flops import edge_macs

    full = space.full(channels)
    return np.array([edge_macs(space, full[a], full[b], e) for e, (a, b) in enumerate(space.edges)], dtype=float)


def _suffix_share(space, macs: np.ndarray, node: int) -> float:
    """The share of a network's MACs in the edges that read or write nodes from `node` on: what a scoring resumed
    from the activations before `node` still runs."""
    after = np.array([max(a, b) >= node for a, b in space.edges])
    return float(macs[after].sum() / max(macs.sum(), 1))


def _config(space, which: str) -> list[int]:
    """The widest ("max"), narrowest ("min") or middle ("mid": every layer at its middle choice) network."""
    if which == "max":
        return list(space.max_config)
    if which == "min":
        return list(space.min_config)
    return [c[len(c) // 2] for c in space.layer_choices]


def _through(points: list[tuple[float, float]], x: float) -> float:
    """The piecewise-linear function through `points` (x, y) at x, continued along the nearest segment beyond them."""
    pts = sorted(dict(points).items())
    if len(pts) == 1:
        return pts[0][1]
    xs, ys = zip(*pts)
    if xs[0] <= x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    (x0, y0), (x1, y1) = pts[:2] if x < xs[0] else pts[-2:]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


# The settings that move each rule's time, as `aows plan` names them.
MOVERS: dict[str, str] = {
    "train_ows": "supernet.epochs, data.train_subset, supernet.batch_size, supernet.threads, supernet.estimate_configs",
    "train_aows": "aows.targets, supernet.epochs − aows.warmup_epochs, aows.threads, aows.final_configs",
    "greedy_trajectory": "greedy.n_eval, greedy.n_cal, greedy.threads, the space's width choices",
    "proxy": "data.search_val, data.calibration, greedy.threads",
    "profile": "sampling.coverage, sampling.test, profiling.repeats, profiling.min_time_ms, devices",
    "retrain_net": "retrain.epochs, retrain.seeds, retrain.train_subset, decode.targets, retrain.threads",
    "decode": "verify.rounds, verify.max_rounds, decode.targets",
    "decide_baseline": "verify.rounds, verify.max_rounds, decode.targets",
    "measure": "measure.rounds, decode.targets",
}
