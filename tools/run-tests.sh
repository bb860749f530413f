#!/usr/bin/env bash
# Runs every test: configure, build and ctest through the CMake workflow preset (the CUDA backend
# is compiled whenever nvcc exists; its GPU tests skip, saying so, when no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --workflow --preset default
