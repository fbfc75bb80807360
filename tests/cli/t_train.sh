# tpusim train (docs/step_dir.md): options and errors, metrics.jsonl and the files of a run, kill -9 in the
# middle of a run then --resume giving the uninterrupted run's final state byte for byte, --steps-per-exec
# and the cached dataset format giving the same state, the learning-rate finder, input-bound reporting.
# Sourced by tests/cli/run.sh ($BIN, expect, ok, bad).
out=$CLI_OUT
tr_dir=$(mktemp -d /tmp/tpusim-train.XXXXXX)
SD=examples/digits_mlp
has() { if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; sed 's/^/    /' "$out" | head -20 >&2; fi; }
same() { if cmp -s "$1" "$2"; then ok; else bad "$1 and $2 differ"; fi; }

expect 0 "$BIN" train --help
for o in --steps --slice --cores --steps-per-exec --data --eval-data --cached --model-dir --resume --save-every \
         --eval-every --seed --numerics --prefetch --input-delay-ms --input-rate --log-every --no-progress --quiet \
         --lr-find --lr-min --lr-max --lr-out; do has "$o"; done
expect 2 "$BIN" train
expect 2 "$BIN" train $SD
has "--steps N is required"
expect 2 "$BIN" train $SD --steps
expect 2 "$BIN" train $SD --steps 5 --bogus
expect 2 "$BIN" train /nonexistent --steps 5
has "is not a STEP_DIR"
expect 2 "$BIN" train $SD --steps 5 --cores 4
has "1 or all 8"
expect 2 "$BIN" train $SD --steps 5 --resume
has "needs --model-dir"
mkdir -p "$tr_dir/empty"
expect 2 "$BIN" train $SD --steps 5 --data "$tr_dir/empty"
has "holds no .npz shards or .tpuds files"

# a short run: the report, metrics.jsonl with its fields, the profile files
expect 0 "$BIN" train $SD --steps 12 --model-dir "$tr_dir/a" --eval-every 6 --no-progress
has "8 replicas x 16 examples = global batch 128"
has "learning_rate x 1: linear scaling rule"
has "eval at step 6"
has "predicted step time on v3-8"
has "gradient all-reduce"
has "MXU utilization"
has "advice:"
for f in metrics.jsonl state.npz progress.json profile.html trace.json memory.html; do
    if [ -s "$tr_dir/a/$f" ]; then ok; else bad "no $tr_dir/a/$f"; fi
done
if [ "$(grep -c '"sim_step_time_s"' "$tr_dir/a/metrics.jsonl")" = 12 ]; then ok; else bad "metrics.jsonl: not 12 step records"; fi
for k in '"step": 12' '"loss": ' '"accuracy": ' '"learning_rate": ' '"epoch": '; do
    if grep -q "$k" "$tr_dir/a/metrics.jsonl"; then ok; else bad "metrics.jsonl lacks $k"; fi
done
if grep -q '{"step": 6, "eval": {"accuracy": ' "$tr_dir/a/metrics.jsonl" && grep -q '{"step": 12, "eval": {"accuracy": ' "$tr_dir/a/metrics.jsonl"; then ok; else bad "metrics.jsonl lacks the eval records"; fi
expect 0 "$BIN" train $SD --steps 12 --cores 1 --quiet
has "1 replica, global batch 16"
expect 0 "$BIN" train $SD --steps 3 --input-rate 500 --quiet
has "INPUT-BOUND"

# kill -9 in the middle, --resume: the same final state as an uninterrupted run, every step logged once
expect 0 "$BIN" train $SD --steps 40 --save-every 5 --model-dir "$tr_dir/full" --quiet
# a model dir holding a checkpoint is not overwritten without being asked (issue 18), even with --quiet
cp "$tr_dir/full/state.npz" "$tr_dir/state.before"
expect 2 "$BIN" train $SD --steps 2 --model-dir "$tr_dir/full" --quiet
has "holds a checkpoint: --resume continues it, --overwrite starts over"
same "$tr_dir/full/state.npz" "$tr_dir/state.before"
expect 2 "$BIN" train $SD --steps 2 --model-dir "$tr_dir/full" --quiet --resume --overwrite
has "not both"
expect 0 "$BIN" train $SD --steps 40 --save-every 5 --model-dir "$tr_dir/full" --quiet --overwrite
same "$tr_dir/full/state.npz" "$tr_dir/state.before"
"$BIN" train $SD --steps 40 --save-every 5 --model-dir "$tr_dir/killed" --input-delay-ms 40 --quiet >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    s=$(sed -n 's/.*"step": \([0-9]*\),.*/\1/p' "$tr_dir/killed/progress.json" 2>/dev/null)
    [ -n "$s" ] && [ "$s" -ge 10 ] && break
    sleep 0.05
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
s=$(sed -n 's/.*"step": \([0-9]*\),.*/\1/p' "$tr_dir/killed/progress.json" 2>/dev/null)
if [ -n "$s" ] && [ "$s" -ge 10 ] && [ "$s" -lt 40 ]; then ok; else bad "kill -9: the checkpoint is at step '$s', wanted 10..35"; fi
expect 0 "$BIN" train $SD --steps 40 --save-every 5 --model-dir "$tr_dir/killed" --resume --no-progress
has "resuming $tr_dir/killed at step $s of 40"
same "$tr_dir/full/state.npz" "$tr_dir/killed/state.npz"
n=$(grep -o '^{"step": [0-9]*, "epoch"' "$tr_dir/killed/metrics.jsonl" | sort | uniq | wc -l)
m=$(grep -c '"epoch"' "$tr_dir/killed/metrics.jsonl")
if [ "$n" = 40 ] && [ "$m" = 40 ]; then ok; else bad "resumed metrics.jsonl: $m step records, $n distinct (wanted 40)"; fi
expect 0 "$BIN" train $SD --steps 40 --model-dir "$tr_dir/killed" --resume --quiet
has "nothing to do"

# K steps per host call and the cached format change nothing in the result
expect 0 "$BIN" train $SD --steps 40 --steps-per-exec 8 --model-dir "$tr_dir/k8" --quiet
same "$tr_dir/full/state.npz" "$tr_dir/k8/state.npz"
if [ "$(grep -c '"steps": 8' "$tr_dir/k8/metrics.jsonl")" = 5 ]; then ok; else bad "K=8: not 5 records of 8 steps"; fi
expect 0 "$BIN" train $SD --steps 40 --cached --model-dir "$tr_dir/cached" --quiet
same "$tr_dir/full/state.npz" "$tr_dir/cached/state.npz"

# the learning-rate finder
expect 0 "$BIN" train $SD --lr-find --steps 25 --lr-out "$tr_dir/lr.json" --quiet
has "suggested learning rate"
for f in lr.json lr.jsonl lr.svg; do if [ -s "$tr_dir/$f" ]; then ok; else bad "no $tr_dir/$f"; fi; done
if grep -q '"hyper": "learning_rate", "replicas": 8' "$tr_dir/lr.json" && [ "$(grep -c '"lr": ' "$tr_dir/lr.jsonl")" -ge 10 ]; then ok; else bad "lr.json / lr.jsonl are not the finder's"; fi
rm -rf "$tr_dir"
