"""The house's import contract (issue "One house"; docs/extending.md, Where things live): layers, no cycles, pure math layers.

cli → stages → plan → {training, report} → artifacts → {search, latency, devices, evaluation} → {nets, data}
→ config → tracing (a user's module traced into a space) → space → {kinds (the layer kinds: their torch and onnx parts are imported by the methods that build and
run networks, so importing the package loads neither), memory (malloc's settings for a process, D51)}. A module may import its own package and any layer below its own; devices may use
nets, and latency's coverage sampler (supplementary A) uses search's chain Viterbi. Walks every module's imports with `ast` (top-level and function-local)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "aows_core"
LAYERS = [
    {"cli"},
    {"stages"},
    {"plan"},
    {"training", "report"},
    {"artifacts"},
    {"search", "latency", "devices", "evaluation"},
    {"nets", "data"},
    {"config"},
    {"tracing"},
    {"space"},
    {"kinds", "memory"},
]
# devices build the networks they time; coverage sampling (supp. A) decodes with the chain's Viterbi
ALSO = {("devices", "nets"), ("latency", "search")}
RANK = {unit: k for k, layer in enumerate(LAYERS) for unit in layer}
PURE = {"search": {"torch", "pyarrow", "pandas", "scipy", "matplotlib", "onnx", "onnxruntime"},
        "latency": {"torch", "pyarrow", "pandas", "matplotlib", "onnx", "onnxruntime"},
        "evaluation": {"torch", "pyarrow", "pandas", "matplotlib"},
        "nets": {"pyarrow", "pandas", "matplotlib"}}


def modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        yield ".".join(("aows_core",) + parts), path, rel.name == "__init__"


def imports(name, path, is_pkg):
    """aows_core modules and third-party top-level packages that a module imports, anywhere in it."""
    own, third = set(), set()
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                (own if a.name.startswith("aows_core") else third).add(a.name if a.name.startswith("aows_core")
                                                                        else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                own.add(target)
                if not node.module:  # from . import x
                    own.update(f"{target}.{a.name}" for a in node.names)
            elif node.module.startswith("aows_core"):
                own.add(node.module)
                own.update(f"{node.module}.{a.name}" for a in node.names)
            else:
                third.add(node.module.split(".")[0])
    return own, third


def unit(module):
    """The layer unit of an aows_core module: its first component below aows_core (None: the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


GRAPH = {name: imports(name, path, is_pkg) for name, path, is_pkg in modules()}
KNOWN = set(GRAPH)


def resolve(target):
    """The module a `from X import y` names (y may be a module or a name inside X)."""
    return target if target in KNOWN else target.rsplit(".", 1)[0]


def test_every_module_sits_in_a_layer():
    units = {unit(m) for m in KNOWN} - {None}
    assert units <= set(RANK), sorted(units - set(RANK))


def test_layers_import_only_downwards():
    bad = []
    for name, (own, _) in GRAPH.items():
        src = unit(name)
        for t in map(resolve, own):
            dst = unit(t)
            if src is None or dst is None or src == dst or t == "aows_core":
                continue
            if RANK[dst] <= RANK[src] and (src, dst) not in ALSO:
                bad.append(f"{name} → {t}")
    assert bad == []


def test_no_import_cycle():
    edges = {n: {resolve(t) for t in own if resolve(t) in KNOWN and resolve(t) != n} for n, (own, _) in GRAPH.items()}
    # a package's __init__ re-exporting its own modules is not a cycle between units; check modules
    state, stack, cycles = {}, [], []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in edges[n]:
            if state.get(m) == 1 and not (m == n.rsplit(".", 1)[0] or n == m.rsplit(".", 1)[0]):
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n)
    assert cycles == []


@pytest.mark.parametrize("layer", sorted(PURE))
def test_math_layers_import_no_heavy_or_io_library(layer):
    for name, (_, third) in GRAPH.items():
        if unit(name) == layer:
            assert not third & PURE[layer], (name, third & PURE[layer])
    mods = [n for n in KNOWN if unit(n) == layer]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in mods) +
            f"print(sorted(set({sorted(PURE[layer])!r}) & set(m.split('.')[0] for m in sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout


def test_only_artifacts_and_data_touch_files():
    """Project artifacts are read and written in artifacts/ alone; dataset folders in data/ alone; the files a config
    names (config files; a user's model and its weights, tracing) where they are read."""
    calls = ("read_parquet", "write_table", "pq.", "torch.save", "torch.load", "savefig", "onnx.save", ".write_text(",
             ".write_bytes(", "os.replace(", "json.dump(")
    allowed = {"artifacts", "data", "config", "tracing"}
    bad = []
    for name, path, _ in modules():
        if unit(name) in allowed:
            continue
        text = path.read_text()
        bad += [f"{name}: {c}" for c in calls if c in text]
    assert bad == []


def test_the_layer_kinds_import_no_torch_or_onnx():
    """space (and everything the Snakefile imports) asks the kinds for shapes and keys without loading torch."""
    code = ("import sys, aows_core.kinds, aows_core.space\n"
            "print(sorted({'torch', 'onnx', 'onnxruntime'} & set(m.split('.')[0] for m in sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout
