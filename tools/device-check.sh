#!/usr/bin/env bash
# The GPU check, in one command, on a machine that has nothing of ours installed:
#   tools/device-check.sh [--build DIR] [--golden DIR] [--out DIR] [--quick] [--parts LIST]
# LIST is a comma list of tests,golden,sanitizer,bench,reliability (default: all of them), so the
# check can be split over several device calls of at most 10 minutes each; sanitizer-matrix (the
# four compute-sanitizer tools over the whole GPU matrix, both kernels) runs only when named.
# Uses a build made elsewhere (DIR holds src/libkda.so, tests/test_cuda and tools/kda) or, when
# DIR has none, configures and builds one there. Runs the GPU test matrix, the golden files
# through `kda run --check`, compute-sanitizer (memcheck, racecheck, synccheck) on a subset, the
# model-shape timings and the GPU reliability tests (tests/test_cuda_reliability); writes full
# logs under --out and prints a summary table last.
set -uo pipefail
cd "$(dirname "$0")/.."

build=build
golden=../shared/golden
out=${OUT:-device-check-logs}
quick=0
parts=tests,golden,sanitizer,bench,reliability
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --golden) golden=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "device-check: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
want() { [[ ",$parts," == *",$1,"* ]]; }
# One summary row; the elapsed seconds at its end show where a run's time went.
row() { printf '%-44s %s  [%ss]\n' "$1" "$2" "$SECONDS" | tee -a "$summary" >/dev/null; }
# The environment of a kernel choice: general, auto (the default dispatch) or prefetch (auto with
# the tensor-core path's L2-prefetch experiment), as words for `env`: callers expand it unquoted.
kernel_env() {
  case "$1" in
    general) echo "KDA_CUDA_KERNEL=general KDA_CUDA_L2_PREFETCH=0" ;;
    auto) echo "KDA_CUDA_KERNEL=auto KDA_CUDA_L2_PREFETCH=0" ;;
    prefetch) echo "KDA_CUDA_KERNEL=auto KDA_CUDA_L2_PREFETCH=1" ;;
  esac
}
# sanitize LABEL KERNEL TOOL BINARY FILTER: one compute-sanitizer run, logged to sanitizer.log,
# summarized in one row.
sanitize() {
  echo "== compute-sanitizer --tool $3, $(kernel_env "$2"), $(basename "$4") --gtest_filter=$5" \
    >>"$out/sanitizer.log"
  env $(kernel_env "$2") compute-sanitizer --tool "$3" --error-exitcode 99 "$4" --gtest_color=no \
    --gtest_filter="$5" >>"$out/sanitizer.log" 2>&1
  local src=$?
  local errors
  errors=$(grep -E 'ERROR SUMMARY' "$out/sanitizer.log" | tail -1 | sed 's/.*ERROR SUMMARY: //')
  row "$1" "$([ $src -eq 0 ] && echo PASS || echo FAIL): ${errors:-no summary}"
}

{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
} >"$out/env.txt" 2>&1

if [ ! -x "$build/tests/test_cuda" ]; then
  echo "device-check: no build in $build; building there" | tee -a "$out/env.txt"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >>"$out/env.txt" 2>&1 &&
    cmake --build "$build" -j"$(nproc)" >>"$out/env.txt" 2>&1 || {
      echo "device-check: build failed (see env.txt)"; exit 1; }
fi
export LD_LIBRARY_PATH="$build/src:${LD_LIBRARY_PATH:-}"
export KDA_GOLDEN_DIR="$(cd "$golden" && pwd)"
kda="$build/tools/kda"
test_cuda="$build/tests/test_cuda"

# 1. The GPU test matrix (fresh random inputs vs float64 cpu-ref, poisoned outputs, unchanged
#    inputs, determinism, streams, golden files), on the general kernel and again with the
#    tensor-core path enabled where it applies (KDA_CUDA_KERNEL=auto); then the tensor-core path's
#    unit tests.
gtest_row() {  # gtest_row LABEL LOG RC
  local passed failed skipped
  passed=$(grep -c '^\[       OK \]' "$2")
  # One line per test, the one that ends with its time (the recap lists failures again).
  failed=$(grep -cE '^\[  FAILED  \].* \([0-9]+ ms\)$' "$2")
  skipped=$(grep -cE '^\[  SKIPPED \].* \([0-9]+ ms\)$' "$2")
  # Mostly skipped means no GPU was visible (a few host-only tests still pass): that is not a
  # pass on the machine this script is for. A few skips (two-GPU tests on one GPU) show in the
  # counts.
  local verdict=PASS
  [ "$passed" -eq 0 ] || [ "$skipped" -gt "$passed" ] && verdict="NOT RUN"
  [ "$3" -ne 0 ] && verdict=FAIL
  row "$1" "$verdict: $passed passed, $failed failed, $skipped skipped"
}
# The runs share one log (the transfer back takes at most 8 files).
: >"$out/test_cuda.log"
gtest_record() {  # gtest_record LABEL LOG RC: the summary row, then LOG appended to test_cuda.log
  gtest_row "$1" "$2" "$3"
  { echo "==== $1"; cat "$2"; } >>"$out/test_cuda.log"
  rm -f "$2"
}
gtest_run() {  # gtest_run LABEL BINARY [env assignments...]
  local label=$1 binary=$2
  shift 2
  env "$@" "$binary" --gtest_color=no >"$out/.gtest_run.log" 2>&1
  gtest_record "$label" "$out/.gtest_run.log" $?
}
# The matrix runs split into $shards gtest shards at once: its time is mostly the float64
# reference on the host (single-threaded per process), which the GPU machine's cores share out:
# one shard per two cores, at least 4.
default_shards=$(($(nproc) / 2))
[ "$default_shards" -lt 4 ] && default_shards=4
shards=${KDA_CHECK_SHARDS:-$default_shards}
# run_shards LOG COMMAND...: COMMAND (a gtest binary, or a tool that runs one) as $shards gtest
# shards at once, their outputs concatenated into LOG; status 1 when any shard failed.
run_shards() {
  local log=$1 rc=0 i
  shift
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$i" "$@" >"$out/.shard$i.log" 2>&1 &
  done
  for ((i = 0; i < shards; i++)); do wait -n || rc=1; done
  cat "$out"/.shard*.log >"$log"
  rm -f "$out"/.shard*.log
  return $rc
}
gtest_run_sharded() {  # gtest_run_sharded LABEL BINARY [env assignments...]
  local label=$1 binary=$2
  shift 2
  run_shards "$out/.gtest_run.log" env "$@" "$binary" --gtest_color=no
  gtest_record "$label" "$out/.gtest_run.log" $?
}
if want tests; then
gtest_run_sharded "gpu tests, general kernel" "$test_cuda" $(kernel_env general)
gtest_run_sharded "gpu tests, KDA_CUDA_KERNEL=auto" "$test_cuda" $(kernel_env auto)
# The L2-prefetch experiment of the tensor-core path (off by default; docs/performance.md).
gtest_run_sharded "gpu tests, auto + KDA_CUDA_L2_PREFETCH=1" "$test_cuda" $(kernel_env prefetch)
if [ -x "$build/tests/test_cuda_fast_units" ]; then
  gtest_run "tensor-core path unit tests" "$build/tests/test_cuda_fast_units"
fi
fi

# 2. Every golden file through the command-line tool on the cuda backend.
if want golden; then
golden_ok=0
golden_all=0
: >"$out/cli.log"
for f in "$KDA_GOLDEN_DIR"/*.safetensors; do
  golden_all=$((golden_all + 1))
  echo "== kda run --input $(basename "$f") --check --backend cuda" >>"$out/cli.log"
  if "$kda" run --input "$f" --check --backend cuda >>"$out/cli.log" 2>&1; then
    golden_ok=$((golden_ok + 1))
  fi
done
row "golden files via kda run --check (cuda)" "$([ $golden_ok -eq $golden_all ] && echo PASS || echo FAIL): $golden_ok/$golden_all"
# With a GPU present and no --backend, `kda run` must pick cuda.
echo "== kda run --shape 1,130,2,64,64 --check (no --backend)" >>"$out/cli.log"
"$kda" run --shape 1,130,2,64,64 --check >"$out/.default.log" 2>&1
drc=$?
cat "$out/.default.log" >>"$out/cli.log"
picked=$(grep -E '^ *backend +' "$out/.default.log" | head -1 | awk '{print $2}')
rm -f "$out/.default.log"
row "kda run without --backend picks cuda" "$([ $drc -eq 0 ] && [ "$picked" = cuda ] && echo PASS || echo FAIL): picked ${picked:-nothing}, rc $drc"
fi

# 3. compute-sanitizer on the subset (every dtype, a tail, a varlen case, K = V = 100), for each
#    tool and each kernel choice.
if want sanitizer; then
: >"$out/sanitizer.log"
for kernel in general auto prefetch; do
  for tool in memcheck racecheck synccheck initcheck; do
    [ "$kernel" = prefetch ] && [ "$tool" != memcheck ] && continue
    sanitize "compute-sanitizer $tool ($kernel)" "$kernel" "$tool" "$test_cuda" \
      'Subset/CudaSanitizerSubset.*'
  done
done
fi

# 3b. (Not in the default parts: several minutes.) compute-sanitizer over the whole GPU matrix,
#     each tool on each kernel choice, in gtest shards like the matrix itself. The rows say
#     PASS only when every shard's tool run exited 0 with its ERROR SUMMARY of 0 errors.
if want sanitizer-matrix; then
: >"$out/sanitizer-matrix.log"
for kernel in general auto; do
  for tool in memcheck racecheck synccheck initcheck; do
    run_shards "$out/.san.log" env $(kernel_env "$kernel") compute-sanitizer --tool "$tool" \
      --error-exitcode 99 "$test_cuda" --gtest_color=no
    rc=$?
    summaries=$(grep -c 'ERROR SUMMARY: 0 errors' "$out/.san.log")
    { echo "== compute-sanitizer --tool $tool, KDA_CUDA_KERNEL=$kernel, whole matrix"
      cat "$out/.san.log"; } >>"$out/sanitizer-matrix.log"
    rm -f "$out/.san.log"
    verdict=PASS
    [ "$rc" -ne 0 ] || [ "$summaries" -ne "$shards" ] && verdict=FAIL
    row "sanitizer $tool, whole matrix ($kernel)" "$verdict: $summaries/$shards shards with 0 errors"
  done
done
fi

# 4. Timings at the model shape (B=1, T=2048, H=32, K=V=128, BT=64), CUDA events, median of 100.
if want bench; then
: >"$out/bench.log"
repeat=100
[ $quick -eq 1 ] && repeat=20
for kernel in general auto prefetch; do  # prefetch: auto + KDA_CUDA_L2_PREFETCH=1
  for dtype in bf16 fp16 fp32; do
    for hdtype in fp32 x; do
      [ "$dtype" = fp32 ] && [ "$hdtype" = x ] && continue
      [ "$kernel" != general ] && [ "$dtype" = fp32 ] && continue  # no tensor-core path for fp32
      echo "== model shape $dtype h=$hdtype kernel=$kernel" >>"$out/bench.log"
      env $(kernel_env "$kernel") "$kda" run --shape 1,2048,32,128,128 --dtype "$dtype" \
        --h-dtype "$hdtype" --backend cuda --repeat "$repeat" --check >>"$out/bench.log" 2>&1
      brc=$?
      median=$(grep -iE 'median' "$out/bench.log" | tail -1)
      row "model shape $dtype h=$hdtype ($kernel)" "$([ $brc -eq 0 ] && echo PASS || echo FAIL): $median"
    done
  done
done
fi

# 5. GPU reliability tests (tests/test_cuda_reliability.cpp: two streams and four host threads vs
#    serial bits, two GPUs, tensors past 2^31 elements, NaN/Inf and extreme gates, garbage
#    device-resident indices) on every kernel choice, then compute-sanitizer memcheck over the
#    garbage-index tests. Logs go to test_cuda.log and sanitizer.log (no new files).
reliability="$build/tests/test_cuda_reliability"
if ! want reliability; then
  :
elif [ -x "$reliability" ]; then
  gtest_run "gpu reliability tests" "$reliability" $(kernel_env general)
  gtest_run "gpu reliability tests, KDA_CUDA_KERNEL=auto" "$reliability" $(kernel_env auto)
  gtest_run "gpu reliability tests, auto + L2 prefetch" "$reliability" $(kernel_env prefetch)
  for kernel in general auto prefetch; do
    sanitize "memcheck, garbage indices ($kernel)" "$kernel" memcheck "$reliability" \
      '*DeviceIndexGarbage*'
  done
else
  row "gpu reliability tests" "FAIL: $reliability not built (carry it with the build)"
fi

echo
echo "================ device-check summary ($(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)) ================"
cat "$summary"
grep -qE 'FAIL|NOT RUN' "$summary" && exit 1
exit 0
