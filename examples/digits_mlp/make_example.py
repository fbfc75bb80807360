#!/usr/bin/env python3
"""Builds examples/digits_mlp: an MLP on scikit-learn's handwritten digits (1797 8x8 images, 10 classes).

    pip install scikit-learn            # only for load_digits; jax and numpy are the other needs
    PYTHONPATH=python python3 examples/digits_mlp/make_example.py [--steps 165] [--replicas 8] [--exact] [--no-sim] [--no-lr-find]

Writes, next to this script:
    signature.json step.hlo grad.hlo apply.hlo eval.hlo init_state.npz   the STEP_DIR (docs/step_dir.md)
    data/train/shard-0000{0,1}.npz  data/test/shard-00000.npz            the data as .npz shards
    data/train.tpuds  data/test.tpuds                                    and in the cached format
    lr_find.svg                                                          the learning-rate finder's plot (tpusim)
then checks every program with tpusim (check, run), compares tpusim's step.hlo with jax's step under
simulated TPU numerics, and simulates data-parallel training on 8 replicas (v3-8) in jax.
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
from tpusim import nn, optim, schedules, data as dsets   # noqa: E402
from tpusim import simulate, verify, lr_find            # noqa: E402

PER_REPLICA = 16          # 8 replicas x 16 = 128 examples per step on a v3-8
REPLICAS = 8
HIDDEN = (128, 64)
MAX_LR = 0.01


def load():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = d.data.astype(np.uint8)            # pixel values 0..16
    y = d.target.astype(np.int32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return {"x": xtr, "y": ytr}, {"x": xte, "y": yte}


def init_params(key):
    sizes = (64,) + HIDDEN + (10,)
    p = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        key, k = jax.random.split(key)
        p["w%d" % i] = jax.random.normal(k, (a, b), jnp.float32) * np.sqrt(2.0 / a)
        p["b%d" % i] = jnp.zeros((b,), jnp.float32)
    return p


def logits_of(p, x):
    h = x.astype(jnp.float32) / 16.0
    n = len(HIDDEN) + 1
    for i in range(n):
        h = nn.dense(h, p["w%d" % i], p["b%d" % i])
        if i < n - 1:
            h = jax.nn.relu(h)
    return h


def loss_fn(p, batch):
    logits = logits_of(p, batch["x"])
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, batch["y"][:, None], axis=1)[:, 0]
    acc = jnp.mean((jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32))
    return jnp.mean(nll), {"accuracy": acc}


def eval_fn(p, batch):
    logits = logits_of(p, batch["x"])
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["y"][:, None], axis=1)[:, 0]
    m = batch["mask"]
    correct = (jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32)
    return {"loss_sum": jnp.sum(nll * m), "correct": jnp.sum(correct * m), "count": jnp.sum(m)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=165, help="simulated steps (11 per epoch on 8 replicas)")
    ap.add_argument("--replicas", type=int, default=REPLICAS, help="simulated replicas (linear LR scaling)")
    ap.add_argument("--exact", action="store_true", help="simulate with f32 matmuls instead of TPU numerics")
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--no-lr-find", action="store_true")
    args = ap.parse_args()

    train, test = load()
    dsets.write_npz_shards(os.path.join(HERE, "data", "train"), train, num_shards=2)
    dsets.write_npz_shards(os.path.join(HERE, "data", "test"), test, num_shards=1)
    dsets.write_cached(os.path.join(HERE, "data", "train.tpuds"), train)
    dsets.write_cached(os.path.join(HERE, "data", "test.tpuds"), test)
    print("data: %d train, %d test examples" % (len(train["y"]), len(test["y"])))

    ts = tpusim.export_train_step(
        HERE, loss_fn, init_params(jax.random.PRNGKey(0)),
        batch_spec={"x": tpusim.batch_input((64,), "u8"), "y": tpusim.batch_input((), "s32")},
        optimizer=optim.adam(MAX_LR), per_replica_batch=PER_REPLICA, eval_fn=eval_fn,
        hypers={"learning_rate": schedules.one_cycle(MAX_LR)},
        name="digits_mlp", reference_replicas=REPLICAS,
        eval_report={"accuracy": ("correct", "count"), "loss": ("loss_sum", "count")},
        data={"train": "data/train", "eval": "data/test", "cached": {"train": "data/train.tpuds",
                                                                     "eval": "data/test.tpuds"}})
    print("exported %s: %d state arrays, %d parameters" % (
        HERE, ts.S, sum(int(np.prod(e["shape"])) for e in ts.state_entries if e["role"] == "param")))

    ok = verify.verify_step_dir(HERE)
    if ok is False:
        return 1
    if ok:
        batch = [train["x"][:PER_REPLICA], train["y"][:PER_REPLICA]]
        for kind in ("grad", "step"):
            worst = max(verify.compare_step(ts, HERE, batch, kind=kind), key=lambda t: t[1])
            print("tpusim %s.hlo vs jax (simulated TPU numerics): worst relative difference %.2e (%s)"
                  % (kind, worst[1], worst[0]))
        if not args.no_lr_find:
            res = lr_find.lr_find(HERE, data=os.path.join(HERE, "data", "train.tpuds"),
                                  lr_min=1e-5, lr_max=1.0, steps=100)
            lr_find.plot_svg(res["points"], os.path.join(HERE, "lr_find.svg"), res["suggestion"],
                             title="digits_mlp: learning-rate finder on tpusim (1 device, batch %d)" % PER_REPLICA)
            print("lr_find on tpusim: %d steps, suggestion %.3g (lr_find.svg)" % (len(res["points"]), res["suggestion"]))

    if not args.no_sim:
        R = args.replicas
        sim = simulate.Simulator(ts, R, tpu=not args.exact)
        steps_per_epoch = len(train["y"]) // (PER_REPLICA * R)
        print("simulating %d replicas x %d = %d per step, %d steps per epoch, %d steps, %s numerics"
              % (R, PER_REPLICA, PER_REPLICA * R, steps_per_epoch, args.steps, "f32" if args.exact else "TPU"))
        _, hist = sim.train(train, args.steps, eval_data=test, eval_every=steps_per_epoch * 5)
        first = next((s for s, r in hist["evals"] if r["accuracy"] >= 0.95), None)
        print("final test accuracy %.4f; first eval at >= 95%%: step %s" % (hist["evals"][-1][1]["accuracy"], first))
    return 0


if __name__ == "__main__":
    sys.exit(main())
