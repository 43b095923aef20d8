"""`aows <stage>`: one thin subcommand per stage; parses, calls a library function, exits."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from . import __version__


def _config(args) -> dict:
    from .config import load

    return load(args.config, args.config_json)


def _add_config(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--config", help="config YAML (validated by the schema; defaults fill the rest)")
    g.add_argument("--config-json", help="config as inline JSON (what the Snakemake rules pass)")


def cmd_space(args) -> None:
    from .config import space_from_config
    from .space import get_space

    space = get_space(args.preset) if args.preset else space_from_config(_config(args))
    d = space.describe()
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        print(f"{d['name']} (hash {d['hash']}): {d['n_layers']} searchable layers, {d['resolution']} input, "
              f"{d['n_variables']} latency variables for {d['n_slots']} slots, {d['size']:.3e} configurations")
        for layer, ch in enumerate(d["layer_choices"]):
            print(f"  layer {layer:2d}: {ch}")


def cmd_sample(args) -> None:
    from .stages import sample

    counts = sample(_config(args), args.out)
    print(f"wrote {args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


def cmd_profile(args) -> None:
    from .config import space_from_config, stage_settings
    from .profiling import profile

    cfg = _config(args)
    spec = stage_settings(cfg, "profile", args.device)["devices"][args.device]
    res = profile(
        space_from_config(cfg), args.device, spec, args.configs, args.out, args.resume_dir, cfg["profiling"], cfg["seed"],
        progress=not args.quiet, stop_after=args.stop_after,
    )
    if res["complete"]:
        print(f"wrote {args.out}: {res['done']} timings; σ_n = {100 * res['sigma_n']:.2f} % over {res['retest_pairs']} retest pairs")
    else:
        print(f"stopped after {res['done']}/{res['total']} jobs; rerun the same command to resume")


def cmd_fit_lut(args) -> None:
    from .stages import fit_lut

    r = fit_lut(_config(args), args.device, args.latency, args.out, args.report)
    print(f"wrote {args.out}: λ = {r['lambda']:.3g}, lambda_val RMSE {r['val_rmse_ms']:.4g} ({100 * r['val_nrmse']:.2f} %)")


def cmd_validate_lut(args) -> None:
    from .stages import validate_lut

    r = validate_lut(_config(args), args.device, args.latency, args.lut, args.out, args.predictions, args.plot)
    m, f = r["lut"], r["flops_proportional"]
    print(
        f"test: NRMSE {100 * m['nrmse']:.2f} % (FLOPs-proportional {100 * f['nrmse']:.2f} %), "
        f"{100 * m['within_10pct']:.1f} % within ±10 %, Kendall τ {m['kendall_tau']:.3f}; "
        f"noise floor σ_n {100 * (r['sigma_n'] or 0):.2f} %, retest pairs within ±10 %: {100 * (r['retest_within_10pct'] or 0):.1f} %"
    )


def cmd_decode(args) -> None:
    from .stages import decode

    rows = decode(_config(args), args.device, args.method, args.unaries, args.lut, args.target, args.out, args.epoch)
    for r in rows:
        print(f"{r['method']} @ {r['target']} ({r['target_ms']:.4g} {r['unit']}): {r['channels']} predicted "
              f"{r['predicted_latency_ms']:.4g}, Σδ {r['objective']:.4g}, γ {r['gamma']:.3g}, gap {r['gap']:.3g}"
              f"{' (exact)' if r['exact'] else ''}")


def cmd_greedy(args) -> None:
    from .stages import greedy

    rows = greedy(_config(args), args.model, args.out, progress=not args.quiet)
    print(f"wrote {args.out}: {len(rows)} points from error {rows[0]['error']:.4f} (max) to {rows[-1]['error']:.4f} (min)")


def cmd_decide_baseline(args) -> None:
    from .stages import decide_baseline

    rows = decide_baseline(_config(args), args.device, args.method, args.lut, args.target, args.out, args.trajectory)
    for r in rows:
        print(f"{r['method']} @ {r['target']} ({r['target_ms']:.4g} {r['unit']}): {r['channels']} predicted "
              f"{r['predicted_latency_ms']:.4g}")


def cmd_retrain(args) -> None:
    from .retrain import retrain

    cfg = _config(args)
    if args.seed is not None:
        cfg["seed"] = args.seed
    r = retrain(cfg, args.decision, args.out_dir, args.resume_dir, progress=not args.quiet,
                stop_after_steps=args.stop_after)
    if r["complete"]:
        print(f"{r['method']} @ {r['target']}: test top-1 {100 * r['test_acc']:.2f} % "
              f"[{100 * r['test_acc_low']:.2f}, {100 * r['test_acc_high']:.2f}] (Wilson 95 %, n = {r['test_n']})")
    else:
        print(f"stopped at epoch {r['epoch']} step {r['step']}; rerun the same command to resume")


def cmd_export(args) -> None:
    from .export import export

    r = export(_config(args), args.model, args.out_dir)
    print(f"wrote {args.out_dir}/model.onnx and state_dict.pt: ONNX Runtime vs PyTorch max |Δlogit| "
          f"{r['max_abs_diff']:.2g} on {r['checked_images']} test images, top-1 agreement {100 * r['top1_agreement']:.1f} %")


def cmd_measure(args) -> None:
    from .measure import measure

    rows = measure(_config(args), args.device, args.decisions, args.latency, args.lut, args.out, progress=not args.quiet)
    unit = rows[0]["unit"]
    print(f"wrote {args.out}: {len(rows)} finalists on {args.device} ({unit}; measured = median over "
          f"{rows[0]['rounds']} rounds, drift-corrected to the LUT's reference)")
    print(f"  {'method':8s} {'target':12s} {'predicted':>10s} {'measured':>10s} {'rel.err':>8s}  meets")
    for r in rows:
        print(f"  {r['method']:8s} {r['target']:12s} {r['predicted_ms']:10.4g} {r['measured_ms']:10.4g} "
              f"{100 * r['rel_error']:+7.2f}%  {'yes' if r['meets_target_measured'] else 'NO'}"
              f"{'' if r['fingerprint_match'] else '  (fingerprint differs from the LUT)'}")


def cmd_check_target(args) -> None:
    from .stages import check_target

    value = check_target(_config(args), args.device, args.lut, args.target, args.out)
    print(f"{args.device}: target {args.target} = {value:.4g} is feasible")


def cmd_train_supernet(args) -> None:
    import os
    import subprocess

    from .train import train_supernet

    cfg = _config(args)
    n = int(cfg["supernet"]["processes"])
    if n > 1 and "RANK" not in os.environ:  # relaunch as n data-parallel processes under torchrun
        if cfg["supernet"]["batch_size"] % n:
            raise ValueError(f"supernet.batch_size = {cfg['supernet']['batch_size']} is not divisible by "
                             f"supernet.processes = {n}")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
               "-m", "aows_core.cli", "train-supernet", "--config-json", json.dumps(cfg), "--method", args.method,
               "--out-dir", str(args.out_dir), "--resume-dir", str(args.resume_dir)]
        for flag in ("lut", "device", "target", "init_from", "stop_after"):
            if getattr(args, flag) is not None:
                cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        cmd += ["--quiet"] if args.quiet else []
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(cfg["supernet"]["threads"]))}
        rc = subprocess.run(cmd, env=env).returncode
        if rc:
            raise RuntimeError(f"torchrun with {n} processes exited with status {rc} (see the ranks' errors above)")
        return
    r = train_supernet(cfg, args.out_dir, args.resume_dir, method=args.method, lut_path=args.lut,
                       device=args.device, target=args.target, init_from=args.init_from, progress=not args.quiet,
                       stop_after_steps=args.stop_after)
    if os.environ.get("RANK", "0") != "0":
        return  # rank 0 reports
    if r["complete"]:
        m = r["metrics"]
        print(f"wrote {args.out_dir}: {r['epochs']} epochs; last epoch max-config train accuracy "
              f"{100 * m['train_acc_max']:.1f} %, {m['images_per_s']:.0f} images/s")
    else:
        print(f"stopped at epoch {r['epoch']} step {r['step']}; rerun the same command to resume")


def cmd_inspect(args) -> None:
    from .io import inspect

    if str(args.file).endswith((".yaml", ".yml")):  # a config: validate it and show it with every default
        import yaml

        from .config import load

        cfg = load(args.file)
        print(f"# {args.file}: a valid aows configuration; with the schema's defaults filled in:")
        print(yaml.safe_dump(cfg, sort_keys=False))
        return
    print(inspect(args.file, rows=args.rows))


def cmd_proxy(args) -> None:
    from .proxy import proxy_scores

    rows = proxy_scores(_config(args), args.device, args.decisions, args.unaries, args.model, args.out)
    print(f"wrote {args.out}: {len(rows)} finalists")


def cmd_pareto(args) -> None:
    from .pareto import pareto_stage, summary_markdown

    metrics = dict(m.split("=", 1) for m in args.metrics)
    rows = pareto_stage(_config(args), args.device, args.measure, args.retrain, args.proxy, metrics, args.out,
                        args.plots_dir, args.lut_validation)
    print(summary_markdown(rows))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aows", description="Hardware-aware network width search (AOWS).")
    ap.add_argument("--version", action="version", version=f"aows {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("space", help="print a search space")
    p.add_argument("--preset", help="preset name (default: the config's space)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_config(p)
    p.set_defaults(func=cmd_space)

    p = sub.add_parser("sample", help="sample the configurations to profile (§4, supplementary A)")
    _add_config(p)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("profile", help="time whole networks on a device (§4)")
    _add_config(p)
    p.add_argument("--device", required=True, help="a device name from the config's `devices`")
    p.add_argument("--configs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--resume-dir", default="results/.resume", help="where the resume journal lives (not an output)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many jobs (resume later)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("fit-lut", help="fit the latency table (§4)")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--latency", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--report", required=True)
    p.set_defaults(func=cmd_fit_lut)

    p = sub.add_parser("validate-lut", help="validate the latency table on held-out networks (§7)")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--latency", required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--predictions", required=True)
    p.add_argument("--plot", required=True)
    p.set_defaults(func=cmd_validate_lut)

    p = sub.add_parser("decode", help="optimal widths under latency targets (§5 eq. lagrange / viterbi)")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--method", required=True, help="label written in the decisions (e.g. ows, aows)")
    p.add_argument("--unaries", required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--target", action="append", required=True, help="'4.5ms', '325mflops' or 'range:0.3'; repeatable")
    p.add_argument("--epoch", type=int, default=None, help="which epoch's unaries (default: the last)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_decode)

    p = sub.add_parser("check-target", help="refuse a target no network of the space meets on a device")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_check_target)

    p = sub.add_parser("train-supernet", help="train an OWS or AOWS slimmable supernet (§3, §5, §6)",
                       description="With supernet.processes = N > 1, relaunches itself under torchrun as N data-parallel processes.")
    _add_config(p)
    p.add_argument("--method", choices=["ows", "aows"], default="ows")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--resume-dir", required=True, help="where the resume checkpoint lives (not an output)")
    p.add_argument("--lut", help="AOWS: the device's latency table")
    p.add_argument("--device", help="AOWS: the device name")
    p.add_argument("--target", help="AOWS: the latency target string")
    p.add_argument("--init-from", help="AOWS: the OWS checkpoint after the warm-up epochs")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (resume later)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_train_supernet)

    p = sub.add_parser("greedy", help="the AutoSlim greedy trajectory of the OWS supernet (§3)")
    _add_config(p)
    p.add_argument("--model", required=True, help="the OWS supernet's model.pt")
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_greedy)

    p = sub.add_parser("decide-baseline", help="baseline decisions: greedy trajectory or uniform multipliers")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--method", choices=["greedy", "uniform"], required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--trajectory", help="greedy: the greedy_trajectory parquet")
    p.add_argument("--target", action="append", required=True, help="'4.5ms', '325mflops' or 'range:0.3'; repeatable")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_decide_baseline)

    p = sub.add_parser("retrain", help="train a decision's network from scratch; top-1 on the test split (§7)")
    _add_config(p)
    p.add_argument("--decision", required=True, help="a decisions parquet (one row)")
    p.add_argument("--seed", type=int, help="this run's seed (default: the config's top-level seed)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--resume-dir", required=True, help="where the resume checkpoint lives (not an output)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (resume later)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_retrain)

    p = sub.add_parser("export", help="ONNX (checked against PyTorch) and state dict of a retrained network")
    _add_config(p)
    p.add_argument("--model", required=True, help="a retrained model.pt")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("measure", help="time a device's finalists with the profiling protocol (§7)")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--decisions", nargs="+", required=True, help="the finalists' decisions parquet files")
    p.add_argument("--latency", required=True, help="the device's latency file (reference baseline, fingerprint)")
    p.add_argument("--lut", required=True, help="the device's LUT (predicted latencies)")
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_measure)

    p = sub.add_parser("proxy", help="supernet proxies of a device's finalists: Σδ and BN-recalibrated accuracy (§3)")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--decisions", nargs="+", required=True, help="the finalists' decisions parquet files")
    p.add_argument("--unaries", required=True, help="the OWS supernet's unaries.parquet")
    p.add_argument("--model", required=True, help="the OWS supernet's model.pt")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_proxy)

    p = sub.add_parser("pareto", help="a device's results table and plots: accuracy vs measured latency (§7)")
    _add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--measure", required=True, help="the device's measure parquet")
    p.add_argument("--retrain", nargs="+", required=True, help="the finalists' retraining result.parquet files")
    p.add_argument("--proxy", help="the device's proxy parquet")
    p.add_argument("--lut-validation", help="the device's LUT validation.parquet (its held-out quality is recorded)")
    p.add_argument("--metrics", nargs="*", default=[], help="RUN=metrics.parquet of the supernet runs")
    p.add_argument("--out", required=True, help="the Pareto figure (PDF; PNG and parquet beside it)")
    p.add_argument("--plots-dir", required=True, help="folder of the other figures and their tables")
    p.set_defaults(func=cmd_pareto)

    p = sub.add_parser("inspect", help="print an artifact's schema, provenance and first rows")
    p.add_argument("file")
    p.add_argument("--rows", type=int, default=5)
    p.set_defaults(func=cmd_inspect)
    return ap


# Arguments naming what a stage writes: checked writable before any work starts.
OUTPUT_FILES = ("out", "report", "predictions", "plot")
OUTPUT_FOLDERS = ("out_dir", "resume_dir", "plots_dir")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable = args.func
    try:
        from .io import check_writable

        check_writable([getattr(args, a) for a in OUTPUT_FILES if getattr(args, a, None)],
                       [getattr(args, a) for a in OUTPUT_FOLDERS if getattr(args, a, None)])
        func(args)
    except (ValueError, RuntimeError, OSError) as e:  # OSError: missing files, permissions, a full disk
        print(f"aows {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
