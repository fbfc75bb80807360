# Multi-process slices over MPI (docs/pods.md): the runtime's collectives across processes equal one process's
# bit for bit (dist-tests equal, 2 and 4 processes); a failing process, another program, another slice, a
# process that never arrives and a process count that does not split the hosts end every process with an
# error naming the cause; `tpusim train` under mpirun (2 and 4 processes) ends with the one-process run's
# state byte for byte; a killed process ends the job. Every mpirun started here carries a tag in its
# environment, and no process with it may outlive the test. Sourced by tests/cli/run.sh ($BIN, expect, ok, bad).
DT=${TPUSIM_DIST_TESTS:-build/release/dist-tests}
dist_dir=$(mktemp -d /tmp/tpusim-dist.XXXXXX)
MPI_TAG="${TPUSIM_MPI_TEST_TAG:-tpusim-mpi-test}:cli$$"
has() { if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; sed 's/^/    /' "$out" | head -20 >&2; fi; }
# mpi NP CMD...: mpirun on this machine, tagged; a hang guard of 300 s (not a timing check: a hang fails).
# Under AddressSanitizer the leak check is off in MPI processes: Open MPI leaves allocations at exit, some in
# components it has already unloaded (no name to suppress them by); ASan's other checks stay on.
mpi() {
    local np=$1; shift
    timeout -k 5 300 env TPUSIM_MPI_TEST_TAG="$MPI_TAG" OMPI_MCA_rmaps_base_oversubscribe=1 \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        mpirun --allow-run-as-root -np "$np" "$@"
}
# the processes still carrying this file's tag (the grep itself does not carry it)
strays() { env -u TPUSIM_MPI_TEST_TAG grep -ls -- "TPUSIM_MPI_TEST_TAG=$MPI_TAG" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3; }

if ! command -v mpirun >/dev/null; then
    bad "mpirun is missing (scripts/deps.sh installs openmpi-bin)"
else
# ---- the runtime: equal results, failures ----
for np in 2 4; do
    expect 0 mpi $np "$DT" equal
    for r in $(seq 0 $((np - 1))); do has "rank $r: [1-9][0-9]* checks passed, 0 failed"; done
done
expect 1 mpi 2 "$DT" fail   # MPI_Abort: mpirun exits 1
has "rank 1: run: device [4-7] (replica [4-7], partition 0): input 0 (parameter 0 of 'e'): expected f32\[37\], got f32\[36\]"
# rank 0 hears of process 1's failure inside its own run, or, when process 1 failed before rank 0's run began, at the start
has "rank 0: run: \\(device [0-3] (replica [0-3], partition 0)\\|the multi-process system is down\\): process 1 failed: device [4-7] (replica [4-7], partition 0): input 0"
expect 1 mpi 2 "$DT" early
has "rank 1: run: no inputs for device 4 (and none for device 0)"
has "rank 0: run: \\(device [0-3] (replica [0-3], partition 0)\\|the multi-process system is down\\): process 1 failed: no inputs for device 4"
expect 1 mpi 2 "$DT" program
has "rank 0: run: .*all-reduce 'ar': process 1 runs another program (fingerprint"
has "every process must run the same programs in the same order"
expect 1 mpi 2 "$DT" slice
has "rank 0: system: the processes disagree about the slice: process 0 has 'v4-16 (8 devices.*process 1 'v4-32 (16 devices"
TPUSIM_DIST_TIMEOUT=2 expect 1 mpi 2 "$DT" hang
has "rank 0: run: .*process 0 waited 2 s for process 1 (all-reduce 'ar'): it died, hangs or runs another program"
expect 1 mpi 3 "$DT" nprocs
has "v3-32 has 4 hosts (8 devices each): run it on a number of processes that divides 4 (mpirun -np 4: one per host), not 3"

# ---- tpusim train under mpirun: the one-process run's state and metrics, byte for byte ----
SD=examples/digits_mlp
nosps() { sed 's/"steps_per_s": [0-9.e+-]*//' "$1"; }
expect 0 "$BIN" train $SD --slice v4-16 --steps 12 --eval-every 6 --model-dir "$dist_dir/one16" --quiet
expect 0 mpi 2 "$BIN" train $SD --slice v4-16 --steps 12 --eval-every 6 --model-dir "$dist_dir/two16" --no-progress
has "processes: 2 (mpirun), 4 replicas each"
has "eval at step 6"
if cmp -s "$dist_dir/one16/state.npz" "$dist_dir/two16/state.npz"; then ok; else bad "2 processes: state.npz differs from one process's"; fi
if [ "$(nosps "$dist_dir/one16/metrics.jsonl")" = "$(nosps "$dist_dir/two16/metrics.jsonl")" ]; then ok; else bad "2 processes: metrics.jsonl differs"; fi
expect 0 "$BIN" train $SD --slice v3-32 --steps 6 --model-dir "$dist_dir/one32" --quiet
expect 0 mpi 4 "$BIN" train $SD --slice v3-32 --steps 6 --model-dir "$dist_dir/four32" --quiet
has "processes: 4 (mpirun), 8 replicas each"
if cmp -s "$dist_dir/one32/state.npz" "$dist_dir/four32/state.npz"; then ok; else bad "4 processes: state.npz differs from one process's"; fi
if [ "$(nosps "$dist_dir/one32/metrics.jsonl")" = "$(nosps "$dist_dir/four32/metrics.jsonl")" ]; then ok; else bad "4 processes: metrics.jsonl differs"; fi
# the processes must agree; slices that do not exist or do not split
expect 2 mpi 1 "$BIN" train $SD --slice v4-16 --steps 5 --quiet : -np 1 "$BIN" train $SD --slice v4-16 --steps 6 --quiet
has "the processes disagree about the training run"
expect 2 mpi 3 "$BIN" train $SD --slice v3-32 --steps 2 --quiet
has "v3-32 has 4 hosts (8 devices each): run it on a number of processes that divides 4"
expect 2 mpi 2 "$BIN" train $SD --slice v3-12 --steps 2 --quiet
has "v3 slices come in 8, 32, 64"
# a process killed in the middle of training ends the job with mpirun's report (the hang guard is 300 s)
mpi 2 "$BIN" train $SD --slice v4-16 --steps 100000 --input-delay-ms 20 --model-dir "$dist_dir/killed" --quiet \
    >"$dist_dir/killed.out" 2>&1 &
job=$!
for _ in $(seq 1 1200); do
    [ "$(cat "$dist_dir/killed/metrics.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.05
done
victim=""
for p in $(strays); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && grep -q train /proc/$p/cmdline 2>/dev/null; then victim=$p; fi
done
if [ -n "$victim" ]; then ok; kill -9 "$victim"; else bad "no rank 1 of the training job to kill"; fi
wait $job
rc=$?
# mpirun exits 137 (128 + SIGKILL) after a process died of SIGKILL; 124 would be the hang guard
if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then ok; else bad "the job with a killed process ended with status $rc"; fi
if grep -q "process rank 1 with PID .* exited on signal 9" "$dist_dir/killed.out"; then ok; else bad "no report of the killed process"; sed 's/^/    /' "$dist_dir/killed.out" | head >&2; fi
fi

left=$(strays)
if [ -z "$left" ]; then ok; else bad "MPI processes outlived their test: $left"; for p in $left; do kill -9 "$p" 2>/dev/null; done; fi
rm -rf "$dist_dir"
