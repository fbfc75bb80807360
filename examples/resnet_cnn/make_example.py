#!/usr/bin/env python3
"""Builds examples/resnet_cnn: a small ResNet-style CNN (batch norm, residual blocks) on generated 32x32 images.

    PYTHONPATH=python python3 examples/resnet_cnn/make_example.py [--steps 240] [--replicas 8] [--no-sim]

The images (generate() below; fixed seeds): a background of one random colour (each channel 40..140) with a
vertical brightness gradient, and one filled shape — circle, square or triangle, radius 6..11 px at a random
place — in a red, green or blue colour jittered by +-35 per channel. The class is shape x colour: 9 classes.
2048 training and 512 test images, x: u8[32,32,3], y: s32; written as compressed .npz shards.

The model: conv3x3(8)-BN-ReLU, then three residual blocks (8, 16 stride 2, 32 stride 2; each two conv3x3-BN
with a 1x1 conv-BN shortcut when the shape changes), global average pooling, a dense layer to 9 classes.
Batch norm uses the per-replica batch statistics in training and running averages (momentum 0.1, PyTorch's
convention and unbiased variance) in evaluation: the running averages are `stat` state entries, averaged over
replicas by the trainer. SGD with Nesterov momentum 0.9, weight decay 5e-4 on the conv/dense weights,
one-cycle learning rate (max 0.2, tuned for 8 replicas), 16 images per replica.
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

PER_REPLICA, REPLICAS = 16, 8
MAX_LR = 0.2
WIDTHS = (8, 16, 32)
NCLASS = 9
SHAPES = ("circle", "square", "triangle")
COLOURS = ("red", "green", "blue")


def generate(n, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32] + 0.5
    x = np.empty((n, 32, 32, 3), np.uint8)
    y = np.empty(n, np.int32)
    base = np.array([[210, 50, 50], [50, 190, 60], [50, 80, 220]], float)
    for i in range(n):
        shape, colour = rng.integers(3), rng.integers(3)
        img = rng.uniform(40, 140, 3)[None, None, :] + rng.uniform(-30, 30) * (yy[..., None] / 32 - 0.5)
        r = rng.uniform(6, 11)
        cx, cy = rng.uniform(r, 32 - r, 2)
        if shape == 0:
            m = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
        elif shape == 1:
            m = (abs(xx - cx) <= r * 0.8) & (abs(yy - cy) <= r * 0.8)
        else:
            m = (yy >= cy - r) & (yy <= cy + r * 0.8) & (abs(xx - cx) <= (yy - (cy - r)) * 0.6)
        img[m] = base[colour] + rng.uniform(-35, 35, 3)
        x[i] = np.clip(img, 0, 255).astype(np.uint8)
        y[i] = shape * 3 + colour
    return {"x": x, "y": y}


def he(key, shape):
    fan_in = int(np.prod(shape[:-1]))
    return jax.random.normal(key, shape, jnp.float32) * np.sqrt(2.0 / fan_in)


def init(key):
    params, stats = {}, {}
    keys = iter(jax.random.split(key, 32))

    def conv_bn(name, k, cin, cout):
        params[name + "/w"] = he(next(keys), (k, k, cin, cout))
        params[name + "/scale"] = jnp.ones((cout,), jnp.float32)
        params[name + "/bias"] = jnp.zeros((cout,), jnp.float32)
        stats[name + "/mean"] = jnp.zeros((cout,), jnp.float32)
        stats[name + "/var"] = jnp.ones((cout,), jnp.float32)
    conv_bn("stem", 3, 3, WIDTHS[0])
    cin = WIDTHS[0]
    for b, w in enumerate(WIDTHS):
        conv_bn("b%d/c1" % b, 3, cin, w)
        conv_bn("b%d/c2" % b, 3, w, w)
        if w != cin:
            conv_bn("b%d/proj" % b, 1, cin, w)
        cin = w
    params["head/w"] = jax.random.normal(next(keys), (cin, NCLASS), jnp.float32) / np.sqrt(cin)
    params["head/b"] = jnp.zeros((NCLASS,), jnp.float32)
    return params, stats


def forward(p, s, x, train):
    new = {}

    def conv_bn(name, h, stride=1, relu=True):
        h = nn.conv(h, p[name + "/w"], stride)
        if train:
            mean = jnp.mean(h, axis=(0, 1, 2))
            var = jnp.mean(jnp.square(h - mean), axis=(0, 1, 2))
            n = h.shape[0] * h.shape[1] * h.shape[2]
            new[name + "/mean"] = 0.9 * s[name + "/mean"] + 0.1 * mean
            new[name + "/var"] = 0.9 * s[name + "/var"] + 0.1 * var * (n / (n - 1.0))
        else:
            mean, var = s[name + "/mean"], s[name + "/var"]
        h = (h - mean) * (jax.lax.rsqrt(var + 1e-5) * p[name + "/scale"]) + p[name + "/bias"]
        return jax.nn.relu(h) if relu else h

    h = conv_bn("stem", x.astype(jnp.float32) / 255.0 - 0.5)
    cin = WIDTHS[0]
    for b, w in enumerate(WIDTHS):
        stride = 1 if b == 0 else 2
        r = conv_bn("b%d/c2" % b, conv_bn("b%d/c1" % b, h, stride), relu=False)
        sc = conv_bn("b%d/proj" % b, h, stride, relu=False) if w != cin else h
        h = jax.nn.relu(r + sc)
        cin = w
    h = jnp.mean(h, axis=(1, 2))
    return nn.dense(h, p["head/w"], p["head/b"]), new


def xent(logits, y):
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]


def loss_fn(p, s, batch):
    logits, new = forward(p, s, batch["x"], True)
    acc = jnp.mean((jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32))
    return jnp.mean(xent(logits, batch["y"])), {"accuracy": acc}, new


def eval_fn(p, s, batch):
    logits, _ = forward(p, s, batch["x"], False)
    m = batch["mask"]
    correct = (jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32)
    return {"loss_sum": jnp.sum(xent(logits, batch["y"]) * m), "correct": jnp.sum(correct * m), "count": jnp.sum(m)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--replicas", type=int, default=REPLICAS)
    ap.add_argument("--no-sim", action="store_true")
    args = ap.parse_args()

    train, test = generate(2048, 1), generate(512, 2)
    dsets.write_npz_shards(os.path.join(HERE, "data", "train"), train, num_shards=2, compress=True)
    dsets.write_npz_shards(os.path.join(HERE, "data", "test"), test, num_shards=1, compress=True)

    params, stats = init(jax.random.PRNGKey(2))
    ts = tpusim.export_train_step(
        HERE, loss_fn, params, stats=stats,
        batch_spec={"x": tpusim.batch_input((32, 32, 3), "u8"), "y": tpusim.batch_input((), "s32")},
        optimizer=optim.momentum(MAX_LR, 0.9, nesterov=True, weight_decay=5e-4,
                                 decay_mask=lambda name: name.endswith("/w")),
        per_replica_batch=PER_REPLICA, eval_fn=eval_fn, hypers={"learning_rate": schedules.one_cycle(MAX_LR)},
        name="resnet_cnn", reference_replicas=REPLICAS,
        eval_report={"accuracy": ("correct", "count"), "loss": ("loss_sum", "count")},
        data={"train": "data/train", "eval": "data/test",
              "classes": ["%s %s" % (c, s) for s in SHAPES for c in COLOURS]})
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
        sim.train(train, args.steps, eval_data=test, eval_every=per_epoch * 5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
