#!/usr/bin/env bash
# On the GPU machine (carry [".carry"] from dev/stage-carry.sh): chunk_bwd_epilogue's GPU tests,
# its timings at B=1 T=8192 H=32 K=V=128 bf16 (default call and the Kimi layer's) with the TF32
# and the 3xTF32 products (KDA_EPILOGUE_PRODUCTS), tests/python/test_chunk_kda.py's golden files
# with each (fla 0.6.0 from the carried releases), and fla's KimiDeltaAttention step. Prints the
# lines it measured.
set -u
out=${OUT:-epilogue-ab-out}
dev/gpu-check.sh --parts epilogue --deadline 100 --out "$out/a" >/dev/null 2>&1
cat "$out/a/summary.txt"
B=.carry/build
R=.carry/fla-releases
mkdir -p "$R"
[ -d "$R/0.6.0" ] || tar -xJf .carry/fla-releases.tar.xz -C "$R"
export LD_LIBRARY_PATH=$B/src KDA_LIBRARY=$B/src/libkda.so
export KDA_LAYER_GOLDEN_DIR=$PWD/.carry/golden/golden-kda
for products in tf32 3xtf32; do
  for call in "--gate none" "--gate lower_bound --beta-sigmoid --state-v-first"; do
    echo "== $products $call"
    # shellcheck disable=SC2086  # the call's options are words
    KDA_EPILOGUE_PRODUCTS=$products timeout 60 "$B/tools/kda" run chunk_bwd_epilogue \
      --shape 1,8192,32,128,128 --backend cuda --repeat 30 $call 2>&1 |
      grep -E "err_ratio|out\.|median|min |bytes"
  done
done
for products in tf32 3xtf32; do
  echo "== pytest $products"
  KDA_EPILOGUE_PRODUCTS=$products PYTHONPATH="$R/0.6.0:python:tests/python" timeout 150 \
    python3 -m pytest -q -rsP -p no:cacheprovider tests/python/test_chunk_kda.py \
    -k "golden and fla" 2>&1 | grep -E "^\[chunk_kda.*ours/fla|passed|failed|^E  "
done
PYTHONPATH="$R/0.6.0:python:tests/python" timeout 100 python3 -m pytest -q -rsP \
  -p no:cacheprovider tests/python/test_fla_layer.py 2>&1 | grep -E "Kimi|passed|failed|^E  "
