"""ImageFolder training loader speed against worker count (`data.num_workers`; docs/method.md D30).

Writes a folder of random JPEGs (--images training images over --classes classes, --size × --size pixels,
plus a few validation images) in a temporary directory and reads epochs of its training batches through
`Splits.train_batches` (RandomResizedCrop to --crop + flip, seeded per image) with 0, 1 and 2 workers.
Each worker count keeps its loader (persistent workers, `data.prefetch_factor` batches ahead per worker,
pinned memory when CUDA is present); one untimed epoch starts it, then --reps timed epochs per worker
count are interleaved (0, 1, 2, 0, 1, 2, ...) so that a shared machine's load hits them alike. Prints the
median and interquartile range of images/s per worker count, and each count's ratio to 0 workers.

    PYTHONPATH=. python bench/bench_data.py [--images 2000] [--classes 10] [--size 256] [--crop 224] [--batch 64] [--reps 5]
    PYTHONPATH=. python bench/bench_data.py --quick      # a tiny folder: checks that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from aows_core.config import DataSpec
from aows_core.data import load_splits

WORKERS = (0, 1, 2)


def write_folder(root: Path, images: int, classes: int, size: int, seed: int = 0) -> None:
    """root/{train,val}/c{k}/*.jpg: `images` training and one validation JPEG per class, random pixels."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, n in (("train", images), ("val", classes)):
        for i in range(n):
            folder = root / split / f"c{i % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)


def epoch_rate(splits, epoch: int) -> float:
    """Images per second of one epoch of training batches."""
    t0, n = time.perf_counter(), 0
    for x, _ in splits.train_batches(epoch):
        n += len(x)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="60 images of 64×64, crop 32, batch 8, 2 repetitions")
    args = ap.parse_args()
    if args.quick:
        args.images, args.classes, args.size, args.crop, args.batch, args.reps = 60, 3, 64, 32, 8, 2
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_folder(root, args.images, args.classes, args.size)
        loaders = {}
        for w in WORKERS:
            spec = DataSpec(name="imagefolder", root=str(root), search_val=args.classes, calibration=args.classes,
                            batch_size=args.batch, num_workers=w, image_size=args.crop)
            loaders[w] = load_splits(spec, pin_memory=torch.cuda.is_available())
            epoch_rate(loaders[w], 0)  # starts the workers; untimed
        rates: dict[int, list[float]] = {w: [] for w in WORKERS}
        for rep in range(args.reps):
            for w in WORKERS:
                rates[w].append(epoch_rate(loaders[w], rep + 1))
    base = float(np.median(rates[0]))
    rows = []
    for w in WORKERS:
        q1, med, q3 = np.percentile(rates[w], [25, 50, 75])
        rows.append({"workers": w, "median_images_per_s": round(float(med), 1), "iqr": round(float(q3 - q1), 1),
                     "min": round(min(rates[w]), 1), "max": round(max(rates[w]), 1), "vs_0_workers": round(med / base, 2)})
    print(json.dumps({"images": args.images, "size": args.size, "crop": args.crop, "batch": args.batch,
                      "reps": args.reps, "cpus": len(os.sched_getaffinity(0)), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
