# The README's 5-minute tour runs as written: every `$T ...` line of its block (and `cat ... | $T ...`) exits 0,
# from the repository root, with /tmp/tour replaced by a temporary directory. Lines that read StableHLO need
# a Python with jax (build/venv, `make venv`): skipped, saying so, without one. Sourced by tests/cli/run.sh.
tour=$(mktemp -d /tmp/tpusim-tour.XXXXXX)
block=$(awk '/^## A 5-minute tour/{t=1} t&&/^```/{n++; if(n==2) exit; next} t&&n==1' README.md)
if [ -z "$block" ]; then bad "README.md has no tour block"; fi
py=""
[ -x build/venv/bin/python ] && build/venv/bin/python -c 'import jaxlib' 2>/dev/null && py=build/venv/bin/python
P=$(printf '%s\n' "$block" | sed -n 's/^P=\([^ ]*\).*/\1/p')
ran=0
while IFS= read -r line; do
  case "$line" in
    '$T '*|'cat '*) ;;
    *) continue ;;
  esac
  cmd=$(printf '%s' "$line" | sed -e 's/ # .*$//' -e 's/ *$//' -e "s|/tmp/tour|$tour|g")
  if printf '%s' "$cmd" | grep -q 'stablehlo/' && [ -z "$py" ]; then skip "tour: $cmd (no Python with jax: make venv)"; continue; fi
  ran=$((ran + 1))
  if T="$BIN" P="$P" TPUSIM_PYTHON="${py:-python3}" bash -o pipefail -c "$cmd" >"$tour/log" 2>&1 </dev/null; then ok
  else
    # `| head` may end the pipe early (SIGPIPE): judge the tpusim command alone then
    rc=$?
    if [ "$rc" = 141 ]; then ok; else bad "tour: $cmd -> exit $rc"; sed 's/^/    /' "$tour/log" | tail -8 >&2; fi
  fi
done <<< "$block"
[ "$ran" -ge 15 ] && ok || bad "tour: only $ran commands found"
# what the tour says it writes
for f in out/out0.npy mem.html prof.html trace.json digits/profile.html; do
  if [ -s "$tour/$f" ]; then ok; else bad "tour: $f not written"; fi
done
if ls "$tour"/tb/plugins/profile/resnet50/*.xplane.pb >/dev/null 2>&1; then ok; else bad "tour: no TensorBoard profile"; fi
rm -rf "$tour"
# the README's layout and its diagram show every module of src/
layout=$(awk '/^## Layout/{t=1} t' README.md)
diagram=$(awk '/^## How it works/{t=1} t&&/^```/{n++; if(n==2) exit; next} t&&n==1' README.md)
for d in src/*/; do
  m=${d%/}
  if printf '%s' "$layout" | grep -q "$m/"; then ok; else bad "README layout lacks $m"; fi
  if printf '%s' "$diagram" | grep -q "$m"; then ok; else bad "README diagram lacks $m"; fi
done
