"""The one table of artifact schemas: every parquet kind and its columns, declared, never inferred.

A static, read-only mapping (no module adds a kind by being imported): a stray `SCHEMAS[...] = ...`
or `setdefault` fails loudly. `tests/test_snapshots.py` freezes it in `tests/snapshots/schemas.json`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

import pyarrow as pa

META_KEY = b"aows"

CHANNELS = pa.list_(pa.int32())

# One schema per artifact kind; every column is declared, never inferred. The first eight kinds are the
# latency model's and the decisions'; the rest are the supernet's, the baselines' and the results'.
SCHEMAS: Mapping[str, pa.Schema] = MappingProxyType({
    "configs": pa.schema(
        [
            ("config_id", pa.int64()),
            ("channels", CHANNELS),
            ("set", pa.string()),
            ("sampler", pa.string()),
        ]
    ),
    "latency": pa.schema(
        [
            ("job", pa.int64()),
            ("config_id", pa.int64()),
            ("channels", CHANNELS),
            ("role", pa.string()),
            ("set", pa.string()),
            ("t_start_s", pa.float64()),
            ("latency_ms", pa.float64()),
            ("latency_ms_raw", pa.float64()),
            ("drift_factor", pa.float64()),
            ("median_ms", pa.float64()),
            ("mean_ms", pa.float64()),
            ("min_ms", pa.float64()),
            ("p10_ms", pa.float64()),
            ("p90_ms", pa.float64()),
            ("std_ms", pa.float64()),
            ("n_repeats", pa.int32()),
            ("ref_ms_raw", pa.float64()),
            ("pair_ratio", pa.float64()),
            ("ratio_spread", pa.float64()),
            ("retimed", pa.bool_()),
        ]
    ),
    "lut": pa.schema(
        [
            ("in_h", pa.int32()),
            ("in_w", pa.int32()),
            ("stride", pa.int32()),
            ("kernel", pa.int32()),
            ("kind", pa.string()),
            ("c_in", pa.int32()),
            ("c_out", pa.int32()),
            ("latency_ms", pa.float64()),
            ("n_obs", pa.int64()),
        ]
    ),
    "lut_fit": pa.schema(
        [
            ("lam", pa.float64()),
            ("mu", pa.float64()),
            ("link_knot_ms", pa.float64()),
            ("link_slope", pa.float64()),
            ("train_rmse_ms", pa.float64()),
            ("train_nrmse", pa.float64()),
            ("val_rmse_ms", pa.float64()),
            ("val_nrmse", pa.float64()),
            ("val_mape", pa.float64()),
            ("n_violated", pa.int64()),
            ("solve_s", pa.float64()),
            ("iterations", pa.int64()),
            ("status", pa.string()),
            ("chosen", pa.bool_()),
        ]
    ),
    "lut_validation": pa.schema(
        [
            ("model", pa.string()),
            ("n", pa.int64()),
            ("rmse_ms", pa.float64()),
            ("nrmse", pa.float64()),
            ("mape", pa.float64()),
            ("within_5pct", pa.float64()),
            ("within_10pct", pa.float64()),
            ("kendall_tau", pa.float64()),
        ]
    ),
    "unaries": pa.schema(
        [
            ("layer", pa.int16()),
            ("width", pa.int32()),
            ("delta", pa.float64()),
            ("delta_se", pa.float64()),
            ("count", pa.int64()),
            ("epoch", pa.int32()),
            ("estimator", pa.string()),
        ]
    ),
    "decisions": pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("target_ms", pa.float64()),
            ("unit", pa.string()),
            ("channels", CHANNELS),
            ("predicted_latency_ms", pa.float64()),
            ("objective", pa.float64()),
            ("gamma", pa.float64()),
            ("dual_bound", pa.float64()),
            ("gap", pa.float64()),
            ("exact", pa.bool_()),
            ("unvisited_policy", pa.string()),
            ("epoch", pa.int32()),
            ("width_signal_z", pa.float64()),
        ]
    ),
    "lut_predictions": pa.schema(
        [
            ("config_id", pa.int64()),
            ("channels", CHANNELS),
            ("measured_ms", pa.float64()),
            ("predicted_ms", pa.float64()),
            ("flops_baseline_ms", pa.float64()),
        ]
    ),
    "greedy_trajectory": pa.schema(
        [
            ("step", pa.int32()),
            ("channels", CHANNELS),
            ("lowered_layer", pa.int32()),
            ("errors", pa.int64()),
            ("error", pa.float64()),
            ("cross_entropy", pa.float64()),
            ("candidates", pa.int32()),
        ]
    ),
    "measure": pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("target_ms", pa.float64()),
            ("unit", pa.string()),
            ("channels", CHANNELS),
            ("predicted_ms", pa.float64()),
            ("measured_ms_raw", pa.float64()),
            ("measured_ms", pa.float64()),
            ("measured_ms_min", pa.float64()),
            ("measured_ms_max", pa.float64()),
            ("rounds", pa.int32()),
            ("meets_target_predicted", pa.bool_()),
            ("meets_target_measured", pa.bool_()),
            ("rel_error", pa.float64()),
            ("fingerprint_match", pa.bool_()),
            ("too_noisy", pa.bool_()),
        ]
    ),
    "pareto": pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("target_ms", pa.float64()),
            ("unit", pa.string()),
            ("channels", CHANNELS),
            ("mmacs", pa.float64()),
            ("predicted_ms", pa.float64()),
            ("measured_ms", pa.float64()),
            ("measured_ms_min", pa.float64()),
            ("measured_ms_max", pa.float64()),
            ("meets_target_predicted", pa.bool_()),
            ("meets_target_measured", pa.bool_()),
            ("too_noisy", pa.bool_()),
            ("seeds", pa.int32()),
            ("test_acc", pa.float64()),
            ("test_acc_low", pa.float64()),
            ("test_acc_high", pa.float64()),
            ("test_acc_std", pa.float64()),
            ("test_n", pa.int64()),
            ("sum_delta", pa.float64()),
            ("supernet_acc", pa.float64()),
            ("pareto_optimal", pa.bool_()),
        ]
    ),
    "configurations": pa.schema(
        [
            ("method", pa.string()),
            ("target", pa.string()),
            ("layer", pa.int32()),
            ("width", pa.int32()),
            ("base_width", pa.int32()),
            ("ratio", pa.float64()),
        ]
    ),
    "training_curves": pa.schema(
        [
            ("run", pa.string()),
            ("epoch", pa.int32()),
            ("sampling", pa.string()),
            ("loss_max", pa.float64()),
            ("loss_min", pa.float64()),
            ("loss_random", pa.float64()),
            ("train_acc_max", pa.float64()),
            ("temperature", pa.float64()),
            ("images_per_s", pa.float64()),
        ]
    ),
    "proxy_check": pa.schema(
        [
            ("proxy", pa.string()),
            ("method", pa.string()),
            ("target", pa.string()),
            ("score", pa.float64()),
            ("test_acc", pa.float64()),
            ("kendall_tau", pa.float64()),
            ("p_value", pa.float64()),
            ("n", pa.int64()),
        ]
    ),
    "proxy": pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("channels", CHANNELS),
            ("sum_delta", pa.float64()),
            ("supernet_errors", pa.int64()),
            ("supernet_n", pa.int64()),
            ("supernet_acc", pa.float64()),
        ]
    ),
    "retrain": pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("channels", CHANNELS),
            ("seed", pa.int64()),
            ("epochs", pa.int32()),
            ("train_seconds", pa.float64()),
            ("final_train_loss", pa.float64()),
            ("test_correct", pa.int64()),
            ("test_n", pa.int64()),
            ("test_acc", pa.float64()),
            ("test_acc_low", pa.float64()),
            ("test_acc_high", pa.float64()),
        ]
    ),
    "train_metrics": pa.schema(
        [
            ("epoch", pa.int32()),
            ("steps", pa.int64()),
            ("images", pa.int64()),
            ("seconds", pa.float64()),
            ("images_per_s", pa.float64()),
            ("loss_max", pa.float64()),
            ("loss_min", pa.float64()),
            ("loss_random", pa.float64()),
            ("train_acc_max", pa.float64()),
            ("sampling", pa.string()),
            ("gamma", pa.float64()),
            ("temperature", pa.float64()),
            ("scale", pa.float64()),
            ("entropy", pa.float64()),
            ("sampled_latency", pa.float64()),
            ("gamma_zero_share", pa.float64()),
            ("width_signal", pa.float64()),
            ("width_signal_se", pa.float64()),
            ("unaries_r2", pa.float64()),
        ]
    ),
})
