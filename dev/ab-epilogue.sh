#!/usr/bin/env bash
# chunk_bwd_epilogue kernel experiments that cannot be runtime variants, on the GPU machine:
# several builds of libkda (each a directory holding libkda.so.0.2, or NAME.tar.xz of one),
# checked and timed in one call against the carried build (named "base"):
#   dev/ab-epilogue.sh [--rounds N] NAME=DIR[@VAR=VALUE...] ...
# For each build: test_epilogue_cuda (every test) and racecheck + synccheck on its Subset; then
# `kda run chunk_bwd_epilogue --repeat 30` at B=1 T=8192 H=32 K=V=128 bf16 in the default call
# and the Kimi layer's (inputs generated once by the base build), the builds alternated N rounds
# (default 2) so that drift shows. Under $OUT/ab-epilogue/: summary.txt (written as the steps
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
test_epilogue=$build/tests/ops/chunk_bwd_epilogue/test_epilogue_cuda
kda=$build/tools/kda
ab_check_builds "$test_epilogue" 120 'Subset/*'
calls=(default kimi)
# h, dh in bf16 as the layer passes them (the bf16 kernel's problems).
declare -A call_options=([default]="--gate none --h-dtype x"
  [kimi]="--gate lower_bound --beta-sigmoid --state-v-first --h-dtype x")
for call in "${calls[@]}"; do
  file=/tmp/epilogue-$call.safetensors
  # shellcheck disable=SC2086  # the options are words
  [ -f "$file" ] || ! ab_fits 60 "input $call" || LD_LIBRARY_PATH=${dirs[0]} timeout 120 "$kda" \
    run chunk_bwd_epilogue --shape 1,8192,32,128,128 ${call_options[$call]} --backend cuda \
    --repeat 1 -o "$file" >"$logs/input.$call.log" 2>&1
done
for ((r = 1; r <= rounds; r++)); do
  for call in "${calls[@]}"; do
    file=/tmp/epilogue-$call.safetensors
    [ -f "$file" ] || continue
    for n in "${!names[@]}"; do
      ab_fits 30 "${names[$n]} round $r $call" || continue
      log=$logs/time.${names[$n]}.$call.$r.log
      # shellcheck disable=SC2086  # the build's environment words
      env ${envs[$n]} LD_LIBRARY_PATH=${dirs[$n]} timeout 90 "$kda" run chunk_bwd_epilogue \
        --input "$file" --backend cuda --repeat 30 >"$log" 2>&1
      rc=$?
      median=$(grep -E '^ *median' "$log" | head -1 | awk '{print $2, $3}')
      echo "${names[$n]} round $r $call median ${median:-none} (rc $rc)" >>"$summary"
    done
  done
done
