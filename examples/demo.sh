#!/usr/bin/env bash
# make demo: trains a real model on a simulated TPU v3-8. The digits MLP exported from JAX
# (examples/digits_mlp: signature, train-step HLO, initial state, data) runs as 8 replicas with TPU
# numerics (bf16 MXU passes, f32 accumulation): each replica computes gradients on its 16 examples, an
# all-reduce on the replicated runtime averages them, Adam updates the state on the device. Then the
# predicted v3-8 step time, MXU utilization, the advisor's top pointers, and where the profile, the trace,
# the memory viewer and metrics.jsonl were written. Fails unless the test accuracy reaches 95%.
#   usage: examples/demo.sh [TPUSIM_BINARY] [MODEL_DIR]
set -euo pipefail
BIN=${1:-build/release/tpusim}
RUN=${2:-build/demo/digits_mlp_v3-8}
SD=examples/digits_mlp
rm -rf "$RUN"

echo "== tpusim check: will the train step compile for a TPU?"
"$BIN" check "$SD/step.hlo" | tail -1
echo
echo "== tpusim train: the digits MLP on a simulated v3-8 (8 replicas x 16 examples, TPU numerics)"
start=$(date +%s.%N)
"$BIN" train "$SD" --slice v3-8 --steps 165 --eval-every 55 --model-dir "$RUN" --log-every 33
end=$(date +%s.%N)
echo
acc=$(sed -n 's/^{"step": 165, "eval": {"accuracy": \([0-9.e+-]*\).*/\1/p' "$RUN/metrics.jsonl")
awk -v a="$acc" -v s="$start" -v e="$end" -v load="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" 'BEGIN {
    printf "== result: test accuracy %.2f%% after 165 steps (15 epochs); %.1f s of wall time on this host (load average %s)\n",
           100 * a, e - s, load
    if (a + 0 < 0.95) { print "demo FAILED: the test accuracy is below 95%"; exit 1 }
}'
echo "   open $RUN/profile.html in a browser, $RUN/trace.json in ui.perfetto.dev, $RUN/memory.html for the memory viewer"

# Part 2: an unchanged JAX script (examples/jax/train_digits.py: nothing in it knows tpusim) on the simulated
# v3-8 through the PJRT plugin, installed with pip into the venv like a user would (make venv made it).
VENV=${3:-build/venv}
if [ -x "$VENV/bin/python" ]; then
  JAXRUN=build/demo/jax_digits_v3-8
  rm -rf "$JAXRUN"
  echo
  echo "== pip install . (the Python package with the PJRT plugin), then an ordinary JAX training script on TPU v3-8"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation . >/dev/null
  JAX_PLATFORMS=tpusim TPUSIM_SLICE=v3-8 TPUSIM_PROFILE_DIR="$JAXRUN" "$VENV/bin/python" examples/jax/train_digits.py \
    2>&1 | grep -v "is experimental" | tee "$JAXRUN.log"
  acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' "$JAXRUN.log")
  awk -v a="$acc" 'BEGIN { if (a + 0 < 95) { print "demo FAILED: the JAX script reached " a "%, below 95%"; exit 1 } }'
  echo "   per-program profiles, memory plans, summary.txt and trace.json (all executions): $JAXRUN"
fi
