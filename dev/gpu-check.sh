#!/usr/bin/env bash
# The GPU check, for a fresh GPU machine with nothing of ours installed, in one command per device
# call (dev/README.md says how the parts are split over calls):
#   dev/gpu-check.sh [--parts LIST] [--deadline SECONDS] [--carry DIR] [--out DIR]
# LIST is a comma list of the parts below (default: all but sanitizer-matrix). Every step runs
# under a timeout cut to one deadline (default 470 s), so the call ends inside the device tool's
# limit with its logs written; a step cut short says so in its row.
#   python            (in the background, beside the C++ parts) `pip install ./python` offline
#                     into a fresh folder, one op call through that install from outside the
#                     checkout, then the whole Python suite against it, fla's tests included
#                     (fla's autotuners trimmed to one config: tests/python/fla_tuning.py)
#   tests             test_cuda for each kernel choice, in gtest shards; the tensor-core unit tests
#   golden            the golden files through `kda run --check --backend cuda`; `kda run` with no
#                     --backend picks cuda
#   sanitizer         memcheck, racecheck, synccheck, initcheck on the subset, each kernel choice
#   reliability       test_cuda_reliability for each kernel choice; memcheck on garbage indices
#   sanitizer-matrix  the four tools over the whole test_cuda matrix (default kernel), then
#                     memcheck over it with the general kernel, as far as the deadline allows
#   bench             model-shape timings per kernel choice (kda run, CUDA events, median of 100)
# Needs .carry from dev/stage-carry.sh (carry [".carry"]). Writes $OUT/summary.txt and one
# $OUT/logs.tar.gz of every log (the device tool brings back at most 8 files), and prints the
# summary last, each row with the elapsed seconds at its end.
set -uo pipefail
cd "$(dirname "$0")/.."

carry=.carry
out=${OUT:-gpu-check-out}
parts=python,tests,golden,sanitizer,reliability,bench
budget=470
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) parts=$2; shift 2 ;;
    --deadline) budget=$2; shift 2 ;;
    --carry) carry=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done
carry=$(cd "$carry" && pwd)
build=$carry/build
logs=$out/logs
mkdir -p "$logs"
summary=$out/summary.txt
: >"$summary"
. dev/deadline.sh
deadline_in "$budget"
want() { [[ ",$parts," == *",$1,"* ]]; }
row() { printf '%-46s %s  [%ss]\n' "$1" "$2" "$SECONDS" | tee -a "$summary" >/dev/null; }
# bounded SECONDS COMMAND...: COMMAND under a timeout cut to the deadline (status 124 if cut).
bounded() {
  local want=$1
  shift
  timeout "$(left "$want")" "$@"
}

export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export LD_LIBRARY_PATH="$build/src:${LD_LIBRARY_PATH:-}"
export KDA_GOLDEN_DIR=$carry/golden/golden
export TRITON_CACHE_DIR=/tmp/triton-cache
kda=$build/tools/kda
test_cuda=$build/tests/test_cuda
reliability=$build/tests/test_cuda_reliability
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
  nproc
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} >"$logs/env.txt" 2>&1

# The environment of a kernel choice: general or auto (the default dispatch), as words for `env`.
kernel_env() { echo "KDA_CUDA_KERNEL=$1"; }
kernels="general auto"

# --- python: in the background ----------------------------------------------------------------
python_pid=
if want python; then
  (
    site=/tmp/kda-site
    rm -rf "$site"
    bounded 60 env KDA_LIBRARY="$build/src/libkda.so" python3 -m pip install \
      --no-build-isolation --no-index --no-deps --target "$site" ./python >"$logs/pip.log" 2>&1
    prc=$?
    row "pip install ./python --no-index" "$([ $prc -eq 0 ] && echo PASS || echo "FAIL (rc $prc)")"
    # From /tmp with only the install on the path: the checkout's python/ cannot be what imports.
    (cd /tmp && bounded 60 env -u KDA_LIBRARY PYTHONPATH="$site" python3 -c '
import torch, kda_kernels
print("kda_kernels from", kda_kernels.__file__, "libkda from", kda_kernels.library_path())
assert kda_kernels.__file__.startswith("/tmp/kda-site/"), kda_kernels.__file__
B, T, H, K, V, BT = 1, 256, 2, 64, 64, 64
g = torch.Generator(device="cuda").manual_seed(0)
r = lambda *s, dt=torch.bfloat16: torch.randn(*s, device="cuda", generator=g).to(dt)
gk = -torch.rand(B, T, H, K, device="cuda", generator=g).cumsum(1) * 0.05
outs = kda_kernels.chunk_kda_bwd_wy_dqkg_fused(
    q=r(B, T, H, K), k=r(B, T, H, K), v=r(B, T, H, V), v_new=r(B, T, H, V), g=gk,
    beta=torch.rand(B, T, H, device="cuda", generator=g), A=r(B, T, H, BT) * 0.1,
    h=r(B, T // BT, H, K, V, dt=torch.float32), do=r(B, T, H, V),
    dh=r(B, T // BT, H, K, V, dt=torch.float32), dv=r(B, T, H, V), chunk_size=BT)
torch.cuda.synchronize()
assert all(o.is_cuda and bool(torch.isfinite(o).all()) for o in outs)
print("outputs", [tuple(o.shape) for o in outs], "finite on", outs[0].device)
') >>"$logs/pip.log" 2>&1
    irc=$?
    row "installed package runs the op on cuda" "$([ $irc -eq 0 ] && echo PASS || echo "FAIL (rc $irc)")"
    bounded 430 env -u KDA_LIBRARY PYTHONPATH="$carry:$site" python3 -m pytest -q -rsP \
      -p no:cacheprovider -n 6 --durations=15 tests/python >"$logs/pytest.log" 2>&1
    trc=$?
    row "pytest tests/python (installed, fla trimmed)" \
      "$([ $trc -eq 0 ] && echo PASS || echo "FAIL (rc $trc)"): $(grep -E 'passed|failed' "$logs/pytest.log" | tail -1)"
  ) &
  python_pid=$!
fi

# --- gtest helpers ---------------------------------------------------------------------------
gtest_row() {  # gtest_row LABEL LOG RC
  local passed failed skipped verdict=PASS
  passed=$(grep -c '^\[       OK \]' "$2")
  failed=$(grep -cE '^\[  FAILED  \].* \([0-9]+ ms\)$' "$2")
  skipped=$(grep -cE '^\[  SKIPPED \].* \([0-9]+ ms\)$' "$2")
  # Mostly skipped means no GPU was visible: not a pass on the machine this script is for.
  { [ "$passed" -eq 0 ] || [ "$skipped" -gt "$passed" ]; } && verdict="NOT RUN"
  [ "$3" -eq 124 ] && verdict="CUT (deadline)"
  [ "$3" -ne 0 ] && [ "$3" -ne 124 ] && verdict=FAIL
  row "$1" "$verdict: $passed passed, $failed failed, $skipped skipped"
}
shards=$(($(nproc) / 3))
[ "$shards" -lt 2 ] && shards=2
# run_shards SECONDS LOG COMMAND...: COMMAND (a gtest binary, or a tool running one) as $shards
# gtest shards at once, outputs concatenated into LOG; status 124 if cut, 1 if any shard failed.
run_shards() {
  local want=$1 log=$2 rc=0 i src
  shift 2
  local limit
  limit=$(left "$want")
  local pids=()
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$limit" "$@" \
      >"$log.shard$i" 2>&1 &
    pids+=($!)
  done
  : >"$log"
  for ((i = 0; i < shards; i++)); do
    wait "${pids[$i]}"
    src=$?
    [ $src -eq 124 ] && rc=124
    [ $src -ne 0 ] && [ $rc -eq 0 ] && rc=1
    { cat "$log.shard$i"; echo "== shard $i of $shards: exit status $src"; } >>"$log"
    rm -f "$log.shard$i"
  done
  return $rc
}

# --- tests -----------------------------------------------------------------------------------
if want tests; then
  for kernel in $kernels; do
    run_shards 200 "$logs/test_cuda.$kernel.log" env $(kernel_env $kernel) "$test_cuda" \
      --gtest_color=no
    gtest_row "test_cuda ($kernel)" "$logs/test_cuda.$kernel.log" $?
  done
  bounded 120 "$build/tests/test_cuda_fast_units" --gtest_color=no >"$logs/fast_units.log" 2>&1
  gtest_row "tensor-core path unit tests" "$logs/fast_units.log" $?
fi

# --- golden ----------------------------------------------------------------------------------
if want golden; then
  ok=0 all=0
  : >"$logs/cli.log"
  for f in "$KDA_GOLDEN_DIR"/*.safetensors; do
    all=$((all + 1))
    echo "== kda run --input $(basename "$f") --check --backend cuda" >>"$logs/cli.log"
    bounded 30 "$kda" run --input "$f" --check --backend cuda >>"$logs/cli.log" 2>&1 && ok=$((ok + 1))
  done
  row "golden files via kda run --check (cuda)" "$([ $ok -eq $all ] && echo PASS || echo FAIL): $ok/$all"
  echo "== kda run --shape 1,130,2,64,64 --check (no --backend)" >>"$logs/cli.log"
  bounded 30 "$kda" run --shape 1,130,2,64,64 --check >"$logs/.default" 2>&1
  drc=$?
  cat "$logs/.default" >>"$logs/cli.log"
  picked=$(grep -E '^ *backend +' "$logs/.default" | head -1 | awk '{print $2}')
  rm -f "$logs/.default"
  row "kda run without --backend picks cuda" \
    "$([ $drc -eq 0 ] && [ "$picked" = cuda ] && echo PASS || echo FAIL): picked ${picked:-nothing}, rc $drc"
fi

# --- sanitizer on the subset -----------------------------------------------------------------
# sanitize LABEL KERNEL TOOL BINARY FILTER: one compute-sanitizer run, one summary row.
sanitize() {
  local log=$logs/sanitizer.$3.$2.log
  bounded 120 env $(kernel_env "$2") compute-sanitizer --tool "$3" --error-exitcode 99 "$4" \
    --gtest_color=no --gtest_filter="$5" >>"$log" 2>&1
  local src=$? errors
  errors=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 | sed 's/.*SUMMARY: //')
  row "$1" "$([ $src -eq 0 ] && echo PASS || echo "FAIL (rc $src)"): ${errors:-no summary}"
}
if want sanitizer; then
  for kernel in $kernels; do
    for tool in memcheck racecheck synccheck initcheck; do
      sanitize "sanitizer $tool, subset ($kernel)" "$kernel" "$tool" "$test_cuda" \
        'Subset/CudaSanitizerSubset.*'
    done
  done
fi

# --- reliability -----------------------------------------------------------------------------
if want reliability; then
  for kernel in $kernels; do
    bounded 150 env $(kernel_env $kernel) "$reliability" --gtest_color=no \
      >"$logs/reliability.$kernel.log" 2>&1
    gtest_row "test_cuda_reliability ($kernel)" "$logs/reliability.$kernel.log" $?
    sanitize "memcheck, garbage device indices ($kernel)" "$kernel" memcheck "$reliability" \
      '*DeviceIndexGarbage*'
  done
fi

# --- sanitizer over the whole matrix ---------------------------------------------------------
if want sanitizer-matrix; then
  for run in "auto memcheck" "auto racecheck" "auto synccheck" "auto initcheck" \
    "general memcheck"; do
    set -- $run
    if [ "$(left 1000)" -lt 30 ]; then
      row "sanitizer $2, whole matrix ($1)" "NOT RUN: no time left before the deadline"
      continue
    fi
    log=$logs/sanitizer-matrix.$2.$1.log
    run_shards 400 "$log" env $(kernel_env "$1") compute-sanitizer --tool "$2" \
      --error-exitcode 99 "$test_cuda" --gtest_color=no
    rc=$?
    # memcheck, synccheck, initcheck end with "ERROR SUMMARY: 0 errors", racecheck with
    # "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
    clean=$(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors' "$log")
    verdict=PASS
    [ $rc -ne 0 ] || [ "$clean" -ne "$shards" ] && verdict=FAIL
    [ $rc -eq 124 ] && verdict="CUT (deadline)"
    row "sanitizer $2, whole matrix ($1)" "$verdict: $clean/$shards shards with 0 errors, $(grep -c '^\[       OK \]' "$log") tests passed"
  done
fi

# --- bench -----------------------------------------------------------------------------------
if [ -n "$python_pid" ]; then
  wait "$python_pid"
fi
if want bench; then
  : >"$logs/bench.log"
  for kernel in general auto; do
    for dtype in bf16 fp16 fp32; do
      for hdtype in fp32 x; do
        [ "$dtype" = fp32 ] && [ "$hdtype" = x ] && continue
        [ "$kernel" != general ] && [ "$dtype" = fp32 ] && continue
        echo "== model shape $dtype h=$hdtype kernel=$kernel" >>"$logs/bench.log"
        bounded 60 env $(kernel_env $kernel) "$kda" run --shape 1,2048,32,128,128 --dtype "$dtype" \
          --h-dtype "$hdtype" --backend cuda --repeat 100 --check >"$logs/.bench" 2>&1
        brc=$?
        cat "$logs/.bench" >>"$logs/bench.log"
        median=$(grep -E '^ *median' "$logs/.bench" | awk '{print $2, $3, $4}')
        row "model shape $dtype h=$hdtype ($kernel)" "$([ $brc -eq 0 ] && echo PASS || echo FAIL): $median"
      done
    done
  done
  rm -f "$logs/.bench"
fi

tar -czf "$out/logs.tar.gz" -C "$logs" . && rm -rf "$logs"
echo
echo "==== gpu-check summary ($(date -u +%FT%TZ), parts $parts) ===="
cat "$summary"
grep -qE 'FAIL|NOT RUN|CUT' "$summary" && exit 1
exit 0
