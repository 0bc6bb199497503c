#!/usr/bin/env bash
# The one prepared GPU check (issue: the CuPy backend, verified on a real GPU).
# Needs an NVIDIA GPU and CuPy installed (e.g. pip install cupy-cuda13x, or
# pip install -e ".[cuda,dev]"). Takes a few minutes: the test suite on the
# CuPy backend (the CPU cases run too), then the GPU benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
python -c "import cupy; print('CuPy', cupy.__version__, cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())"
python -m pytest tests/ops/test_devices.py -q -rs
python -m benchmarks.bench_gpu
