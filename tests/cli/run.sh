#!/usr/bin/env bash
# CLI tests: run the tpusim binary ($TPUSIM_BIN) on real files and check exit codes and output.
set -u
BIN=${TPUSIM_BIN:-build/release/tpusim}
pass=0; fail=0; skipped=0
ok()   { pass=$((pass+1)); }
bad()  { fail=$((fail+1)); echo "  FAIL: $*" >&2; }
skip() { skipped=$((skipped+1)); echo "  SKIP: $*" >&2; }
# expect CODE CMD... : runs CMD, checks its exit code
# one output file per run (several worktrees' test runs share /tmp; a fixed name made them read each other's output)
CLI_OUT=$(mktemp /tmp/tpusim-cli.XXXXXX)
trap 'rm -f "$CLI_OUT"' EXIT
expect() { local want=$1; shift; "$@" >"$CLI_OUT" 2>&1; local got=$?; if [ "$got" = "$want" ]; then ok; else bad "$* -> exit $got, wanted $want"; sed 's/^/    /' "$CLI_OUT" | head -20 >&2; fi; }
expect 0 "$BIN" --help
expect 2 "$BIN" no-such-command
for t in tests/cli/t_*.sh; do [ -e "$t" ] && . "$t"; done
echo "cli tests: $pass passed, $fail failed, $skipped skipped"
[ "$fail" = 0 ]
