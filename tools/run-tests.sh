#!/usr/bin/env bash
# Runs every test: the C++ suite through the CMake workflow preset (configure, build, ctest; the
# CUDA backend is compiled whenever nvcc exists and its GPU tests skip, saying so, without a GPU;
# the compiled torch op is built when the python3 on PATH imports torch), then the Python
# package's tests with pytest against the library just built (torch, GPU and fla tests skip with
# their reason where those are missing), with the benchmarks' and the device scripts' own tests
# (bench/, dev/).
#
# Where python3 imports torch, the suite runs on the compiled torch op (KDA_TORCH_OP=compiled:
# it must have been built and must load, or every test fails at import), then the files that
# touch the torch ops run again on the ops registered from Python over ctypes, the fallback of a
# machine without the compiled op (KDA_TORCH_OP=python). Set KDA_TORCH_OP to run the first pass
# on another choice. KDA_FLA_TREES (colon-separated folders, each holding one fla release:
# tools/install-fla-releases.sh) runs the fla tests once more per release.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --workflow --preset default

if ! python3 -c "import numpy, safetensors, pytest, ml_dtypes, setuptools, wheel" 2>/dev/null; then
  python3 -m pip install -q -r tests/python/requirements-ci.txt
fi
export KDA_LIBRARY="$PWD/build/src/libkda.so"
if python3 -c "import torch" 2>/dev/null; then
  KDA_TORCH_OP="${KDA_TORCH_OP:-compiled}" python3 -m pytest tests/python bench dev -q -rs
  KDA_TORCH_OP=python python3 -m pytest tests/python/test_torch.py tests/python/test_torch_op.py \
    tests/python/test_fla_backend.py bench/test_bench.py -q -rs
  IFS=: read -r -a fla_trees <<<"${KDA_FLA_TREES:-}"
  for tree in "${fla_trees[@]}"; do
    echo "run-tests: the fla tests against $(PYTHONPATH=$tree python3 -c 'import fla; print("fla", fla.__version__, "at", fla.__file__)' 2>/dev/null)"
    PYTHONPATH=$tree${PYTHONPATH:+:$PYTHONPATH} python3 -m pytest tests/python/test_fla.py \
      tests/python/test_fla_layer.py -q -rs -W ignore::UserWarning
  done
else
  python3 -m pytest tests/python bench dev -q -rs
fi
