"""Scoring sub-networks of a trained network: the one `SubnetScorer` (greedy baseline and proxy) and `top1`.

`SubnetScorer` gives the top-1 errors and summed cross-entropy of a configuration of the slimmable
supernet on fixed evaluation images, BatchNorm recalibrated per candidate with the exact statistics of
fixed calibration images (§3; docs/method.md, D22). The network runs block by block (`space.blocks`: a chain's blocks
are its edges, D44), each block on the calibration activations (its BN recalibrated
on them) and then on the evaluation ones, so the state after a block depends only on the widths of the nodes that it
and the blocks before it touch. The scorer keeps the states of one configuration's first blocks: a configuration
resumes after the longest run of leading blocks whose nodes' widths it shares with them (the same tensors the whole
pass would compute, bit for bit), and `score(channels, start_edge)` keeps its states before the first block touching
a node above `start_edge` (greedy trimming, which lowers node `start_edge + 1`: its candidates, scored in ascending
node order, each resume where the previous stopped caching). One configuration's states at most are held, as the
activations of a whole pass. Under autocast the
convolutions run in reduced precision, the recalibration statistics and normalisation in float32 (D29);
the images must be on the model's device. Data-parallel scoring (`greedy.processes`, D30): each process holds
its share of the evaluation images and all the calibration images (so every process recalibrates BN to the
same statistics), and `reduce` sums the (errors, cross-entropy) of the shares.

`score_many` scores a list of configurations: on CUDA (`batched`, by the model's device) several per
forward (`nets.batched`: each configuration a group with its own recalibrated statistics, shared prefixes run once,
one host copy and one `reduce` per call); on the CPU one at a time with `score`, which is cheaper there
(bench/README.md).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from ..kinds import Pass
from ..space import SearchSpace
from .batched import (
    APPLY,
    CALIBRATE,
    DevicePlan,
    as_sources,
    chunks,
    configs_per_pass,
    grouped_features,
    grouped_logits,
    prefix_plan,
    runs_batched,
)
from .batchnorm import at_least_float32


class SubnetScorer:
    """Error and cross-entropy of sub-networks of a supernet with per-candidate BN recalibration (§3)."""

    def __init__(self, model: Any, cal: torch.Tensor, x_eval: torch.Tensor, y_eval: torch.Tensor, batch_size: int,
                 reduce: Callable[[list[float]], list[float]] | None = None, batched: bool | None = None,
                 per_pass: int | None = None):
        """`x_eval`, `y_eval`: this process's evaluation images; `reduce`: a sum over the processes that hold
        the others (None: these are all of them); `batched`: `score_many` runs several configurations per forward
        (None: when the model is on CUDA); `per_pass`: configurations per batched forward
        (None: by the activation budget of `nets.batched`)."""
        self.model = model.eval()
        self.space: SearchSpace = model.space
        fmt = torch.channels_last if model.channels_last else torch.contiguous_format
        self.cal = cal.contiguous(memory_format=fmt)
        self.x = [b.contiguous(memory_format=fmt) for b in x_eval.split(int(batch_size))]
        self.y, self.bs = y_eval, int(batch_size)
        # states (calibration, evaluation activations) entering feature block k, computed at node widths `_prefix_of`
        self._prefix: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}
        self._prefix_of: tuple[int, ...] | None = None
        blocks = self.space.blocks[:-1]  # the last block is the classifier
        edges = self.space.edges
        self._block_nodes = [sorted({n for e in (*b.edges, b.shortcut, b.add) if e >= 0 for n in edges[e]})
                             for b in blocks]
        self._reduce = reduce
        self.n = len(y_eval) if reduce is None else int(reduce([float(len(y_eval))])[0])  # evaluation images, all ranks
        self.batched = runs_batched(model, batched)
        self.per_pass = (max(1, int(per_pass)) if per_pass is not None
                         else configs_per_pass(self.space, max(len(cal), int(batch_size))) if self.batched else 1)

    def _block(self, j: int, full: Sequence[int], cal: torch.Tensor,
               xs: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Block j on the calibration activations, every BN normalising them with their own statistics and keeping
        the unbiased variance, then on the evaluation activations with the kept statistics: one train-mode pass on
        the calibration images, then eval mode (D22), in execution order."""
        net = self.model
        stats: list[tuple[torch.Tensor, torch.Tensor]] = []

        def calibrate(z: torch.Tensor, bn, node: int, act: bool) -> torch.Tensor:
            z = at_least_float32(z)  # D29
            if bn is None:  # a unit without BatchNorm: no statistics
                return _normalise(net, z, bn, None, None, act)
            var, mean = torch.var_mean(z, dim=(0, 2, 3), correction=0)
            n = z.numel() // z.shape[1]
            stats.append((mean, var * (n / (n - 1))))
            return _normalise(net, z, bn, mean, var, act)

        cal = net._block(j, cal, Pass(full, calibrate))
        out = []
        for x in xs:
            kept = iter(stats)
            out.append(net._block(j, x, Pass(full, lambda z, bn, node, act, kept=kept: _normalise(
                net, at_least_float32(z), bn, *(next(kept) if bn is not None else (None, None)), act))))
        return cal, out

    def _upto(self, start_edge: int) -> int:
        """Feature blocks before the first one that touches a node above `start_edge` (in a chain: `start_edge`)."""
        s = int(start_edge)
        return next((j for j, nodes in enumerate(self._block_nodes) if nodes[-1] > s), len(self._block_nodes))

    def _features(self, full: Sequence[int], upto: int) -> list[torch.Tensor]:
        """Evaluation activations entering the classifier at node widths `full`: resumed from the deepest cached state
        whose blocks' node widths are those of `full`; the states entering blocks 1..`upto` cached."""
        key = tuple(int(c) for c in full)
        old = self._prefix_of
        valid = 0
        if old is not None:
            for nodes in self._block_nodes:
                if any(key[n] != old[n] for n in nodes):
                    break
                valid += 1
        self._prefix = {k: v for k, v in self._prefix.items() if k <= valid}  # the others are another prefix's
        self._prefix_of = key
        best = max(self._prefix, default=0)
        cal, xs = self._prefix[best] if best else (self.model._input(self.cal), self.x)
        for j in range(best, len(self._block_nodes)):
            cal, xs = self._block(j, full, cal, xs)
            if j < upto:
                self._prefix[j + 1] = (cal, xs)
        return xs

    def _logits(self, channels: Sequence[int], start_edge: int) -> torch.Tensor:
        """Logits of the evaluation images, resumed from the cache (`_features`)."""
        self.space.indices(channels)
        full = self.space.full(channels)
        xs = self._features(full, self._upto(start_edge))
        p = Pass(full, None)
        return torch.cat([self.model._logits(x, p) for x in xs])

    @torch.inference_mode()
    def score(self, channels: Sequence[int], start_edge: int = 0) -> tuple[int, float]:
        """(errors, summed cross-entropy) on the evaluation images, resumed from the cached states of the blocks it
        shares with the cached configuration; those before the first block touching a node above `start_edge` (in a
        chain: edge `start_edge`) are cached in turn (greedy trimming passes the lowered node − 1)."""
        logits = self._logits(channels, start_edge)
        errors = int((logits.argmax(1) != self.y).sum())
        ce = float(F.cross_entropy(logits.double(), self.y, reduction="sum"))
        if self._reduce is not None:
            e, ce = self._reduce([float(errors), ce])
            errors = int(round(e))
        return errors, ce

    @torch.inference_mode()
    def score_many(self, configs: Sequence[Sequence[int]]) -> list[tuple[int, float]]:
        """[`score(c)` for c in configs]: batched (`per_pass` per forward) or one at a time (§3, D22), each then
        caching the prefix it shares with another of `configs` (`start_edge`: their longest common leading widths)."""
        if not self.batched:
            return [self.score(c, start_edge=s) for c, s in zip(configs, _shared_prefixes(configs))]
        parts = [self._score_batch([configs[k] for k in part]) for part in chunks(len(configs), self.per_pass)]
        if not parts:
            return []
        vals = torch.cat(parts).cpu().flatten().tolist()  # one host copy: (errors, CE) of every configuration
        if self._reduce is not None:
            vals = self._reduce(vals)
        return [(int(round(vals[2 * k])), float(vals[2 * k + 1])) for k in range(len(configs))]

    def _score_batch(self, configs: Sequence[Sequence[int]]) -> torch.Tensor:
        """(K, 2) float64 (errors, summed CE) on the device: BN statistics of every group recorded on the calibration
        images (biased variance normalises them, the unbiased one the evaluation images, as `_block`), then applied."""
        for c in configs:
            self.space.indices(c)
        dp = DevicePlan(prefix_plan(self.space, configs), self.cal.device)
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


def _normalise(net, z: torch.Tensor, bn, mean: torch.Tensor, var: torch.Tensor, act: bool) -> torch.Tensor:
    """BN of z's channels with the given statistics and the first affine parameters of `bn` (None: none, z as it
    is), then the space's activation (in place where the normalised tensor is fresh)."""
    o = z.shape[1]
    y = z if bn is None else F.batch_norm(z, mean, var, bn.weight[:o], bn.bias[:o], False, 0.0, bn.eps)
    if not act:
        return y
    return y.relu_() if net.space.act == "relu" else y.clamp_(0.0, 6.0)


def _shared_prefixes(configs: Sequence[Sequence[int]]) -> list[int]:
    """Per configuration, the most leading widths it shares with another of `configs` (0 for a lone one)."""
    rows = [[int(c) for c in cfg] for cfg in configs]

    def common(a: list[int], b: list[int]) -> int:
        return next((k for k, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))

    return [max((common(a, b) for j, b in enumerate(rows) if j != k), default=0) for k, a in enumerate(rows)]


@torch.inference_mode()
def top1(model: torch.nn.Module, batches) -> tuple[int, int]:
    """(correct, n) of top-1 predictions over (x, y) batches, eval-mode BN."""
    model.eval()
    correct = n = 0
    for x, y in batches:
        correct += int((model(x).argmax(1) == y).sum())
        n += len(y)
    return correct, n
