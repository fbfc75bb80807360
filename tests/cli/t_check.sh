# t_check.sh — `tpusim check` and `tpusim print`: exit codes 0/1/2 and the lines users read. Sourced by
# tests/cli/run.sh ($BIN, expect, ok, bad).
C=../shared/corpus/hlo
ck_tmp=$(mktemp -d)
# expect_out CODE PATTERN CMD... : exit code CODE and a line of the output matching PATTERN (grep -E)
expect_out() {
    local want=$1 pat=$2; shift 2
    "$@" >"$ck_tmp/out" 2>&1; local got=$?
    if [ "$got" = "$want" ] && grep -Eq -- "$pat" "$ck_tmp/out"; then ok; else
        bad "$* -> exit $got (wanted $want), output lacks /$pat/"; sed 's/^/    /' "$ck_tmp/out" | head -20 >&2; fi
}
expect_out 0 "usage: tpusim check" "$BIN" check --help
expect_out 0 "split-input-file" "$BIN" check --help
expect_out 0 "usage: tpusim print" "$BIN" print --help
expect 2 "$BIN" check
expect 2 "$BIN" check --bogus "$C/mobilenet_v2.hlo"
expect 2 "$BIN" check --chip
expect_out 2 "no-such.hlo" "$BIN" check "$ck_tmp/no-such.hlo"
printf 'HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] frob(p)\n}\n' >"$ck_tmp/bad.hlo"
expect_out 2 "bad.hlo:4:19: unknown opcode 'frob'" "$BIN" check "$ck_tmp/bad.hlo"
expect_out 2 "bad.hlo:4:19" "$BIN" print "$ck_tmp/bad.hlo"
if [ -f "$C/mobilenet_v2.hlo" ]; then
    expect_out 0 "^verdict: compatible with TPU v5e: 0 errors" "$BIN" check "$C/mobilenet_v2.hlo" --chip v5e
    expect_out 2 "unknown TPU generation 'v99'" "$BIN" check "$C/mobilenet_v2.hlo" --chip=v99
    expect_out 0 "dynamic shape f32\[1,1,<=1801\] — XLA:TPU pads it" "$BIN" check --split-input-file "$C/xla-parser-tests/import_bounded_dynamism.hlo"
    expect_out 1 "dynamic shape f32\[1,\?\] — the TPU compiler needs static" "$BIN" check --split-input-file "$C/xla-parser-tests/custom_call.hlo"
    expect_out 1 "^verdict: NOT COMPATIBLE" "$BIN" check --split-input-file "$C/xla-parser-tests/custom_call.hlo"
    expect_out 0 '"severity":"warning","category":"dynamic shape"' "$BIN" check --json "$C/xla-parser-tests/dynamic_param.hlo"
    expect_out 0 '"compatible":true' "$BIN" check --json "$C/xla-parser-tests/simple.hlo"
    expect_out 0 "ROOT %dot.4 = f32\[\] dot" "$BIN" print "$C/xla-parser-tests/simple.hlo"
    expect_out 0 "^// -----" "$BIN" print --split-input-file "$C/xla-parser-tests/call.hlo"
fi
printf 'HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] custom-call(p), custom_call_target="PyFunc"\n}\n' >"$ck_tmp/py.hlo"
expect_out 1 "custom-call 'PyFunc' calls back into the host" "$BIN" check "$ck_tmp/py.hlo"
printf 'HloModule m\nENTRY e {\n  p = f64[4] parameter(0)\n  ROOT r = add(p, p)\n}\n' >"$ck_tmp/f64.hlo"
expect_out 0 "f64 — TPUs have no float64 hardware" "$BIN" check "$ck_tmp/f64.hlo"
expect_out 0 "ROOT %r = f64\[4\] add\(f64\[4\] %p, f64\[4\] %p\)" "$BIN" print "$ck_tmp/f64.hlo"
# print's output parses back and prints the same
"$BIN" print "$ck_tmp/f64.hlo" >"$ck_tmp/p1.hlo" 2>&1 && "$BIN" print "$ck_tmp/p1.hlo" >"$ck_tmp/p2.hlo" 2>&1 &&
    cmp -s "$ck_tmp/p1.hlo" "$ck_tmp/p2.hlo" && ok || bad "print is not a fixed point"
# binary HloModuleProto / HloProto / HloSnapshot files (tests/golden/proto/): every command reads them
PB=tests/golden/proto
expect_out 0 "^verdict: compatible with a TPU" "$BIN" check "$PB/mlp.pb"
expect_out 0 "ROOT %reduce_sum.0 = f32\[2\]\{0\} reduce" "$BIN" print "$PB/dump_after.pb"
expect_out 0 "out0 +f32\[4,3\]" "$BIN" run "$PB/mlp.pb" --random-inputs
expect_out 0 "^Fits in hbm" "$BIN" memory "$PB/conv.pb" --chip v3-8
expect_out 0 "step time" "$BIN" profile "$PB/dump_snapshot.pb" --chip v3-8
expect_out 0 "8 outputs on 4 devices" "$BIN" run "$PB/collectives.pb" --random-inputs --replicas 4
head -c 500 "$PB/control.pb" >"$ck_tmp/cut.pb"
expect_out 2 "cut.pb: byte 22: computations\[0\]: length 1021 runs past the end of the message" "$BIN" check "$ck_tmp/cut.pb"
rm -rf "$ck_tmp"
