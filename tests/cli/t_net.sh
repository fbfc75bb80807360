# tpusim serve / resolve / list / jobs: options, help, and clear errors without a server (loopback only; the
# end-to-end tests with servers are python/tests/net). Sourced by tests/cli/run.sh ($BIN, expect, ok, bad).
out=$CLI_OUT
has() { if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; sed 's/^/    /' "$out" | head -20 >&2; fi; }
net_home=$(mktemp -d /tmp/tpusim-cli-home-XXXXXX)
export TPUSIM_HOME=$net_home
expect 0 "$BIN" serve --help
has "grpc://IP:8470"; has "--token"
expect 0 "$BIN" jobs --help
has "jobs create --tpu NAME"
expect 2 "$BIN" serve --no-such-option
has "unknown option"
expect 2 "$BIN" serve --port 8o
has "0 to 65535"
expect 2 "$BIN" serve --numerics fast
has "tpu or exact"
expect 2 "$BIN" serve --name "two words"
has "letters, digits"
expect 1 "$BIN" serve --port 0 --bind 0.0.0.0 --quiet
has "needs a token"
expect 1 "$BIN" serve --port 0 --tls-cert /nonexistent.pem --tls-key /nonexistent.pem --quiet
has "cannot read it"
expect 2 "$BIN" serve --slice v3-12
has "v3 slices come in"
expect 0 "$BIN" list
has "no TPUs registered"
expect 0 "$BIN" list --json
has "^\[\]"
expect 1 "$BIN" resolve nowhere
has "no TPU named 'nowhere'"
expect 2 "$BIN" resolve
expect 0 "$BIN" jobs list
has "ID"
expect 1 "$BIN" jobs create --tpu nowhere --command true
has "no TPU named"
expect 2 "$BIN" jobs create --tpu nowhere
has "required"
expect 1 "$BIN" jobs logs 42
has "no job 42"
expect 2 "$BIN" jobs logs abc
has "not a job ID"
expect 2 "$BIN" jobs frobnicate 1
rm -rf "$net_home"
unset TPUSIM_HOME
