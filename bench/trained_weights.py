"""A trained network's narrow widths, before any supernet training: channels kept in their own order or ordered by
importance (docs/method.md D48).

Trains tests/fixtures/user_models.py's SmallNet on Fashion-MNIST for `--epochs`, saves it, and loads it through
`space.weights` as the supernet stage does; then, for each importance order, every uniform multiplier's front slice
(`multiplier_configs`), its BatchNorm recalibrated on `--calibration` training images (D22), is scored on the test
split. Prints the full network's accuracy (equal in every order) and one row per multiplier.

    python bench/trained_weights.py --epochs 2 [--finetune 2]

With `--finetune E`, the 0.75× network is trained for 1..E epochs (each a fresh run with its own one-cycle schedule)
from its ordered slice (retrain.init: weights) and from scratch.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from aows_core.config import DATASET_INPUT, SpaceSettings
from aows_core.data.datasets import MEAN_STD, _fmnist_arrays
from aows_core.nets.supernet import Supernet
from aows_core.space import multiplier_configs
from aows_core.tracing import load_model

ROOT = Path(__file__).resolve().parents[1]
MODEL = f"{ROOT}/tests/fixtures/user_models.py:small_net"


def normalised(x: torch.Tensor) -> torch.Tensor:
    mean, std = MEAN_STD["fashion_mnist"]
    return (x.float() / 255 - mean[0]) / std[0]


def train(epochs: int, batch: int, seed: int, model: torch.nn.Module | None = None) -> tuple[torch.nn.Module, float]:
    """SmallNet (or `model`) trained with SGD and a one-cycle schedule on the 60 000 training images; (model,
    seconds)."""
    torch.manual_seed(seed)
    x, y = _fmnist_arrays(Path("/usr/share/datasets/fashion-mnist"), "train", False)
    model = load_model(MODEL, {"width": 16}) if model is None else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    steps = epochs * (len(x) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=steps)
    t0 = time.perf_counter()
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x))
        for i in range(len(x) // batch):
            idx = order[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(model(normalised(x[idx])), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model.eval(), time.perf_counter() - t0


@torch.no_grad()
def accuracy(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cal: torch.Tensor) -> float:
    """Test accuracy after recalibrating every BatchNorm on `cal` (cumulative statistics, D22)."""
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    net.train()
    for i in range(0, len(cal), 256):
        net(cal[i:i + 256])
    net.eval()
    right = sum(int((net(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()) for i in range(0, len(x), 1000))
    return right / len(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--calibration", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--finetune", type=int, default=0, help="epochs of the 0.75× fine-tuning comparison (0: none)")
    a = ap.parse_args()
    torch.set_num_threads(2)
    model, seconds = train(a.epochs, a.batch, a.seed)
    xt, yt = _fmnist_arrays(Path("/usr/share/datasets/fashion-mnist"), "test", False)
    xc, _ = _fmnist_arrays(Path("/usr/share/datasets/fashion-mnist"), "train", False)
    xt, cal = normalised(xt), normalised(xc[torch.randperm(len(xc), generator=torch.Generator().manual_seed(1))[:a.calibration]])
    with torch.no_grad():
        full = float((model(xt).argmax(1) == yt).float().mean())
    print(f"SmallNet trained {a.epochs} epochs in {seconds:.0f} s: test accuracy {100 * full:.2f} %")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trained.pt"
        torch.save(model.state_dict(), path)
        for importance in ("none", "bn"):
            section = SpaceSettings(model=MODEL, model_kwargs={"width": 16}, weights=str(path), importance=importance)
            space = section.build()
            assert (space.in_channels, space.resolution[0]) == DATASET_INPUT["fashion_mnist"]
            sup = Supernet(space)
            sup.load_state_dict(section.initial_state())
            with torch.no_grad():
                step0 = float((sup.eval()(xt).argmax(1) == yt).float().mean())
            assert abs(step0 - full) < 1e-3, (step0, full)  # the widest network is the trained one
            for m, cfg in multiplier_configs(space):
                rows.setdefault(round(m, 3), {})[importance] = accuracy(sup.subnet(cfg), xt, yt, cal)
    print("| multiplier | kept in their order | ordered by BN |γ| |")
    print("|---|---|---|")
    for m, r in sorted(rows.items()):
        print(f"| {m:.2f} | {100 * r['none']:.2f} % | {100 * r['bn']:.2f} % |")
    gain = [r["bn"] - r["none"] for m, r in rows.items() if m < 1]
    print(f"BN order − own order below 1.0×: median {100 * np.median(gain):+.2f} points")
    if a.finetune:
        finetune(a, xt, yt, path_state=(space, sup))


def finetune(a: argparse.Namespace, xt: torch.Tensor, yt: torch.Tensor, path_state) -> None:
    """retrain.init: the 0.75× network fine-tuned from its ordered slice against trained from scratch, epoch by
    epoch (the same recipe as the trained network's)."""
    from aows_core.nets.network import Network

    space, sup = path_state
    m, cfg = min(multiplier_configs(space), key=lambda mc: abs(mc[0] - 0.75))
    for name, make in (("fine-tuned", lambda: sup.subnet(cfg)), ("from scratch", lambda: Network(space, cfg))):
        accs = []
        for e in range(1, a.finetune + 1):
            net, _ = train(e, a.batch, a.seed, make().train())
            with torch.no_grad():
                accs.append(float((net.eval()(xt).argmax(1) == yt).float().mean()))
        print(f"{m:.2f}× {name}: " + ", ".join(f"{e} epoch(s) {100 * v:.2f} %" for e, v in enumerate(accs, 1)))


if __name__ == "__main__":
    main()
