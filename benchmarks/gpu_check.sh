#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in about five minutes: builds the extension with its CUDA
# kernels, runs the generated CUDA tests (the CPU properties on CUDA, plus CUDA-vs-CPU agreement
# of forward and backward) and times every op against eager PyTorch and a device-to-device copy.
#
#     PYTHON=/path/to/python-with-cuda-torch bash benchmarks/gpu_check.sh [OUT_DIR]
#
# PYTHON defaults to .venv-cuda/bin/python (made by .ci/cuda). Results go to OUT_DIR (default
# benchmarks/results/gpu): build.txt, tests.txt, gpu_kernels.csv, gpu_kernels.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv-cuda/bin/python}
OUT=${1:-${OUT:-benchmarks/results/gpu}}
mkdir -p "$OUT"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())" | tee "$OUT/build.txt"
"$PY" -m opgen build --cuda on 2>&1 | tee -a "$OUT/build.txt"
status=0
HYPOTHESIS_PROFILE=ci "$PY" -m pytest -q -p no:cacheprovider generated/tests -k cuda -rs 2>&1 | tee "$OUT/tests.txt" || status=$?
"$PY" benchmarks/gpu_bench.py --out "$OUT" 2>&1 | tee "$OUT/bench.txt"
exit $status
