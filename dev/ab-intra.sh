#!/usr/bin/env bash
# Kernel experiments that cannot be runtime variants, on the GPU machine: several builds of
# libkda (each a directory holding libkda.so.0.2, or NAME.tar.xz of one), checked and timed in one
# call against the carried build:
#   dev/ab-intra.sh [--rounds N] [--variants LIST] NAME=DIR ...
# For each build: test_intra_cuda (every test) and racecheck + synccheck on its sanitizer subset;
# then bench_intra_cuda at T=8192 and 2048 bf16, the builds alternated N rounds (default 2) so
# that drift shows. Under $OUT/ab-intra/: summary.txt (written as the steps finish) and
# logs.tar.gz, the summary printed last (also when KDA_AB_SECONDS, dev/ab-builds.sh, cut it short).
# Needs .carry from dev/stage-carry.sh (its test and bench binaries load libkda through the
# library path).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
rounds=2
variants="split=1"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    *) break ;;
  esac
done
# shellcheck source=dev/ab-builds.sh
. dev/ab-builds.sh
ab_builds ab-intra "$@"  # also points the tests at the carried golden files
test_intra=$build/tests/ops/chunk_bwd_intra/test_intra_cuda
bench=$build/tests/ops/chunk_bwd_intra/bench_intra_cuda
# gpu-check.sh's sanitizer subset of test_intra_cuda, and the copy-path test (short chunks).
subset='*/fixed_bf16_bt64:*/fixed_bf16_bt64_safe:*/varlen_safe_fp16_bt16:*/fixed_fp32_bt16:*/k100_fp16:*/gva_h2_hv8_bf16'
subset+=':*/varlen_bf16_bt16_derived_i32_nt_bound:*/layout_channel_strided_fp16:*CopyPaths*'
ab_check_builds "$test_intra" 120 "$subset"
for ((r = 1; r <= rounds; r++)); do
  for n in "${!names[@]}"; do
    ab_fits 60 "${names[$n]} round $r" || continue
    # shellcheck disable=SC2086  # the build's environment words
    env ${envs[$n]} LD_LIBRARY_PATH=${dirs[$n]} timeout 120 "$bench" --T 8192,2048 --dtypes bf16 --runs 50 \
      --variants "$variants" >"$logs/bench.${names[$n]}.$r.log" 2>&1
    grep -E '^T=' "$logs/bench.${names[$n]}.$r.log" |
      awk -v n="${names[$n]}" -v r="$r" '{print n, "round", r, $1, $2, $3, "median", $12, $13}' >>"$summary"
  done
done
