#!/usr/bin/env bash
# chunk_bwd_epilogue kernel experiments that cannot be runtime variants, on the GPU machine:
# several builds of libkda (each a directory holding libkda.so.0.2, or NAME.tar.xz of one),
# checked and timed in one call against the carried build (named "base"):
#   dev/ab-epilogue.sh [--rounds N] NAME=DIR[@VAR=VALUE...] ...
# For each build: test_epilogue_cuda (every test) and racecheck + synccheck on its Subset; then
# `kda run chunk_bwd_epilogue --repeat 30` at B=1 T=8192 H=32 K=V=128 bf16 in the default call
# and the Kimi layer's (inputs generated once by the base build), the builds alternated N rounds
# (default 2) so that drift shows; then ncu's GPU time of the dA_log / ddt_bias kernel alone on the
# Kimi inputs, per build. Under $OUT/ab-epilogue/: summary.txt (written as the steps
# finish) and logs.tar.gz, the summary printed last, also when the deadline (KDA_AB_SECONDS,
# dev/ab-builds.sh) cut the run short. Needs .carry from dev/stage-carry.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    *) break ;;
  esac
done
# shellcheck source=dev/ab-builds.sh
. dev/ab-builds.sh
ab_builds ab-epilogue "$@"
ab_check_builds "$build/tests/ops/chunk_bwd_epilogue/test_epilogue_cuda" 120 'Subset/*'
# h, dh in bf16 as the layer passes them (the bf16 kernel's problems).
shape=(--shape "1,8192,32,128,128" --h-dtype x)
ab_kda_input chunk_bwd_epilogue default "${shape[@]}" --gate none
ab_kda_input chunk_bwd_epilogue kimi "${shape[@]}" --gate lower_bound --beta-sigmoid --state-v-first
ab_kda_rounds chunk_bwd_epilogue 30 30 "$rounds" default kimi
# The dA_log / ddt_bias kernel alone (the Kimi row's difference from the default one).
ab_kda_kernel_times chunk_bwd_epilogue gate_params 5 kimi
