"""Datasets, splits and deterministic, resumable, shardable loaders (§7 and the "prepare data" stage).

`datasets` reads the dataset folders (Fashion-MNIST, CIFAR-10, ImageFolder) and checks a space
against them (`check_dataset`); `preprocessing` describes what the evaluation does to a test image
(`describe_preprocessing`, what an export records); `splits` holds the seeded splits, the (seed, epoch, step) batch
streams and their rank shards (`shard_bounds`). The data settings (`DataSpec`, `DataError`,
`DATASETS`, `DEFAULT_ROOTS`, `data_spec`) live in `config` and are re-exported here as the same objects.
"""

from __future__ import annotations

from ..config import DATASETS, DEFAULT_ROOTS, DataError, DataSpec, data_spec
from .datasets import (
    CIFAR10_FILES,
    FMNIST_FILES,
    IMAGEFOLDER_SIZE,
    MEAN_STD,
    PAD,
    DatasetInfo,
    check_dataset,
    dataset_info,
)
from .preprocessing import PREPROCESSING_KEY, describe_preprocessing
from .splits import (
    Splits,
    StepSampler,
    augment_params,
    crop_flip,
    epoch_permutation,
    first_images,
    load_splits,
    shard_bounds,
    split_indices,
    test_batches,
    test_size,
)

__all__ = [
    "CIFAR10_FILES", "DATASETS", "DEFAULT_ROOTS", "FMNIST_FILES", "IMAGEFOLDER_SIZE", "MEAN_STD", "PAD",
    "PREPROCESSING_KEY", "DataError", "DataSpec", "DatasetInfo", "Splits", "StepSampler", "augment_params",
    "check_dataset", "crop_flip", "data_spec", "dataset_info", "describe_preprocessing", "epoch_permutation",
    "first_images", "load_splits", "shard_bounds", "split_indices", "test_batches", "test_size",
]
