#!/usr/bin/env bash
# Stages what a GPU check needs into .carry/ (git-ignored through .git/info/exclude), since the
# GPU machines lack our Debian build dependencies and ../shared does not travel there:
#   .carry/build   libkda, the GPU test binaries and the kda command, built here
#   .carry/golden  the golden files of every operator (../shared/golden*/, read-only copies that
#                  exist only for the trip; the repository never holds them)
#   .carry/fla_best_configs_h200.json   fla's tuned configs, for the benchmarks
#   .carry/fla     fla's Python package from the mirror (for the fla tests and benchmarks)
# Then, with the device tool: run `dev/gpu-check.sh --call 1` (and 2) with carry [".carry"].
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
cmake --preset default >/dev/null
cmake --build --preset default
rm -rf .carry
mkdir -p .carry/build/src .carry/build/tests .carry/build/tools .carry/golden
cp -a "$build"/src/libkda.so* .carry/build/src/
for t in "$build"/tests/test_cuda*; do
  case "$t" in *.cmake) continue ;; esac
  [ -x "$t" ] && cp "$t" .carry/build/tests/
done
cp "$build/tools/kda" .carry/build/tools/
for d in ../shared/golden*/; do
  name=$(basename "$d")
  mkdir -p ".carry/golden/$name"
  cp "$d"/*.safetensors ".carry/golden/$name/"
done
cp ../shared/fla_best_configs_h200.json .carry/
mirror=/work/.mirror/fla-org+flash-linear-attention/repo
if [ -d "$mirror" ]; then
  git -C "$mirror" archive HEAD fla | tar -x -C .carry
else
  echo "stage-carry: no fla mirror at $mirror (the fla tests and columns will skip)" >&2
fi
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >>.git/info/exclude
du -sh .carry
