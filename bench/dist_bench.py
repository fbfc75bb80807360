#!/usr/bin/env python3
"""How the functional simulation's wall time grows with MPI processes on this machine (docs/pods.md).

    python3 bench/dist_bench.py                 # tpusim train on v3-32 and v4-16, 1 / 2 / 4 processes
    python3 bench/dist_bench.py --jax           # also the JAX script through the plugin (build/venv)
    python3 bench/dist_bench.py --repeat 5 --steps 20,220

Each configuration trains examples/digits_mlp (the CLI) on the same slice with 1 process (every device a
thread of it) and with one process per host or per block of hosts under mpirun, for two step counts; the
runs are interleaved (1, 2, 4, 1, 2, 4, ...) so the machine's load hits them alike, and the best of --repeat
is reported: the wall time of each step count, and from the two the time per step and the fixed cost
(process and MPI start-up, finalize). Every multi-process run's final state must be byte for byte the
one-process one's (the bench fails otherwise). Wall time is what a user waits for.
"""
import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TPUSIM = os.path.join(ROOT, "build", "release", "tpusim")
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def run(cmd, env=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    dt = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return dt


def train_cmd(np_, slice_name, steps, out):
    cmd = [TPUSIM, "train", "examples/digits_mlp", "--slice", slice_name, "--steps", str(steps), "--quiet",
           "--model-dir", out]
    return cmd if np_ == 1 else MPI + ["-np", str(np_)] + cmd


def jax_cmd(np_, out):
    script = os.path.join(ROOT, "python", "tests", "dist", "train_dp.py")
    py = os.path.join(ROOT, "build", "venv", "bin", "python")
    if np_ == 1:
        return [py, script, out]
    fwd = []
    for k in ("JAX_PLATFORMS", "PYTHONPATH", "TPUSIM_PJRT_LIBRARY", "TPUSIM_QUIET", "TPUSIM_SLICE"):
        fwd += ["-x", k]
    return MPI + ["-np", str(np_)] + fwd + [py, script, out, "--distributed"]


def bench(name, configs, repeat, check):
    """configs: [(processes, make_cmd(out_dir))]; returns [(name, processes, best s, median s, load)]."""
    times = {np_: [] for np_, _ in configs}
    outs = {}
    load0 = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="tpusim-dist-bench-")
    try:
        for rep in range(repeat):
            for np_, make in configs:
                out = os.path.join(tmp, f"{np_}-{rep}")
                times[np_].append(run(make(out)))
                outs[np_] = out
        if check:
            ref = outs[configs[0][0]]
            for np_, _ in configs[1:]:
                if not filecmp.cmp(os.path.join(ref, "state.npz"), os.path.join(outs[np_], "state.npz"), shallow=False):
                    sys.exit(f"{name}: {np_} processes ended with another state than 1 process")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()[0]
    return [(name, np_, min(times[np_]), statistics.median(times[np_]), f"{load0:.1f}-{load1:.1f}") for np_, _ in configs]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="20,220", help="two step counts (default 20,220)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jax", action="store_true", help="also the JAX data-parallel script through the plugin")
    a = ap.parse_args()
    s1, s2 = (int(x) for x in a.steps.split(","))
    if not os.path.exists(TPUSIM):
        sys.exit("build tpusim first: make -j2")
    print(f"{os.cpu_count()} CPUs; best and median of {a.repeat}, interleaved; per step and fixed cost from {s1} and {s2} steps")
    print(f"{'benchmark':40s} {'procs':>5s} {'%d steps s' % s1:>11s} {'%d steps s' % s2:>12s} {'per step ms':>12s} "
          f"{'fixed s':>8s} {'load':>9s}")
    for sl, nps in (("v3-32", (1, 2, 4)), ("v4-16", (1, 2))):
        name = f"tpusim train digits_mlp {sl}"
        r1 = bench(name, [(n, lambda out, n=n: train_cmd(n, sl, s1, out)) for n in nps], a.repeat, True)
        r2 = bench(name, [(n, lambda out, n=n: train_cmd(n, sl, s2, out)) for n in nps], a.repeat, True)
        for x, y in zip(r1, r2):
            per = (y[2] - x[2]) / (s2 - s1)
            print(f"{name:40s} {x[1]:5d} {x[2]:11.2f} {y[2]:12.2f} {per * 1e3:12.2f} {x[2] - s1 * per:8.2f} {y[4]:>9s}")
    if a.jax:
        os.environ.update(JAX_PLATFORMS="tpusim", PYTHONPATH=os.path.join(ROOT, "python"), TPUSIM_QUIET="1",
                          TPUSIM_PJRT_LIBRARY=os.path.join(ROOT, "build", "release", "libtpusim_pjrt.so"),
                          TPUSIM_SLICE="v3-32")
        name = "jax train_dp.py v3-32 (whole script)"
        for x in bench(name, [(n, lambda out, n=n: jax_cmd(n, out)) for n in (1, 2, 4)], a.repeat, False):
            print(f"{name:40s} {x[1]:5d} {x[2]:11.2f} {'':>12s} {'':>12s} {'':>8s} {x[4]:>9s}")


if __name__ == "__main__":
    main()
