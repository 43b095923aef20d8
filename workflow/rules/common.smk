"""Helpers shared by the rules: per-stage settings, their hashes, and input functions.

Nothing heavy is imported here (aows_core.config needs only PyYAML and jsonschema).
"""

import json
import os

from aows_core.config import (
    METHODS,
    SUPERNET_METHODS,
    aows_targets,
    device_backends,
    device_reach,
    device_targets,
    gpu_devices,
    net_key,
    parse_target,
    retrain_seeds,
    settings_hash,
    stage_settings,
)

# Each configured device's backend as its class declares it (aows_core/devices: unit, GPU, counted or timed), read
# once. The cluster profiles place timing jobs by the devices whose backend times on a GPU ($AOWS_GPU_DEVICES in their
# resource expressions), never by a device's name.
BACKEND_OF = device_backends(config)
os.environ.update(
    AOWS_GPU_DEVICES=",".join(gpu_devices(BACKEND_OF))
)  # exported for the profiles, not read here


def device_gpus(wildcards):
    """GPUs a timing job of the device needs (the `gpu` resource): 1 where its backend times on a GPU, else 0."""
    return int(BACKEND_OF[wildcards.device].gpu)


def settings(stage, device=None):
    """Params of a rule: the JSON settings its stage reads (its hash reruns it on change)."""
    return lambda wildcards: json.dumps(
        stage_settings(config, stage, device or wildcards.get("device")),
        sort_keys=True,
    )


def reach():
    """How a timing job reaches its device (its timeout_s and worker, D53), passed as `--device-reach`: a param
    derived from the job's resources, which Snakemake leaves out of its rerun check, so that raising a timeout or
    moving the worker reruns nothing."""
    return lambda wildcards, resources: json.dumps(
        device_reach(config, wildcards.device), sort_keys=True
    )


def trained_weights(*stages):
    """The space.weights file (D48) as an input of the trainings that start from it (a new file reruns them); the
    OWS supernet always, the retrainings when retrain.init is weights."""
    path = config["space"].get("weights")
    if path in (None, "module") or (
        "retrain" in stages and config["retrain"]["init"] != "weights"
    ):
        return []  # `module`: the weights of the module's own function
    return [path]


def model_source():
    """A space.model file (`path.py:function`, D48) as an input of the first stages (the profile's configurations,
    the OWS supernet): an edit of the network reruns the run. torchvision's, timm's and an installed module's
    networks change with their package, which Snakemake does not track."""
    model = config["space"].get("model") or ""
    path = model.rpartition(":")[0]
    return [path] if path.endswith(".py") else []


def node_threads(section):
    """CPUs a training job asks for on each of its nodes: threads × processes ÷ nodes (docs/method.md D30)."""
    c = config[section]
    return c["threads"] * c["processes"] // c["nodes"]


def scoring_threads():
    """CPUs of the greedy and proxy jobs: greedy.threads × greedy.processes (docs/method.md D30)."""
    return config["greedy"]["threads"] * config["greedy"]["processes"]


def aows_threads():
    """CPUs an AOWS run asks for on each node: aows.threads × supernet.processes ÷ supernet.nodes (D30)."""
    c = config["supernet"]
    return config["aows"]["threads"] * c["processes"] // c["nodes"]


def stamp(stage, device=None):
    """Hash of a stage's settings and aows's version (Snakemake does not track package code)."""
    return lambda wildcards: settings_hash(
        stage_settings(config, stage, device or wildcards.get("device"))
    )


def timed_here(device):
    """Whether the device's networks are timed on this machine: not counted (flops), not `remote`."""
    return not BACKEND_OF[device].analytic and not config["devices"][device].get(
        "remote"
    )


def timing_threads(wildcards):
    """A timing job (profile, measure) takes all cores, so nothing runs beside it; one when the device is timed on
    another machine (`remote`: this machine only waits) or counted."""
    return workflow.cores if timed_here(wildcards.device) else 1


def decision_threads(wildcards):
    """A decision verified on a timed device times networks (docs/method.md D36): all cores, so nothing runs beside
    it; one on an analytic or remote device, or with verify.max_rounds 0.
    """
    verified = config["verify"]["max_rounds"] > 0
    return workflow.cores if timed_here(wildcards.device) and verified else 1


def unaries_of(wildcards):
    """OWS: one supernet for every device and target; AOWS: one per (device, target)."""
    if wildcards.method == "ows":
        return "results/supernet/ows/unaries.parquet"
    return (
        f"results/supernet/aows/{wildcards.device}/{wildcards.target}/unaries.parquet"
    )


def baseline_inputs(wildcards):
    """Greedy decisions read the trajectory; uniform ones read only the LUT."""
    if wildcards.method == "greedy":
        return {"trajectory": "results/supernet/ows/greedy_trajectory.parquet"}
    return {}


def all_targets(device):
    """Targets decided by every method on a device: the decode targets and the AOWS ones."""
    return list(
        dict.fromkeys(device_targets(config, device) + aows_targets(config, device))
    )


def absolute_target_checks(wildcards):
    """The feasibility checks training waits for: absolute targets only (range:r lies in [L_min, L_max])."""
    return [
        f"results/targets/{d}/{t}.json"
        for d in DEVICES
        for t in all_targets(d)
        if parse_target(t).kind != "range"
    ]


def finalists(device):
    """(method, target) of every finalist of a device: all four methods at every target."""
    # config.METHODS order: ows, greedy, uniform (aows only at its own targets)
    fixed = [m for m in METHODS if m != "aows"]
    aows = [("aows", t) for t in aows_targets(config, device)]
    return [(m, t) for m in fixed for t in all_targets(device)] + aows


def finalist_files(pattern):
    """Input function: `pattern` ({device}, {method}, {target}, optional {seed}) for every finalist
    of the device (and every retrain seed)."""
    return lambda wildcards: list(
        dict.fromkeys(
            pattern.format(device=wildcards.device, method=m, target=t, seed=s)
            for m, t in finalists(wildcards.device)
            for s in retrain_seeds(config)
        )
    )


def trained_network(name):
    """Input function: file `name` of the retraining (this seed) of the network a finalist decided,
    known once its decision exists (decode and decide_baseline are checkpoints): finalists that
    decided the same widths share one training."""

    def network_file(wildcards):
        from aows_core.artifacts import decision_channels

        supernet = wildcards.method in SUPERNET_METHODS
        decided = checkpoints.decode if supernet else checkpoints.decide_baseline
        finalist = {k: wildcards[k] for k in ("device", "method", "target")}
        net = net_key(decision_channels(decided.get(**finalist).output[0]))
        return f"results/retrain/nets/{net}/seed{wildcards.seed}/{name}"

    return network_file


# retrain.seeds_in_one_job (D52): one retrain_net job per distinct network trains every seed in turn (one
# process start for them all), or one job per network and seed (seeds side by side on a cluster).
SEEDS_TOGETHER = bool(config["retrain"]["seeds_in_one_job"])
NET_JOB = "{net}" if SEEDS_TOGETHER else "{net}_seed{seed}"


def net_outputs(pattern):
    """retrain_net's output files of `pattern` ({net}, {seed}): every seed's of the network, or this
    seed's."""
    if SEEDS_TOGETHER:
        return expand(pattern, seed=retrain_seeds(config), allow_missing=True)
    return pattern


def net_dir(root):
    """Params function: the folder under `root` that `aows retrain` writes (or resumes) in: the
    network's, holding one seed<S>/ per seed, or the one seed's."""
    seeds = retrain_seeds(config)

    def folder(wildcards):
        if SEEDS_TOGETHER and len(seeds) > 1:
            return f"{root}/{wildcards.net}"
        return f"{root}/{wildcards.net}/seed{wildcards.get('seed', seeds[0])}"

    return folder


def net_seeds(wildcards):
    """Params function: the seeds a retrain_net job trains."""
    if SEEDS_TOGETHER:
        return " ".join(str(s) for s in retrain_seeds(config))
    return wildcards.seed


def supernet_runs(device):
    """RUN=metrics.parquet of the OWS run and of the device's AOWS runs."""
    runs = ["ows=results/supernet/ows/metrics.parquet"]
    runs += [
        f"aows {t}=results/supernet/aows/{device}/{t}/metrics.parquet"
        for t in aows_targets(config, device)
    ]
    return runs


def plot_output(name, caption):
    return report(
        f"results/plots/{{device}}/{name}.pdf",
        caption=f"../report/{caption}.rst",
        category="Results",
        subcategory="{device}",
    )
