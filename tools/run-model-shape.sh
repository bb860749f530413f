#!/usr/bin/env bash
# The main job: build (if needed) and run chunk_bwd_wy_dqkg at the model shape (B=1, T=2048, H=32,
# K=V=128, BT=64, bf16, h/dh fp32) on the best backend present (cuda when a GPU is visible, else
# cpu), checked against the float64 reference on sampled chunks, and print the timing table.
# Extra arguments go to `kda run chunk_bwd_wy_dqkg` (e.g. --dtype fp16 --repeat 100).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target kda_cli
exec build/tools/kda run chunk_bwd_wy_dqkg --shape 1,2048,32,128,128 --dtype bf16 --check \
  --repeat 20 "$@"
