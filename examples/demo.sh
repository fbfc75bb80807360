#!/usr/bin/env bash
# make demo: runs a real exported program (an MLP train step exported from JAX) on a simulated TPU and
# shows its results next to XLA:CPU's. (Grows into the v3-8 training demo as the training issue lands.)
set -euo pipefail
BIN=${1:-build/release/tpusim}
CASE=tests/conformance/cases/mlp_train_sgd
echo "== tpusim check: will this MLP train step compile for a TPU?"
"$BIN" check "$CASE/program.hlo" || true
echo
echo "== tpusim run: one train step with TPU numerics (bf16 MXU passes, f32 accumulation)"
"$BIN" run "$CASE/program.hlo" --inputs "$CASE/inputs.npz" --out /tmp/tpusim-demo
echo
echo "== the same step in exact f32 (what XLA:CPU computes)"
"$BIN" run "$CASE/program.hlo" --inputs "$CASE/inputs.npz" --numerics exact
