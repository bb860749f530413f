#!/usr/bin/env bash
# The Python GPU suite, fla's layer tests and the benchmark in one device call, spread over the two
# GPUs of an nvidia-h200-x2 machine so that fla's Triton autotuning (about 5 minutes for each fla
# layer test on a fresh machine, ~100 s per kernel key for the op) on one GPU overlaps the other's
# work, and no timing shares a GPU with other work:
#   GPU 1: pytest tests/python (4 xdist workers) except the fla-dependent tests, then the
#          fixed-length fla layer test alone (its backward timing needs the GPU to itself), then
#          the op against fla's Triton kernel (2 workers);
#   GPU 0: the varlen fla layer test, then bench/run.py on the cases that share fla's
#          model-shape key (ours on the default dispatch and with the L2-prefetch experiment,
#          fla autotuned in the same process; KDA_BENCH_WITH_FLA=0 skips this), then the rest of
#          the table, ours only.
# Needs: .carry (tools/stage-device-carry.sh) and fla's source in .fla (the folder holding the
# `fla` package), both carried. Writes at most 7 logs and one tar of bench/out-* under $OUT (the
# device tool brings back 8 files). The Python package is pip-installed offline first and every
# run uses that install.
#   tools/device-python-bench.sh [SECONDS]   (the whole run's deadline, default 540)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:?set OUT to the folder for logs}
# Every step's timeout is cut to what is left before this deadline, so the whole call ends inside
# the device tool's 10 minutes with every log written.
. tools/deadline.sh
deadline_in "${1:-540}"
# step SECONDS LOG COMMAND...: COMMAND under a timeout cut to the deadline, its output and then
# its exit status ("rc N", 124 when it timed out) in $out/LOG.
step() {
  local want=$1 log="$out/$2"
  shift 2
  timeout "$(left "$want")" "$@" >"$log" 2>&1
  echo "rc $?" >>"$log"
}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export KDA_GOLDEN_DIR=$PWD/.carry/golden TRITON_CACHE_DIR=/tmp/triton-cache
# The package as a user gets it on this machine with no network: pip, offline, without build
# isolation, bundling the carried library; everything below imports that installed copy (the
# tests' conftest prints which kda_kernels and libkda they run against).
site=/tmp/kda-site
rm -rf "$site"
KDA_LIBRARY=$PWD/.carry/build/src/libkda.so python3 -m pip install --no-build-isolation \
  --no-index --no-deps --target "$site" ./python >"$out/pip-install.log" 2>&1
echo "rc $?" >>"$out/pip-install.log"
export PYTHONPATH=$PWD/.fla:$site
pytest="python3 -m pytest -q -rs -p no:cacheprovider"
layer_test=tests/python/test_fla.py::test_chunk_kda_gradients_with_and_without_backend
fla_compare=tests/python/test_cuda.py::test_against_fla_triton
with_fla_bench=${KDA_BENCH_WITH_FLA:-1}
rm -rf bench/out-fla bench/out-ours

(
  export CUDA_VISIBLE_DEVICES=1
  step 120 pytest-main.log $pytest -n 4 tests/python --deselect "$layer_test[fixed]" \
    --deselect "$layer_test[varlen]" --deselect "$fla_compare"
  step 330 pytest-fla-fixed.log $pytest -s "$layer_test[fixed]"
  step 300 pytest-fla-compare.log $pytest -s -n 2 "$fla_compare"
) &

(
  export CUDA_VISIBLE_DEVICES=0
  step 330 pytest-fla-varlen.log $pytest -s "$layer_test[varlen]"
  if [ "$with_fla_bench" = 1 ]; then
    step 300 bench-fla.log python3 bench/run.py --kernels auto,prefetch --out bench/out-fla \
      --cases model-bf16,long-bf16,gva-bf16
  fi
  step 200 bench-ours.log python3 bench/run.py --kernels auto,prefetch --no-fla --no-eager \
    --out bench/out-ours \
    --cases 'model-fp16*,model-bf16-hx,model-fp32,heads16-k64-bf16,varlen-bf16,small-bf16'
) &

wait
tar -cf "$out/bench-out.tar" bench/out-fla bench/out-ours 2>/dev/null
for f in "$out"/*.log; do echo "== $(basename "$f"): $(tail -2 "$f" | tr '\n' ' ')"; done
for d in bench/out-fla bench/out-ours; do tail -30 "$d/bench.md" 2>/dev/null; done
