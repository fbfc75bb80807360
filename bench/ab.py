"""Interleaved A/B of two bench_run binaries on programs of bench/programs (CPU and wall time).

    python3 bench/ab.py OLD_BENCH_RUN NEW_BENCH_RUN ROUNDS REPS prog1,prog2,...   (THREADS=1 to pass --threads 1)

Run from the repository root after run_bench.py (or programs.write_inputs) has made BUILD/bench/NAME/inputs.npz
(BUILD: $BUILD or build/release). Each round runs every program once with each binary, alternating which goes
first; each run is `bench_run PROG --inputs NPZ --reps REPS --warmup 2` and contributes its median CPU and wall
time. Prints per program the medians over rounds and in how many rounds the new binary took less CPU time, with
the load average. Build both binaries the same way (e.g. CC="gcc -falign-functions=64"): code placement alone
moved hot GEMM loops by 5-7% between otherwise equal builds."""
import json
import os
import statistics
import subprocess
import sys

old, new, rounds, reps, progs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split(',')
build = os.environ.get('BUILD', 'build/release')
extra = ['--threads', os.environ['THREADS']] if os.environ.get('THREADS') else []
res = {p: {'old': [], 'new': []} for p in progs}
for r in range(rounds):
    for p in progs:
        order = [('old', old), ('new', new)] if r % 2 == 0 else [('new', new), ('old', old)]
        for tag, b in order:
            out = subprocess.run([b, 'bench/programs/%s.hlo' % p, '--inputs', '%s/bench/%s/inputs.npz' % (build, p),
                                  '--reps', str(reps), '--warmup', '2'] + extra, capture_output=True, text=True, check=True)
            d = json.loads(out.stdout.strip().splitlines()[-1])
            res[p][tag].append((statistics.median(d['cpu']), statistics.median(d['wall'])))
print('load', open('/proc/loadavg').read().strip())
for p in progs:
    o, n = res[p]['old'], res[p]['new']
    oc, nc = statistics.median(x[0] for x in o), statistics.median(x[0] for x in n)
    ow, nw = statistics.median(x[1] for x in o), statistics.median(x[1] for x in n)
    wins = sum(1 for a, b in zip(o, n) if b[0] < a[0])
    print('%-20s cpu old %.0f us new %.0f us (%+.1f%%)  wall old %.0f us new %.0f us (%+.1f%%)  new faster in %d/%d rounds' %
          (p, oc * 1e6, nc * 1e6, 100 * (nc / oc - 1), ow * 1e6, nw * 1e6, 100 * (nw / ow - 1), wins, rounds))
