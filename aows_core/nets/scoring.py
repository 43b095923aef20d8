"""Scoring sub-networks of a trained network: the one `SubnetScorer` (greedy baseline and proxy) and `top1`.

`SubnetScorer` gives the top-1 errors and summed cross-entropy of a configuration of the slimmable
supernet on fixed evaluation images, BatchNorm recalibrated per candidate with the exact statistics of
fixed calibration images (§3; docs/method.md, D22). A candidate that differs from the current
configuration from edge `start_edge` on reuses the cached activations before it. Under autocast the
convolutions run in reduced precision, the recalibration statistics and normalisation in float32 (D29);
the images must be on the model's device. Data-parallel scoring (`greedy.processes`, D30): each process holds
its share of the evaluation images and all the calibration images (so every process recalibrates BN to the
same statistics), and `reduce` sums the (errors, cross-entropy) of the shares.

`score_many` scores a list of configurations: on CUDA (`batched`, by the model's device) several per forward
(`nets.batched`: each configuration a group with its own recalibrated statistics, shared prefixes run once, one
host copy and one `reduce` per call); on the CPU one at a time with `score`, which is cheaper there (bench/README.md).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from ..space import SearchSpace
from .batched import (APPLY, CALIBRATE, DevicePlan, as_sources, chunks, configs_per_pass, grouped_features, grouped_logits,
                      on_cuda, prefix_plan)
from .batchnorm import at_least_float32


class SubnetScorer:
    """Error and cross-entropy of sub-networks of a supernet with per-candidate BN recalibration (§3)."""

    def __init__(self, model: Any, cal: torch.Tensor, x_eval: torch.Tensor, y_eval: torch.Tensor, batch_size: int,
                 reduce: Callable[[list[float]], list[float]] | None = None, batched: bool | None = None,
                 per_pass: int | None = None):
        """`x_eval`, `y_eval`: this process's evaluation images; `reduce`: a sum over the processes that hold
        the others (None: these are all of them); `batched`: `score_many` runs several configurations per forward
        (None: when the model is on CUDA); `per_pass`: configurations per batched forward (None: by the
        activation budget of `nets.batched`)."""
        self.model = model.eval()
        self.space: SearchSpace = model.space
        fmt = torch.channels_last if model.channels_last else torch.contiguous_format
        self.cal = cal.contiguous(memory_format=fmt)
        self.x = [b.contiguous(memory_format=fmt) for b in x_eval.split(int(batch_size))]
        self.y, self.bs = y_eval, int(batch_size)
        self._prefix: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}
        self._prefix_of: tuple[int, ...] | None = None
        self._reduce = reduce
        self.n = len(y_eval) if reduce is None else int(reduce([float(len(y_eval))])[0])  # evaluation images, all ranks
        self.batched = on_cuda(model) if batched is None else bool(batched)
        self.per_pass = (configs_per_pass(self.space, max(len(cal), int(batch_size))) if per_pass is None
                         else max(1, int(per_pass)))

    def _units(self, i: int, full: Sequence[int]):
        """(conv, bn, weight slice, groups) of edge i's conv units under `full` channels."""
        ci, co = full[i], full[i + 1]
        units = list(self.model._units(i))
        if self.space.thetas[i].kind == "dwsep":
            (dw, dbn), (pw, pbn) = units
            return [(dw, dbn, dw.weight[:ci], ci), (pw, pbn, pw.weight[:co, :ci], 1)]
        (cv, bn), = units
        return [(cv, bn, cv.weight[:co, :ci], 1)]

    def _edge(self, i: int, full: Sequence[int], cal: torch.Tensor, xs: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Edge i on the calibration and evaluation activations, BN recalibrated on the calibration ones."""
        for conv, bn, w, g in self._units(i, full):
            z = at_least_float32(F.conv2d(cal, w, None, conv.stride, conv.padding, conv.dilation, g))  # D29
            var, mean = torch.var_mean(z, dim=(0, 2, 3), correction=0)
            n = z.numel() // z.shape[1]
            o = w.shape[0]
            # as one train-mode pass then eval: calibration images normalised by the biased variance,
            # the evaluation images by the unbiased one that BatchNorm keeps as its running variance
            cal = F.relu_(F.batch_norm(z, mean, var, bn.weight[:o], bn.bias[:o], False, 0.0, bn.eps))
            var_u = var * (n / (n - 1))
            xs = [F.relu_(F.batch_norm(at_least_float32(F.conv2d(x, w, None, conv.stride, conv.padding, conv.dilation, g)),
                                       mean, var_u, bn.weight[:o], bn.bias[:o], False, 0.0, bn.eps)) for x in xs]
        return cal, xs

    def _activations(self, channels: Sequence[int], upto: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Calibration and evaluation activations entering edge `upto` (cached for the current configuration)."""
        key = tuple(int(c) for c in channels)
        if self._prefix_of is None or any(a != b for a, b in zip(key[:upto], self._prefix_of[:upto])):
            self._prefix, self._prefix_of = {}, key
        best = max((k for k in self._prefix if k <= upto), default=0)
        if best == 0:
            cal, xs = self.model._input(self.cal), self.x
        else:
            cal, xs = self._prefix[best]
        full = self.space.full(key)
        for i in range(best, upto):
            cal, xs = self._edge(i, full, cal, xs)
            self._prefix[i + 1] = (cal, xs)
        return cal, xs

    @torch.inference_mode()
    def score(self, channels: Sequence[int], start_edge: int = 0) -> tuple[int, float]:
        """(errors, summed cross-entropy) on the evaluation images; edges before `start_edge` come from the cache."""
        full = self.space.full(channels)
        cal, xs = self._activations(channels, start_edge) if start_edge else (self.model._input(self.cal), self.x)
        for i in range(start_edge, self.space.n_edges - 1):
            cal, xs = self._edge(i, full, cal, xs)
        clf = self.model.classifier
        logits = torch.cat([F.linear(x.mean((2, 3)), clf.weight[:, : full[-2]], clf.bias) for x in xs])
        errors = int((logits.argmax(1) != self.y).sum())
        ce = float(F.cross_entropy(logits.double(), self.y, reduction="sum"))
        if self._reduce is not None:
            e, ce = self._reduce([float(errors), ce])
            errors = int(round(e))
        return errors, ce

    @torch.inference_mode()
    def score_many(self, configs: Sequence[Sequence[int]]) -> list[tuple[int, float]]:
        """[`score(c)` for c in configs]: batched (`per_pass` per forward) or one at a time (§3, D22)."""
        if not self.batched:
            return [self.score(c) for c in configs]
        parts = [self._score_batch([configs[k] for k in part]) for part in chunks(len(configs), self.per_pass)]
        if not parts:
            return []
        vals = torch.cat(parts).cpu().flatten().tolist()  # one host copy: (errors, CE) of every configuration
        if self._reduce is not None:
            vals = self._reduce(vals)
        return [(int(round(vals[2 * k])), float(vals[2 * k + 1])) for k in range(len(configs))]

    def _score_batch(self, configs: Sequence[Sequence[int]]) -> torch.Tensor:
        """(K, 2) float64 (errors, summed CE) on the device: BN statistics of every group recorded on the calibration
        images (biased variance normalises them, the unbiased one the evaluation images, as `_edge`), then applied."""
        for c in configs:
            self.space.indices(c)
        dp = DevicePlan(prefix_plan(configs), self.cal.device)
        stats: list = []
        grouped_features(self.model, dp, as_sources(self.model, self.cal, 1), CALIBRATE, stats)
        K = len(configs)
        errors = torch.zeros(K, dtype=torch.int64, device=self.cal.device)
        ce = torch.zeros(K, dtype=torch.float64, device=self.cal.device)
        start = 0
        for x in self.x:
            y = self.y[start:start + len(x)]
            start += len(x)
            logits = grouped_logits(self.model, dp, as_sources(self.model, x, 1), APPLY, list(stats))  # (K, b, classes)
            errors += (logits.argmax(2) != y).sum(1)
            ce += F.cross_entropy(logits.flatten(0, 1).double(), y.repeat(K), reduction="none").view(K, -1).sum(1)
        return torch.stack([errors.double(), ce], 1)


@torch.inference_mode()
def top1(model: torch.nn.Module, batches) -> tuple[int, int]:
    """(correct, n) of top-1 predictions over (x, y) batches, eval-mode BN."""
    model.eval()
    correct = n = 0
    for x, y in batches:
        correct += int((model(x).argmax(1) == y).sum())
        n += len(y)
    return correct, n
