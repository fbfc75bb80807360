#!/usr/bin/env bash
# CLI tests: run the tpusim binary ($TPUSIM_BIN) on real files and check exit codes and output.
set -u
BIN=${TPUSIM_BIN:-build/release/tpusim}
pass=0; fail=0
ok()   { pass=$((pass+1)); }
bad()  { fail=$((fail+1)); echo "  FAIL: $*" >&2; }
# expect CODE CMD... : runs CMD, checks its exit code
# every command's output goes to $out (a file of this run's own: suites of other checkouts may run at once)
out=$(mktemp /tmp/tpusim-cli.XXXXXX)
trap 'rm -f "$out"' EXIT
expect() { local want=$1; shift; "$@" >"$out" 2>&1; local got=$?; if [ "$got" = "$want" ]; then ok; else bad "$* -> exit $got, wanted $want"; sed 's/^/    /' "$out" | head -20 >&2; fi; }
expect 0 "$BIN" --help
expect 2 "$BIN" no-such-command
for t in tests/cli/t_*.sh; do [ -e "$t" ] && . "$t"; done
echo "cli tests: $pass passed, $fail failed"
[ "$fail" = 0 ]
