#!/usr/bin/env python3
"""Builds examples/lstm_weather: an LSTM forecasting a synthetic multi-variable hourly weather series.

    PYTHONPATH=python python3 examples/lstm_weather/make_example.py [--steps 165] [--replicas 8] [--no-sim]

The series (generate() below; fixed seed) is hourly, 365 + 90 days, four variables:
    temperature  deg C   10 + 8 sin(2 pi (day - 110) / 365)                    seasonal cycle, warmest late July
                         + (4 + 1.5 sin(...same...)) sin(2 pi (hour - 9) / 24)  daily cycle, larger in summer
                         + a_T                                                  AR(1) weather, phi 0.97, sd 0.5/h
    pressure     hPa     1013 + a_P + 0.6 sin(4 pi hour / 24)                   slow AR(1) (phi 0.995, sd 0.45/h)
                                                                                 + the semi-diurnal tide
    humidity     %       70 - 2.0 (T - seasonal T) - 0.8 (P - 1013) + a_H      drier when warm (daily) and under
                         clipped to [5, 100]                                    high pressure; AR(1) phi 0.9, sd 1.5
    wind         m/s     |3 + 1.2 max(0, -(P(t) - P(t-6))) + 1.0 sin(2 pi (hour - 12) / 24) + a_W|
                                                                                 stronger when pressure falls;
                                                                                 AR(1) phi 0.8, sd 0.6
The first 365 days train, the last 90 test. Variables are standardised with the training mean and sd.
An example is a 24-hour window of the four variables (x: f32[24,4]) and the next hour's values (y: f32[4]);
training windows start every 6 hours, test windows every 6 hours.

Writes next to this script: the STEP_DIR (signature.json, step/grad/apply/eval.hlo, init_state.npz) and the
data in the cached format, data/train.tpuds and data/test.tpuds; checks with tpusim; simulates training.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np                      # noqa: E402
import jax                              # noqa: E402
import jax.numpy as jnp                 # noqa: E402

import tpusim                           # noqa: E402
from tpusim import nn, optim, schedules, data as dsets, simulate, verify   # noqa: E402

WINDOW, STRIDE, HIDDEN, NVAR = 24, 6, 32, 4
PER_REPLICA, REPLICAS = 16, 8
MAX_LR = 0.01
VARS = ("temperature", "pressure", "humidity", "wind")


def ar1(rng, n, phi, sd):
    e = rng.normal(0.0, sd, n)
    out = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc = phi * acc + e[i]
        out[i] = acc
    return out


def generate(days=455, seed=7):
    rng = np.random.default_rng(seed)
    n = days * 24
    t = np.arange(n)
    hour, day = t % 24, t / 24.0
    season = np.sin(2 * np.pi * (day - 110) / 365.0)
    t_season = 10 + 8 * season
    temp = t_season + (4 + 1.5 * season) * np.sin(2 * np.pi * (hour - 9) / 24) + ar1(rng, n, 0.97, 0.5)
    pres = 1013 + ar1(rng, n, 0.995, 0.45) + 0.6 * np.sin(4 * np.pi * hour / 24)
    hum = np.clip(70 - 2.0 * (temp - t_season) - 0.8 * (pres - 1013) + ar1(rng, n, 0.9, 1.5), 5, 100)
    dp = np.concatenate([np.zeros(6), pres[6:] - pres[:-6]])
    wind = np.abs(3 + 1.2 * np.maximum(0, -dp) + 1.0 * np.sin(2 * np.pi * (hour - 12) / 24) + ar1(rng, n, 0.8, 0.6))
    return np.stack([temp, pres, hum, wind], axis=1)          # [hours, 4]


def windows(series, stride):
    starts = np.arange(0, len(series) - WINDOW, stride)
    x = np.stack([series[s:s + WINDOW] for s in starts]).astype(np.float32)
    y = np.stack([series[s + WINDOW] for s in starts]).astype(np.float32)
    return {"x": x, "y": y}


def init_params(key):
    k1, k2, k3 = jax.random.split(key, 3)
    s = 1.0 / np.sqrt(HIDDEN)
    return {"wx": jax.random.uniform(k1, (NVAR, 4 * HIDDEN), jnp.float32, -s, s),
            "wh": jax.random.uniform(k2, (HIDDEN, 4 * HIDDEN), jnp.float32, -s, s),
            "b": jnp.zeros((4 * HIDDEN,), jnp.float32).at[HIDDEN:2 * HIDDEN].set(1.0),   # forget-gate bias 1
            "wo": jax.random.uniform(k3, (HIDDEN, NVAR), jnp.float32, -s, s),
            "bo": jnp.zeros((NVAR,), jnp.float32)}


def predict(p, x):
    """x: [B, 24, 4] -> next hour [B, 4] (a residual on the last observed hour)."""
    B = x.shape[0]

    def cell(carry, xt):
        h, c = carry
        z = nn.dense(xt, p["wx"]) + nn.dense(h, p["wh"]) + p["b"]
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), None
    zeros = jnp.zeros((B, HIDDEN), jnp.float32)
    (h, _), _ = jax.lax.scan(cell, (zeros, zeros), jnp.swapaxes(x, 0, 1))
    return x[:, -1, :] + nn.dense(h, p["wo"], p["bo"])


def loss_fn(p, batch):
    err = predict(p, batch["x"]) - batch["y"]
    return jnp.mean(err * err)


def eval_fn(p, batch):
    m = batch["mask"][:, None]
    sq = jnp.square(predict(p, batch["x"]) - batch["y"]) * m                     # [B, 4]
    pers = jnp.square(batch["x"][:, -1, :] - batch["y"]) * m                      # "next hour = this hour"
    out = {"se_sum": jnp.sum(jnp.mean(sq, -1)), "persistence_se_sum": jnp.sum(jnp.mean(pers, -1)),
           "count": jnp.sum(m)}
    for k, name in enumerate(VARS):
        out[name + "_se_sum"] = jnp.sum(sq[:, k])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=165)
    ap.add_argument("--replicas", type=int, default=REPLICAS)
    ap.add_argument("--no-sim", action="store_true")
    args = ap.parse_args()

    series = generate()
    train_s, test_s = series[:365 * 24], series[365 * 24:]
    mean, sd = train_s.mean(0), train_s.std(0)
    train = windows((train_s - mean) / sd, STRIDE)
    test = windows((test_s - mean) / sd, STRIDE)
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    dsets.write_cached(os.path.join(HERE, "data", "train.tpuds"), train)
    dsets.write_cached(os.path.join(HERE, "data", "test.tpuds"), test)
    print("data: %d train, %d test windows; mean %s sd %s" % (len(train["y"]), len(test["y"]),
                                                              np.round(mean, 2), np.round(sd, 2)))

    report = {"mse": ("se_sum", "count"), "persistence_mse": ("persistence_se_sum", "count")}
    report.update({name + "_mse": (name + "_se_sum", "count") for name in VARS})
    ts = tpusim.export_train_step(
        HERE, loss_fn, init_params(jax.random.PRNGKey(1)),
        batch_spec={"x": tpusim.batch_input((WINDOW, NVAR), "f32"), "y": tpusim.batch_input((NVAR,), "f32")},
        optimizer=optim.adam(MAX_LR), per_replica_batch=PER_REPLICA, eval_fn=eval_fn,
        hypers={"learning_rate": schedules.one_cycle(MAX_LR)}, name="lstm_weather",
        reference_replicas=REPLICAS, eval_report=report,
        data={"train": "data/train.tpuds", "eval": "data/test.tpuds",
              "normalisation": {"variables": list(VARS), "mean": [float(v) for v in mean],
                                "sd": [float(v) for v in sd]}})
    print("exported: %d state arrays, %d parameters" % (
        ts.S, sum(int(np.prod(e["shape"])) for e in ts.state_entries if e["role"] == "param")))

    ok = verify.verify_step_dir(HERE)
    if ok is False:
        return 1
    if ok:
        batch = [train["x"][:PER_REPLICA], train["y"][:PER_REPLICA]]
        for kind in ("grad", "step"):
            worst = max(verify.compare_step(ts, HERE, batch, kind=kind), key=lambda t: t[1])
            print("tpusim %s.hlo vs jax (simulated TPU numerics): worst relative difference %.2e (%s)"
                  % (kind, worst[1], worst[0]))
    if not args.no_sim:
        R = args.replicas
        per_epoch = len(train["y"]) // (PER_REPLICA * R)
        print("simulating %d replicas x %d, %d steps per epoch, %d steps, TPU numerics"
              % (R, PER_REPLICA, per_epoch, args.steps))
        sim = simulate.Simulator(ts, R, tpu=True)
        _, hist = sim.train(train, args.steps, eval_data=test, eval_every=per_epoch * 5, log=None)
        for step, rep in hist["evals"]:
            print("step %4d  test mse %.4f (persistence %.4f)  %s" % (
                step, rep["mse"], rep["persistence_mse"],
                " ".join("%s %.3f" % (v, rep[v + "_mse"]) for v in VARS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
