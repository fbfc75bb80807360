#!/usr/bin/env bash
# scripts/with_tpu_server.sh TPUSIM_BIN CMD... — runs CMD against a network TPU: starts `tpusim serve` on a free
# loopback port under a fresh TPUSIM_HOME, registered as "ci-tpu", runs CMD with TPU_NAME=ci-tpu, then stops the
# server (also when CMD fails or this script is interrupted; the server also stops by itself after 30 minutes)
# and exits with CMD's status. `make test` runs the plugin's pytest suite this way.
set -u
bin=$1; shift
home=$(mktemp -d /tmp/tpusim-home-XXXXXX)
export TPUSIM_HOME=$home
"$bin" serve --port 0 --name ci-tpu --max-seconds 1800 --quiet >"$home/url" 2>"$home/serve.log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$home"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 1 600); do
  [ -s "$home/url" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ ! -s "$home/url" ]; then
  echo "with_tpu_server: tpusim serve did not start:" >&2
  cat "$home/serve.log" >&2
  exit 1
fi
echo "with_tpu_server: TPU_NAME=ci-tpu at $(cat "$home/url")"
TPU_NAME=ci-tpu "$@"
rc=$?
exit $rc
