#!/usr/bin/env python3
"""Builds tests/train/bn_tiny: a tiny STEP_DIR with batch-norm running statistics (role "stat") and a bf16
parameter, so that t_train.c checks the trainer's averaging of new statistics over the replicas and its
bf16 gradient all-reduce (convert, f32 sum, convert back) against single-core training on the full batch.

    PYTHONPATH=python python3 tests/train/make_bn_tiny.py

Model: x f32[6] -> dense 6x12 -> batch norm (batch statistics in training, running mean/var as state)
-> relu -> dense 12x3 (bf16 weights) -> softmax cross-entropy; momentum SGD, constant learning rate.
Data: 96 training and 20 test examples of a fixed random problem (numpy seed 0).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np                      # noqa: E402
import jax                              # noqa: E402
import jax.numpy as jnp                 # noqa: E402

import tpusim                           # noqa: E402
from tpusim import nn, optim, schedules, data as dsets   # noqa: E402

OUT = os.path.join(HERE, "bn_tiny")
B = 4


def forward(p, s, x, train):
    h = nn.dense(x, p["w0"], p["b0"])
    if train:
        mean, var = jnp.mean(h, 0), jnp.var(h, 0)
        new_s = {"mean": 0.9 * s["mean"] + 0.1 * mean, "var": 0.9 * s["var"] + 0.1 * var}
    else:
        mean, var, new_s = s["mean"], s["var"], s
    h = (h - mean) / jnp.sqrt(var + 1e-5) * p["gamma"] + p["beta"]
    h = jax.nn.relu(h)
    return nn.dense(h, p["w1"].astype(jnp.float32), p["b1"]), new_s


def loss_fn(p, s, batch):
    logits, new_s = forward(p, s, batch["x"], True)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["y"][:, None], axis=1)[:, 0]
    acc = jnp.mean((jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32))
    return jnp.mean(nll), {"accuracy": acc}, new_s


def eval_fn(p, s, batch):
    logits, _ = forward(p, s, batch["x"], False)
    m = batch["mask"]
    correct = (jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32)
    return {"correct": jnp.sum(correct * m), "count": jnp.sum(m)}


def main():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 3))
    x = rng.normal(size=(116, 6)).astype(np.float32)
    y = np.argmax(x @ w + 0.3 * rng.normal(size=(116, 3)), 1).astype(np.int32)
    k0, k1 = jax.random.split(jax.random.PRNGKey(0))
    params = {"w0": jax.random.normal(k0, (6, 12)) * 0.5, "b0": jnp.zeros(12), "gamma": jnp.ones(12),
              "beta": jnp.zeros(12), "w1": (jax.random.normal(k1, (12, 3)) * 0.3).astype(jnp.bfloat16),
              "b1": jnp.zeros(3)}
    stats = {"mean": jnp.zeros(12), "var": jnp.ones(12)}
    tpusim.export_train_step(
        OUT, loss_fn, params, stats=stats, name="bn_tiny",
        batch_spec={"x": tpusim.batch_input((6,), "f32"), "y": tpusim.batch_input((), "s32")},
        optimizer=optim.momentum(0.05, beta=0.9), per_replica_batch=B, eval_fn=eval_fn,
        hypers={"learning_rate": schedules.constant(0.05)}, reference_replicas=8,
        eval_report={"accuracy": ("correct", "count")},
        data={"train": "data/train", "eval": "data/test"})
    dsets.write_npz_shards(os.path.join(OUT, "data/train"), {"x": x[:96], "y": y[:96]}, num_shards=1)
    dsets.write_npz_shards(os.path.join(OUT, "data/test"), {"x": x[96:], "y": y[96:]}, num_shards=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
