# t_formats.sh — issue 16 at the command line: every format jax and XLA write in every command (StableHLO text,
# bytecode and jax.export files through jaxlib; binary protos), '-' for standard input and output, --json on
# every command that reports (one array with --split-input-file), strict numbers, run --inputs by parameter
# name, progress on stderr, and the files profile says it wrote. Sourced by tests/cli/run.sh.
ft=$(mktemp -d /tmp/tpusim-formats.XXXXXX)
S=tests/golden/stablehlo
P=tests/conformance/cases/mlp_train_sgd/program.hlo
fo() {   # fo CODE PATTERN CMD... : exit code, and PATTERN (grep -F) in stdout+stderr ("" for none)
    local want=$1 pat=$2; shift 2
    "$@" >"$ft/out" 2>"$ft/err"; local got=$?
    if [ "$got" = "$want" ] && { [ -z "$pat" ] || cat "$ft/out" "$ft/err" | grep -Fq -- "$pat"; }; then ok; else
        bad "$* -> exit $got (wanted $want)${pat:+, output lacks '$pat'}"; cat "$ft/out" "$ft/err" | sed 's/^/    /' | head -12 >&2; fi
}
has_in() {   # has_in FILE PATTERN: the last command's FILE (out or err) has PATTERN
    if grep -Fq -- "$2" "$ft/$1"; then ok; else bad "the last command's $1 lacks '$2'"; sed 's/^/    /' "$ft/$1" | head -8 >&2; fi
}
is_json() {   # the last command's stdout is one JSON value (of type $1: list or dict)
    if python3 -c "import json,sys; v=json.load(open('$ft/out')); sys.exit(0 if type(v).__name__=='$1' else 1)" 2>/dev/null; then ok
    else bad "stdout of the last command is not a JSON $1"; head -5 "$ft/out" | sed 's/^/    /' >&2; fi
}

# 1. StableHLO in every command, through jaxlib (build/venv's Python)
py=""
[ -x build/venv/bin/python ] && build/venv/bin/python -c 'import jaxlib' 2>/dev/null && py=$PWD/build/venv/bin/python
if [ -n "$py" ]; then
  export TPUSIM_PYTHON=$py
  for f in mlp.mlir mlp.mlirbc mlp.jax_exported; do
    fo 0 "HloModule jit_mlp" "$BIN" print $S/$f
    fo 0 "compatible with a TPU" "$BIN" check $S/$f
    fo 0 "" "$BIN" memory $S/$f --chip v5e
    fo 0 "compiled for v5e" "$BIN" compile $S/$f --chip v5e
    fo 0 '"step_time_s"' "$BIN" profile $S/$f --chip v5e --json
    fo 0 "" "$BIN" run $S/$f --inputs $S/inputs.npz --numerics exact --out "$ft/o-$f" --quiet
    if "$py" -c "import numpy as np,sys; a=np.load('$ft/o-$f/out0.npy'); b=np.load('$S/expected.npz')['out0']; sys.exit(0 if np.allclose(a,b,rtol=1e-5,atol=1e-5) else 1)"; then ok
    else bad "run $f: the result differs from XLA:CPU's (expected.npz)"; fi
  done
  fo 0 "HloModule jit_mlp" sh -c "cat $S/mlp.mlirbc | '$BIN' print -"   # bytecode from standard input
  # a StableHLO error comes back as jaxlib says it, naming the file
  printf 'module {\n  func.func @main() {\n    bogus\n  }\n}\n' >"$ft/bad.mlir"
  fo 2 "$ft/bad.mlir: jaxlib could not read the StableHLO" "$BIN" check "$ft/bad.mlir"
  unset TPUSIM_PYTHON
else
  skip "StableHLO formats: no Python with jax (make venv)"
fi
# without jaxlib: the pip command; without Python: what to set
printf '#!/bin/sh\nexec python3 -S -I "$@"\n' >"$ft/nosite-python"; chmod +x "$ft/nosite-python"
fo 2 "pip install jax==0.10.2 jaxlib==0.10.2" env TPUSIM_PYTHON="$ft/nosite-python" "$BIN" check $S/mlp.mlir
fo 2 "No module named" env TPUSIM_PYTHON="$ft/nosite-python" "$BIN" run $S/mlp.jax_exported --random-inputs
fo 2 "cannot be run" env TPUSIM_PYTHON="$ft/no-such-python" "$BIN" profile $S/mlp.mlirbc --chip v5e

# 2. binary protos and '-' for standard input and output
fo 0 "HloModule" sh -c "'$BIN' print - < tests/golden/proto/dump_after.pb"
"$BIN" print $P >"$ft/a" 2>&1; "$BIN" print - <$P >"$ft/b" 2>&1
if cmp -s "$ft/a" "$ft/b"; then ok; else bad "print - (stdin) differs from print FILE"; fi
fo 0 '<svg id="roofline"' "$BIN" profile $P --chip v5e --no-advice --html -
fo 0 '"traceEvents"' "$BIN" profile $P --chip v5e --no-advice --trace -
fo 0 '<svg' "$BIN" memory $P --chip v5e --svg -
fo 2 "cannot open" "$BIN" check "$ft/missing.hlo"

# 3. --json on every command that reports; --split-input-file gives one array
fo 0 "" "$BIN" run $P --random-inputs --json; is_json dict
fo 0 '"outputs"' "$BIN" run $P --random-inputs --json --replicas 2
fo 0 "" "$BIN" compile $P --chip v5e --json; is_json dict
fo 0 "" "$BIN" memory $P --chip v5e --json; is_json dict
fo 0 "" "$BIN" check $P --json; is_json dict
fo 0 "" "$BIN" profile $P --chip v5e --json; is_json dict
fo 0 "" "$BIN" chips --json; is_json list
fo 0 "" "$BIN" scalesim -c tests/golden/scalesim/calc_os_conv/config.cfg -t tests/golden/scalesim/calc_os_conv/topology.csv -p "$ft/ss" --json; is_json dict
has_in out '"compute_report"' 
fo 0 "" "$BIN" bench matmul --chip v2-8 --n 128 --count 3 --host-runs 1 --json; is_json dict
fo 0 "" "$BIN" train examples/digits_mlp --slice v3-8 --steps 3 --quiet --json; is_json dict
has_in out '"sim_allreduce_s"' 
{ cat $P; printf '\n// -----\n\n'; cat tests/golden/proto/mlp.hlo; printf '\n// -----\n\n'; cat tests/golden/proto/sort.hlo; } >"$ft/three.hlo"
fo 0 "" "$BIN" check "$ft/three.hlo" --split-input-file --json; is_json list
if python3 -c "import json; assert len(json.load(open('$ft/out'))) == 3"; then ok; else bad "check --split-input-file --json: not 3 reports"; fi
fo 0 "" "$BIN" profile "$ft/three.hlo" --split-input-file --json --chip v5e; is_json list

# 4. strict numbers
fo 2 "--top wants an integer" "$BIN" profile $P --chip v5e --top 2abc
fo 2 "--top wants an integer" "$BIN" memory $P --chip v5e --top 2abc
fo 2 "--seed wants an integer" "$BIN" run $P --random-inputs --seed 1x
fo 2 "--n wants an integer" "$BIN" bench matmul --chip v2-8 --n 12abc
fo 2 "--max-input-size" "$BIN" --max-input-size 4Gx check $P

# 5. profile says which files it wrote
fo 0 "tpusim profile: wrote $ft/p.html" "$BIN" profile $P --chip v5e --html "$ft/p.html" --trace "$ft/p.json" --tensorboard "$ft/tb" --run r1
has_in err "tpusim profile: wrote $ft/p.json"
has_in err "tpusim profile: wrote $ft/tb/plugins/profile/r1/"
fo 2 "run name" "$BIN" profile $P --chip v5e --tensorboard "$ft/tb" --run ../up

# 6. run --inputs takes members named like the parameters, in any order, and names them in errors
if [ -n "$py" ]; then
  "$py" - "$S/inputs.npz" "$ft" <<'PY'
import sys, numpy as np
d = dict(np.load(sys.argv[1]))
np.savez(sys.argv[2] + "/named.npz", b=d["b"], w=d["w"], x=d["x"])            # not in parameter order
np.savez(sys.argv[2] + "/numbered.npz", arg2=d["b"], arg0=d["x"], arg1=d["w"])
np.savez(sys.argv[2] + "/badshape.npz", x=d["x"], w=d["w"][:3], b=d["b"])
np.savez(sys.argv[2] + "/missing.npz", **{"x.1": d["x"], "w": d["w"]})
PY
  export TPUSIM_PYTHON=$py
  for a in named numbered; do
    fo 0 "" "$BIN" run $S/mlp.mlirbc --inputs "$ft/$a.npz" --numerics exact --out "$ft/o-$a" --quiet
    if cmp -s "$ft/o-$a/out0.npy" "$ft/o-mlp.mlirbc/out0.npy"; then ok; else bad "run --inputs $a.npz: not the parameters' order"; fi
  done
  fo 2 "member 'w.npy': f32[3,4], but parameter 1 (w.1)" "$BIN" run $S/mlp.mlirbc --inputs "$ft/badshape.npz"
  fo 2 "no member for parameter 2 (b.1" "$BIN" run $S/mlp.mlirbc --inputs "$ft/missing.npz"
  unset TPUSIM_PYTHON
else
  skip "run --inputs by name: no Python with jax (make venv)"
fi

# 7. progress on stderr for a run that takes more than 2 s (here: stopped by its time limit after 3 s)
fo 1 "tpusim run: running" "$BIN" run tests/hostile/while_forever.hlo --timeout 3
if grep -q "tpusim run: running .* s" "$ft/err" && grep -q "done in" "$ft/err"; then ok; else bad "run: no progress line on stderr"; sed 's/^/    /' "$ft/err" >&2; fi
rm -rf "$ft"
