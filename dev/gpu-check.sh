#!/usr/bin/env bash
# The GPU check, for a fresh GPU machine with nothing of ours installed, in one command per device
# call (dev/README.md says how the parts are split over calls):
#   dev/gpu-check.sh [--parts LIST] [--deadline SECONDS] [--carry DIR] [--out DIR] [--lib DIR]
# LIST is a comma list of the parts below (default: python,tests,golden,sanitizer,reliability,
# bench,bench-intra). Every step runs under a timeout cut to one deadline (default 470 s), so the call ends
# inside the device tool's limit with its logs written; a step cut short says so in its row.
#   python            (in the background, beside the C++ parts) `pip install ./python` offline
#                     into a fresh folder, one op call through that install from outside the
#                     checkout, then the whole Python suite against it, fla's tests included
#                     (fla's autotuners trimmed to one config: tests/python/fla_tuning.py)
#   tests             test_wy_cuda (chunk_bwd_wy_dqkg, every kernel in one process), its sm80_mma
#                     unit tests, test_intra_cuda (chunk_bwd_intra), in gtest shards; the wgmma
#                     unit tests
#   golden            every golden file of both operators through `kda run <op> --check --backend
#                     cuda` (chunk_bwd_wy_dqkg also with --kernel simt); `kda run` with no
#                     --backend picks cuda
#   sanitizer         memcheck, racecheck, synccheck, initcheck on each operator's subset
#   reliability       test_cuda_reliability with the simt kernel and the default dispatch;
#                     memcheck on the garbage-index tests of both operators
#   sanitizer-matrix  the four tools over the whole test_wy_cuda matrix, then over the whole
#                     test_intra_cuda, as far as the deadline allows (KDA_SANITIZER_MATRIX=wy|intra:
#                     one of them; KDA_SANITIZER_TOOLS: a comma list of the tools)
#   epilogue          test_epilogue_cuda (chunk_bwd_epilogue: random problems against cpu-ref, the
#                     golden-kda files, refusals), the four sanitizers on its Subset, and `kda run`
#                     timings at the model shape (default call and the Kimi layer's call)
#   prep              chunk_bwd_prep (the backward's first pass): test_prep_cuda (random problems
#                     of every option against cpu-ref), the four sanitizers on its Subset, `kda
#                     run` at the model shape (default call and the Kimi layer's), bench/prep.py
#                     (ours beside the fla stages it stands in for, floor, float64 errors)
#   scans             the state scans, chunk_bwd_dhu and chunk_fwd_h: test_dhu_cuda and
#                     test_fwd_h_cuda (random problems of every option against cpu-ref, both
#                     kernels), the four sanitizers on each Subset, `kda run` at the model shape
#                     and bench/scans.py (ours beside fla's kernels, float64 errors, byte floor)
#   chunk-kda         tests/python/test_chunk_kda.py (kda_kernels.chunk_kda beside fla, the golden-kda
#                     files, the reductions over seeds) against the first carried fla release that
#                     KDA_FLA_RELEASES picks (default: every release; the first is used); five
#                     tails (split, epilogue, epilogue with our first pass, epilogue with our
#                     scans, every stage ours): about 4
#                     minutes on an H100 for the first three, so give it a call of its own (KDA_CHUNK_KDA_K: a
#                     pytest -k expression, e.g. "prep or library"; KDA_CHUNK_KDA_ARGS: more pytest
#                     options, split on spaces without quoting)
#   bench             chunk_bwd_wy_dqkg timings per kernel (kda run, CUDA events)
#   bench-py-intra    bench/run.py --op chunk_bwd_intra: ours and fla's Triton kernel (autotuned)
#                     in one process, floor, err_ratio against float64
#   bench-py-wy       bench/run.py --op chunk_bwd_wy_dqkg on the model, fp32, varlen and long
#                     cases, fla's WY kernel pinned to its tuned winners (no autotuning);
#                     KDA_BENCH_WY_CASES picks the cases, KDA_BENCH_WY_SECONDS its time (240)
#   layer             bench/layer.py: fla's chunk_kda forward + backward at B=1 and B=4, T=8192,
#                     H=32 with fla's kernels, with our WY, with both of ours, through
#                     kda_kernels.chunk_kda: GPU time per kernel, eager wall time, CUDA graph
#                     time, gradients against fla's; its tables go into the summary.
#                     KDA_LAYER_ARGS="--call cudnn" adds cuDNN-frontend's sm90 engine (staged
#                     with dev/stage-carry.sh --cudnn --no-golden)
#   fla               kda_kernels.fla against the mirror's fla source tree and every fla release
#                     of .carry/fla-releases.tar.xz (PyPI): tests/python/test_fla.py and
#                     test_fla_layer.py (fla's KimiDeltaAttention trained one step, kernel
#                     launches counted), then fla's own tests/ops/test_kda.py with our backend
#                     enabled (tests/python/fla_peer_plugin.py: calls to our backend counted);
#                     KDA_FLA_PEER_SECONDS bounds each peer run (150); KDA_FLA_RELEASES
#                     (versions, space-separated) picks releases, KDA_FLA_SOURCE=0 skips the
#                     source tree
#   bench-intra       bench_intra_cuda (chunk_bwd_intra, its variants, both safe_gate values)
#   ncu-intra         ncu (--set full, SASS-level stall samples) on one chunk_bwd_intra launch at
#                     the model shape (T=8192 bf16); report, details and the SASS table in logs
#   ncu-epilogue      the same on one chunk_bwd_epilogue launch at B=1 T=2048 H=32 K=V=128 bf16, the
#                     Kimi layer's call (gate, beta sigmoid, l2norm, V-first h in bf16: the bf16
#                     kernel), on the default call's, and on its dA_log / ddt_bias kernel
#   ncu-scans         the same on one launch of each state scan's tensor-core kernel (chunk_bwd_dhu,
#                     chunk_fwd_h) at B=1 T=2048 H=32 K=V=128 bf16, V-first states
#   ncu-wy            the same on one chunk_bwd_wy_dqkg launch at its model shape (B=1 T=2048
#                     H=32 K=V=128 bf16, h float32): the data for issue 12's v3 design
#   ncu-wy-fp32       the same in float32 (the 3xTF32 kernel)
#   ncu-wy-bt32       the same at BT = 32 (fp16, h float32: the issue's BT = 32 row)
#   ncu-wy-small      the same at B=1 T=512 H=8 bf16 (split units: the issue's small row)
#   host-perf         `perf record` (when the machine has perf) over host_cost.py's compiled-op
#                     layer of chunk_bwd_wy_dqkg: where the host time per call goes
#   host-cost         bench/host_cost.py --device cuda for both operators: host time per call of
#                     each layer, the compiled torch op and the python one (issue 13's targets)
#   ab                the same chunk_bwd_wy_dqkg shapes with a build of another commit
#                     (.carry/old/kda, old command syntax) alternated with this one: before and
#                     after in one run
# --lib DIR points the library path and KDA_LIBRARY at the libkda in DIR (a folder holding
# libkda.so.0.2, e.g. a build that dev/ab-scans.sh unpacked into .carry/ab/NAME earlier in the
# same call) instead of the carried build's, so that `--parts scans --lib DIR` checks one
# experiment whole; the test binaries and `kda` are the carried ones either way.
# Needs .carry from dev/stage-carry.sh (carry [".carry"]). Writes $OUT/summary.txt and one
# $OUT/logs.tar.gz of every log (the device tool brings back at most 8 files), and prints the
# summary last, each row with the elapsed seconds at its end.
set -uo pipefail
cd "$(dirname "$0")/.."

carry=.carry
out=${OUT:-gpu-check-out}
parts=python,tests,golden,sanitizer,reliability,bench,bench-intra
budget=470
lib=
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) parts=$2; shift 2 ;;
    --deadline) budget=$2; shift 2 ;;
    --carry) carry=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done
carry=$(cd "$carry" && pwd)
build=$carry/build
# The builds travel packed (dev/stage-carry.sh). Unpacked afresh unless the folder holds this very archive's files (its checksum, written after
# unpacking): a machine still warm keeps an earlier call's folder, which held another build or
# lacked its symbolic links.
if [ -f "$carry/build.tar.xz" ] &&
  [ "$(cat "$build/.unpacked" 2>/dev/null)" != "$(sha1sum <"$carry/build.tar.xz")" ]; then
  rm -rf "$build" && mkdir -p "$build" && tar -xJf "$carry/build.tar.xz" -C "$carry" &&
    sha1sum <"$carry/build.tar.xz" >"$build/.unpacked"
fi
if [ ! -d "$carry/old" ] && [ -f "$carry/old.tar.xz" ]; then
  mkdir -p "$carry/old" && tar -xJf "$carry/old.tar.xz" -C "$carry/old"
fi
# The checkout's own build, as a developer's checkout has one (the editable-install test finds
# libkda there).
[ -e build ] || ln -s "$build" build
logs=$out/logs
mkdir -p "$logs"
summary=$out/summary.txt
: >"$summary"
. dev/deadline.sh
deadline_in "$budget"
want() { [[ ",$parts," == *",$1,"* ]]; }
row() { printf '%-50s %s  [%ss]\n' "$1" "$2" "$SECONDS" | tee -a "$summary" >/dev/null; }
# bounded SECONDS COMMAND...: COMMAND under a timeout cut to the deadline (status 124 if cut).
bounded() {
  local want=$1
  shift
  timeout "$(left "$want")" "$@"
}

export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# The library every part loads: the carried build's, or --lib's.
lib=$(cd "${lib:-$build/src}" && pwd) || exit 2
libkda=$lib/libkda.so
[ -e "$libkda" ] || libkda=$lib/libkda.so.0.2
if [ ! -e "$libkda" ]; then
  echo "gpu-check: no libkda.so or libkda.so.0.2 in $lib" >&2
  exit 2
fi
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
export KDA_GOLDEN_DIR=$carry/golden/golden
export KDA_INTRA_GOLDEN_DIR=$carry/golden/golden-intra
export KDA_LAYER_GOLDEN_DIR=$carry/golden/golden-kda
export TRITON_CACHE_DIR=/tmp/triton-cache
unset KDA_CUDA_KERNEL
kda=$build/tools/kda
test_wy=$build/tests/ops/chunk_bwd_wy_dqkg/test_wy_cuda
test_intra=$build/tests/ops/chunk_bwd_intra/test_intra_cuda
test_epilogue=$build/tests/ops/chunk_bwd_epilogue/test_epilogue_cuda
test_dhu=$build/tests/ops/chunk_bwd_dhu/test_dhu_cuda
test_prep=$build/tests/ops/chunk_bwd_prep/test_prep_cuda
test_fwd_h=$build/tests/ops/chunk_fwd_h/test_fwd_h_cuda
reliability=$build/tests/test_cuda_reliability
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
  nproc
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} >"$logs/env.txt" 2>&1

# --- python: in the background ----------------------------------------------------------------
python_pid=
if want python; then
  (
    site=/tmp/kda-site
    rm -rf "$site"
    bounded 60 env KDA_LIBRARY="$libkda" python3 -m pip install \
      --no-build-isolation --no-index --no-deps --target "$site" ./python >"$logs/pip.log" 2>&1
    prc=$?
    row "pip install ./python --no-index" "$([ $prc -eq 0 ] && echo PASS || echo "FAIL (rc $prc)")"
    # From /tmp with only the install on the path: the checkout's python/ cannot be what imports.
    (cd /tmp && bounded 60 env -u KDA_LIBRARY PYTHONPATH="$site" python3 -c '
import torch, kda_kernels
print("kda_kernels from", kda_kernels.__file__, "libkda from", kda_kernels.library_path())
print("torch op:", kda_kernels.torch_op_backend(detail=True))
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
    row "torch op of the installed package" "$(grep -m1 '^torch op:' "$logs/pip.log" | cut -c11-)"
    bounded 430 env -u KDA_LIBRARY PYTHONPATH="$carry:$site" python3 -m pytest -q -rsP \
      -p no:cacheprovider -n 6 --durations=15 tests/python >"$logs/pytest.log" 2>&1
    trc=$?
    row "pytest tests/python (installed, fla trimmed)" \
      "$([ $trc -eq 0 ] && echo PASS || echo "FAIL (rc $trc)"): $(grep -E 'passed|failed' "$logs/pytest.log" | tail -1)"
    # The failing tests by name, in the summary: the logs may not come back (8 files at most).
    grep -E '^(FAILED|ERROR) ' "$logs/pytest.log" | head -5 | while read -r line; do
      row "  $line" ""
    done
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
# gtest shards at once, outputs concatenated into LOG with each shard's exit status; status 124 if
# cut, 1 if any shard failed.
run_shards() {
  local want=$1 log=$2 rc=0 i src limit
  shift 2
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
  run_shards 200 "$logs/test_wy_cuda.log" "$test_wy" --gtest_color=no
  gtest_row "test_wy_cuda (wy_dqkg: simt, sm80_mma, auto)" "$logs/test_wy_cuda.log" $?
  run_shards 200 "$logs/test_intra_cuda.log" "$test_intra" --gtest_color=no
  gtest_row "test_intra_cuda (intra: sm80_mma)" "$logs/test_intra_cuda.log" $?
  bounded 120 "$build/tests/ops/chunk_bwd_wy_dqkg/test_wy_sm80_mma_units" --gtest_color=no \
    >"$logs/wy_sm80_mma_units.log" 2>&1
  gtest_row "sm80_mma unit tests (wy_dqkg)" "$logs/wy_sm80_mma_units.log" $?
  bounded 60 "$build/tests/test_cuda_wgmma_units" --gtest_color=no >"$logs/wgmma_units.log" 2>&1
  gtest_row "wgmma unit tests (issue 12's first piece)" "$logs/wgmma_units.log" $?
fi

# --- golden ----------------------------------------------------------------------------------
golden_files() {  # golden_files OP DIR [kda run options...]
  local op=$1 dir=$2 ok=0 all=0 f
  shift 2
  for f in "$dir"/*.safetensors; do
    all=$((all + 1))
    echo "== kda run $op --input $(basename "$f") --check --backend cuda $*" >>"$logs/cli.log"
    bounded 30 "$kda" run "$op" --input "$f" --check --backend cuda "$@" >>"$logs/cli.log" 2>&1 &&
      ok=$((ok + 1))
  done
  row "golden $op via kda run --check $*" "$([ $ok -eq $all ] && [ $all -gt 0 ] && echo PASS || echo FAIL): $ok/$all"
}
if want golden; then
  : >"$logs/cli.log"
  golden_files chunk_bwd_wy_dqkg "$KDA_GOLDEN_DIR"
  golden_files chunk_bwd_wy_dqkg "$KDA_GOLDEN_DIR" --kernel simt
  golden_files chunk_bwd_intra "$KDA_INTRA_GOLDEN_DIR"
  echo "== kda run chunk_bwd_wy_dqkg --shape 1,130,2,64,64 --check (no --backend)" >>"$logs/cli.log"
  bounded 30 "$kda" run chunk_bwd_wy_dqkg --shape 1,130,2,64,64 --check >"$logs/.default" 2>&1
  drc=$?
  cat "$logs/.default" >>"$logs/cli.log"
  picked=$(grep -E '^ *backend +' "$logs/.default" | head -1 | awk '{print $2}')
  rm -f "$logs/.default"
  row "kda run without --backend picks cuda" \
    "$([ $drc -eq 0 ] && [ "$picked" = cuda ] && echo PASS || echo FAIL): picked ${picked:-nothing}, rc $drc"
fi

# --- sanitizer on the subsets ----------------------------------------------------------------
# sanitize LABEL TOOL BINARY FILTER [ENV...]: one compute-sanitizer run, one summary row.
sanitize() {
  local label=$1 tool=$2 binary=$3 filter=$4
  shift 4
  local log=$logs/sanitizer.$tool.$(basename "$binary").log
  echo "== $filter $*" >>"$log"
  bounded 150 env "$@" compute-sanitizer --tool "$tool" --error-exitcode 99 "$binary" \
    --gtest_color=no --gtest_filter="$filter" >>"$log" 2>&1
  local src=$? errors
  errors=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 | sed 's/.*SUMMARY: //')
  row "$label" "$([ $src -eq 0 ] && echo PASS || echo "FAIL (rc $src)"): ${errors:-no summary}"
}
intra_subset='*/fixed_bf16_bt64:*/fixed_bf16_bt64_safe:*/varlen_safe_fp16_bt16:*/fixed_fp32_bt16:*/k100_fp16:*/gva_h2_hv8_bf16'
intra_subset+=':*/varlen_bf16_bt16_derived_i32_nt_bound:*/layout_channel_strided_fp16'
if want sanitizer; then
  for tool in memcheck racecheck synccheck initcheck; do
    sanitize "sanitizer $tool, wy_dqkg subset" "$tool" "$test_wy" 'Subset/CudaSanitizerSubset.*'
    sanitize "sanitizer $tool, intra subset" "$tool" "$test_intra" "$intra_subset"
  done
fi

# --- reliability -----------------------------------------------------------------------------
if want reliability; then
  for kernel in simt auto; do
    bounded 150 env KDA_CUDA_KERNEL=$kernel "$reliability" --gtest_color=no \
      >"$logs/reliability.$kernel.log" 2>&1
    gtest_row "test_cuda_reliability (KDA_CUDA_KERNEL=$kernel)" "$logs/reliability.$kernel.log" $?
  done
  sanitize "memcheck, garbage device indices (wy_dqkg)" memcheck "$reliability" \
    '*DeviceIndexGarbage*'
  sanitize "memcheck, garbage device indices (intra)" memcheck "$test_intra" '*Garbage*'
fi

# --- epilogue ----------------------------------------------------------------------------------
if want epilogue; then
  run_shards 200 "$logs/test_epilogue_cuda.log" "$test_epilogue" --gtest_color=no
  gtest_row "test_epilogue_cuda (chunk_bwd_epilogue)" "$logs/test_epilogue_cuda.log" $?
  for tool in memcheck racecheck synccheck initcheck; do
    sanitize "sanitizer $tool, epilogue subset" "$tool" "$test_epilogue" 'Subset/*'
  done
  : >"$logs/epilogue_bench.log"
  # h, dh in bf16 (as the layer passes them) run the bf16 kernel; in float32 the general one.
  for call in "--gate none --h-dtype x" "--gate lower_bound --beta-sigmoid --state-v-first --h-dtype x" \
    "--gate none" "--gate lower_bound --beta-sigmoid --state-v-first"; do
    echo "== kda run chunk_bwd_epilogue --shape 1,8192,32,128,128 $call" >>"$logs/epilogue_bench.log"
    # shellcheck disable=SC2086
    bounded 60 "$kda" run chunk_bwd_epilogue --shape 1,8192,32,128,128 --backend cuda --repeat 20 \
      $call >"$logs/.epi" 2>&1
    erc=$?
    cat "$logs/.epi" >>"$logs/epilogue_bench.log"
    row "epilogue B=1 T=8192 H=32 bf16 $call" "rc $erc: $(grep -m1 -iE 'median|time' "$logs/.epi" | tr -s ' ')"
  done
  rm -f "$logs/.epi"
fi

if want prep; then
  run_shards 200 "$logs/test_prep_cuda.log" "$test_prep" --gtest_color=no
  gtest_row "test_prep_cuda (chunk_bwd_prep)" "$logs/test_prep_cuda.log" $?
  for tool in memcheck racecheck synccheck initcheck; do
    sanitize "sanitizer $tool, prep subset" "$tool" "$test_prep" 'Subset/*'
  done
  for call in "--gate none" "--gate lower_bound --beta-sigmoid"; do
    echo "== kda run chunk_bwd_prep --shape 1,8192,32,128,128 $call" >>"$logs/prep_bench.log"
    # shellcheck disable=SC2086
    bounded 60 "$kda" run chunk_bwd_prep --shape 1,8192,32,128,128 --backend cuda --repeat 20 \
      $call >"$logs/.prep" 2>&1
    prc=$?
    cat "$logs/.prep" >>"$logs/prep_bench.log"
    row "chunk_bwd_prep B=1 T=8192 H=32 bf16 $call" "rc $prc: $(grep -m1 -E 'median' "$logs/.prep" | tr -s ' ')"
  done
  rm -f "$logs/.prep"
  # Ours beside the fla stages it stands in for, in one process (KDA_PREP_ARGS: bench/prep.py
  # options).
  # shellcheck disable=SC2086
  bounded "${KDA_PREP_SECONDS:-150}" env KDA_LIBRARY="$libkda" PYTHONPATH="$carry:python" \
    python3 bench/prep.py ${KDA_PREP_ARGS:-} >"$logs/prep_py.log" 2>&1
  row "bench/prep.py (rc $?)" "see prep_py.log"
  sed -n '/^| shape/,$p' "$logs/prep_py.log" >>"$summary"
fi

if want scans; then
  for scan in dhu fwd_h; do
    tbin=$test_dhu
    [ "$scan" = fwd_h ] && tbin=$test_fwd_h
    op=chunk_bwd_dhu
    [ "$scan" = fwd_h ] && op=chunk_fwd_h
    run_shards 200 "$logs/test_${scan}_cuda.log" "$tbin" --gtest_color=no
    gtest_row "test_${scan}_cuda ($op)" "$logs/test_${scan}_cuda.log" $?
    for tool in memcheck racecheck synccheck initcheck; do
      sanitize "sanitizer $tool, $scan subset" "$tool" "$tbin" 'Subset/*'
    done
    for call in "" "--state-v-first"; do
      echo "== kda run $op --shape 1,8192,32,128,128 $call" >>"$logs/scans_bench.log"
      # shellcheck disable=SC2086
      bounded 60 "$kda" run "$op" --shape 1,8192,32,128,128 --backend cuda --repeat 20 \
        $call >"$logs/.scan" 2>&1
      src=$?
      cat "$logs/.scan" >>"$logs/scans_bench.log"
      row "$op B=1 T=8192 H=32 bf16 $call" "rc $src: $(grep -m1 -E 'median' "$logs/.scan" | tr -s ' ')"
    done
  done
  rm -f "$logs/.scan"
  # Ours beside fla's Triton kernels in one process (KDA_SCANS_ARGS: bench/scans.py options).
  # shellcheck disable=SC2086
  bounded "${KDA_SCANS_SECONDS:-200}" env KDA_LIBRARY="$libkda" PYTHONPATH="$carry:python" \
    python3 bench/scans.py ${KDA_SCANS_ARGS:-} >"$logs/scans_py.log" 2>&1
  row "bench/scans.py (rc $?)" "see scans_py.log"
  sed -n '/^| scan/,$p' "$logs/scans_py.log" >>"$summary"
fi

# --- sanitizer over the whole matrix ---------------------------------------------------------
if want sanitizer-matrix; then
  # KDA_SANITIZER_MATRIX: which binaries (wy, intra; default both) get the four tools.
  # KDA_SANITIZER_TOOLS: which tools (default all four).
  # KDA_SANITIZER_SECONDS: the most one tool's run may take (default 400; racecheck over the
  # whole test_wy_cuda needs ~420 s on an H100 with 5 shards).
  tools=${KDA_SANITIZER_TOOLS:-memcheck,racecheck,synccheck,initcheck}
  matrix=()
  for tool in ${tools//,/ }; do
    [[ ",${KDA_SANITIZER_MATRIX:-wy,intra}," == *",wy,"* ]] && matrix+=("$tool $test_wy")
  done
  for tool in ${tools//,/ }; do
    [[ ",${KDA_SANITIZER_MATRIX:-wy,intra}," == *",intra,"* ]] && matrix+=("$tool $test_intra")
  done
  for run in "${matrix[@]}"; do
    set -- $run
    name=$(basename "$2")
    if [ "$(left 1000)" -lt 30 ]; then
      row "sanitizer $1, whole $name" "NOT RUN: no time left before the deadline"
      continue
    fi
    log=$logs/sanitizer-matrix.$1.$name.log
    run_shards "${KDA_SANITIZER_SECONDS:-400}" "$log" compute-sanitizer --tool "$1" --error-exitcode 99 "$2" --gtest_color=no
    rc=$?
    # memcheck, synccheck, initcheck end with "ERROR SUMMARY: 0 errors", racecheck with
    # "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
    clean=$(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors' "$log")
    verdict=PASS
    [ $rc -ne 0 ] || [ "$clean" -ne "$shards" ] && verdict=FAIL
    [ $rc -eq 124 ] && verdict="CUT (deadline)"
    row "sanitizer $1, whole $name" "$verdict: $clean/$shards shards with 0 errors, $(grep -c '^\[       OK \]' "$log") tests passed"
  done
fi

# --- timings: the GPU to themselves ----------------------------------------------------------
if [ -n "$python_pid" ]; then
  wait "$python_pid"
fi
# time_row LABEL LOG COMMAND...: COMMAND's `median` line as a row.
time_row() {
  local label=$1 log=$2
  shift 2
  # Past the deadline nothing runs (a timeout of 1 s, or an input never generated, would read
  # as a failure): the row says it was cut.
  if [ "$SECONDS" -ge "$deadline" ]; then
    row "$label" "CUT (deadline): not run"
    return
  fi
  echo "== $*" >>"$log"
  bounded 60 "$@" >"$log.one" 2>&1
  local rc=$?
  cat "$log.one" >>"$log"
  local median
  median=$(grep -E '^ *median' "$log.one" | head -1 | awk '{print $2, $3}')
  rm -f "$log.one"
  row "$label" "$([ $rc -eq 0 ] && echo "${median:-no median}" || echo "FAIL (rc $rc) ${median}")"
}
# shellcheck source=dev/wy-shapes.sh
. dev/wy-shapes.sh
# The inputs of each shape, generated once into /tmp (`kda run -o`), so that every timed run
# reads them instead of drawing gigabytes of random numbers again.
wy_input() {  # wy_input NAME OPTIONS...: the file's path, generated on first use
  local file=/tmp/wy-$1.safetensors
  shift
  [ -f "$file" ] || bounded 90 "$kda" run chunk_bwd_wy_dqkg "$@" --backend cuda --repeat 1 \
    -o "$file" >/dev/null 2>&1
  echo "$file"
}
if want bench; then
  : >"$logs/bench.log"
  for entry in "${wy_shapes[@]}"; do
    set -- $entry
    name=$1
    shift
    file=$(wy_input "$name" "$@")
    for kernel in simt auto; do
      [ "$kernel" = simt ] && [ "$name" != model-bf16 ] && [ "$name" != model-fp32 ] && continue
      time_row "wy $name ($kernel)" "$logs/bench.log" "$kda" run chunk_bwd_wy_dqkg \
        --input "$file" --backend cuda --kernel "$kernel" --repeat 100
    done
  done
fi

# --- before/after: another commit's build alternated with this one ---------------------------
if want ab; then
  old=$carry/old/tools/kda
  : >"$logs/ab.log"
  for ((round = 1; round <= ${KDA_AB_ROUNDS:-2}; round++)); do
    for entry in "${wy_shapes[@]}"; do
      set -- $entry
      name=$1
      shift
      [[ ",${KDA_AB_SHAPES:-$name}," == *",$name,"* ]] || continue
      file=$(wy_input "$name" "$@")
      # KDA_AB_ORDER=new-first swaps the pair, to tell drift between the two runs from a change.
      for which in $([ "${KDA_AB_ORDER:-old-first}" = new-first ] && echo "new old" || echo "old new"); do
        if [ "$which" = old ]; then
          time_row "ab $name old #$round" "$logs/ab.log" env LD_LIBRARY_PATH="$carry/old/src" \
            "$old" run chunk_bwd_wy_dqkg --input "$file" --backend cuda --repeat 100
        else
          time_row "ab $name new #$round" "$logs/ab.log" "$kda" run chunk_bwd_wy_dqkg \
            --input "$file" --backend cuda --repeat 100
        fi
      done
    done
  done
fi

# --- chunk_bwd_intra beside fla's Triton kernel (autotuned here) in one process ----------------
# The floors use SPEC's H200 copy bandwidth; on any other card (the device tool may lend an H100)
# the bench measures the card's own, so that the shares stay shares of this card's floor.
bench_bw=()
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 || bench_bw=(--bandwidth measured)
if want bench-py-intra; then
  bounded 240 env KDA_LIBRARY="$libkda" PYTHONPATH="$carry:python" python3 bench/run.py \
    --op chunk_bwd_intra "${bench_bw[@]}" --kernels auto --fresh --out "$logs/bench-py-intra" \
    >"$logs/bench-py-intra.log" 2>&1
  brc=$?
  row "bench/run.py --op chunk_bwd_intra (with fla)" "$([ $brc -eq 0 ] && echo PASS || echo "FAIL (rc $brc)"): see bench-py-intra/"
fi

# --- chunk_bwd_wy_dqkg beside fla's Triton kernel pinned to its tuned configs -----------------
if want bench-py-wy; then
  bounded "${KDA_BENCH_WY_SECONDS:-240}" env KDA_LIBRARY="$libkda" PYTHONPATH="$carry:python" python3 bench/run.py \
    --op chunk_bwd_wy_dqkg --fla-configs "$carry/fla_best_configs_h200.json" "${bench_bw[@]}" \
    --cases "${KDA_BENCH_WY_CASES:-model-bf16,model-bf16-hx,model-fp32,varlen-bf16,long-bf16}" \
    --kernels auto --fresh --out "$logs/bench-py-wy" >"$logs/bench-py-wy.log" 2>&1
  brc=$?
  row "bench/run.py --op chunk_bwd_wy_dqkg (fla pinned)" "$([ $brc -eq 0 ] && echo PASS || echo "FAIL (rc $brc)"): see bench-py-wy/"
  [ -f "$logs/bench-py-wy/bench.md" ] && cat "$logs/bench-py-wy/bench.md" >>"$summary"
fi

# --- kda_kernels.fla against each fla: our tests, then fla's own KDA tests ------------------
releases=$carry/fla-releases
unpack_fla_releases() {
  if [ -f "$carry/fla-releases.tar.xz" ] && [ ! -d "$releases" ]; then
    mkdir -p "$releases" && tar -xJf "$carry/fla-releases.tar.xz" -C "$releases"
  fi
}
picked_release() {  # picked_release VERSION_DIR: KDA_FLA_RELEASES (space-separated) takes it
  [[ -z "${KDA_FLA_RELEASES:-}" || " $KDA_FLA_RELEASES " == *" $(basename "$1") "* ]]
}
if want chunk-kda; then
  unpack_fla_releases
  for tree in "$releases"/*/; do
    picked_release "$tree" && [ -d "$tree/fla" ] || continue
    label=$(PYTHONPATH=$tree python3 -c 'import fla; print(fla.__version__)' 2>/dev/null)
    select=()  # KDA_CHUNK_KDA_K: one -k expression, spaces and all
    [ -n "${KDA_CHUNK_KDA_K:-}" ] && select=(-k "$KDA_CHUNK_KDA_K")
    # shellcheck disable=SC2086
    bounded 540 env KDA_LIBRARY="$libkda" \
      PYTHONPATH="${tree%/}:$PWD/python:$PWD/tests/python" python3 -m pytest -q -rsP \
      -p no:cacheprovider "${select[@]}" ${KDA_CHUNK_KDA_ARGS:-} tests/python/test_chunk_kda.py \
      >"$logs/chunk-kda-$label.log" 2>&1
    crc=$?
    row "test_chunk_kda.py against fla $label" \
      "$([ $crc -eq 0 ] && echo PASS || echo "FAIL (rc $crc)"): $(grep -E 'passed|failed' "$logs/chunk-kda-$label.log" | tail -1)"
    grep -E '^(FAILED|ERROR) ' "$logs/chunk-kda-$label.log" | head -5 | while read -r line; do
      row "  $line" ""
    done
    break
  done
fi

if want fla; then
  unpack_fla_releases
  trees=()
  # the mirror's source tree ($carry/fla), unless KDA_FLA_SOURCE=0
  [ -d "$carry/fla" ] && [ "${KDA_FLA_SOURCE:-1}" != 0 ] && trees+=("$carry")
  for tree in "$releases"/*/; do
    picked_release "$tree" || continue
    [ -d "$tree/fla" ] && trees+=("${tree%/}")
  done
  for tree in "${trees[@]}"; do
    label=$(PYTHONPATH=$tree python3 -c 'import fla; print(fla.__version__)' 2>/dev/null)
    [ "$tree" = "$carry" ] && label="$label-source"
    path="$tree:$PWD/python:$PWD/tests/python"
    bounded 200 env KDA_LIBRARY="$libkda" PYTHONPATH="$path" python3 -m pytest \
      -q -rsP -p no:cacheprovider tests/python/test_fla.py tests/python/test_fla_layer.py \
      >"$logs/fla-$label.log" 2>&1
    frc=$?
    row "test_fla*.py against fla $label" \
      "$([ $frc -eq 0 ] && echo PASS || echo "FAIL (rc $frc)"): $(grep -E 'passed|failed' "$logs/fla-$label.log" | tail -1)"
    grep -h '^\[KimiDeltaAttention' "$logs/fla-$label.log" >>"$summary"
    calls=$logs/fla-peer-calls-$label
    mkdir -p "$calls"
    # pytest's cache (kept in the logs) remembers the failures for the baseline run below.
    cache=(-o "cache_dir=$logs/fla-peer-cache-$label")
    (cd "$carry/fla-peer" && bounded "${KDA_FLA_PEER_SECONDS:-150}" env \
      KDA_LIBRARY="$libkda" PYTHONPATH="$path" KDA_PEER_CALLS_DIR="$calls" \
      python3 -m pytest -q -rfs "${cache[@]}" -p fla_peer_plugin -n "${KDA_FLA_PEER_WORKERS:-4}" \
      tests/ops/test_kda.py) >"$logs/fla-peer-$label.log" 2>&1
    prc=$?
    row "fla's tests/ops/test_kda.py, our backend, fla $label" \
      "$([ $prc -eq 0 ] && echo PASS || echo "FAIL (rc $prc)"): $(grep -E 'passed|failed' "$logs/fla-peer-$label.log" | tail -1)"
    row "  calls fla's dispatch made to our backend" "$(python3 -c '
import collections, json, pathlib, sys
total = collections.Counter()
for f in pathlib.Path(sys.argv[1]).glob("calls-*.json"):
    total.update(json.loads(f.read_text()))
print(dict(total))' "$calls")"
    if grep -q '^FAILED' "$logs/fla-peer-$label.log"; then
      # The failed tests again on fla alone: a failure there too is fla's own, not ours.
      (cd "$carry/fla-peer" && bounded 120 env KDA_PEER_BACKEND=0 PYTHONPATH="$path" \
        python3 -m pytest -q -rs "${cache[@]}" -p fla_peer_plugin --lf -n "${KDA_FLA_PEER_WORKERS:-4}" \
        tests/ops/test_kda.py) >"$logs/fla-peer-$label-baseline.log" 2>&1
      row "  those that failed, on fla alone" "$(grep -E 'passed|failed' "$logs/fla-peer-$label-baseline.log" | tail -1)"
      grep -h '^FAILED' "$logs/fla-peer-$label.log" | cut -c1-200 | head -20 >>"$summary"
    fi
  done
fi

# --- a KDA layer through fla's chunk_kda, with and without our kernels (issues 13, 14) ---------
if want layer; then
  # KDA_LAYER_ARGS adds bench/layer.py options (e.g. "--shapes 1x8192x32 --modes fla,both
  # --full-autotune": fla's other kernels autotuned, the yardstick issue 14's 2.0 ms was set
  # against; minutes of autotuning on a fresh machine, so raise KDA_LAYER_SECONDS with it).
  # cuDNN-frontend for mode cudnn (--call cudnn), when staged (dev/stage-carry.sh --cudnn).
  cudnn_site=""
  if [ -d "$carry/cudnn-wheels" ]; then
    cudnn_site=$carry/cudnn-site
    python3 -m pip install -q --no-deps --no-index --target "$cudnn_site" "$carry"/cudnn-wheels/*.whl \
      >"$logs/cudnn-install.log" 2>&1 || row "cuDNN-frontend install" "FAIL: see cudnn-install.log"
  fi
  # shellcheck disable=SC2086  # the options are words
  bounded "${KDA_LAYER_SECONDS:-240}" env KDA_LIBRARY="$libkda" \
    PYTHONPATH="${cudnn_site:+$cudnn_site:}$carry:python" \
    python3 bench/layer.py --fla-configs "$carry/fla_best_configs_h200.json" --out "$logs/layer" \
    ${KDA_LAYER_ARGS:-} >"$logs/layer.log" 2>&1
  lrc=$?
  row "bench/layer.py (chunk_kda: fla, wy, both)" "$([ $lrc -eq 0 ] && echo PASS || echo "FAIL (rc $lrc)"): see layer.log, layer/"
  [ -f "$logs/layer/layer.md" ] && cat "$logs/layer/layer.md" >>"$summary"
fi

# --- chunk_bwd_intra's benchmark: its variants, both safe_gate values -------------------------
if want bench-intra; then
  bounded 280 "$build/tests/ops/chunk_bwd_intra/bench_intra_cuda" --T 8192,2048 \
    --dtypes "${KDA_BENCH_INTRA_DTYPES:-bf16,fp16,fp32}" --runs 50 \
    --variants "${KDA_BENCH_INTRA_VARIANTS:-split=1;split=3;split=1,stages=1;split=1,prefetch=0}" \
    >"$logs/bench_intra.log" 2>&1
  brc=$?
  row "bench_intra_cuda" "$([ $brc -eq 0 ] && echo PASS || echo "FAIL (rc $brc)"): see bench_intra.log"
fi

# --- ncu profiles: chunk_bwd_intra (issue 14) and chunk_bwd_wy_dqkg (issue 12) at their model shapes
# ncu_profile NAME KERNEL_REGEX LABEL COMMAND...: one launch of the kernel (the fourth), profiled
# with --set full and SASS-level stall samples; the report, its details page and its SASS table
# (dev/ncu-sass-summary.py reads it) in the logs, the duration in the summary.
ncu_profile() {
  local name=$1 regex=$2 label=$3
  shift 3
  local rep=$logs/$name
  bounded 200 ncu --clock-control none --set full --import-source yes -k "regex:$regex" \
    --launch-skip 3 --launch-count 1 -f -o "$rep" "$@" >"$logs/$name.log" 2>&1
  local nrc=$?
  ncu --import "$rep.ncu-rep" --page details >"$logs/$name-details.txt" 2>&1
  ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$logs/$name-sass.csv" 2>&1
  row "$label" "$([ $nrc -eq 0 ] && echo PASS || echo "FAIL (rc $nrc)"): $(grep -m1 -E '^ *Duration' "$logs/$name-details.txt" | tr -s ' ')"
}
if want ncu-intra; then
  ncu_profile ncu-intra chunk_bwd_intra "ncu chunk_bwd_intra T=8192 bf16" \
    "$build/tests/ops/chunk_bwd_intra/bench_intra_cuda" --T 8192 --dtypes bf16 --runs 50 \
    --variants "${KDA_NCU_INTRA_VARIANT:-split=1}"
fi
if want ncu-epilogue; then
  ncu_profile ncu-epilogue chunk_bwd_epilogue_bf16 "ncu chunk_bwd_epilogue T=2048 bf16 Kimi call" \
    "$kda" run chunk_bwd_epilogue --shape 1,2048,32,128,128 --backend cuda --repeat 5 \
    --gate lower_bound --beta-sigmoid --state-v-first --h-dtype x
  ncu_profile ncu-epilogue-default chunk_bwd_epilogue_bf16 "ncu chunk_bwd_epilogue T=2048 bf16 default call" \
    "$kda" run chunk_bwd_epilogue --shape 1,2048,32,128,128 --backend cuda --repeat 5 --gate none \
    --h-dtype x
  ncu_profile ncu-epilogue-reduce gate_params "ncu chunk_bwd_epilogue's dA_log/ddt_bias T=2048" \
    "$kda" run chunk_bwd_epilogue --shape 1,2048,32,128,128 --backend cuda --repeat 5 \
    --gate lower_bound --beta-sigmoid --state-v-first --h-dtype x
fi
# The state scans' tensor-core kernels at the model shape (T=2048: 32 steps, the chain's shape).
if want ncu-scans; then
  ncu_profile ncu-dhu chunk_bwd_dhu_mma "ncu chunk_bwd_dhu T=2048 bf16 V-first" \
    "$kda" run chunk_bwd_dhu --shape 1,2048,32,128,128 --backend cuda --repeat 5 --state-v-first
  ncu_profile ncu-fwd-h chunk_fwd_h_mma "ncu chunk_fwd_h T=2048 bf16 V-first" \
    "$kda" run chunk_fwd_h --shape 1,2048,32,128,128 --backend cuda --repeat 5 --state-v-first
fi
# chunk_bwd_wy_dqkg's default kernel at the model shape (bf16, h float32).
if want ncu-wy; then
  ncu_profile ncu-wy wy_dqkg "ncu chunk_bwd_wy_dqkg model bf16" \
    "$kda" run chunk_bwd_wy_dqkg --shape 1,2048,32,128,128 --backend cuda --repeat 10
fi
# The float32 kernel (3xTF32) at the model shape.
if want ncu-wy-fp32; then
  ncu_profile ncu-wy-fp32 wy_dqkg "ncu chunk_bwd_wy_dqkg model fp32" \
    "$kda" run chunk_bwd_wy_dqkg --shape 1,2048,32,128,128 --dtype fp32 --backend cuda --repeat 10
fi

# The BT = 32 row (fp16, h float32) and the small problem (T=512 H=8: split units).
if want ncu-wy-bt32; then
  ncu_profile ncu-wy-bt32 wy_dqkg "ncu chunk_bwd_wy_dqkg model fp16 BT=32" \
    "$kda" run chunk_bwd_wy_dqkg --shape 1,2048,32,128,128 --dtype fp16 --chunk-size 32 \
    --backend cuda --repeat 10
fi
if want ncu-wy-small; then
  ncu_profile ncu-wy-small wy_dqkg "ncu chunk_bwd_wy_dqkg T=512 H=8 bf16" \
    "$kda" run chunk_bwd_wy_dqkg --shape 1,512,8,128,128 --backend cuda --repeat 10
fi

# --- where the compiled op's host time goes (issue 13): perf over host_cost.py ----------------
if want host-perf; then
  perf_bin=$(command -v perf || true)
  {
    echo "perf: ${perf_bin:-none}; perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null)"
    uname -r
  } >"$logs/host_perf.log" 2>&1
  if [ -n "$perf_bin" ]; then
    bounded 150 env KDA_LIBRARY="$libkda" PYTHONPATH=python perf record -g -F 4999 \
      -o "$logs/host_perf.data" python3 bench/host_cost.py --device cuda --op chunk_bwd_wy_dqkg \
      --torch-op compiled >>"$logs/host_perf.log" 2>&1
    perf report -i "$logs/host_perf.data" --no-children --sort dso,sym --stdio 2>/dev/null |
      head -150 >"$logs/host_perf_report.txt"
    rm -f "$logs/host_perf.data"
    row "perf over host_cost.py (chunk_bwd_wy_dqkg)" "see host_perf_report.txt"
  else
    row "perf over host_cost.py (chunk_bwd_wy_dqkg)" "NOT RUN (no perf on this machine)"
  fi
fi

# --- host time per call, both torch op implementations (issue 13) ----------------------------
# KDA_HOST_COST_ROUNDS=N runs it N times (the lent hosts' speed drifts by tens of percent within
# a call: one round is not a verdict).
if want host-cost; then
  for ((hround = 1; hround <= ${KDA_HOST_COST_ROUNDS:-1}; hround++)); do
    for op in chunk_bwd_wy_dqkg chunk_bwd_intra; do
      bounded 120 env KDA_LIBRARY="$libkda" PYTHONPATH=python python3 \
        bench/host_cost.py --device cuda --op "$op" >"$logs/host_cost_$op.$hround.log" 2>&1
      hrc=$?
      row "host_cost.py --device cuda --op $op (#$hround)" "$([ $hrc -eq 0 ] && echo PASS || echo "FAIL (rc $hrc)"): see host_cost_$op.$hround.log"
      cat "$logs/host_cost_$op.$hround.log" >>"$summary"
    done
  done
fi

tar -czf "$out/logs.tar.gz" -C "$logs" . && rm -rf "$logs"
echo
echo "==== gpu-check summary ($(date -u +%FT%TZ), parts $parts) ===="
cat "$summary"
grep -qE 'FAIL|NOT RUN|CUT' "$summary" && exit 1
exit 0
