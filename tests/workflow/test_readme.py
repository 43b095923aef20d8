"""The README: short, current, every command and snippet runs or dry-runs, its result generated from a run.

- the quick start's two commands are CI's; its follow-up commands and Python run verbatim after the quick start's
  own main command (`pareto_run`: `results/pareto_synth.pdf`, `cpu` read as `synth`);
- every YAML snippet, put beside config.yaml as the README says, validates and dry-runs, and does what its
  text claims (an ImageFolder tree matches the space it sets, absolute targets are decided, a device is planned);
- every other command runs (fast ones) or dry-runs; the pipeline graph's edges are Snakemake's; every rule has its line;
- the result block is what `scripts/default_result.py` renders from docs/default_run/; no run diary.
"""

import ast
import re
import shlex
import subprocess
import sys

import pytest
import torch
import yaml
from PIL import Image
from tiny_workflow import ROOT, TINY, copy_run, planned, smk

from aows_core import config as aows_config

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop

README_PATH = ROOT / "README.md"
README = README_PATH.read_text()
MAIN = "bash scripts/setup.sh && . .venv/bin/activate && snakemake --cores 2 results/pareto_cpu.pdf"
TESTS = "bash scripts/setup.sh && . .venv/bin/activate && python3 -m pytest -q"
COMMAND = re.compile(r"^(?:snakemake|aows|python3?|bash|taskset) ")
PROVENANCE = re.compile(r"^Provenance: .*$", re.M)


def section(title: str) -> str:
    """The text of one `## title` section."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert m, f"README has no section {title!r}"
    return m.group(1)


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def sh_lines(text: str) -> list[str]:
    """The commands of the ```sh blocks of `text`, comments dropped."""
    return [line.split("  #")[0].strip() for block in fenced(text, "sh") for line in block.splitlines() if line.strip()]


def readme_commands() -> list[str]:
    """Every shell command the README shows (indented blocks, ```sh blocks and inline code), in order."""
    found = re.findall(r"^    ((?:snakemake|aows|python3?|bash) .*)$", README, re.M)
    found += sh_lines(README)
    found += [c for c in re.findall(r"`([^`\n]+)`", README) if COMMAND.match(c)]
    return list(dict.fromkeys(c.strip() for c in found))


def snippets() -> list[dict]:
    return [yaml.safe_load(block) for block in fenced(README, "yaml")]


def merge(base: dict, over: dict) -> dict:
    """`over` written into `base` by hand, as a user who puts every snippet in config.yaml: mappings recursively
    (a device beside the default's), everything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def workdir(path, config: dict | None = None):
    """A folder laid out like the repository for verbatim commands: workflow/, configs/, examples/, envs/, config.yaml."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("workflow", "configs", "examples", "envs", "bench", "scripts"):
        (path / name).symlink_to(ROOT / name)
    text = (ROOT / "config.yaml").read_text() if config is None else yaml.safe_dump(config)
    (path / "config.yaml").write_text(text)
    return path


def as_synth(text: str) -> str:
    """A README command or example read on the tiny quick-start run: device `synth`, its AOWS target range:0.5."""
    return text.replace("cpu", "synth").replace("aows/range:0.25", "aows/range:0.5")


# ------------------------------------------------------------------------------------------ the text


def test_readme_is_at_most_250_lines():
    assert len(README.splitlines()) <= 250


def test_readme_holds_no_run_diary_outside_the_provenance_line():
    """No commit hash, clock time or UTC stamp; the one provenance line of the result table carries them."""
    assert len(PROVENANCE.findall(README)) == 1
    rest = PROVENANCE.sub("", README)
    assert not re.findall(r"\b[0-9a-f]{40}\b", rest)
    assert not re.findall(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\b", rest)  # short hashes too
    assert not re.findall(r"(?<![\w:.])\d{1,2}:\d{2}(?::\d{2})?(?![\w.])", rest)
    assert "UTC" not in rest


def test_the_result_block_is_what_the_script_renders_from_the_stored_run(tmp_path):
    r = subprocess.run([sys.executable, "scripts/default_result.py", "--check"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    block = re.search(r"<!-- default-result:start -->(.*?)<!-- default-result:end -->", README, re.S).group(1)
    rows = [line for line in block.splitlines() if line.startswith("|")]
    assert 3 <= len(rows) <= 17  # header, rule and at most 15 rows
    # a README that drifted from the stored run fails, naming the command that fixes it
    drifted = tmp_path / "README.md"
    drifted.write_text(README.replace("<!-- default-time:start -->about ", "<!-- default-time:start -->nearly ", 1))
    r = subprocess.run([sys.executable, "scripts/default_result.py", "--check", "--readme", str(drifted)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and "scripts/default_result.py --write" in r.stderr


def test_the_quick_start_commands_are_ci_s():
    """The two commands, verbatim, as indented blocks; CI (.ci/run) runs the set-up and then the same tests."""
    blocks = re.findall(r"^    (\S.*)$", section("Quick start"), re.M)
    assert MAIN in blocks and TESTS in blocks
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TESTS in ci
    # CI proves the set-up on the machine's system Python (Debian's, externally managed: PEP 668)
    assert "export PYTHON=/usr/bin/python3" in ci


# ----------------------------------------------------------------------------- commands and snippets


def test_quick_start_follow_ups_run_after_the_quick_start(pareto_run, tmp_path):
    """After the main command's own target (not rule `all`): the report, inspect, the export of the file to deploy,
    then the Python examples (reading the table, classifying image files with the exported ONNX, one class each), all
    verbatim but for the device."""
    wd = copy_run(pareto_run, tmp_path / "quick")
    for name in ("workflow", "bench"):
        if not (wd / name).exists():
            (wd / name).symlink_to(ROOT / name)
    text = section("Quick start")
    commands = sh_lines(text)
    assert any("--report" in c for c in commands) and any("results/export/" in c for c in commands)
    for cmd in commands:
        r = subprocess.run(shlex.split(as_synth(cmd)), capture_output=True, text=True, cwd=wd)
        assert r.returncode == 0, (cmd, r.stdout[-1500:], r.stderr[-1500:])
    assert (wd / "results/report.html").exists()
    assert (wd / "results/export/synth/aows/range:0.5/seed0/model.onnx").exists()
    examples = fenced(text, "python")
    assert examples
    images = [f"grey{shade}.png" for shade in (0, 128, 255)]
    for shade, name in zip((0, 128, 255), images):  # images the size of Fashion-MNIST's
        Image.new("L", (28, 28), shade).save(wd / name)
    for code in examples:
        r = subprocess.run([sys.executable, "-c", as_synth(code), *images], capture_output=True, text=True, cwd=wd)
        assert r.returncode == 0, (code, r.stderr[-1500:])
    assert len(ast.literal_eval(r.stdout.strip().splitlines()[-1])) == len(images)


def fake_imagefolder(root, classes: int):
    """root/{train,val}/<class>/ with a few small RGB images each."""
    from PIL import Image

    for split, n in (("train", 3), ("val", 1)):
        for k in range(classes):
            folder = root / split / f"class{k}"
            folder.mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (40, 30), (20 * k, 10 * i, 0)).save(folder / f"{i}.png")
    return root


@pytest.mark.parametrize("index", range(len(snippets())))
def test_yaml_snippet_validates_and_dry_runs_as_the_users_own_file(index, tmp_path):
    """Each snippet as the user's own file over config.yaml (the README's `--configfile mine.yaml`): it validates,
    the main target of the device it sets up dry-runs with exactly the devices the README's rule gives (the
    snippet's own when it names `devices`, else the default's), and it does what the text around it says."""
    from aows_core.config import layered, space_from_config, validate

    snippet = snippets()[index]
    wd = workdir(tmp_path / "wd")
    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    if snippet.get("data", {}).get("dataset") == "imagefolder":  # the tree the snippet names, made up
        root = fake_imagefolder(tmp_path / "images", snippet["space"]["num_classes"])
        snippet = merge(snippet, {"data": {"root": str(root)}})
    (wd / "mine.yaml").write_text(yaml.safe_dump(snippet))
    config = validate(layered(base, snippet))
    added = sorted(set(snippet.get("devices", {})) - set(base["devices"]))
    device = added[0] if added else "cpu"
    r = smk(wd, "-n", f"results/pareto_{device}.pdf", "--configfile", str(wd / "mine.yaml"), check=False)
    assert r.returncode == 0, (snippet, r.stdout[-2000:], r.stderr[-2000:])
    jobs = planned(r.stdout)
    every = smk(wd, "-n", "latency_models", "--configfile", str(wd / "mine.yaml"), check=False)  # every device's LUT
    profiled = set(re.findall(r"aows profile .*--device (\w+)", every.stdout))
    assert profiled == set(snippet.get("devices", base["devices"])) == set(config["devices"]), profiled
    assert {"profile", "train_ows", "decode", "retrain", "measure", "pareto"} <= set(jobs), jobs
    for section_ in ("decode", "aows"):  # every target the snippet names is decided on its device
        s = snippet.get(section_, {})
        named = [(d, t) for d, ts in s.get("device_targets", {}).items() for t in ts]
        named += [(device, t) for t in s.get("targets", [])]
        for d, t in named:
            assert f"results/targets/{d}/{t}.json" in r.stdout, (d, t)
    if added:  # a device the snippet adds is profiled with the backend it names
        assert re.search(rf"aows profile .*--device {device}\b", r.stdout)
        assert config["devices"][device]["backend"] == snippet["devices"][device]["backend"]
    if config["data"]["dataset"] == "imagefolder":  # the space it sets matches the images it names
        from aows_core.data import check_dataset, dataset_info

        check_dataset(dataset_info("imagefolder", config["data"]["root"]), space_from_config(config))


def test_the_snippets_cover_data_targets_a_device_and_a_gpu():
    """The README shows an ImageFolder dataset with range: targets, absolute ms targets, a device and a GPU."""
    s = snippets()
    assert any(x.get("data", {}).get("dataset") == "imagefolder" and "range:" in str(x.get("decode")) for x in s)
    assert any(re.search(r"\d+(\.\d+)?ms", str(x.get("decode", {}).get("device_targets"))) for x in s)
    backends = [d["backend"] for x in s for d in x.get("devices", {}).values()]
    assert "torch-cuda" in backends and len(backends) >= 2
    assert any(x.get("train", {}).get("device") == "cuda" for x in s)


def test_other_commands_run_or_dry_run(tmp_path):
    """Everything outside the quick start's blocks: fast commands verbatim (help, inspect, the rule graph), the
    long ones (rule all, presets, the cluster profile, a configured GPU) dry-run in a checkout configured with the
    README's snippets; templates (`aows <stage>`, `...`, N, TARGET, NAME) are filled in or skipped."""
    wd = workdir(tmp_path / "user", config=merge_all_snippets())
    follow_ups = set(sh_lines(section("Quick start"))) | {MAIN, TESTS}
    ran = []
    for cmd in readme_commands():
        if cmd in follow_ups or "..." in cmd or "<stage>" in cmd:
            continue
        for part in (p.strip() for p in cmd.split("&&")):
            if part == "bash scripts/setup.sh" or part.startswith("python3 -m pytest"):
                continue  # CI's own steps (test_the_quick_start_commands_are_ci_s)
            argv = shlex.split(part)
            cwd = wd
            if "mine.yaml" in argv:  # a user's own file beside the default config.yaml: the snippet that sets up
                # the device whose Pareto the command builds
                device = next(re.search(r"pareto_(\w+)\.pdf", a).group(1) for a in argv if "pareto_" in a)
                mine = next(x for x in snippets() if device in x.get("devices", {}))
                if argv[0] == "aows":  # a plan calibrates on this machine: over the tiny budget, in seconds
                    cwd = workdir(tmp_path / "plan", config=TINY)
                else:
                    cwd = own if (own := tmp_path / "own").exists() else workdir(own)
                (cwd / "mine.yaml").write_text(yaml.safe_dump(mine))
            if argv[0] == "aows" and "NAME" in part:
                continue  # a plan per preset: the one for a user's own file below runs the same way
            if argv[0] == "aows":  # run: `aows plan` calibrates on this machine (tests/plan checks what it prints)
                argv = [a.replace("FILE", "config.yaml") for a in argv]
                r = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
            elif "--rulegraph" in argv:
                r = subprocess.run(argv, capture_output=True, text=True, cwd=wd)
            elif argv[0] == "snakemake":
                # NAME: one preset (test_presets dry-runs each the same way)
                names = [sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))[0]] if "NAME" in part else [None]
                for name in names:
                    devices = aows_config.load(ROOT / "configs" / f"{name}.yaml")["devices"] if name else {"cpu": None}
                    target = f"results/pareto_{next(iter(devices))}.pdf"  # TARGET: the preset's first device's
                    filled = ["2" if a == "N" else target if a == "TARGET" else a.replace("NAME", name or "NAME")
                              for a in argv]
                    r = subprocess.run([*filled, "-n"], capture_output=True, text=True, cwd=cwd)
                    assert r.returncode == 0, (filled, r.stdout[-1500:], r.stderr[-1500:])
            elif part == "bash scripts/gpu_check.sh":
                if torch.cuda.is_available():
                    continue  # minutes of work: the GPU check itself, not this test's
                r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60)
                assert r.returncode == 1 and "no CUDA GPU" in r.stderr, (r.stdout, r.stderr)  # fails fast, says why
                ran.append(part)
                continue
            else:
                pytest.fail(f"no rule to check the README command {part!r}")
            assert r.returncode == 0, (part, r.stdout[-1500:], r.stderr[-1500:])
            ran.append(part)
    assert any("profiles/slurm" in p for p in ran) and any("--rulegraph" in p for p in ran)
    assert any(p.startswith("aows inspect") for p in ran) and "snakemake --cores 2" in ran


def merge_all_snippets() -> dict:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    for s in snippets():
        config = merge(config, s)
    return config


# ----------------------------------------------------------------------------------------- the pipeline


def rules_of_the_workflow() -> set[str]:
    text = "".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    return set(re.findall(r"^(?:checkpoint|rule) (\w+):", text, re.M))


def test_every_rule_has_its_line_in_the_stage_table():
    table = [line for line in section("The pipeline").splitlines() if line.startswith("| `")]
    listed = {name for line in table for name in re.findall(r"`(\w+)`", line.split("|")[1])}
    assert listed == rules_of_the_workflow()


def test_the_pipeline_graph_shows_edges_of_the_real_rule_graph(tmp_path):
    """Each `a --> b` of the README's mermaid graph is an edge of `snakemake --rulegraph mermaid-js` on the default."""
    wd = workdir(tmp_path / "default")
    r = subprocess.run(["snakemake", "--cores", "2", "--rulegraph", "mermaid-js", "results/pareto_cpu.pdf"],
                       capture_output=True, text=True, cwd=wd)
    assert r.returncode == 0, r.stderr[-1500:]
    names = dict(re.findall(r"^\s*(\w+)\[([\w ]+?)\]", r.stdout, re.M))
    real = {(names.get(a, a), names.get(b, b)) for a, b in re.findall(r"^\s*(\w+)\s*-->\s*(\w+)", r.stdout, re.M)}
    assert real, r.stdout[:1500]
    (graph,) = fenced(README, "mermaid")
    shown = set()
    for line in graph.splitlines():
        nodes = [n.strip() for n in line.split("-->")]
        shown |= set(zip(nodes, nodes[1:]))
    assert shown and shown <= real, shown - real
    assert {n for e in shown for n in e} <= rules_of_the_workflow()
