"""Today's positional stage calls, mapped onto `aows_core.stages.<m>.run(config, inputs, outputs, **options)`.

Not a test module: the stage tests import their stage functions from here (tests/ is on sys.path via conftest),
so every assertion keeps its call.
"""

from __future__ import annotations

from importlib import import_module

_ct = import_module("aows_core.stages.check_target")
_db = import_module("aows_core.stages.decide_baseline")
_dc = import_module("aows_core.stages.decode")
_ex = import_module("aows_core.stages.export")
_fl = import_module("aows_core.stages.fit_lut")
_gr = import_module("aows_core.stages.greedy")
_me = import_module("aows_core.stages.measure")
_pa = import_module("aows_core.stages.pareto")
_pr = import_module("aows_core.stages.profile")
_px = import_module("aows_core.stages.proxy")
_rt = import_module("aows_core.stages.retrain")
_sa = import_module("aows_core.stages.sample")
_ts = import_module("aows_core.stages.train_supernet")
_vl = import_module("aows_core.stages.validate_lut")


def sample(config, out):
    return _sa.run(config, {}, {"out": out})


def profile(config, device, configs, out, resume_dir, progress=True, stop_after=None):
    return _pr.run(config, {"configs": configs}, {"out": out}, device=device, resume_dir=resume_dir, progress=progress,
                   stop_after=stop_after)


def fit_lut(config, device, latency, out, report):
    return _fl.run(config, {"latency": latency}, {"out": out, "report": report}, device=device)


def validate_lut(config, device, latency, lut_path, out, predictions, plot):
    return _vl.run(config, {"latency": latency, "lut": lut_path}, {"out": out, "predictions": predictions, "plot": plot},
                   device=device)


def decode(config, device, method, unaries, lut_path, targets, out, epoch=None, latency=None):
    return _dc.run(config, {"unaries": unaries, "lut": lut_path, "latency": latency}, {"out": out}, device=device,
                   method=method, target=targets, epoch=epoch)


def check_target(config, device, lut_path, target, out):
    return _ct.run(config, {"lut": lut_path}, {"out": out}, device=device, target=target)


def decide_baseline(config, device, method, lut_path, targets, out, trajectory=None, latency=None):
    return _db.run(config, {"lut": lut_path, "trajectory": trajectory, "latency": latency}, {"out": out}, device=device,
                   method=method, target=targets)


def greedy_trajectory(config, model, out, progress=True):
    return _gr.run(config, {"model": model}, {"out": out}, progress=progress)


def train_supernet(config, out_dir, resume_dir, *, method="ows", lut_path=None, device=None, target=None,
                   init_from=None, progress=True, stop_after_steps=None):
    return _ts.run(config, {"lut": lut_path, "init_from": init_from}, {"out_dir": out_dir}, resume_dir=resume_dir,
                   method=method, device=device, target=target, progress=progress, stop_after=stop_after_steps)


def retrain(config, decision, out_dir, resume_dir, *, progress=True, stop_after_steps=None):
    return _rt.run(config, {"decision": decision}, {"out_dir": out_dir}, resume_dir=resume_dir, progress=progress,
                   stop_after=stop_after_steps)


def export(config, model, out_dir, **kw):
    return _ex.run(config, {"model": model}, {"out_dir": out_dir}, **kw)


def measure(config, device, decisions, latency, lut_path, out, **kw):
    return _me.run(config, {"decisions": decisions, "latency": latency, "lut": lut_path}, {"out": out}, device=device,
                   **kw)


def proxy_scores(config, device, decisions, unaries, model, out):
    return _px.run(config, {"decisions": decisions, "unaries": unaries, "model": model}, {"out": out}, device=device)


def pareto_stage(config, device, measure, retrain, proxy, metrics, out, plots_dir, lut_validation=None):
    return _pa.run(config, {"measure": measure, "retrain": retrain, "proxy": proxy, "metrics": metrics,
                            "lut_validation": lut_validation}, {"out": out, "plots_dir": plots_dir}, device=device)
