# t_hostile.sh — issue 18 at the command line: programs that do not verify are not run, runs can be limited,
# numbers are parsed strictly, lying inputs are refused early, outputs are written whole or not at all and
# special files are never replaced. Sourced by tests/cli/run.sh ($BIN, expect, ok, bad).
hs_tmp=$(mktemp -d /tmp/tpusim-hostile.XXXXXX)
H=tests/hostile
hs_out() {   # hs_out CODE PATTERN CMD... : exit code and a line of output matching PATTERN (grep -F)
    local want=$1 pat=$2; shift 2
    "$@" >"$hs_tmp/out" 2>&1; local got=$?
    if [ "$got" = "$want" ] && grep -Fq -- "$pat" "$hs_tmp/out"; then ok; else
        bad "$* -> exit $got (wanted $want), output lacks '$pat'"; sed 's/^/    /' "$hs_tmp/out" | head -12 >&2; fi
}
P=tests/conformance/cases/mlp_train_sgd/program.hlo

# 1. a program that does not verify is not run (nor are its inputs read or made)
hs_out 1 "does not verify (1 error)" "$BIN" run $H/neg_shape_mismatch.hlo --random-inputs
hs_out 1 "declared shape f32[4000,4000] differs" "$BIN" run $H/neg_shape_mismatch.hlo --random-inputs
hs_out 1 "does not verify" "$BIN" run $H/dus_update_too_big.hlo --inputs $H/dup_members.npz
hs_out 1 "takes at least 1 operand" "$BIN" check $H/noop_conditional.hlo
hs_out 1 "does not verify" "$BIN" profile $H/noop_convolution.hlo --chip v5e
hs_out 1 "is too large: more than 2^60 bytes" "$BIN" memory $H/huge_array.hlo --chip v5e
# a step dir whose gradient program does not verify is refused when the trainer starts
mkdir -p "$hs_tmp/sd"
for f in examples/digits_mlp/*; do ln -s "$PWD/$f" "$hs_tmp/sd/"; done
rm "$hs_tmp/sd/grad.hlo"
sed 's/^  ROOT max.3 = f32\[16,128\]{1,0} maximum/  ROOT max.3 = f32[16,99]{1,0} maximum/' examples/digits_mlp/grad.hlo >"$hs_tmp/sd/grad.hlo"
hs_out 2 "programs.grad: $hs_tmp/sd/grad.hlo does not verify" "$BIN" train "$hs_tmp/sd" --steps 2 --quiet

# 5. limits: a loop that never ends stops
hs_out 1 "the step limit (5000 instructions run" "$BIN" run $H/while_forever.hlo --max-steps 5000
hs_out 1 "the time limit" "$BIN" run $H/while_forever.hlo --timeout 0.2
hs_out 1 "the step limit" "$BIN" run $H/while_forever.hlo --max-steps 5000 --replicas 2

# 9. one strict number parser
hs_out 2 "--steps wants an integer from 1 to 1000000000, got '99999999999999999999'" "$BIN" profile $P --chip v5e --steps 99999999999999999999
hs_out 2 "--input-rate wants a number" "$BIN" profile $P --chip v5e --input-rate nan
hs_out 2 "--price wants dollars" "$BIN" profile $P --chip v5e --price nan
hs_out 2 "--price wants dollars" "$BIN" profile $P --chip v5e --price v4=abc
hs_out 2 "--price wants dollars" "$BIN" profile $P --chip v5e --price v4=1,=2
hs_out 0 "cost" "$BIN" profile $P --chip v5e --price v4=3.22,v5e=1.2
hs_out 2 "--batch wants an integer from 1" "$BIN" profile $P --chip v5e --batch -1
hs_out 2 "--top wants an integer from 1" "$BIN" profile $P --chip v5e --top -5
hs_out 2 "--top wants an integer from 1" "$BIN" memory $P --chip v5e --top 1x
hs_out 2 "--steps wants an integer from 1" "$BIN" train examples/digits_mlp --steps 99999999999999999999
hs_out 2 "--seed wants an integer from 0" "$BIN" run $P --random-inputs --seed -1
hs_out 2 "--threads wants an integer" "$BIN" run $P --random-inputs --threads ' 4'
hs_out 2 "--max-steps wants an integer from 1" "$BIN" run $P --random-inputs --max-steps 0
hs_out 2 "--timeout wants a number" "$BIN" run $P --random-inputs --timeout inf

# 7. lying inputs
hs_out 2 "/dev/zero: not a text file (a NUL byte at offset 0)" "$BIN" check /dev/zero
hs_out 2 "is a directory, not a file" "$BIN" check $H
hs_out 2 "is a directory, not a file" "$BIN" run $H --random-inputs
hs_out 2 "is more than the input limit of 100 bytes" "$BIN" --max-input-size 100 check $H/while_forever.hlo
hs_out 0 "verdict: compatible" "$BIN" check $H/while_forever.hlo --max-input-size=1M
hs_out 2 "--max-input-size wants an integer" "$BIN" check $H/while_forever.hlo --max-input-size 1Q
printf 'HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] negate(p)\n}\n' >"$hs_tmp/neg2.hlo"
hs_out 2 "two members are named 'a'" "$BIN" run "$hs_tmp/neg2.hlo" --inputs $H/dup_members.npz
sed 's/f32\[2\]/f32[3]/g' "$hs_tmp/neg2.hlo" >"$hs_tmp/neg3.hlo"
hs_out 2 "member 'a.npy': f32[2] is not the shape of any parameter of m (f32[3]); nothing was read" \
    "$BIN" run "$hs_tmp/neg3.hlo" --inputs $H/dup_members.npz

# 8. outputs: whole or not at all; links stay links; special files are written through, never replaced
"$BIN" profile $P --chip v5e --trace "$hs_tmp/t.json" >/dev/null 2>&1
cp "$hs_tmp/t.json" "$hs_tmp/t.before"
( trap '' XFSZ; ulimit -f 8; "$BIN" profile $P --chip v5e --steps 50 --trace "$hs_tmp/t.json" ) >"$hs_tmp/out" 2>&1
if [ $? = 2 ] && grep -q "t.json: cannot write: File too large" "$hs_tmp/out"; then ok; else bad "full disk: no errno in the message"; cat "$hs_tmp/out" >&2; fi
same_file() { if cmp -s "$1" "$2"; then ok; else bad "$1 changed"; fi; }
same_file "$hs_tmp/t.json" "$hs_tmp/t.before"
if ls "$hs_tmp" | grep -q '\.tmp\.'; then bad "a temporary file was left behind"; else ok; fi
ln -s t.before "$hs_tmp/link.json"
"$BIN" profile $P --chip v5e --steps 3 --trace "$hs_tmp/link.json" >/dev/null 2>&1
if [ -L "$hs_tmp/link.json" ] && grep -q '"steps": 3' "$hs_tmp/t.before"; then ok; else bad "the symlink was replaced or its target not written"; fi
mkfifo "$hs_tmp/fifo"
cat "$hs_tmp/fifo" >"$hs_tmp/fifo.out" &
hs_cat=$!
"$BIN" profile $P --chip v5e --trace "$hs_tmp/fifo" >/dev/null 2>&1
wait $hs_cat
if [ -p "$hs_tmp/fifo" ] && grep -q traceEvents "$hs_tmp/fifo.out"; then ok; else bad "the FIFO was replaced or not written through"; fi
hs_out 2 "is a directory, not a file to write" "$BIN" profile $P --chip v5e --html "$hs_tmp"
hs_out 2 "No such file or directory" "$BIN" memory $P --chip v5e --svg "$hs_tmp/no/such/dir/m.svg"
rm -rf "$hs_tmp"
