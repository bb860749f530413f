#!/usr/bin/env bash
# Stages what the GPU check needs into .carry/ (git-ignored: add "/.carry/" to .git/info/exclude):
# a build made here (the GPU machines lack our Debian dependencies) and the golden files (the
# ../shared beside the checkout does not travel to the GPU machine). Then, with the device tool:
#   run  command: tools/device-check.sh --build .carry/build --golden .carry/golden --out $OUT
#        carry:   [".carry"]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --preset default >/dev/null
cmake --build --preset default
rm -rf .carry
mkdir -p .carry/build/src .carry/build/tests .carry/build/tools .carry/golden
cp -a "$build"/src/libkda.so* .carry/build/src/
for t in test_cuda test_cuda_fast_units test_cuda_reliability; do
  cp "$build/tests/$t" .carry/build/tests/
done
cp "$build/tools/kda" .carry/build/tools/
cp ../shared/golden/*.safetensors .carry/golden/
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >>.git/info/exclude
du -sh .carry
