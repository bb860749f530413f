#!/usr/bin/env bash
# Stages what a GPU check needs into .carry/ (git-ignored through .git/info/exclude), since the
# GPU machines lack our Debian build dependencies and ../shared does not travel there:
#   .carry/build.tar.xz  libkda, the compiled torch op, the GPU test binaries, the benchmarks and
#                        the kda command, built here (xz: CUDA fatbins shrink ~10x, and a call
#                        carries 64 MB at most); dev/gpu-check.sh unpacks it into .carry/build.
#                        The compiled torch op is built when KDA_TORCH_PYTHON (or python3 on
#                        PATH) imports torch: the GPU machine's release, 2.11.0 so far (e.g.
#                        KDA_TORCH_PYTHON=/work/venv-torch/bin/python); without it the GPU
#                        check runs the python ops, and says so
#   .carry/old.tar.xz    (with --old DIR) libkda and kda of another build, for the before/after
#                        part of the check; unpacked into .carry/old
#   .carry/golden/       the golden files of every operator (../shared/golden*/: read-only copies
#                        that exist only for the trip; the repository never holds them)
#   .carry/fla_best_configs_h200.json   fla's tuned configs, for the benchmarks
#   .carry/fla/          fla's Python package from the mirror (for the fla tests and benchmarks)
#   .carry/fla-releases.tar.xz   every fla release of tests/python/fla_releases.txt from PyPI
#                        (tools/install-fla-releases.sh), for the `fla` part: one folder each
#   .carry/fla-peer/     fla's own tests/conftest.py and tests/ops/test_kda.py from the mirror
#   .carry/cudnn-wheels/ (with --cudnn) cuDNN-frontend 1.32 and the CUDA Python bindings its sm90
#                        KDA engine compiles with (NVRTC), for the GPU machine's Python 3.12 (no
#                        internet there): bench/layer.py's mode cudnn; the `layer` part installs
#                        them. About 20 MB: with --no-golden (the golden files stay behind) the
#                        carry stays under the device's 64 MB
# Then, with the device tool: run `dev/gpu-check.sh ...` with carry [".carry"].
#   dev/stage-carry.sh [--old BUILD_DIR] [--no-fla] [--cudnn] [--no-golden]
set -euo pipefail
cd "$(dirname "$0")/.."
old=""
with_fla=1
with_cudnn=0
with_golden=1
while [ $# -gt 0 ]; do
  case "$1" in
    --old) old=$2; shift 2 ;;
    --no-fla) with_fla=0; shift ;;
    --cudnn) with_cudnn=1; shift ;;
    --no-golden) with_golden=0; shift ;;
    *) echo "stage-carry: unknown option $1" >&2; exit 2 ;;
  esac
done
build=build
cmake --preset default ${KDA_TORCH_PYTHON:+-DKDA_TORCH_PYTHON=$KDA_TORCH_PYTHON} >/dev/null
cmake --build --preset default
rm -rf .carry
mkdir -p .carry/golden
binaries=("$build"/src/libkda.so* "$build/tools/kda")
torch_ops=("$build"/src/libkda_torch-*.so)
if [ -e "${torch_ops[0]}" ]; then
  binaries+=("${torch_ops[@]}")
else
  echo "stage-carry: no compiled torch op in $build/src (set KDA_TORCH_PYTHON to a python with" \
    "the GPU machine's torch): the GPU check will run the python ops" >&2
fi
for t in "$build"/tests/test_cuda* "$build"/tests/ops/*/test_*_cuda \
  "$build"/tests/ops/*/test_*_units "$build"/tests/ops/*/bench_*; do
  case "$t" in *.cmake) continue ;; esac
  [ -x "$t" ] && binaries+=("$t")
done
tar -cf - "${binaries[@]}" | xz -T2 -6 >.carry/build.tar.xz
if [ -n "$old" ]; then
  tar -cf - -C "$old" $(cd "$old" && ls src/libkda.so* tools/kda) | xz -T2 -6 >.carry/old.tar.xz
fi
for d in ../shared/golden*/; do
  [ "$with_golden" = 1 ] || break
  name=$(basename "$d")
  mkdir -p ".carry/golden/$name"
  cp "$d"/*.safetensors ".carry/golden/$name/"
done
if [ "$with_cudnn" = 1 ]; then
  "${KDA_TORCH_PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_28_x86_64 -d .carry/cudnn-wheels \
    nvidia-cudnn-frontend==1.32.0 cuda-bindings cuda-pathfinder
fi
cp ../shared/fla_best_configs_h200.json .carry/
mirror=/work/.mirror/fla-org+flash-linear-attention/repo
if [ "$with_fla" = 1 ]; then
  releases=${KDA_FLA_RELEASES_DIR:-/tmp/kda-fla-releases}
  tools/install-fla-releases.sh "$releases" "${KDA_TORCH_PYTHON:-python3}" >/dev/null
  tar -cf - -C "$releases" . | xz -T2 -6 >.carry/fla-releases.tar.xz
fi
if [ "$with_fla" = 1 ] && [ -d "$mirror" ]; then
  git -C "$mirror" archive HEAD fla | tar -x -C .carry
  mkdir -p .carry/fla-peer
  git -C "$mirror" archive HEAD tests/conftest.py tests/ops/test_kda.py | tar -x -C .carry/fla-peer
elif [ "$with_fla" = 1 ]; then
  echo "stage-carry: no fla mirror at $mirror (the fla tests and columns will skip)" >&2
fi
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >>.git/info/exclude
du -sh .carry
