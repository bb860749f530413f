#!/usr/bin/env bash
# On the GPU machine (carry [".carry"] from dev/stage-carry.sh): chunk_bwd_epilogue's GPU tests,
# its timings at B=1 T=8192 H=32 K=V=128 bf16 (default call and the Kimi layer's) with the TF32
# and the 3xTF32 products (KDA_EPILOGUE_PRODUCTS), tests/python/test_chunk_kda.py's golden files
# with each (fla 0.6.0 from the carried releases), and fla's KimiDeltaAttention step. Prints the
# lines it measured.
set -u
dev/gpu-check.sh --parts epilogue --deadline 100 --out $OUT/a >/dev/null 2>&1; cat $OUT/a/summary.txt
B=.carry/build; R=.carry/fla-releases; mkdir -p $R; [ -d $R/0.6.0 ] || tar -xJf .carry/fla-releases.tar.xz -C $R
export LD_LIBRARY_PATH=$B/src KDA_LIBRARY=$B/src/libkda.so KDA_LAYER_GOLDEN_DIR=$PWD/.carry/golden/golden-kda
for P in tf32 3xtf32; do for C in "--gate none" "--gate lower_bound --beta-sigmoid --state-v-first"; do
 echo "== $P $C"; KDA_EPILOGUE_PRODUCTS=$P timeout 60 $B/tools/kda run chunk_bwd_epilogue --shape 1,8192,32,128,128 --backend cuda --repeat 30 $C 2>&1 | grep -E "err_ratio|out\.|median|min |bytes" ; done; done
for P in tf32 3xtf32; do echo "== pytest $P"; KDA_EPILOGUE_PRODUCTS=$P PYTHONPATH=$R/0.6.0:python:tests/python timeout 150 python3 -m pytest -q -rsP -p no:cacheprovider tests/python/test_chunk_kda.py -k "golden and fla" 2>&1 | grep -E "^\[chunk_kda.*ours/fla|passed|failed|^E  " ; done
PYTHONPATH=$R/0.6.0:python:tests/python timeout 100 python3 -m pytest -q -rsP -p no:cacheprovider tests/python/test_fla_layer.py 2>&1 | grep -E "Kimi|passed|failed|^E  "
