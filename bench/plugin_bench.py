#!/usr/bin/env python3
"""The PJRT plugin beside jax's CPU backend, in one process and one run, interleaved:

  * per-call latency of a tiny jitted op (x * 2 + 1 on f32[8]): dispatch, transfer and execution overhead
  * steps/s of a training loop: an MLP train step (batch 128, 64 -> 256 -> 256 -> 10, Adam-free SGD) on one
    device, and data parallel over every device of the slice (tpusim only: the CPU backend has one device)

    JAX_PLATFORMS=tpusim,cpu PYTHONPATH=python build/venv/bin/python bench/plugin_bench.py [--repeat 5]

  * with --suite [NAME,...]: every program of the benchmark set (bench/programs.py: the same jax functions
    whose HLO run_bench.py runs) jitted on both backends, interleaved: the first call (compile and run, what
    a new process pays) and the best warm call; geometric mean of the ratios

    PYTHONPATH=python TPUSIM_PJRT_LIBRARY=build/release/libtpusim_pjrt.so build/venv/bin/python bench/plugin_bench.py --suite

Ratios are tpusim's speed over the CPU backend's (> 1: tpusim is faster). Timings are best of --repeat
rounds; the machine's load average is printed before and after. Exact numerics are timed too (f32 dots)
beside the default TPU numerics.
"""
import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "tpusim,cpu")
os.environ.setdefault("TPUSIM_QUIET", "1")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def load():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "?"


def best_of(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def tiny_latency(dev, calls, opts):
    f = jax.jit(lambda x: x * 2 + 1, compiler_options=opts) if opts else jax.jit(lambda x: x * 2 + 1)
    x = jax.device_put(np.ones(8, np.float32), dev)
    f(x).block_until_ready()

    def run():
        y = x
        for _ in range(calls):
            y = f(y)
        y.block_until_ready()
    return run


def mlp_step(p, x, y):
    def loss(p):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        logits = h @ p["w3"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), -1))
    l, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), l


def training(devs, steps, opts):
    r = np.random.RandomState(0)
    p = {"w1": r.randn(64, 256).astype(np.float32) * 0.1, "b1": np.zeros(256, np.float32),
         "w2": r.randn(256, 256).astype(np.float32) * 0.06, "b2": np.zeros(256, np.float32),
         "w3": r.randn(256, 10).astype(np.float32) * 0.06}
    x, y = r.randn(128, 64).astype(np.float32), r.randint(0, 10, 128).astype(np.int32)
    if len(devs) > 1:
        mesh = Mesh(np.array(devs), ("d",))
        p = jax.device_put(p, NamedSharding(mesh, P()))
        x, y = jax.device_put((x, y), NamedSharding(mesh, P("d")))
    else:
        p, x, y = jax.device_put((p, x, y), devs[0])
    step = jax.jit(mlp_step, compiler_options=opts) if opts else jax.jit(mlp_step)
    state = {"p": step(p, x, y)[0]}
    jax.block_until_ready(state["p"])

    def run():
        q = state["p"]
        for _ in range(steps):
            q, loss = step(q, x, y)
        jax.block_until_ready(loss)
    return run


def suite(names, repeat, budget):
    """Each benchmark program jitted on tpusim (TPU numerics) and on jax's CPU backend, interleaved."""
    import math
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import programs
    tpu, cpu = jax.devices()[0], jax.devices("cpu")[0]
    names = names or programs.order()
    print(f"load before: {load()}   {len(names)} programs")
    rows = []
    for name in names:
        fn, args = programs.make_args(name)
        runs = {}
        for who, dev, opts in (("cpu", cpu, None), ("tpusim", tpu, {"tpusim_numerics": "tpu"})):
            f = jax.jit(fn, compiler_options=opts) if opts else jax.jit(fn)
            a = jax.device_put(args, dev)
            t0 = time.perf_counter()
            jax.block_until_ready(f(*a))
            runs[who] = (f, a, time.perf_counter() - t0)
        best = {who: float("inf") for who in runs}
        t_start, rounds = time.perf_counter(), 0
        while rounds < repeat or (time.perf_counter() - t_start < budget and rounds < 50):
            for who, (f, a, _) in runs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(*a))
                best[who] = min(best[who], time.perf_counter() - t0)
            rounds += 1
        r = (name, runs["cpu"][2], runs["tpusim"][2], best["cpu"], best["tpusim"])
        rows.append(r)
        print(f"  {name:24s} first call cpu {r[1]:7.3f} s tpusim {r[2]:7.3f} s   warm cpu {r[3] * 1e3:9.3f} ms "
              f"tpusim {r[4] * 1e3:9.3f} ms  {r[3] / r[4]:5.2f}x  (load {load().split()[0]})", flush=True)
        del runs
    g = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    print("\n| program | CPU backend first call s | tpusim first call s | CPU backend warm ms | tpusim warm ms | "
          "warm tpusim/CPU speed |")
    print("|---|---|---|---|---|---|")
    for n, fc, ft, wc, wt in rows:
        print(f"| {n} | {fc:.3f} | {ft:.3f} | {wc * 1e3:.3f} | {wt * 1e3:.3f} | {wc / wt:.2f}x |")
    print(f"| geometric mean ({len(rows)}) | | | | | {g([r[3] / r[4] for r in rows]):.2f}x (first call "
          f"{g([r[1] / r[2] for r in rows]):.2f}x) |")
    print(f"\nload after: {load()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--suite", nargs="?", const="", default=None, help="the benchmark set (comma-separated names)")
    ap.add_argument("--budget", type=float, default=1.0, help="--suite: seconds of warm rounds per program")
    a = ap.parse_args()
    if a.suite is not None:
        suite([n for n in a.suite.split(",") if n], a.repeat, a.budget)
        return
    tpu, cpu = jax.devices(), jax.devices("cpu")
    exact, tpun = {"tpusim_numerics": "exact"}, {"tpusim_numerics": "tpu"}
    print(f"load before: {load()}   tpusim: {tpu[0].client.platform_version.splitlines()[-1]}   cpu: {os.cpu_count()} cores")
    rows = []
    cases = [
        ("tiny op x*2+1, per call", a.calls, [("cpu", lambda: tiny_latency(cpu[0], a.calls, None)),
                                             ("tpusim", lambda: tiny_latency(tpu[0], a.calls, tpun))]),
        ("MLP train step, 1 device", a.steps, [("cpu", lambda: training(cpu, a.steps, None)),
                                              ("tpusim", lambda: training(tpu[:1], a.steps, tpun)),
                                              ("tpusim exact", lambda: training(tpu[:1], a.steps, exact))]),
        (f"MLP train step, data parallel x{len(tpu)}", a.steps, [("tpusim", lambda: training(tpu, a.steps, tpun))]),
    ]
    for name, n, runners in cases:
        prepared = [(who, make()) for who, make in runners]
        times = {who: float("inf") for who, _ in prepared}
        for _ in range(a.repeat):   # interleaved rounds
            for who, run in prepared:
                times[who] = min(times[who], best_of(run, 1))
        rows.append((name, n, times))
    print()
    print("| measure | CPU backend | tpusim (TPU numerics) | tpusim exact | tpusim/CPU speed |")
    print("|---|---|---|---|---|")
    for name, n, t in rows:
        per = "per call" in name
        fmt = (lambda s: f"{s / n * 1e6:.1f} us") if per else (lambda s: f"{n / s:.1f} steps/s")
        cpu_s, tpu_s = t.get("cpu"), t.get("tpusim")
        ratio = f"{cpu_s / tpu_s:.2f}x" if cpu_s and tpu_s else "-"
        print(f"| {name} | {fmt(cpu_s) if cpu_s else '-'} | {fmt(tpu_s)} | "
              f"{fmt(t['tpusim exact']) if 'tpusim exact' in t else '-'} | {ratio} |")
    print(f"\nload after: {load()}")


if __name__ == "__main__":
    main()
