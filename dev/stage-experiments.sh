#!/usr/bin/env bash
# Builds kernel experiments for an ab script, here: for each NAME=PATCH (a file in
# dev/experiments, with or without its .patch), applies the patch to the clean working tree,
# builds libkda, packs it as .carry/ab/NAME.tar.xz (libkda.so.0.2, what dev/ab-wy.sh and
# dev/ab-intra.sh unpack), and takes the patch back out; at the end libkda is built again from
# the tree as it was. Run after dev/stage-carry.sh (which empties .carry):
#   dev/stage-experiments.sh f32pairs=wy-f32-slab-pairs xh=wy-xh-vv-in-ring
# then on the GPU machine: dev/ab-wy.sh ... f32pairs=.carry/ab/f32pairs.tar.xz xh=...
# Refuses to start when src/ or tests/ have uncommitted changes (a patch would build on them and
# its take-back could not be told from them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  echo "usage: dev/stage-experiments.sh NAME=PATCH ..." >&2
  exit 2
fi
if ! git diff --quiet -- src tests || ! git diff --cached --quiet -- src tests; then
  echo "stage-experiments: src/ or tests/ have uncommitted changes; commit or stash them first" >&2
  exit 2
fi
mkdir -p .carry/ab
for spec in "$@"; do
  name=${spec%%=*}
  patch=${spec#*=}
  [ -f "$patch" ] || patch=dev/experiments/${patch%.patch}.patch
  if [ "$name" = "$spec" ] || [ ! -f "$patch" ]; then
    echo "stage-experiments: $spec: expected NAME=PATCH with PATCH in dev/experiments" >&2
    exit 2
  fi
  git apply "$patch"
  echo "stage-experiments: $name ($patch): building libkda" >&2
  if ! cmake --build build --target kda >"/tmp/stage-experiments.$name.log" 2>&1; then
    git apply -R "$patch"
    echo "stage-experiments: $name did not build; see /tmp/stage-experiments.$name.log" >&2
    exit 1
  fi
  dir=$(mktemp -d)
  cp build/src/libkda.so.0.2.0 "$dir/libkda.so.0.2"
  tar -C "$dir" -cf - libkda.so.0.2 | xz -T2 -6 >".carry/ab/$name.tar.xz"
  rm -rf "$dir"
  git apply -R "$patch"
  echo "stage-experiments: .carry/ab/$name.tar.xz" >&2
done
cmake --build build --target kda >/tmp/stage-experiments.head.log 2>&1
git diff --quiet -- src tests || {
  echo "stage-experiments: the tree differs from before; check git status" >&2
  exit 1
}
