#!/usr/bin/env bash
# Runs every test: the C++ suite through the CMake workflow preset (configure, build, ctest; the
# CUDA backend is compiled whenever nvcc exists and its GPU tests skip, saying so, without a GPU),
# then the Python package's tests with pytest against the library just built (torch, GPU and fla
# tests skip with their reason where those are missing).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --workflow --preset default

if ! python3 -c "import numpy, safetensors, pytest, ml_dtypes, setuptools, wheel" 2>/dev/null; then
  python3 -m pip install -q -r tests/python/requirements-ci.txt
fi
KDA_LIBRARY="$PWD/build/src/libkda.so" python3 -m pytest tests/python bench -q -rs
