#!/usr/bin/env bash
# fuzz/run.sh [SECONDS] — runs every build/fuzz/fuzz_* target for SECONDS (default 60) on its corpus, then
# replays its regression files. Target fuzz_NAME reads seeds from fuzz/corpus/NAME/ (kept in git), writes what
# it discovers to fuzz/corpus-work/NAME/ (ignored by git), uses fuzz/NAME.dict when present, and replays
# fuzz/regress/NAME/* (inputs that once crashed: they must not crash now). Crash inputs are saved under
# build/fuzz/artifacts/NAME/. Exits non-zero if any target crashed.
#   make fuzz && ./fuzz/run.sh 600
set -u
cd "$(dirname "$0")/.." || exit 2
secs=${1:-60}
# undefined behaviour is a crash too (the fuzz build does not stop on it by itself)
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
fail=0
found=0
crashed=()   # "target: log" of each failure, repeated at the end so a log's tail names them
for bin in build/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    found=1
    name=$(basename "$bin")
    short=${name#fuzz_}
    seeds=fuzz/corpus/$short
    work=fuzz/corpus-work/$short
    art=build/fuzz/artifacts/$short
    mkdir -p "$work" "$art" "$seeds"
    dict=()
    [ -f "fuzz/$short.dict" ] && dict=(-dict="fuzz/$short.dict")
    echo "== $name: ${secs}s over $seeds (+ $work)"
    if ! "$bin" "$work" "$seeds" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$art/" -print_final_stats=1 2>"$art/log.txt"; then
        echo "!! $name crashed; input and log in $art/ (tail follows)"
        tail -40 "$art/log.txt"
        crashed+=("$name: $art/log.txt")
        fail=1
    else
        grep -E "stat::number_of_executed_units|cov:" "$art/log.txt" | tail -2
    fi
    shopt -s nullglob
    regress=(fuzz/regress/$short/*)
    shopt -u nullglob
    if [ ${#regress[@]} -gt 0 ]; then
        echo "== $name: replaying ${#regress[@]} regression files"
        if ! "$bin" "${regress[@]}" >"$art/regress.txt" 2>&1; then
            echo "!! $name crashed on a regression file (log: $art/regress.txt)"
            tail -40 "$art/regress.txt"
            crashed+=("$name: $art/regress.txt")
            fail=1
        fi
    fi
done
[ "$found" = 1 ] || { echo "no fuzz targets in build/fuzz/ (run 'make fuzz' first)"; exit 2; }
# a CI log keeps only its tail: name each failure again, with the crash report and the input's bytes
for c in "${crashed[@]}"; do
    log=${c#*: }
    echo "!! fuzz failure in ${c%%: *}; the crash report:"
    grep -A25 -m1 -E "^==[0-9]+==|ERROR: libFuzzer|runtime error|SUMMARY|deadly signal|out-of-memory|timeout" "$log" | head -40
    grep -E "^(INFO: Seed:|Test unit written to|Base64:)" "$log" | tail -3
done
exit $fail
