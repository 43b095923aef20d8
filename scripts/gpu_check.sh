#!/usr/bin/env bash
# The one command that checks aows on a GPU (≤ 8 minutes on one H100): the CUDA-only tests, then the whole
# workflow on configs/gpu_check.yaml (a torch-cuda device timed as CUDA graphs, training in bf16) to
# results/pareto_gpu.pdf in a scratch folder, then each stage's wall time and the latency table's and the
# results' figures. Without a GPU it says so and exits 1 at once.
#
#   bash scripts/gpu_check.sh [WORK_DIR]      # default WORK_DIR: /tmp/aows_gpu_check (emptied first)
#
# Set AOWS_DATA_ROOT to a Fashion-MNIST folder when /usr/share/datasets/fashion-mnist is absent.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${1:-/tmp/aows_gpu_check}"
cd "$repo"

if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA GPU visible to torch (torch.cuda.is_available() is False, or torch is not installed):" >&2
    echo "  run this on a machine with an NVIDIA GPU and a CUDA build of torch; on this machine run the CPU tests:" >&2
    echo "  python3 -m pytest -q" >&2
    exit 1
fi
python3 -c 'import torch; p = torch.cuda.get_device_properties(0); print(f"gpu_check: {p.name}, CUDA {torch.version.cuda}, torch {torch.__version__}")'

data_root="${AOWS_DATA_ROOT:-/usr/share/datasets/fashion-mnist}"
if [ ! -d "$data_root" ]; then
    echo "gpu_check: no Fashion-MNIST at $data_root; set AOWS_DATA_ROOT to its folder (the idx files)" >&2
    exit 1
fi

t0=$(date +%s)
echo "== 1/3 CUDA-only tests"
# ONNX Runtime's CUDA and TensorRT providers (tests/devices/test_providers.py: widths resolved, a TensorRT engine
# built once per network) need the onnxruntime-gpu build (and tensorrt) in place of onnxruntime; without them those
# two tests skip, saying so.
python3 -c 'import onnxruntime as o; print(f"gpu_check: onnxruntime {o.__version__}, providers {o.get_available_providers()}")'
python3 -m pytest -q -p no:cacheprovider -m cuda -n 0 -rs tests

echo "== 2/3 workflow: configs/gpu_check.yaml -> results/pareto_gpu.pdf in $work"
rm -rf "$work" && mkdir -p "$work"
python3 - "$repo/configs/gpu_check.yaml" "$work/config.yaml" "$data_root" <<'PY'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
cfg.setdefault("data", {})["root"] = sys.argv[3]
yaml.safe_dump(cfg, open(sys.argv[2], "w"), sort_keys=False)
PY
# The target before --configfile: --configfile takes every word after it as a config file.
snakemake -s "$repo/workflow/Snakefile" --directory "$work" --cores all results/pareto_gpu.pdf \
    --configfile "$work/config.yaml" --quiet rules

echo "== 3/3 figures"
python3 "$repo/bench/stage_times.py" "$work/results"
python3 - "$work/results" <<'PY'
import sys
from pathlib import Path
from aows_core.artifacts import parquet as io
res = Path(sys.argv[1])
_, v = io.read_table(res / "lut/gpu/validation.parquet", "lut_validation")
a = v["adequacy"]
print(f"torch-cuda table: sigma_n {100 * a['sigma_n']:.2f} %, held-out RMS error {100 * a['rel_rms']:.2f} %, "
      f"verdict {a['verdict']}; held-out Kendall tau {a['kendall_tau']:.3f}; max/min latency "
      f"{a['latency_span']:.2f}x = {a['span_sigmas']:.0f} sigma_n; widths resolved: {a['width_resolved']}")
rows = io.read_table(res / "pareto_gpu.parquet", "pareto")[0].to_pylist()
print("| target | method | predicted ms | measured ms | test top-1 % |")
print("|---|---|---|---|---|")
for r in sorted(rows, key=lambda r: (r["target_ms"], r["method"])):
    print(f"| {r['target']} | {r['method']} | {r['predicted_ms']:.3f} | {r['measured_ms']:.3f} | {100 * r['test_acc']:.1f} |")
PY
echo "gpu_check: passed in $(( $(date +%s) - t0 )) s"
