#!/usr/bin/env bash
# Installs what tpusim needs to build and test on a Debian/Ubuntu machine, only where something is missing.
# Run by `make demo` and `make test`; safe to run again.
set -euo pipefail
pkgs=(gcc make pkg-config libopenblas-dev libcjson-dev zlib1g-dev)
# multi-host slices: one process per simulated host over MPI (src/dist/, docs/pods.md)
pkgs+=(libopenmpi-dev openmpi-bin)
# the network TPU (tpusim serve, the plugin's remote mode): gRPC's C core, protobuf-c (protoc-c generates the
# protocol's C code at build time), SQLite for names and jobs; openssl makes the TLS test's certificate
pkgs+=(libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libsqlite3-dev openssl)
if [ "${TPUSIM_WITH_CLANG:-1}" = 1 ]; then
  pkgs+=(clang libclang-rt-14-dev libomp-dev)
fi
# headless Chromium renders the profile's HTML report in tests/t_profile.c (skipped when absent)
if [ "${TPUSIM_WITH_CHROMIUM:-1}" = 1 ]; then
  pkgs+=(chromium)
fi
# the plugin's tests and demo make a venv under build/ (python3 with venv and pip; Debian splits them out)
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  pkgs+=(python3 python3-venv python3-pip)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "tpusim: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
