#!/usr/bin/env bash
# State-scan kernel experiments that cannot be runtime variants, on the GPU machine: several
# builds of libkda (each a directory holding libkda.so.0.2, or NAME.tar.xz of one), checked and
# timed in one call against the carried build (named "base"):
#   dev/ab-scans.sh [--rounds N] NAME=DIR[@VAR=VALUE...] ...
# For each build: test_dhu_cuda and test_fwd_h_cuda (every test), then racecheck + synccheck on
# test_dhu_cuda's Subset; then `kda run chunk_bwd_dhu` and `kda run chunk_fwd_h --repeat 30` at
# B=1 T=8192 H=32 K=V=128 bf16, states K-first and V-first, and on the varlen mix (V-first;
# inputs generated once by the base build), the builds alternated N rounds (default 2). Under
# $OUT/ab-scans/: summary.txt and logs.tar.gz, the summary printed last (dev/ab-builds.sh:
# KDA_AB_SECONDS, KDA_AB_SANITIZERS).
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
ab_builds ab-scans "$@"
ab_check_builds "$build/tests/ops/chunk_fwd_h/test_fwd_h_cuda" 60 'Subset/*'
ab_check_builds "$build/tests/ops/chunk_bwd_dhu/test_dhu_cuda" 60 'Subset/*'
shape=(--shape "1,8192,32,128,128")
for op in chunk_bwd_dhu chunk_fwd_h; do
  ab_kda_input "$op" kfirst "${shape[@]}"
  ab_kda_input "$op" vfirst "${shape[@]}" --state-v-first
  # The issues' varlen mix (six sequences, 8192 tokens), V-first.
  ab_kda_input "$op" mix "${shape[@]}" --state-v-first --seqlens 1300,547,2048,963,271,3063
  ab_kda_rounds "$op" 30 30 "$rounds" kfirst vfirst mix
done
