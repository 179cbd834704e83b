#!/bin/sh
# Runs the whole ctest suite N times (default 5) under `ctest -j2` with a CPU hog on every core
# beside it, as a loaded CI machine would: no test may depend on wall time. Prints one line per
# run and exits non-zero if any run had a failure.
# Usage: tests/loaded.sh [N] [BUILD_DIR]   (from the repository root, after the build)
n=${1:-5}
build=${2:-build}
cores=$(nproc)
hogs=""
for i in $(seq "$cores"); do
  sh -c 'while :; do :; done' &
  hogs="$hogs $!"
done
trap 'kill $hogs 2>/dev/null' EXIT INT TERM
failed=0
for i in $(seq "$n"); do
  start=$(date +%s)
  if ctest --test-dir "$build" -j2 > "$build/loaded-$i.log" 2>&1; then
    echo "run $i: passed ($(($(date +%s) - start)) s, $cores hogs)"
  else
    # every failing test's whole output, for the diagnosis
    cp "$build/Testing/Temporary/LastTest.log" "$build/loaded-$i-tests.log" 2>/dev/null
    echo "run $i: FAILED ($(($(date +%s) - start)) s): see $build/loaded-$i.log and $build/loaded-$i-tests.log"
    grep -E "^\s+[0-9]+ - " "$build/loaded-$i.log"
    failed=1
  fi
done
exit $failed
