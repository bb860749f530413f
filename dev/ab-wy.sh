#!/usr/bin/env bash
# chunk_bwd_wy_dqkg kernel experiments that cannot be runtime variants, on the GPU machine: several
# builds of libkda (each a directory holding libkda.so.0.2, or NAME.tar.xz of one), checked and
# timed in one call against the carried build (named "base"):
#   dev/ab-wy.sh [--rounds N] [--shapes LIST] NAME=DIR[@VAR=VALUE...] ...
# For each build: test_wy_cuda (every test, every kernel choice) and racecheck + synccheck on
# gpu-check.sh's WY sanitizer subset; then `kda run chunk_bwd_wy_dqkg --repeat 100` on the shapes
# (default model-bf16,model-bf16-hx,heads16-k64; any name of dev/wy-shapes.sh; inputs generated
# once by the base build), the builds alternated N rounds (default 2) so that drift shows.
# Under $OUT/ab-wy/: summary.txt (written as the steps finish) and logs.tar.gz, the summary
# printed last, also when the deadline (KDA_AB_SECONDS, dev/ab-builds.sh) cut the run short.
# Needs .carry from dev/stage-carry.sh (the test binary and kda load libkda through the library
# path, which wins over their build-time RUNPATH).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
rounds=2
shapes=model-bf16,model-bf16-hx,heads16-k64
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    *) break ;;
  esac
done
# shellcheck source=dev/ab-builds.sh
. dev/ab-builds.sh
ab_builds ab-wy "$@"
test_wy=$build/tests/ops/chunk_bwd_wy_dqkg/test_wy_cuda
# The shapes, gpu-check.sh's (dev/wy-shapes.sh).
# shellcheck source=dev/wy-shapes.sh
. dev/wy-shapes.sh
ab_check_builds "$test_wy" 150 'Subset/CudaSanitizerSubset.*'
IFS=, read -r -a shape_list <<<"$shapes"
known=()
for shape in "${shape_list[@]}"; do
  options=$(wy_shape_options "$shape") || { echo "ab-wy: unknown shape $shape" >>"$summary"; continue; }
  known+=("$shape")
  # shellcheck disable=SC2086  # the options are words
  ab_kda_input chunk_bwd_wy_dqkg "$shape" $options
done
ab_kda_rounds chunk_bwd_wy_dqkg 100 20 "$rounds" "${known[@]}"
