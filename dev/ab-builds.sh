# shellcheck shell=bash
# Sourced by dev/ab-intra.sh and dev/ab-wy.sh (from the repository root): the carried build and
# the builds to compare with it.
#   ab_builds OUT_NAME NAME=DIR ...
# Sets carry (.carry's path), build (the carried build, unpacked on first use), out
# ($OUT/OUT_NAME, created), names (base, then each NAME) and dirs (each build's library folder;
# a NAME=FILE.tar.xz is unpacked into .carry/ab/NAME first).
ab_builds() {
  local out_name=$1 spec name dir
  shift
  carry=$(cd .carry && pwd)
  build=$carry/build
  if [ ! -d "$build" ] && [ -f "$carry/build.tar.xz" ]; then
    mkdir -p "$build" && tar -xJf "$carry/build.tar.xz" -C "$carry"
  fi
  out=${OUT:-$out_name-out}/$out_name
  mkdir -p "$out"
  names=(base)
  dirs=("$build/src")
  for spec in "$@"; do
    name=${spec%%=*}
    dir=${spec#*=}
    if [ -f "$dir" ]; then
      mkdir -p "$carry/ab/$name" && tar -xJf "$dir" -C "$carry/ab/$name"
      dir=$carry/ab/$name
    fi
    names+=("$name")
    dirs+=("$(cd "$dir" && pwd)")
  done
}
