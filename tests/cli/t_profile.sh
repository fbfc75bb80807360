# tpusim profile and tpusim bench: every corpus program on v3-8, v4-8 and v5e-8 (exit 0, the JSON fields the
# issue asks for), the validation programs, the step-loop options, the what-if table, the outputs, and
# clear errors. Sourced by tests/cli/run.sh ($BIN, expect, ok, bad).
# pexpect: run.sh's expect with our own output file (not run.sh's shared one), so concurrent test runs on one machine do not mix outputs.
out=$(mktemp /tmp/tpusim-cli-profile.XXXXXX)
pexpect() { local want=$1; shift; "$@" >"$out" 2>&1; local got=$?; if [ "$got" = "$want" ]; then ok; else bad "$* -> exit $got, wanted $want"; sed 's/^/    /' "$out" | head -20 >&2; fi; }
has() { if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; sed 's/^/    /' "$out" | head -20 >&2; fi; }
json_has_fields() {
  local f
  for f in '"step_time_s":' '"flops":' '"mxu_utilization":' '"hbm_bytes":' '"bound":' '"ops":' '"name":' '"time_s":'; do
    if grep -q -- "$f" "$out"; then ok; else bad "profile --json lacks $f ($*)"; fi
  done
}

corpus=../shared/corpus/hlo
if [ -d "$corpus" ]; then
  for prog in mobilenet_v2.hlo hlo_llama31_8b_bf16_1x8.hlo nv_maxtext_1n1g_jit_train_step_before_optimization.hlo; do
    for chip in v3-8 v4-8 v5e-8; do
      pexpect 0 "$BIN" profile "$corpus/$prog" --chip "$chip" --analytic --json
      json_has_fields "$prog on $chip"
    done
  done
  # files of several modules (XLA's parser tests): each profiles, or says why it does not verify (exit 1)
  for f in "$corpus"/xla-parser-tests/*.hlo; do
    "$BIN" profile "$f" --chip v4-8 --split-input-file --json >"$out" 2>"$out.err"; rc=$?
    if [ $rc -le 1 ] && head -c 1 "$out" | grep -q '\['; then ok; else bad "profile --split-input-file $f: exit $rc"; head -5 "$out.err" >&2; fi
  done
  rm -f "$out.err"
  pexpect 0 "$BIN" profile "$corpus/xla-parser-tests/fusion.hlo" --chip v3-8 --split-input-file --no-advice
  has "== module 1 of"
  pexpect 0 "$BIN" profile "$corpus/mobilenet_v2.hlo" --chip v3-8
  has "step time"; has "bound            memory"; has "top ops"; has "advice:"
else
  skip "corpus profiles: $corpus absent"
fi

# the validation programs (docs/timing-validation.md)
for chip in v2-8 v3-8 v4-8; do
  pexpect 0 "$BIN" profile examples/timing/resnet50_train_b128_dp8.hlo --chip "$chip" --json
  json_has_fields "resnet50 on $chip"
done
pexpect 0 "$BIN" profile examples/timing/matmul_bf16_8192.hlo --chip v5e --no-advice
has "bound            compute"; has "MXU utilization  9"

# step loop: input-bound detection, steps per execution
pexpect 0 "$BIN" profile examples/timing/matmul_bf16_4096.hlo --chip v5e --input-rate 1000 --batch 4096
has "INPUT-BOUND"; has "input pipeline is the bottleneck"
pexpect 0 "$BIN" profile examples/timing/resnet50_train_b128_dp8.hlo --chip v4-8 --input-time 1.0
has "INPUT-BOUND"; has "per batch of 128"
pexpect 2 "$BIN" profile examples/timing/matmul_bf16_1024.hlo --chip v5e --input-time 0
pexpect 0 "$BIN" profile examples/timing/matmul_bf16_1024.hlo --chip v5e --steps-per-exec 1
has "steps_per_execution to 32"
pexpect 0 "$BIN" profile examples/timing/matmul_bf16_1024.hlo --chip v5e --steps-per-exec 32
has "(32 steps per host call)"

# what-if on other slices, with prices
pexpect 0 "$BIN" profile examples/timing/matmul_bf16_4096.hlo --chip v4-8 --no-advice --compare v5e-8,v6e-8 --price v4=3.22,v5e=1.2,v6e=2.7
has "what-if"; has "v5e-8"; has "v6e-8"; has "speed-up"; has '\$'

# outputs
trace=$out.trace.json; html=$out.report.html
pexpect 0 "$BIN" profile examples/timing/resnet50_train_b128_dp8.hlo --chip v4-8 --steps 2 --trace "$trace" --html "$html"
if grep -q '"traceEvents"' "$trace" && grep -q '"device 0 core 1 (chip 0)"' "$trace"; then ok; else bad "trace lacks events or core tracks"; fi
if grep -q '<svg id="roofline"' "$html" && grep -q '<svg id="timeline"' "$html"; then ok; else bad "HTML report lacks its charts"; fi
rm -f "$trace" "$html"

# bench
pexpect 0 "$BIN" bench matmul --chip v2-8 --n 256 --count 10 --host-runs 1
has "simulated v2-8"; has "warm"; has "cold"; has "host CPU"; has "extrapolated"
pexpect 0 "$BIN" bench matmul --print-program --n 128 --count 3
has "while(init)"
pexpect 2 "$BIN" bench matmul --chip v2-8 --n 0
has "--n wants an integer from 1 to 1048576"
pexpect 2 "$BIN" bench nosuch
pexpect 2 "$BIN" bench matmul

# errors: exit 2 for the command line and unreadable programs, 1 for programs that do not verify
pexpect 2 "$BIN" profile examples/timing/matmul_bf16_1024.hlo
has "--chip is required"
pexpect 2 "$BIN" profile examples/timing/matmul_bf16_1024.hlo --chip v9-8
pexpect 2 "$BIN" profile /nonexistent.hlo --chip v3-8
pexpect 2 "$BIN" profile examples/timing/matmul_bf16_1024.hlo --chip v3-8 --steps 0
pexpect 2 "$BIN" profile examples/timing/matmul_bf16_1024.hlo --chip v3-8 --price abc
has "--price wants"
pexpect 2 "$BIN" profile examples/timing/matmul_bf16_1024.hlo --chip v3-8 --bogus
printf 'HloModule bad\nENTRY main {\n  a = f32[4,4]{1,0} parameter(0)\n  b = f32[3,3]{1,0} parameter(1)\n  ROOT c = f32[4,4]{1,0} add(a, b)\n}\n' > "$out.bad.hlo"
pexpect 1 "$BIN" profile "$out.bad.hlo" --chip v3-8
rm -f "$out.bad.hlo" "$out"
