#!/usr/bin/env bash
# bench/scalesim/run.sh [--quick] [--out DIR] — tpusim scalesim against pip's SCALE-Sim 3.0.0.
# Builds tpusim (release), installs scalesim==3.0.0 with numpy<2 (SCALE-Sim 3.0.0 fails on numpy 2) into
# build/scalesim-venv on first use (needs the network once), then runs bench/scalesim/run.py, which prints
# report-by-report agreement and the speed ratio. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s BUILD=build/release build/release/tpusim
venv=build/scalesim-venv
if ! "$venv/bin/python" -c "import scalesim, numpy; assert numpy.__version__ < '2'" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "scalesim==3.0.0" "numpy<2"
fi
exec python3 bench/scalesim/run.py --tpusim build/release/tpusim --python "$venv/bin/python" "$@"
