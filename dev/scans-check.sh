#!/usr/bin/env bash
# One build of libkda's state scans, on the GPU machine, after dev/ab-scans.sh has timed it:
#   dev/scans-check.sh LIBDIR [SECONDS]
# The four sanitizers on test_dhu_cuda's and test_fwd_h_cuda's Subset cases, then bench/scans.py
# (ours beside fla's kernels, float64 errors, byte floor; KDA_SCANS_ARGS: its options) with that
# library. Under $OUT/scans-check/: summary.txt and logs.tar.gz, the summary printed last.
# SECONDS (default 400) bounds the whole script; a step that would not fit is skipped, saying so.
# Needs .carry from dev/stage-carry.sh (its test binaries load libkda through the library path).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
lib=$(cd "$1" && pwd)
seconds=${2:-400}
tests=.carry/build/tests/ops
out=${OUT:-scans-check-out}/scans-check
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
logs=$(mktemp -d /tmp/scans-check-logs.XXXXXX)
finish() {
  (cd "$logs" && tar -czf "$out/logs.tar.gz" -- *.log 2>/dev/null)
  cat "$summary"
}
trap finish EXIT
left() { echo $((seconds - SECONDS)); }
for tool in memcheck racecheck synccheck initcheck; do
  for binary in chunk_bwd_dhu/test_dhu_cuda chunk_fwd_h/test_fwd_h_cuda; do
    name=$(basename "$binary")
    if [ "$(left)" -lt 60 ]; then
      echo "skipped (deadline): $tool $name" >>"$summary"
      continue
    fi
    LD_LIBRARY_PATH=$lib timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$tests/$binary" --gtest_color=no '--gtest_filter=Subset/*' >"$logs/$tool.$name.log" 2>&1
    echo "$tool $name rc $? $(grep -E 'SUMMARY' "$logs/$tool.$name.log" | tail -1)" \
      "$(grep -E '^\[  (PASSED|FAILED) ' "$logs/$tool.$name.log" | tr '\n' ' ')" >>"$summary"
  done
done
if [ "$(left)" -ge 90 ]; then
  # shellcheck disable=SC2086  # the bench's options
  KDA_LIBRARY=$lib/libkda.so.0.2 PYTHONPATH=$PWD/.carry:python timeout "$(left)" \
    python3 bench/scans.py ${KDA_SCANS_ARGS:-} >"$logs/scans_py.log" 2>&1
  echo "bench/scans.py rc $?" >>"$summary"
  sed -n '/^| scan/,$p' "$logs/scans_py.log" >>"$summary"
else
  echo "skipped (deadline): bench/scans.py" >>"$summary"
fi
