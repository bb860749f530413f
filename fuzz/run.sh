#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer, CUDA off) in
# build-fuzz, replays every saved regression input, then runs each fuzzer for a bounded time on a
# scratch copy of its committed seed corpus (fuzz/corpus/<target>/ is never modified).
#
# Usage: fuzz/run.sh [seconds-per-fuzzer]      (default 60)
# Prints one summary line per fuzzer:
#   fuzz_problem: ok executions=123456 seconds=60 corpus=40->311 regressions=2
# Exit status: 0 when every fuzzer ran clean, 1 when one crashed or a regression input fails again
# (a new crashing input is copied to fuzz/regressions/<target>/ so that every later run replays
# it), 2 when the fuzzers could not be built.
#
# Environment: KDA_FUZZ_BUILD_DIR (default build-fuzz), KDA_FUZZ_JOBS (build jobs, default 2),
# KDA_FUZZ_ARGS (extra libFuzzer flags), KDA_FUZZ_UPDATE_CORPUS=1 (after a clean run, merge the
# inputs that add coverage into the committed corpus), KDA_FUZZ_KEEP=1 (keep the scratch dirs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

seconds="${1:-60}"
build="${KDA_FUZZ_BUILD_DIR:-build-fuzz}"
targets=(fuzz_safetensors fuzz_problem)

cxx=""
for candidate in clang++ clang++-14; do
  if command -v "$candidate" >/dev/null; then
    cxx="$candidate"
    break
  fi
done
if [ -z "$cxx" ]; then
  echo "fuzz: no clang++ found; libFuzzer needs clang and its runtime" \
    "(Debian 12: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
cc="${cxx/clang++/clang}"

log_dir="$(mktemp -d "${TMPDIR:-/tmp}/kda-fuzz.XXXXXX")"
if ! CC="$cc" CXX="$cxx" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKDA_ENABLE_CUDA=OFF -DKDA_BUILD_FUZZERS=ON -DKDA_BUILD_TESTS=OFF -DKDA_BUILD_CLI=OFF \
    >"$log_dir/configure.log" 2>&1; then
  tail -n 30 "$log_dir/configure.log" >&2
  echo "fuzz: configure failed" >&2
  exit 2
fi
if ! cmake --build "$build" --target "${targets[@]}" -j "${KDA_FUZZ_JOBS:-2}" \
    >"$log_dir/build.log" 2>&1; then
  tail -n 40 "$log_dir/build.log" >&2
  echo "fuzz: build failed (a missing libclang_rt.fuzzer means: apt-get install" \
    "libclang-rt-14-dev)" >&2
  exit 2
fi

# Largest input libFuzzer makes up: the problem decoder reads well under 512 bytes; the
# safetensors seeds are a few KB. The problem decoder reads its most important bytes first and
# longer inputs cost no more, so it starts at full length (len_control=0) instead of growing.
declare -A target_options=(
  [fuzz_safetensors]="-max_len=16384"
  [fuzz_problem]="-max_len=512 -len_control=0"
)

failed=0
summaries=()
for target in "${targets[@]}"; do
  binary="$build/fuzz/$target"
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/kda-$target.XXXXXX")"
  mkdir -p "$scratch/corpus" "$scratch/artifacts"
  if compgen -G "fuzz/corpus/$target/*" >/dev/null; then
    cp fuzz/corpus/"$target"/* "$scratch/corpus/"
  fi
  seeds=$(find "$scratch/corpus" -type f | wc -l)
  # shellcheck disable=SC2206  # a list of flags
  options=(${target_options[$target]} -timeout=30 -rss_limit_mb=2048 -print_final_stats=1)
  if [ -f "fuzz/$target.dict" ]; then options+=(-dict="fuzz/$target.dict"); fi
  # shellcheck disable=SC2206  # KDA_FUZZ_ARGS is a list of flags
  options+=(${KDA_FUZZ_ARGS:-})

  # 1. Every saved crash must stay fixed.
  regressions=()
  if compgen -G "fuzz/regressions/$target/*" >/dev/null; then
    regressions=(fuzz/regressions/"$target"/*)
  fi
  if [ "${#regressions[@]}" -gt 0 ] &&
    ! "$binary" "${options[@]}" "${regressions[@]}" >"$scratch/replay.log" 2>&1; then
    tail -n 40 "$scratch/replay.log" >&2
    failing=$(grep -o 'Running: .*' "$scratch/replay.log" | tail -n 1 | cut -d' ' -f2-)
    summaries+=("$target: REGRESSION input=$failing regressions=${#regressions[@]}")
    failed=1
    [ "${KDA_FUZZ_KEEP:-0}" = 1 ] || rm -rf "$scratch"
    continue
  fi

  # 2. Fuzz for the time given.
  "$binary" "${options[@]}" -max_total_time="$seconds" -artifact_prefix="$scratch/artifacts/" \
    "$scratch/corpus" >"$scratch/fuzz.log" 2>&1
  status=$?
  executions=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$scratch/fuzz.log" |
    awk '{print $2}' | tail -n 1)
  if [ -z "$executions" ]; then  # -fork mode prints only its progress lines: "#1234: cov: ..."
    executions=$(grep -o '^#[0-9]*' "$scratch/fuzz.log" | tail -n 1 | tr -d '#')
  fi
  corpus=$(find "$scratch/corpus" -type f | wc -l)
  line="$target: ok executions=${executions:-0} seconds=$seconds corpus=$seeds->$corpus"
  line+=" regressions=${#regressions[@]}"
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$scratch/fuzz.log" >&2
    mkdir -p "fuzz/regressions/$target"
    saved=()
    for artifact in "$scratch"/artifacts/*; do
      [ -f "$artifact" ] || continue
      cp "$artifact" "fuzz/regressions/$target/"
      saved+=("fuzz/regressions/$target/$(basename "$artifact")")
    done
    line="${line/: ok /: CRASH exit=$status }"
    line+=" saved=${saved[*]:-none}"
    failed=1
  elif [ "${KDA_FUZZ_UPDATE_CORPUS:-0}" = 1 ]; then
    mkdir -p "fuzz/corpus/$target"
    "$binary" "${options[@]}" -merge=1 "fuzz/corpus/$target" "$scratch/corpus" \
      >"$scratch/merge.log" 2>&1 || echo "fuzz: merge into fuzz/corpus/$target failed" >&2
  fi
  summaries+=("$line")
  if [ "${KDA_FUZZ_KEEP:-0}" = 1 ]; then
    echo "fuzz: kept $scratch" >&2
  else
    rm -rf "$scratch"
  fi
done
rm -rf "$log_dir"

for line in "${summaries[@]}"; do echo "$line"; done
exit "$failed"
