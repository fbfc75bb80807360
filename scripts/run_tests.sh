#!/usr/bin/env bash
# Runs each test suite given as a command, shows its output, and closes with one line of totals over all of
# them: "N passed, N failed, N skipped". Suites report "N passed, N failed[, N skipped]" (unit and CLI tests)
# or pytest's summary ("N passed, N skipped, N failed in ..."). Exits non-zero if any suite failed or
# reported nothing.
set -u
passed=0; failed=0; skipped=0; bad=0
# MPI processes the suites start carry this tag in their environment; none may outlive the run
export TPUSIM_MPI_TEST_TAG=${TPUSIM_MPI_TEST_TAG:-tpusim-tests-$$}
for cmd in "$@"; do
  out=$(mktemp)
  bash -c "$cmd" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '[0-9]+ (passed|failed)' "$out" | tail -1)
  rm -f "$out"
  if [ -z "$line" ]; then echo "run_tests: '$cmd' reported no results (exit $rc)" >&2; bad=1; continue; fi
  for n in $(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); do passed=$((passed + n)); done
  for n in $(echo "$line" | grep -oE '[0-9]+ (failed|errors?)' | grep -oE '[0-9]+'); do failed=$((failed + n)); done
  for n in $(echo "$line" | grep -oE '[0-9]+ (skipped|xfailed)' | grep -oE '[0-9]+'); do skipped=$((skipped + n)); done
  [ "$rc" = 0 ] || bad=1
done
# read the environments with bash alone: a grep or cut started here would carry the tag and count itself
strays=""
needle="TPUSIM_MPI_TEST_TAG=$TPUSIM_MPI_TEST_TAG"
for envf in /proc/[0-9]*/environ; do
  pid=${envf#/proc/}; pid=${pid%/environ}
  [ "$pid" = "$$" ] && continue
  while IFS= read -r -d '' kv; do
    if [ "$kv" = "$needle" ]; then strays="$strays $pid"; break; fi
  done 2>/dev/null < "$envf"
done
if [ -n "$strays" ]; then
  echo "run_tests: MPI processes outlived the tests (killed): $(echo $strays)" >&2
  kill -9 $strays 2>/dev/null
  bad=1
fi
echo "all tests: $passed passed, $failed failed, $skipped skipped"
[ "$bad" = 0 ] && [ "$failed" = 0 ]
