"""Write docs/artifacts.md: every artifact kind of `aows_core.artifacts.SCHEMAS` with its path, columns and metadata.

The columns and their types come from the schemas themselves; what each column and metadata key means is written
below, next to the code that reads it. A kind without a description, a described column that no schema has, or a
column left undescribed stops the script, so the page cannot drift from the schemas (tests/test_artifacts_doc.py
also checks that the committed page is what this script prints).

    python3 scripts/artifacts_doc.py            # rewrite docs/artifacts.md
    python3 scripts/artifacts_doc.py --check    # exit 1 when docs/artifacts.md is not current
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "artifacts.md"
sys.path.insert(0, str(ROOT))


def _kinds() -> list[str]:
    """The layer kinds aows itself registers, in registration order (a kind a user or a test registers is not
    aows's: the page stays the same whatever was imported before)."""
    from aows_core.kinds import KINDS

    return [name for name, cls in KINDS.items() if cls.__module__.startswith("aows_core.")]


@dataclass(frozen=True)
class Kind:
    """One artifact kind: where it is written and by which command, and what its columns and metadata mean."""

    paths: tuple[tuple[str, str], ...]  # (path, the command that writes it)
    what: str
    columns: dict[str, str]
    metadata: dict[str, str] = field(default_factory=dict)


# Keys that every parquet artifact carries in its metadata (under the key `aows`), added by `artifacts.provenance`
# and `artifacts.write_table`; `lut_fit` carries kind, space_hash, device, unit and aows_version only.
COMMON = {
    "kind": "the artifact kind (the headings below); readers refuse a file of another kind",
    "aows_version": "the aows version that wrote the file",
    "python": "the Python version",
    "platform": "the host platform (`platform.platform()`)",
    "space_name": "the search space's name (a preset, `+custom` when overridden)",
    "space_hash": "a hash of the search space's definition; readers refuse an artifact of another space",
    "device": "the device name of `devices:` (absent where the artifact serves every device)",
}

LATENCY_ROLE = ("`sample` (first timing) or `retest` (the same network timed again at least a third of the session "
                "later)")
FINGERPRINT = "the device fingerprint: backend settings, CPU/GPU model, core count, library versions, timed form"

KINDS: dict[str, Kind] = {
    "configs": Kind(
        paths=(("results/latency/configs.parquet", "aows sample"),),
        what="The networks to profile, one row per configuration (§4, supplementary A; [method.md](method.md) D1, D2).",
        columns={
            "config_id": "row id, referenced by the latency files",
            "channels": "the searchable widths c_1 … c_{n-1}",
            "set": "`train` (fitted), `lambda_val` (chooses λ and μ), `test` (held out for `validate-lut`)",
            "sampler": "`biased` (coverage-biased), `anchor` (a uniform width multiplier, `sampling.anchors`), "
                       "`uniform`",
        },
        metadata={
            "space": "the space's definition (choices, Θ per layer, base widths)",
            "seed": "the top-level seed",
            "sampling": "the `sampling:` settings",
            "sampler": "how each set was drawn, in words",
            "coverage_lower_bound": "the fewest networks that can see every latency variable `sampling.coverage` times",
        },
    ),
    "latency": Kind(
        paths=(("results/latency/{device}.parquet", "aows profile"),),
        what="One row per timed network of a profiling session (§4; [timing-protocol.md](timing-protocol.md)).",
        columns={
            "job": "position in the session's seeded order",
            "config_id": "the network's row in configs.parquet",
            "channels": "the searchable widths",
            "role": LATENCY_ROLE,
            "set": "the configuration's set (train, lambda_val, test)",
            "t_start_s": "seconds from the session's first job to this one",
            "latency_ms": "the corrected latency the table is fitted on: latency_ms_raw ÷ reference level × "
                          "reference baseline (D27), in the device's unit",
            "latency_ms_raw": "the statistic (`profiling.statistic`, minimum by default) of the network's passes",
            "drift_factor": "the reference level ÷ the reference baseline: the host's speed during the job",
            "median_ms": "median of the network's passes",
            "mean_ms": "mean of the network's passes",
            "min_ms": "minimum of the network's passes",
            "p10_ms": "10th percentile of the network's passes",
            "p90_ms": "90th percentile of the network's passes",
            "std_ms": "standard deviation of the network's passes",
            "n_repeats": "timed passes of the network (more than `repeats` for fast networks, `min_time_ms`)",
            "ref_ms_raw": "the statistic of the reference network's passes in the same job (NaN on `flops`)",
            "pair_ratio": "network statistic ÷ reference statistic (NaN on `flops`)",
            "ratio_spread": "relative range (max − min) ÷ median of the per-chunk ratios; large = disturbed",
            "retimed": ("the job was timed again: its ratio_spread was large (D27) or it was timed in one of the host's "
                        "spells (D47); the timing outside a spell, then the less disturbed one, is kept"),
        },
        metadata={
            "space": "the space's definition",
            "device_spec": "the device's settings from `devices:`",
            "fingerprint": FINGERPRINT,
            "unit": "\"ms per forward of a batch of B images\" (MMAC for `flops`)",
            "unit_short": "`ms` or `MMAC`",
            "analytic": "true for a counted device (`flops`)",
            "protocol": "the `profiling:` settings; later sessions (`measure`, verification) must share them",
            "statistic": "the fitted statistic",
            "pairing": "`paired` (timed device) or `analytic`",
            "seed": "the top-level seed",
            "reference_channels": "the reference network (the middle width of every layer)",
            "reference_baseline": "the median of the session's reference timings: the scale latencies are expressed at",
            "configs_sampler": "the `sampler` note of configs.parquet",
            "timed_s": "seconds inside timed passes, network and reference",
            "overhead_s": "seconds of construction, session creation and warm-up",
            "session_wall_s": "the session's wall time",
            "retimed": "jobs timed again",
            "quiet_level_ms": "the host's quiet reference level: the 10th percentile of the first timings' ref_ms_raw (D47)",
            "spells_retimed": ("whether they were timed again: not when the host was in spells for half the session or "
                               "more (no quiet majority to return to, D47)"),
            "timed_in_spell": "jobs first timed in one of the host's spells: ref_ms_raw above 1.2 × quiet_level_ms (D47)",
            "retimed_in_spell": "re-timings of those jobs (D47)",
            "left_in_spell": "jobs whose kept timing is still in a spell (D47)",
            "next_job": "the number of jobs: `measure` numbers its jobs after them",
            "targets": "the device's targets when profiled (they set the `auto` noise gate)",
            "sigma_n": "test–retest noise σ_n = RMS((m₁ − m₂)/m̄)/√2 over the retest pairs",
            "retest_pairs": "retest pairs behind σ_n",
            "retest_within_5pct": "share of retest pairs within ±5 % of each other",
            "retest_within_10pct": "share of retest pairs within ±10 % of each other",
            "retest_nrmse": "the held-out NRMSE a perfect table would score against timings this noisy",
            "max_noise": "the noise gate's threshold (resolved from `profiling.max_noise`)",
            "too_noisy": "σ_n exceeded the gate",
            "noise_message": "what to do when too noisy (empty otherwise)",
        },
    ),
    "lut": Kind(
        paths=(("results/lut/{device}/lut.parquet", "aows fit-lut"),),
        what="The latency table: one row for every latency variable (Θ, c_in, c_out) of the space (§4 eq. lat; "
             "[latency-model.md](latency-model.md)).",
        columns={
            "in_h": "Θ: input height",
            "in_w": "Θ: input width",
            "stride": "Θ: stride",
            "kernel": "Θ: kernel size",
            "kind": "Θ: the layer kind, one of the registry's (`aows_core.kinds`, docs/extending.md): "
                    + ", ".join(f"`{name}`" for name in _kinds()),
            "c_in": "input channels",
            "c_out": "output channels",
            "latency_ms": "the entry L_Θ(c_in, c_out), in the device's unit; only path sums are identified (D6)",
            "n_obs": "fitted networks that use the variable",
        },
        metadata={
            "fingerprint": FINGERPRINT + " (the latency file's)",
            "unit": "as in the latency file",
            "unit_short": "as in the latency file",
            "statistic": "as in the latency file",
            "protocol": "as in the latency file",
            "pairing": "as in the latency file",
            "reference_channels": "as in the latency file",
            "reference_baseline": "as in the latency file: `measure` expresses its timings at it",
            "sigma_n": "the profiling session's σ_n",
            "too_noisy": "the profiling session failed the noise gate",
            "lam": "the chosen λ of the monotonicity prior, in ms units (D5)",
            "smoothness": "the chosen μ of the smoothness prior (D38)",
            "link": "the chosen link `{knot_ms, slope}`, null for eq. lat's plain sum (D39)",
            "ridge": "the ridge ρ (`lut.ridge`)",
            "n_train": "training networks fitted",
            "n_lambda_val": "networks that chose λ, μ and the link",
            "n_inequalities": "rows of the monotonicity prior V (D7)",
            "train_rmse_ms": "RMSE on the training networks",
            "val_rmse_ms": "RMSE on the lambda_val networks",
            "val_nrmse": "val_rmse_ms ÷ their mean latency",
            "formulation": "the objective solved, in words",
        },
    ),
    "lut_fit": Kind(
        paths=(("results/lut/{device}/fit.parquet", "aows fit-lut"),),
        what="The fit report: one row per (μ, λ) of the grids and per link tried; `chosen` marks the table kept.",
        columns={
            "lam": "λ of the monotonicity prior, in ms units",
            "mu": "μ of the smoothness prior",
            "link_knot_ms": "the link's knot s₀ (null: additive)",
            "link_slope": "the link's slope κ (null: additive)",
            "train_rmse_ms": "RMSE on the training networks",
            "train_nrmse": "train_rmse_ms ÷ their mean latency",
            "val_rmse_ms": "RMSE on the lambda_val networks (the choice)",
            "val_nrmse": "val_rmse_ms ÷ their mean latency",
            "val_mape": "mean absolute percentage error on lambda_val",
            "n_violated": "monotonicity inequalities the table violates",
            "solve_s": "solver seconds",
            "iterations": "solver iterations",
            "status": "the solver's status (a failed solve stops the fit, D12)",
            "chosen": "the row the table was kept from",
        },
        metadata={"unit": "as in the latency file"},
    ),
    "lut_validation": Kind(
        paths=(("results/lut/{device}/validation.parquet", "aows validate-lut"),),
        what="The table on the held-out `test` networks (§7 Fig. latency_correlation), beside a latency ∝ FLOPs model "
             "fitted on the same training networks.",
        columns={
            "model": "`lut` or `flops_proportional`",
            "n": "held-out networks",
            "rmse_ms": "RMSE of predicted against measured",
            "nrmse": "rmse_ms ÷ mean measured latency",
            "mape": "mean absolute percentage error",
            "within_5pct": "share of networks predicted within ±5 %",
            "within_10pct": "share of networks predicted within ±10 %",
            "kendall_tau": "rank agreement of predicted and measured latency",
        },
        metadata={
            "fingerprint": FINGERPRINT,
            "unit": "as in the latency file",
            "lam": "the table's λ",
            "link": "the table's link",
            "flops_ms_per_mmac": "the slope of the FLOPs-proportional model",
            "adequacy": "the report of D34: `verdict` (width_unresolved, at_noise, model_limited, too_noisy), "
                        "`message`, `sigma_n`, `rel_rms`, `model_error`, `ratio_low` / `ratio_high` (95 % of measured "
                        "÷ predicted), `coverage`, `retest_reach_ms`, `beyond_retest`, `error_beyond_retest`; the "
                        "width-resolution check (docs/latency-model.md): `width_resolved`, `kendall_tau`, "
                        "`latency_span` (predicted max ÷ min configuration), `span_sigmas`, `unresolved_because`",
            "sigma_n": "the profiling session's σ_n",
            "retest_pairs": "as in the latency file",
            "retest_within_5pct": "as in the latency file",
            "retest_within_10pct": "as in the latency file",
            "retest_nrmse": "as in the latency file",
            "max_noise": "as in the latency file",
            "too_noisy": "as in the latency file",
            "noise_message": "as in the latency file",
            "retimed": "as in the latency file",
        },
    ),
    "lut_predictions": Kind(
        paths=(("results/lut/{device}/predictions.parquet", "aows validate-lut"),),
        what="The held-out networks behind validation.pdf; metadata as validation.parquet.",
        columns={
            "config_id": "the network's row in configs.parquet",
            "channels": "the searchable widths",
            "measured_ms": "its corrected latency",
            "predicted_ms": "the table's prediction (through the link, D39)",
            "flops_baseline_ms": "the FLOPs-proportional prediction",
        },
    ),
    "unaries": Kind(
        paths=(
            ("results/supernet/ows/unaries.parquet", "aows train-supernet"),
            ("results/supernet/aows/{device}/{target}/unaries.parquet", "aows train-supernet"),
        ),
        what="The unaries δ_i(c) of eq. average_error per epoch (§5; [method.md](method.md) D26); `decode` reads the frozen "
             "estimate of the last epoch when there is one.",
        columns={
            "layer": "0-based searchable width (a layer of MobileNet-v1; a stream or inner width of a residual space)",
            "width": "the width c",
            "delta": "δ (nats; null iff count = 0)",
            "delta_se": "its standard error (null iff count < 2)",
            "count": "samples or configurations behind δ",
            "epoch": "0-based epoch",
            "estimator": "`frozen` (the estimation pass on trained weights, decides) or `training` "
                         "(the training steps' average)",
        },
        metadata={
            "seed": "the top-level seed",
            "method": "`ows` or `aows`",
            "target": "the AOWS target (null for OWS)",
            "target_value": "the AOWS target resolved in the LUT's unit",
            "target_budget": "the budget the sampler decodes (g⁻¹(target) under a link, D39)",
            "sampling": "how configurations were drawn, in words",
            "window": "AOWS: K of `aows.window`",
            "averaging": "how training-time unaries average, in words",
            "loss": "the loss δ averages (D11)",
            "unaries": "`supernet.unaries`",
            "frozen_estimate": "the estimation pass, in words (null with `training` unaries)",
            "temperature_scale": "AOWS: the scale s the temperature applies to (D18)",
            "processes": "data-parallel processes",
            "bn": "how BatchNorm normalised (per rank or synchronised, D30)",
            "supernet": "the `supernet:` settings",
            "data": "the resolved data settings",
            "train": "the `train:` settings and the resolved device",
            "width_signal": "Σδ(min) − Σδ(max) of the deciding unaries",
            "width_signal_se": "its standard error",
            "width_signal_z": "width_signal ÷ width_signal_se (below 3: no width signal detectable)",
        },
    ),
    "train_metrics": Kind(
        paths=(
            ("results/supernet/ows/metrics.parquet", "aows train-supernet"),
            ("results/supernet/aows/{device}/{target}/metrics.parquet", "aows train-supernet"),
        ),
        what="One row per supernet epoch; metadata as unaries.parquet.",
        columns={
            "epoch": "0-based epoch",
            "steps": "optimiser steps",
            "images": "training images",
            "seconds": "wall seconds of the epoch",
            "images_per_s": "throughput",
            "loss_max": "mean loss of the max configuration",
            "loss_min": "mean loss of the min configuration",
            "loss_random": "mean loss of the random passes",
            "train_acc_max": "training top-1 of the max configuration",
            "sampling": "`uniform` or the AOWS sampling mode",
            "gamma": "AOWS: the γ sampled at (negative while the target does not bind, D31)",
            "temperature": "AOWS: T at the epoch's end",
            "scale": "AOWS: the temperature scale s",
            "entropy": "AOWS: mean normalised entropy of the marginals",
            "sampled_latency": "AOWS: mean table latency of the sampled configurations",
            "gamma_zero_share": "AOWS: share of steps at which the target did not bind",
            "width_signal": "Σδ(min) − Σδ(max) of the epoch's deciding unaries",
            "width_signal_se": "its standard error",
            "unaries_r2": "R² of the additive fit of the epoch's deciding unaries",
        },
    ),
    "decisions": Kind(
        paths=(
            ("results/decisions/{device}/{method}/{target}.parquet",
             "aows decode (aows, ows); aows decide-baseline (greedy, uniform)"),
        ),
        what="The decided widths for one (device, method, target) (§5), verified on the device (D36).",
        columns={
            "method": "`aows`, `ows`, `greedy` or `uniform`",
            "device": "the device name",
            "target": "the target string (`range:0.25`, `4.5ms`, `325mflops`)",
            "target_ms": "the target resolved in the table's unit",
            "unit": "`ms` or `MMAC`",
            "channels": "the decided widths",
            "predicted_latency_ms": "the prediction of the decision's verified table",
            "objective": "Σδ (null for the baselines)",
            "gamma": "the Lagrange multiplier γ* (null for the baselines)",
            "dual_bound": "the Lagrangian dual bound (null for the baselines)",
            "gap": "objective − dual_bound (null for the baselines)",
            "exact": "the answer is the proven constrained optimum (false for the baselines)",
            "unvisited_policy": "what unvisited widths were given (`decode.unvisited`, D13)",
            "epoch": "the unaries' epoch",
            "width_signal_z": "the unaries' width signal in standard errors",
        },
        metadata={
            "fingerprint": "the LUT's device fingerprint",
            "unit": "the LUT's unit",
            "lut_lambda": "the LUT's λ",
            "decode": "aows, ows: the `decode:` settings",
            "unaries_meta": "aows, ows: the unaries' metadata",
            "width_signal_note": "aows, ows: a note when no width signal is detectable (else null)",
            "trajectory_meta": "greedy: the trajectory's metadata",
            "verification": "D36: `verified`, `settings`, and per target `target_ms`, `margin` (the session margin kept "
                            "under it), `converged` (within the "
                            "tolerance, on an interval no wider than it, its bound meeting the target), "
                            "`meets_target` (the last timing's bound meets the target), the last timing's relative "
                            "half-`interval`, `networks_timed`, the verified table `lut` (one value per latency "
                            "variable) and the `trace` (per round: `channels`, `aim_ms` the latency decided for, "
                            "`predicted_ms`, `measured_ms` — the median over its timings — `measured_lo_ms` and "
                            "`measured_hi_ms` their range, `measured_upper_ms` the median's upper bound (D36), `bound_ms` the larger "
                            "of that and the median raised by the margin, "
                            "`timing_rounds`, `rel_error`, `meets_target`, `timed`, "
                            "`stopped` when no network met the aim), or `reason` when not verified",
        },
    ),
    "greedy_trajectory": Kind(
        paths=(("results/supernet/ows/greedy_trajectory.parquet", "aows greedy"),),
        what="The AutoSlim trajectory from the max to the min configuration (§3; D22): one row per step.",
        columns={
            "step": "0 = the max configuration",
            "channels": "the widths after the step",
            "lowered_layer": "the searchable width lowered by one choice (a tied stream as one unit; null at step 0)",
            "errors": "top-1 errors on the search-validation images",
            "error": "errors ÷ images",
            "cross_entropy": "mean cross-entropy (the tie-break)",
            "candidates": "candidates scored at the step",
        },
        metadata={
            "seed": "the top-level seed",
            "n_eval": "search-validation images scored",
            "n_cal": "images BatchNorm is recalibrated on",
            "processes": "data-parallel scoring processes",
            "supernet": "the OWS supernet scored",
            "ranks_widths": "Spearman between step and error, with its p-value",
            "score": "the score, in words",
            "bn": "the BatchNorm protocol, in words",
            "train": "the `train:` settings and the resolved device",
        },
    ),
    "retrain": Kind(
        paths=(
            ("results/retrain/nets/{net}/seed{seed}/result.parquet", "aows retrain"),
            ("results/retrain/{device}/{method}/{target}/seed{seed}/result.parquet", "aows relabel"),
        ),
        what="One retraining from scratch and its test-split score (§7; D25).",
        columns={
            "method": "the finalist's method (null in `nets/`)",
            "device": "the finalist's device (null in `nets/`)",
            "target": "the finalist's target (null in `nets/`)",
            "channels": "the widths",
            "seed": "the retraining seed",
            "epochs": "training epochs",
            "train_seconds": "training wall seconds",
            "final_train_loss": "the last epoch's mean training loss",
            "test_correct": "correct test images",
            "test_n": "test images",
            "test_acc": "top-1 on the test split",
            "test_acc_low": "Wilson 95 % interval, low",
            "test_acc_high": "Wilson 95 % interval, high",
        },
        metadata={
            "retrain": "the `retrain:` settings",
            "data": "the resolved data settings",
            "network": "`nets/`: the widths key",
            "decision": "the decision file retrained (or relabelled)",
            "trained": "relabel: the `nets/` result it copies",
            "train": "the `train:` settings and the resolved device",
            "processes": "data-parallel processes",
            "bn": "how BatchNorm normalised",
            "interval": "the interval, in words",
            "schedule": "the learning-rate schedule, in words",
        },
    ),
    "measure": Kind(
        paths=(("results/measure/{device}.parquet", "aows measure"),),
        what="Every finalist of a device timed in one later session with the profiling protocol (§7; D24).",
        columns={
            "method": "the finalist's method",
            "device": "the device name",
            "target": "the target string",
            "target_ms": "the target in the table's unit",
            "unit": "`ms` or `MMAC`",
            "channels": "the widths",
            "predicted_ms": "the decision's (verified) prediction",
            "measured_ms_raw": "median over rounds of the uncorrected statistic",
            "measured_ms": "median over rounds, corrected to the LUT's reference baseline",
            "measured_ms_min": "lowest corrected round",
            "measured_ms_max": "highest corrected round",
            "rounds": "rounds timed",
            "meets_target_predicted": "predicted_ms ≤ target_ms",
            "meets_target_measured": "measured_ms ≤ target_ms",
            "rel_error": "predicted_ms ÷ measured_ms − 1",
            "fingerprint_match": "this machine's fingerprint equals the LUT's",
            "too_noisy": "the LUT's session or this one (spread across rounds) failed the noise gate",
        },
        metadata={
            "device_spec": "the device's settings",
            "fingerprint": "this session's device fingerprint",
            "lut_fingerprint": "the profile's fingerprint",
            "fingerprint_match": "whether they are equal",
            "unit": "the LUT's unit",
            "unit_short": "`ms` or `MMAC`",
            "analytic": "true for `flops`",
            "protocol": "the timing settings (equal to the profile's, or refused)",
            "statistic": "the statistic",
            "rounds": "rounds timed",
            "measure": "the `measure:` settings",
            "seed": "the top-level seed",
            "job_offset": "the first job's number (after the profile's)",
            "settle": "D46: whether the kept rounds are as quiet as the profile and their host as fast "
                      "(`settled`), the round noise and relative speed difference that is (`quiet`), `rounds_timed` "
                      "in all (the last `rounds` kept), `extra_s` seconds of further rounds, and per window of rounds "
                      "considered its round noise (`window_noise`) and its references' median time ÷ the profile's "
                      "(`window_level`); null on an analytic device",
            "retimed": "jobs timed again (disturbed while timed, as in profiling)",
            "reference_channels": "the reference network",
            "reference_baseline": "the LUT's reference baseline the timings are expressed at",
            "session_reference_baseline": "this session's own reference median",
            "pairing": "`paired` or `analytic`",
            "correction": "the correction, in words",
            "round_noise": "pooled spread of log latency across rounds (≈ σ_n)",
            "max_noise": "the noise gate",
            "lut_too_noisy": "the profile failed the gate",
            "too_noisy": "this file's finalists are flagged",
            "noise_message": "why (empty otherwise), and whether the kept rounds never became as quiet as the profile",
            "networks": "the distinct networks timed",
            "decisions": "the decision files read",
            "latency": "the latency file",
            "lut": "the LUT file",
            "lut_lambda": "the LUT's λ",
            "timings": "every single timing (the latency file's columns plus `round` and `network`)",
        },
    ),
    "proxy": Kind(
        paths=(("results/proxy/{device}.parquet", "aows proxy"),),
        what="The supernet's proxies of every finalist (Assumption 3.1).",
        columns={
            "method": "the finalist's method",
            "device": "the device name",
            "target": "the target string",
            "channels": "the widths",
            "sum_delta": "Σδ under the OWS unaries",
            "supernet_errors": "top-1 errors of the sub-network of the OWS supernet, BN recalibrated",
            "supernet_n": "search-validation images scored",
            "supernet_acc": "1 − supernet_errors ÷ supernet_n",
        },
        metadata={
            "unaries": "the OWS unaries file",
            "unaries_epoch": "its epoch",
            "supernet": "the OWS supernet",
            "n_eval": "images scored",
            "n_cal": "images BatchNorm is recalibrated on",
            "unaries_check": "Spearman between Σδ and the recalibrated cross-entropy of 100 random configurations "
                             "no estimate used (`spearman_sum_delta_vs_supernet_ce`, `p_value`, `n_configs`, `loss`)",
            "processes": "data-parallel scoring processes",
            "train": "the `train:` settings and the resolved device",
            "score": "the score, in words",
        },
    ),
    "pareto": Kind(
        paths=(
            ("results/pareto_{device}.parquet", "aows pareto"),
            ("results/plots/{device}/latency.parquet", "aows pareto"),
        ),
        what="The results table behind pareto_{device}.pdf: one row per finalist (§7 Fig. pareto).",
        columns={
            "method": "`aows`, `ows`, `greedy` or `uniform`",
            "device": "the device name",
            "target": "the target string",
            "target_ms": "the target in the table's unit",
            "unit": "`ms` or `MMAC`",
            "channels": "the widths",
            "mmacs": "multiply-accumulates of one image, millions",
            "predicted_ms": "the decision's (verified) prediction",
            "measured_ms": "measured (median over rounds, corrected)",
            "measured_ms_min": "lowest round",
            "measured_ms_max": "highest round",
            "meets_target_predicted": "predicted_ms ≤ target_ms",
            "meets_target_measured": "measured_ms ≤ target_ms",
            "too_noisy": "the timings failed the noise gate (⚠ in the plots)",
            "seeds": "retraining seeds",
            "test_acc": "mean top-1 over seeds",
            "test_acc_low": "95 % interval, low (t over seeds; Wilson with one seed)",
            "test_acc_high": "95 % interval, high",
            "test_acc_std": "standard deviation over seeds",
            "test_n": "test images",
            "sum_delta": "Σδ under the OWS unaries",
            "supernet_acc": "BN-recalibrated supernet top-1",
            "pareto_optimal": "on the accuracy / measured latency front",
        },
        metadata={
            "fingerprint": "the measuring session's fingerprint",
            "unit": "the table's unit",
            "measured": "what measured_ms is, in words",
            "interval": "what the interval is, in words",
            "n": "finalists",
            "targets_met_predicted": "finalists predicted within their target",
            "targets_met_measured": "finalists measured within their target",
            "n_too_noisy": "finalists flagged too noisy",
            "kendall_tau_sum_delta": "Kendall τ of −Σδ against retrained top-1",
            "kendall_tau_supernet_acc": "Kendall τ of the supernet top-1 against retrained top-1",
            "kendall_tau_mmacs": "Kendall τ of size (MMAC) against retrained top-1, the baseline a proxy must beat",
            "unaries_check": "as in the proxy file",
            "comparison": "per pair of methods at a target: `better`, `worse`, `difference`, `p_value`, `p_adjusted` "
                          "(Welch over seeds, Benjamini–Hochberg), `separated`",
            "comparison_message": "the comparison in words (`aows pareto` prints it)",
            "ranking": "D35: `retest_tau`, `tau_ceiling` and per proxy `kendall_tau`, `kendall_tau_within`, "
                       "`p_beats_size`",
            "ranking_message": "the ranking's reliability in words (`aows pareto` prints it)",
            "lut_n": "held-out networks of the LUT's validation",
            "lut_nrmse": "the LUT's held-out NRMSE",
            "lut_within_10pct": "its share within ±10 %",
            "lut_kendall_tau": "its Kendall τ",
            "lut_sigma_n": "the profile's σ_n",
            "lut_too_noisy": "the profile failed the noise gate",
            "noise_message": "the profile's noise message",
            "lut_adequacy": "the LUT's adequacy report (D34)",
        },
    ),
    "configurations": Kind(
        paths=(("results/plots/{device}/configurations.parquet", "aows pareto"),),
        what="The decided widths relative to the base network's (Fig. channelconf_TRT); metadata as the results table, "
             "plus `layer_roles` (stream or inner, per searchable width) for a residual space.",
        columns={
            "method": "the finalist's method",
            "target": "the target string",
            "layer": "0-based searchable width",
            "width": "the decided width",
            "base_width": "the base network's width (× `space.width_mult`): MobileNet-v1's, or the residual preset's",
            "ratio": "width ÷ base_width",
        },
    ),
    "training_curves": Kind(
        paths=(("results/plots/{device}/training.parquet", "aows pareto"),),
        what="Per-epoch curves of the OWS run and the device's AOWS runs; metadata as the results table.",
        columns={
            "run": "the run: ows, or aows and the AOWS run's target (e.g. aows range:0.1)",
            "epoch": "0-based epoch",
            "sampling": "uniform or adaptive",
            "loss_max": "mean loss of the max configuration",
            "loss_min": "mean loss of the min configuration",
            "loss_random": "mean loss of the random passes",
            "train_acc_max": "training top-1 of the max configuration",
            "temperature": "AOWS: T",
            "images_per_s": "throughput",
        },
    ),
    "proxy_check": Kind(
        paths=(("results/plots/{device}/proxy.parquet", "aows pareto"),),
        what="Each proxy's score against retrained top-1 (Fig. proxy_compare); metadata as the results table.",
        columns={
            "proxy": "`-sum_delta`, `supernet_acc` or `mmacs`",
            "method": "the finalist's method",
            "target": "the target string",
            "score": "the proxy's score of the finalist (higher = predicted better)",
            "test_acc": "its retrained top-1",
            "kendall_tau": "the proxy's τ over all finalists",
            "p_value": "its p-value",
            "n": "finalists",
        },
    ),
}

INTRO = """\
<!-- Generated by scripts/artifacts_doc.py from aows_core/artifacts/schemas.py; do not edit by hand.
     After changing a schema or the descriptions run `python3 scripts/artifacts_doc.py` (a test checks this page). -->

# Artifacts

Every stage writes parquet files with an explicit schema (`aows_core/artifacts/schemas.py`, never inferred) and its
provenance in the file's key-value metadata, under the key `aows`, as JSON. A configuration is a `list<int32>` column
`channels`: the searchable widths c_1 … c_{n-1} (the input channels and the class count are fixed; in a residual space
one per stage stream and per block's inner width, in order of first use: `aows space`). Latencies are in
the device's unit: ms per forward of a batch of `batch_size` images on a timed device, MMAC on `flops` (the columns
keep the `_ms` suffix there too). Writes are atomic (a temporary file, then a rename), and every reader refuses a file
of another kind, another search space or another device, naming it.

## Reading them

`aows inspect FILE` prints any artifact's kind, schema, metadata and first rows (`--rows N`). In Python:

```python
import json
import pandas as pd
import pyarrow.parquet as pq

res = pd.read_parquet("results/pareto_cpu.parquet")
print(res.pivot_table(index="target", columns="method", values=["measured_ms", "test_acc"]))

meta = json.loads(pq.read_schema("results/lut/cpu/validation.parquet").metadata[b"aows"])
print(meta["adequacy"]["verdict"], meta["adequacy"]["message"])
```

or with duckdb: `duckdb -c "select method, target, measured_ms, test_acc from 'results/pareto_cpu.parquet'"`.

## Where they are

| path | kind | written by |
|---|---|---|
{where}

`{device}` is a device name of `devices:`, `{method}` one of aows, ows, greedy, uniform, `{target}` the target
string, `{seed}` a retraining seed, `{net}` a network's widths joined by `-`.

Other files:

- `results/lut/{device}/validation.pdf`: predicted against measured latency of the held-out networks.
- `results/targets/{device}/{target}.json`: the target resolved (`target_value`, the device's `min` and `max`);
  `check-target` fails instead, naming the minimum, when no network meets it.
- `results/supernet/ows/model.pt`, `results/supernet/aows/{device}/{target}/model.pt`: the supernet's weights and
  space; `results/supernet/ows/checkpoints/after_{n}.pt`: the OWS run after n epochs (where AOWS starts).
- `results/retrain/…/seed{seed}/model.pt`: `space`, `space_hash`, `channels` and `model` (the state dict of
  `aows_core.nets.network.Network`; parameters `layers.{e}…`, `classifier`).
- `results/export/{device}/{method}/{target}/seed{seed}/`: **the network to deploy**: `model.onnx` (BatchNorm
  folded, input `[N, C, H, W]`), `state_dict.pt` (`space`, `space_hash`, `channels`, `model`) and `export.json` (the
  check against PyTorch on test images: `max_abs_diff`, `top1_agreement`, `checked_images`, `rtol`, `atol`, `opset`).
  How the run's evaluation prepares a test image is export.json's `preprocessing` and, as JSON text, model.onnx's
  metadata key aows.preprocessing (ONNX Runtime: `session.get_modelmeta().custom_metadata_map`), so `model.onnx`
  alone deploys (the README's snippet applies it). In order: `channel_order` (the PIL mode: `RGB`, or `L` for one
  grey channel); `resize` (null: none; else the shorter side to that many pixels, the longer one to
  `int(resize · long / short)`, with PIL's `interpolation` filter, antialiased when shrinking, as torchvision's
  `Resize` applies it) and `center_crop` (null or `[H, W]`, at offsets `round((size − crop) / 2)`); per channel
  `(pixel · scale − mean) / std` (`scale` 1/255, pixels 0..255); `layout` `NCHW`, `dtype` `float32`, `input_shape`
  `[C, H, W]`; `classes`: the outputs' names in label order (`aows_core.data.describe_preprocessing`).
  For a traced `space.model`, also `module_state_dict.pt`: the finalist under your module's own names, which
  `aows_core.tracing.narrowed(your_module, torch.load(path))` loads into your module's classes with fewer
  channels (export.json's `module` records the check). Made by `snakemake --cores 2 retrained` (every finalist of every device) or by naming one file, e.g.
  `snakemake --cores 2 results/export/cpu/aows/range:0.25/seed0/model.onnx`.
- `results/pareto_{device}.pdf` and `.png`, `results/plots/{device}/*.pdf` and `.png`: the figures, each drawn from
  the parquet file beside it.
- `results/logs/*.log`, `results/benchmarks/*.tsv`: each job's log and Snakemake's resource benchmark
  (`aows plan --actual` sums them per stage beside the plan).
- `results/plan/calibration.json`: `aows plan`'s unit costs measured on this machine, each keyed by what it depends
  on (docs/planning.md); `aows plan --recalibrate` measures them again.
- `results/.resume/`: resume state of unfinished jobs (profiling journals, training checkpoints); not an output,
  removed when the job's outputs are written.

## Metadata every artifact carries

| key | meaning |
|---|---|
{common}

## Kinds
"""


def _type(t) -> str:
    text = str(t)
    return {"double": "float64", "list<item: int32>": "list<int32>"}.get(text, text)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The page, from SCHEMAS and KINDS; ValueError when they disagree."""
    from aows_core.artifacts.schemas import SCHEMAS

    missing = sorted(set(SCHEMAS) - set(KINDS))
    stale = sorted(set(KINDS) - set(SCHEMAS))
    if missing or stale:
        raise ValueError(f"artifact kinds without a description: {missing}; described kinds no schema has: {stale}")
    where = []
    for name, kind in KINDS.items():
        for path, writer in kind.paths:
            where.append(f"| `{path}` | [{name}](#{name}) | {_written(writer)} |")
    common = [f"| `{k}` | {_cell(v)} |" for k, v in COMMON.items()]
    out = [INTRO.replace("{where}", "\n".join(where)).replace("{common}", "\n".join(common))]
    for name in SCHEMAS:
        kind = KINDS[name]
        schema = SCHEMAS[name]
        cols = [f.name for f in schema]
        undocumented = [c for c in cols if c not in kind.columns]
        unknown = [c for c in kind.columns if c not in cols]
        if undocumented or unknown:
            raise ValueError(f"{name}: columns without a description {undocumented}; described columns the schema "
                             f"lacks {unknown}")
        out.append(f"### {name}\n")
        out.append(f"{kind.what}\n")
        out.append("; ".join(f"`{p}`, written by {_written(w)}" for p, w in kind.paths) + ".\n")
        out.append("| column | type | meaning |\n|---|---|---|")
        out.extend(f"| `{f.name}` | {_type(f.type)} | {_cell(kind.columns[f.name])} |" for f in schema)
        out.append("")
        if kind.metadata:
            out.append("Metadata, besides the common keys:\n")
            groups: list[tuple[list[str], str]] = []  # consecutive keys of one description share a line
            for k, v in kind.metadata.items():
                if groups and groups[-1][1] == v:
                    groups[-1][0].append(k)
                else:
                    groups.append(([k], v))
            out.extend(f"- {', '.join(f'`{k}`' for k in keys)}: {v}" for keys, v in groups)
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _written(text: str) -> str:
    """`aows decode (aows, ows); aows decide-baseline (...)` with the commands in code spans."""
    parts = []
    for part in text.split(";"):
        part = part.strip()
        cmd, _, rest = part.partition(" (")
        parts.append(f"`{cmd}`" + (f" ({rest}" if rest else ""))
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/artifacts.md is not current")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is not current: run python3 scripts/artifacts_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
