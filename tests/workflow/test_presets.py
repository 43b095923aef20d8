"""Config presets (configs/*.yaml, examples/*.yaml), cluster profiles and the conda env: all checked without data or devices.

Every preset validates against the schema, is internally consistent, and dry-runs (`snakemake -n`)
with the default profile for the main targets, without its dataset and without its devices (a
dry run never reads either). The slurm and cluster-generic profiles give every submitted job the
resources their submit commands need. envs/aows.yaml pins exactly what pyproject.toml pins.
"""

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from aows_core import config as aows_config
from aows_core.data import IMAGEFOLDER_SIZE, DatasetInfo
from aows_core.data import check_dataset as check_space

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop

ROOT = Path(__file__).resolve().parents[2]
SNAKEFILE = ROOT / "workflow" / "Snakefile"
PROFILES = ROOT / "workflow" / "profiles"
PRESETS = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))

# Targets every preset must dry-run; extend this list when the workflow grows a new main target.
TARGETS = ["all", "decisions", "retrained"]  # and each device's results/pareto_{device}.pdf

# Image shape and class count of each dataset a preset may name (imagefolder: ImageNet's).
DATASET_SHAPES = {"cifar10": (32, 3, 10), "fashion_mnist": (28, 1, 10), "imagefolder": (IMAGEFOLDER_SIZE, 3, 1000)}


def smk(workdir, *args):
    cmd = ["snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def preset_ids():
    return [p.stem for p in PRESETS]


def job_blocks(stdout):
    """(rule, wildcards line, resources dict, shell command or None) of every job of a dry run."""
    blocks = []
    for chunk in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) \w+:)", stdout):
        m = re.match(r"(?:local)?(?:rule|checkpoint) (\w+):", chunk)
        if not m:
            continue
        res = re.search(r"^\s+resources: (.*)$", chunk, re.M)
        wc = re.search(r"^\s+wildcards: (.*)$", chunk, re.M)
        shell = re.search(r"^Shell command: (.*)$", chunk, re.M)
        resources = dict(kv.split("=", 1) for kv in res.group(1).split(", ")) if res else {}
        blocks.append((m.group(1), wc.group(1) if wc else "", resources,
                       None if shell is None or shell.group(1) == "None" else shell.group(1)))
    return blocks


def job_counts(stdout):
    """The 'Job stats' table of a dry run as {rule: count}."""
    table = stdout.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_there_are_presets():
    assert {"imagenet_paper", "cifar10"} <= set(preset_ids())


@pytest.mark.parametrize("path", PRESETS, ids=preset_ids())
def test_preset_validates_and_is_consistent(path):
    cfg = aows_config.load(path)  # raises ConfigError naming the key on any schema violation
    devices = set(cfg["devices"])
    for section in ("decode", "aows"):
        unknown = set(cfg[section]["device_targets"]) - devices
        assert not unknown, f"{section}.device_targets names unconfigured devices {unknown}"
    for device in devices:  # mflops targets only on flops devices, ms targets never there
        flops = cfg["devices"][device]["backend"] == "flops"
        for t in aows_config.device_targets(cfg, device) + aows_config.aows_targets(cfg, device):
            assert not t.endswith("ms") or not flops, (device, t)
            assert not t.endswith("mflops") or flops, (device, t)
    assert cfg["aows"]["warmup_epochs"] < cfg["supernet"]["epochs"]
    assert cfg["supernet"]["batch_size"] % cfg["supernet"]["processes"] == 0
    assert cfg["greedy"]["n_eval"] <= cfg["data"]["search_val"]
    assert cfg["greedy"]["n_cal"] <= cfg["data"]["calibration"]
    size, channels, classes = DATASET_SHAPES[cfg["data"]["dataset"]]
    info = DatasetInfo(name=cfg["data"]["dataset"], root="-", height=size, width=size, channels=channels,
                       classes=classes, n_train=1, n_test=1, mean=(0.0,) * channels, std=(1.0,) * channels)
    check_space(info, aows_config.space_from_config(cfg))  # the space fits the dataset's images


def test_imagenet_preset_is_the_papers_setting():
    cfg = aows_config.load(ROOT / "configs" / "imagenet_paper.yaml")
    assert cfg["space"]["preset"] == "mobilenet_v1_imagenet" and cfg["data"]["dataset"] == "imagefolder"
    assert cfg["data"]["train_subset"] is None
    sn, aw, rt = cfg["supernet"], cfg["aows"], cfg["retrain"]
    assert (sn["epochs"], sn["batch_size"], sn["lr"], aw["warmup_epochs"]) == (20, 512, 0.05, 5)
    assert (rt["epochs"], rt["batch_size"]) == (200, 2048)
    assert {d: v["backend"] for d, v in cfg["devices"].items()} == {"cpu": "torch-cpu", "cuda": "torch-cuda",
                                                                    "flops": "flops"}
    assert (cfg["devices"]["cpu"]["batch_size"], cfg["devices"]["cuda"]["batch_size"]) == (1, 16)
    want = {"cpu": ["15ms", "20ms", "30ms"], "cuda": ["2.2ms", "2.4ms", "2.6ms"],
            "flops": ["150mflops", "325mflops", "572mflops"]}
    assert cfg["decode"]["device_targets"] == want and cfg["aows"]["device_targets"] == want
    # with W = 5 of E = 20 the built-in schedule passes through supp. B's anchors
    from aows_core.search.sampler import TemperatureSchedule

    sched = TemperatureSchedule(aw["warmup_epochs"], sn["epochs"])
    for epoch, temperature in ((5, 1.0), (6, 1e-2), (10, 1e-3), (20, 5e-4)):
        assert sched(epoch) == pytest.approx(temperature)


@pytest.mark.parametrize("path", PRESETS, ids=preset_ids())
def test_preset_dry_runs_without_data_or_devices(path, tmp_path):
    """`--configfile PRESET` beside the repository's config.yaml plans the preset alone (regression: Snakemake
    merged it over config.yaml, adding config.yaml's devices and targets)."""
    cfg = aows_config.load(path)
    raw = yaml.safe_load(path.read_text())
    raw["data"]["root"] = str(tmp_path / "no-dataset-here")  # whatever root the preset names, it is absent here
    (tmp_path / "preset.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # a preset's space.model file, relative to the run
    pareto = [f"results/pareto_{d}.pdf" for d in cfg["devices"]]
    r = smk(tmp_path, "-n", "--profile", str(PROFILES / "default"), *TARGETS, *pareto, "--configfile",
            str(tmp_path / "preset.yaml"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for rule, wildcards, _, _ in job_blocks(r.stdout):
        fields = dict(kv.split("=", 1) for kv in wildcards.split(", ")) if wildcards else {}
        if "device" in fields:
            assert fields["device"] in cfg["devices"], (rule, wildcards)
            if "target" in fields:
                d = fields["device"]
                assert fields["target"] in aows_config.device_targets(cfg, d) + aows_config.aows_targets(cfg, d), (rule, wildcards)
    assert not (tmp_path / "no-dataset-here").exists()
    counts = job_counts(r.stdout)
    devices = sorted(cfg["devices"])
    n_aows = sum(len(aows_config.aows_targets(cfg, d)) for d in devices)
    n_finalists = n_aows + 3 * sum(
        len(dict.fromkeys(aows_config.device_targets(cfg, d) + aows_config.aows_targets(cfg, d))) for d in devices
    )
    assert counts["train_ows"] == 1 and counts["train_aows"] == n_aows
    assert counts["profile"] == counts["measure"] == counts["pareto"] == len(devices)
    assert counts["retrain"] == counts["export"] == n_finalists * len(aows_config.retrain_seeds(cfg))


@pytest.mark.parametrize("profile", ["slurm", "cluster-generic"])
def test_cluster_profiles_give_every_job_its_resources(profile, tmp_path):
    """Dry run of the paper preset (cpu, cuda and flops devices) through a cluster profile."""
    (tmp_path / "config.yaml").write_text((ROOT / "configs" / "imagenet_paper.yaml").read_text())
    preset = aows_config.load(tmp_path / "config.yaml")
    processes, retrain_processes = preset["supernet"]["processes"], preset["retrain"]["processes"]
    r = smk(tmp_path, "-n", "--profile", str(PROFILES / profile), "all", "retrained")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    settings = yaml.safe_load((PROFILES / profile / "config.yaml").read_text())
    if profile == "slurm":
        needed = {"slurm_account", "slurm_partition", "mem_mb", "runtime"}
    else:
        needed = set(re.findall(r"\{resources\.(\w+)\}", settings["cluster-generic-submit-cmd"]))
        assert needed >= {"mem_mb_per_cpu", "runtime", "gpu", "queue"}
    jobs = [b for b in job_blocks(r.stdout) if b[3] is not None]  # jobs that are submitted
    rules = {rule for rule, *_ in jobs}
    assert {"profile", "measure", "train_ows", "train_aows", "greedy_trajectory", "decode", "retrain"} <= rules
    # retrain_net jobs are known once the decisions exist (checkpoints), so a dry run shows none: the profile's
    assert needed <= set(settings["set-resources"]["retrain_net"]) | set(settings["default-resources"])
    assert str(settings["set-resources"]["retrain_net"]["gpu"]) == str(retrain_processes)  # one GPU per process
    for rule, wildcards, res, _ in jobs:
        assert needed <= set(res), (rule, needed - set(res))
        if rule in ("train_ows", "train_aows"):  # one GPU per data-parallel process
            assert res["gpu"] == str(processes), rule
        if rule in ("greedy_trajectory", "proxy"):  # one GPU per scoring process (D29, D30)
            assert res["gpu"] == str(preset["greedy"]["processes"]), rule
        if rule == "retrain_net":  # one GPU per data-parallel process (D30)
            assert res["gpu"] == str(retrain_processes), rule
        if rule in ("profile", "measure"):  # timing: on the modelled hardware (by its backend), alone on the node
            device = re.search(r"\bdevice=([\w-]+)", wildcards).group(1)
            on_gpu = device in aows_config.gpu_devices(aows_config.device_backends(preset))
            assert res["gpu"] == ("1" if on_gpu else "0"), (rule, wildcards)
            if profile == "slurm":
                assert res["slurm_extra"] == "--exclusive" and res["constraint"]


def test_set_resources_of_a_missing_rule_do_not_break_a_dry_run(tmp_path):
    prof = tmp_path / "prof"
    prof.mkdir()
    settings = yaml.safe_load((PROFILES / "slurm" / "config.yaml").read_text())
    settings["set-resources"]["no_such_rule"] = {"mem_mb": 1}
    (prof / "config.yaml").write_text(yaml.safe_dump(settings))
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    r = smk(tmp_path, "-n", "--profile", str(prof))
    assert r.returncode == 0, r.stderr[-2000:]


# ---------------------------------------------------------------------------- conda environment


def _env():
    return yaml.safe_load((ROOT / "envs" / "aows.yaml").read_text())


def _pip_requirements(env):
    pip = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, "envs/aows.yaml needs exactly one pip section"
    return [Requirement(line) for line in pip[0] if not line.startswith("-")]


def test_conda_env_pins_exactly_what_pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}
    env = _env()
    got = {canonicalize_name(r.name): r for r in _pip_requirements(env)}
    conda = {re.split(r"[=<>! ]", d, maxsplit=1)[0]: d for d in env["dependencies"] if isinstance(d, str)}
    assert set(conda) == {"python", "pip"}, f"conda packages beside python and pip: {set(conda) - {'python', 'pip'}}"
    assert set(got) == set(want), (set(want) - set(got), set(got) - set(want))
    for name, req in want.items():
        assert got[name].specifier == req.specifier, (name, str(got[name].specifier), str(req.specifier))
        assert str(got[name].marker) == str(req.marker), (name, got[name].marker, req.marker)
        assert got[name].extras == req.extras, name
    # the env's Python satisfies requires-python
    python = conda["python"].split("=", 1)[1].lstrip("=")
    assert SpecifierSet(project["requires-python"]).contains(python + ".0"), (python, project["requires-python"])


def test_conda_env_installs_the_package_after_creation():
    """Snakemake runs envs/aows.post-deploy.sh in the new env; it installs this checkout (editable)."""
    script = ROOT / "envs" / "aows.post-deploy.sh"
    text = script.read_text()
    assert text.startswith("#!") and "pip install" in text and "-e" in text
    assert not any(line.startswith("-e") for d in _env()["dependencies"] if isinstance(d, dict)
                   for line in d.get("pip", []))
    r = subprocess.run(["bash", str(script)], cwd=ROOT.parent, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "AOWS_ROOT": str(ROOT / "no-such-dir")})
    assert r.returncode != 0 and "no aows checkout" in r.stderr
