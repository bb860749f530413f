# shellcheck shell=bash
# Sourced by dev/ab-intra.sh, dev/ab-wy.sh and dev/ab-epilogue.sh (from the repository root): the
# carried build, the builds to compare with it, the checks every build gets, the timing rounds of
# `kda run`, and a deadline.
#   ab_builds OUT_NAME NAME=DIR ...
# Sets carry (.carry's path), build (the carried build, unpacked on first use), out
# ($OUT/OUT_NAME, created), summary ($out/summary.txt, emptied, written line by line), logs (a
# folder outside $OUT for the per-step logs), names (base, then each NAME), dirs (each build's
# library folder; a NAME=FILE.tar.xz is unpacked into .carry/ab/NAME first) and envs (each
# build's environment words: NAME=DIR@VAR=VALUE@VAR=VALUE runs that build with those variables
# set, so that one library can appear several times with different runtime settings, e.g.
# s5=.carry/ab/stagger.tar.xz@KDA_WY_STAGGER_NS=5000; the steps run `env ${envs[n]} ...`).
# Only summary.txt and logs.tar.gz go under $OUT: a call brings back at most 8 files, and a
# killed run that left its logs there brought back none of its results.
# ab_finish (run on exit, also when killed by SIGTERM/SIGINT) packs the logs and prints the
# summary. KDA_AB_SECONDS (default 480) bounds the whole script: ab_time_left says what is left,
# and a step that would not fit is skipped with a line in the summary.
AB_START=$SECONDS
AB_SECONDS=${KDA_AB_SECONDS:-480}
ab_time_left() { echo $((AB_SECONDS - (SECONDS - AB_START))); }
# ab_fits SECONDS LABEL: true when SECONDS are left; else notes LABEL as skipped.
ab_fits() {
  if [ "$(ab_time_left)" -ge "$1" ]; then return 0; fi
  echo "skipped (deadline, KDA_AB_SECONDS=$AB_SECONDS): $2" >>"$summary"
  return 1
}
ab_finish() {
  trap - EXIT TERM INT
  [ -n "${logs:-}" ] && [ -d "$logs" ] && (cd "$logs" && tar -czf "$out/logs.tar.gz" -- *.log 2>/dev/null)
  [ -n "${summary:-}" ] && cat "$summary"
}
ab_builds() {
  local out_name=$1 spec name dir
  shift
  carry=$(cd .carry && pwd)
  build=$carry/build
  # Unpacked afresh unless the folder holds this very archive's files (its checksum, written after
  # unpacking): a machine still warm keeps an earlier call's folder, which held another build or
  # lacked its symbolic links.
  if [ -f "$carry/build.tar.xz" ] &&
    [ "$(cat "$build/.unpacked" 2>/dev/null)" != "$(sha1sum <"$carry/build.tar.xz")" ]; then
    rm -rf "$build" && mkdir -p "$build" && tar -xJf "$carry/build.tar.xz" -C "$carry" &&
      sha1sum <"$carry/build.tar.xz" >"$build/.unpacked"
  fi
  # The golden files travel in the carry (../shared does not): the test binaries read them here.
  export KDA_GOLDEN_DIR=$carry/golden/golden KDA_INTRA_GOLDEN_DIR=$carry/golden/golden-intra
  export KDA_LAYER_GOLDEN_DIR=$carry/golden/golden-kda
  out=${OUT:-$out_name-out}/$out_name
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  summary=$out/summary.txt
  : >"$summary"
  logs=$(mktemp -d "/tmp/$out_name-logs.XXXXXX")
  trap ab_finish EXIT
  trap 'echo "killed after $((SECONDS - AB_START)) s" >>"$summary"; kill $(jobs -p) 2>/dev/null; exit 143' TERM INT
  names=(base)
  dirs=("$build/src")
  envs=("")
  local rest vars
  for spec in "$@"; do
    name=${spec%%=*}
    rest=${spec#*=}
    dir=${rest%%@*}
    vars=${rest#"$dir"}
    vars=${vars//@/ }
    if [ -f "$dir" ]; then
      mkdir -p "$carry/ab/$name" && tar -xJf "$dir" -C "$carry/ab/$name"
      dir=$carry/ab/$name
    fi
    # A build that is not there must stop the run: with an empty library path the binaries load
    # the carried build through their RUNPATH, and its rows would read as the experiment's
    # (as when a later stage-carry.sh has emptied .carry/ab).
    if [ ! -f "$dir/libkda.so.0.2" ]; then
      echo "ab_builds: $spec: no libkda.so.0.2 there (expected NAME=DIR or NAME=FILE.tar.xz)" |
        tee -a "$summary" >&2
      exit 2
    fi
    names+=("$name")
    dirs+=("$(cd "$dir" && pwd)")
    envs+=("${vars# }")
  done
}

# ab_check_builds TEST_BINARY SECONDS FILTER: TEST_BINARY whole for every build (under a timeout
# of SECONDS, cut to what the deadline leaves), then racecheck + synccheck on its tests matching
# FILTER for every build; one line each into $summary, the logs into $logs. Every build's tests
# come before any sanitizer run, so that a tight deadline drops sanitizer runs, not a build's
# tests (else the base's sanitizers can use up the time an experiment's test_wy_cuda needed), and
# a build whose tests did not pass is named UNTESTED in the summary beside its timings.
# KDA_AB_SANITIZERS names the sanitizer tools, space- or comma-separated (default "racecheck
# synccheck"; empty: none, for a timing-first call whose kept build gets its sanitizers in a
# later call); KDA_AB_TESTS=0 skips the tests too (diagnostic builds whose results are wrong on
# purpose).
ab_check_builds() {
  local binary=$1 seconds=$2 filter=$3 label n lib name tool left
  label=$(basename "$binary")
  for n in "${!names[@]}"; do
    lib=${dirs[$n]}
    name=${names[$n]}
    if [ "${KDA_AB_TESTS:-1}" = 0 ]; then
      echo "UNTESTED: $name (KDA_AB_TESTS=0: timings only)" >>"$summary"
      continue
    fi
    if ab_fits 45 "$name: $label"; then
      left=$(ab_time_left)
      # shellcheck disable=SC2086  # the build's environment words
      env ${envs[$n]} LD_LIBRARY_PATH=$lib timeout "$((left < seconds ? left : seconds))" "$binary" \
        --gtest_color=no >"$logs/test.$name.log" 2>&1
      echo "$name: $label rc $? $(grep -E '^\[  (PASSED|FAILED) ' "$logs/test.$name.log" | tr '\n' ' ')" >>"$summary"
    fi
    grep -qE '^\[  PASSED ' "$logs/test.$name.log" 2>/dev/null ||
      echo "UNTESTED: $name ($label did not pass or did not run)" >>"$summary"
  done
  for n in "${!names[@]}"; do
    lib=${dirs[$n]}
    name=${names[$n]}
    local tools=${KDA_AB_SANITIZERS-racecheck synccheck}
    for tool in ${tools//,/ }; do
      ab_fits 60 "$name: $tool" || continue
      # shellcheck disable=SC2086  # the build's environment words
      env ${envs[$n]} LD_LIBRARY_PATH=$lib timeout 120 compute-sanitizer --tool $tool \
        --error-exitcode 99 "$binary" \
        --gtest_color=no "--gtest_filter=$filter" >"$logs/$tool.$name.log" 2>&1
      echo "$name: $tool rc $? $(grep -E 'SUMMARY' "$logs/$tool.$name.log" | tail -1)" >>"$summary"
    done
  done
}
# ab_kda_input OP LABEL OPTION...: /tmp/OP-LABEL.safetensors, the inputs of `kda run OP OPTION...`
# generated once by the base build (kept across calls on a warm machine).
ab_kda_input() {
  local op=$1 label=$2
  shift 2
  local file=/tmp/$op-$label.safetensors
  [ -f "$file" ] || ! ab_fits 60 "input $label" || LD_LIBRARY_PATH=${dirs[0]} timeout 120 \
    "$build/tools/kda" run "$op" "$@" --backend cuda --repeat 1 -o "$file" \
    >"$logs/input.$label.log" 2>&1
}
# ab_kda_rounds OP REPEAT SECONDS ROUNDS LABEL...: `kda run OP --repeat REPEAT` of every build on
# each label's inputs (ab_kda_input), the builds alternated ROUNDS times so that drift shows; a
# step is skipped when fewer than SECONDS are left. One summary line per run with its median.
ab_kda_rounds() {
  local op=$1 repeat=$2 need=$3 rounds=$4 r label n file log rc median
  shift 4
  for ((r = 1; r <= rounds; r++)); do
    for label in "$@"; do
      file=/tmp/$op-$label.safetensors
      [ -f "$file" ] || continue
      for n in "${!names[@]}"; do
        ab_fits "$need" "${names[$n]} round $r $label" || continue
        log=$logs/time.${names[$n]}.$label.$r.log
        # shellcheck disable=SC2086  # the build's environment words
        env ${envs[$n]} LD_LIBRARY_PATH=${dirs[$n]} timeout 90 "$build/tools/kda" run "$op" \
          --input "$file" --backend cuda --repeat "$repeat" >"$log" 2>&1
        rc=$?
        median=$(grep -E '^ *median' "$log" | head -1 | awk '{print $2, $3}')
        echo "${names[$n]} round $r $label median ${median:-none} (rc $rc)" >>"$summary"
      done
    done
  done
}
# ab_kda_kernel_times OP REGEX LAUNCHES LABEL...: the GPU time of the kernels whose names match
# REGEX inside `kda run OP` on each label's inputs, per build, by ncu (gpu__time_duration of
# LAUNCHES launches after one skipped: the kernel alone, where `kda run`'s median is the whole
# call). One summary line per build and label with the median in µs; skipped without ncu.
ab_kda_kernel_times() {
  local op=$1 regex=$2 launches=$3 label n file log rc us
  shift 3
  if ! command -v ncu >/dev/null; then
    echo "kernel times ($regex): skipped, no ncu on PATH" >>"$summary"
    return 0
  fi
  for label in "$@"; do
    file=/tmp/$op-$label.safetensors
    [ -f "$file" ] || continue
    for n in "${!names[@]}"; do
      ab_fits 60 "${names[$n]} kernel times $label" || continue
      log=$logs/ncu.${names[$n]}.$label.log
      # shellcheck disable=SC2086  # the build's environment words
      env ${envs[$n]} LD_LIBRARY_PATH=${dirs[$n]} timeout 90 ncu --metrics gpu__time_duration.sum \
        --kernel-name "regex:$regex" --launch-skip 1 --launch-count "$launches" \
        "$build/tools/kda" run "$op" --input "$file" --backend cuda --repeat "$launches" \
        >"$log" 2>&1
      rc=$?
      # ncu prints the metric as: gpu__time_duration.sum  <unit>  <value>, in ns, us or ms.
      us=$(awk '$1 == "gpu__time_duration.sum" {
                  v = $3; gsub(",", "", v);
                  if ($2 == "nsecond") v /= 1000; else if ($2 == "msecond") v *= 1000;
                  print v }' "$log" | sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}')
      echo "${names[$n]} $label $regex kernel median ${us:-none} us of $launches (rc $rc)" >>"$summary"
    done
  done
}
