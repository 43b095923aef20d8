"""The AutoSlim greedy baseline (§3) on the OWS supernet: one trimming trajectory, then a decision per target.

From the max configuration, each step lowers by one choice the layer whose reduction least increases
the top-1 error on a fixed search-validation subset of `n_eval` images (ties broken by the summed
cross-entropy, then by the lowest layer), BatchNorm being recalibrated on `n_cal` training images
for every candidate. The trajectory depends on the supernet only, never on a LUT: a decision for a
(device, target) is the first point of it whose LUT latency meets the target.

Speed: a candidate differs from the current configuration in one layer, so the activations before
that layer are shared: they are cached per trajectory step (calibration and evaluation images),
and each candidate runs only the suffix of the network from its changed layer. BN recalibration
uses the statistics of all calibration images at once, exactly as one train-mode pass over them
followed by evaluation would (momentum 1).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import pyarrow as pa
import torch
import torch.nn.functional as F

from . import io
from .space import SearchSpace

io.SCHEMAS.setdefault(
    "greedy_trajectory",
    pa.schema(
        [
            ("step", pa.int32()),
            ("channels", io.CHANNELS),
            ("lowered_layer", pa.int32()),
            ("errors", pa.int64()),
            ("error", pa.float64()),
            ("cross_entropy", pa.float64()),
            ("candidates", pa.int32()),
        ]
    ),
)


class GreedyScorer:
    """Error and cross-entropy of sub-networks of a supernet with per-candidate BN recalibration (§3)."""

    def __init__(self, model: Any, cal: torch.Tensor, x_eval: torch.Tensor, y_eval: torch.Tensor, batch_size: int):
        self.model = model.eval()
        self.space: SearchSpace = model.space
        fmt = torch.channels_last if model.channels_last else torch.contiguous_format
        self.cal = cal.contiguous(memory_format=fmt)
        self.x = [b.contiguous(memory_format=fmt) for b in x_eval.split(int(batch_size))]
        self.y, self.bs = y_eval, int(batch_size)
        self._prefix: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}
        self._prefix_of: tuple[int, ...] | None = None

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
            z = F.conv2d(cal, w, None, conv.stride, conv.padding, conv.dilation, g)
            var, mean = torch.var_mean(z, dim=(0, 2, 3), correction=0)
            n = z.numel() // z.shape[1]
            o = w.shape[0]
            # as one train-mode pass then eval: calibration images normalised by the biased variance,
            # the evaluation images by the unbiased one that BatchNorm keeps as its running variance
            cal = F.relu_(F.batch_norm(z, mean, var, bn.weight[:o], bn.bias[:o], False, 0.0, bn.eps))
            var_u = var * (n / (n - 1))
            xs = [F.relu_(F.batch_norm(F.conv2d(x, w, None, conv.stride, conv.padding, conv.dilation, g), mean, var_u,
                                       bn.weight[:o], bn.bias[:o], False, 0.0, bn.eps)) for x in xs]
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
        return errors, ce


def greedy_search(scorer: GreedyScorer, progress: bool = False) -> list[dict[str, Any]]:
    """AutoSlim trimming (§3) from max to min: each step lowers the layer with the least (errors, CE) increase."""
    space = scorer.space
    cur = [len(c) - 1 for c in space.layer_choices]
    errors, ce = scorer.score(_widths(space, cur))
    n = len(scorer.y)
    rows = [_row(space, 0, cur, -1, errors, ce, n, 0)]
    total = sum(cur)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="greedy", unit="step")
    while any(cur):
        best = None
        movable = [i for i, j in enumerate(cur) if j > 0]
        # ascending layers: each candidate reuses the cached activations entering its layer
        for layer in movable:
            cand = list(cur)
            cand[layer] -= 1
            e, c = scorer.score(_widths(space, cand), start_edge=layer)
            if best is None or (e, c) < best[:2]:
                best = (e, c, layer, cand)
        errors, ce, layer, cur = best
        rows.append(_row(space, len(rows), cur, layer, errors, ce, n, len(movable)))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(err=f"{errors / n:.3f}")
    if bar is not None:
        bar.close()
    return rows


def _widths(space: SearchSpace, layer_idx: Sequence[int]) -> list[int]:
    return [c[j] for c, j in zip(space.layer_choices, layer_idx)]


def _row(space: SearchSpace, step: int, idx: Sequence[int], layer: int, errors: int, ce: float, n: int,
         candidates: int) -> dict[str, Any]:
    return {"step": step, "channels": _widths(space, idx), "lowered_layer": layer, "errors": errors,
            "error": errors / n, "cross_entropy": ce / n, "candidates": candidates}


def first_images(batches, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n (images, labels) of a batch iterator; a clear error if the split holds fewer."""
    xs, ys, got = [], [], 0
    for x, y in batches:
        xs.append(x)
        ys.append(y)
        got += len(y)
        if got >= n:
            break
    x, y = torch.cat(xs)[:n], torch.cat(ys)[:n]
    if len(y) < n:
        raise ValueError(f"asked for {n} images but the split holds {len(y)}; lower greedy.n_eval / greedy.n_cal "
                         f"or raise data.search_val / data.calibration")
    return x.contiguous(), y


def load_model_state(path: str | os.PathLike, space: SearchSpace) -> dict[str, torch.Tensor]:
    """The weights of a supernet's model.pt, refused if it belongs to another space."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"{path} is not a supernet model file (no 'model' entry); rerun the supernet training")
    if state.get("space_hash") != space.hash:
        raise ValueError(f"{path} was trained on space {state.get('space_hash')}, not {space.hash} ({space.name}); "
                         f"retrain the supernet for this space")
    return state["model"]


def greedy_trajectory(config: Mapping[str, Any], model_path: str | os.PathLike, out: str | os.PathLike,
                      progress: bool = True) -> list[dict[str, Any]]:
    """Stage: the greedy trajectory of the OWS supernet, written as a `greedy_trajectory` parquet."""
    from .config import space_from_config
    from .data import check_space, load
    from .supernet import SlimmableMobileNetV1
    from .train import data_spec

    space = space_from_config(config)
    g = config["greedy"]
    torch.set_num_threads(int(config["supernet"]["threads"]))
    model = SlimmableMobileNetV1(space, channels_last=bool(config["supernet"]["channels_last"]))
    model.load_state_dict(load_model_state(model_path, space))
    splits = load(data_spec(config))
    check_space(splits.info, space)
    x_eval, y_eval = first_images(splits.search_val_batches(int(g["batch_size"])), int(g["n_eval"]))
    cal, _ = first_images(splits.calibration_batches(int(g["batch_size"])), int(g["n_cal"]))
    scorer = GreedyScorer(model, cal, x_eval, y_eval, g["batch_size"])
    rows = greedy_search(scorer, progress=progress)
    meta = io.provenance(space_name=space.name, space_hash=space.hash, seed=config["seed"], n_eval=int(g["n_eval"]),
                         n_cal=int(g["n_cal"]), supernet=str(model_path),
                         score="top-1 errors on the search-validation images, ties by summed cross-entropy",
                         bn="recalibrated per candidate: exact statistics of the calibration images")
    io.write_records(rows, out, "greedy_trajectory", meta)
    return rows
