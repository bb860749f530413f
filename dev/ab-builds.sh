# shellcheck shell=bash
# Sourced by dev/ab-intra.sh and dev/ab-wy.sh (from the repository root): the carried build, the
# builds to compare with it, and the checks every build gets.
#   ab_builds OUT_NAME NAME=DIR ...
# Sets carry (.carry's path), build (the carried build, unpacked on first use), out
# ($OUT/OUT_NAME, created), summary ($out/summary.txt, emptied), names (base, then each NAME)
# and dirs (each build's library folder; a NAME=FILE.tar.xz is unpacked into .carry/ab/NAME
# first).
ab_builds() {
  local out_name=$1 spec name dir
  shift
  carry=$(cd .carry && pwd)
  build=$carry/build
  if [ ! -d "$build" ] && [ -f "$carry/build.tar.xz" ]; then
    mkdir -p "$build" && tar -xJf "$carry/build.tar.xz" -C "$carry"
  fi
  # The golden files travel in the carry (../shared does not): the test binaries read them here.
  export KDA_GOLDEN_DIR=$carry/golden/golden KDA_INTRA_GOLDEN_DIR=$carry/golden/golden-intra
  out=${OUT:-$out_name-out}/$out_name
  mkdir -p "$out"
  summary=$out/summary.txt
  : >"$summary"
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

# ab_check_builds TEST_BINARY SECONDS FILTER: for every build, TEST_BINARY whole (under a timeout
# of SECONDS) and racecheck + synccheck on its tests matching FILTER, one line each into
# $summary, the logs into $out.
ab_check_builds() {
  local binary=$1 seconds=$2 filter=$3 label n lib name tool
  label=$(basename "$binary")
  for n in "${!names[@]}"; do
    lib=${dirs[$n]}
    name=${names[$n]}
    LD_LIBRARY_PATH=$lib timeout "$seconds" "$binary" --gtest_color=no >"$out/test.$name.log" 2>&1
    echo "$name: $label rc $? $(grep -E '^\[  (PASSED|FAILED) ' "$out/test.$name.log" | tr '\n' ' ')" >>"$summary"
    for tool in racecheck synccheck; do
      LD_LIBRARY_PATH=$lib timeout 120 compute-sanitizer --tool $tool --error-exitcode 99 "$binary" \
        --gtest_color=no "--gtest_filter=$filter" >"$out/$tool.$name.log" 2>&1
      echo "$name: $tool rc $? $(grep -E 'SUMMARY' "$out/$tool.$name.log" | tail -1)" >>"$summary"
    done
  done
}
