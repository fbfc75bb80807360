"""An ordinary JAX training script: an MLP on scikit-learn's handwritten digits, data parallel over every
device jax sees (batch sharded, parameters replicated), with Adam. Nothing in it knows about tpusim:

    python examples/jax/train_digits.py                                   # jax's CPU (or your accelerator)
    JAX_PLATFORMS=tpusim TPUSIM_SLICE=v3-8 python examples/jax/train_digits.py    # a simulated TPU v3-8

The data (1797 8x8 images, 80/20 split) is the copy kept in examples/digits_mlp/data as .npz shards.
"""
import glob
import os
import time

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "digits_mlp", "data")
STEPS, PER_DEVICE_BATCH, LR = 165, 16, 3e-3


def load(split):
    parts = [np.load(f) for f in sorted(glob.glob(os.path.join(DATA, split, "*.npz")))]
    x = np.concatenate([p["x"] for p in parts]).astype(np.float32) / 16.0
    y = np.concatenate([p["y"] for p in parts]).astype(np.int32)
    return x, y


def init(key, sizes=(64, 128, 64, 10)):
    params = []
    for k, (n, m) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
        params.append({"w": jax.random.normal(k, (n, m)) * jnp.sqrt(2.0 / n), "b": jnp.zeros(m)})
    return params


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    logits = forward(params, x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), axis=-1))


@jax.jit
def train_step(params, opt, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    t = opt["t"] + 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["v"], grads)
    scale = LR * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, {"t": t, "m": m, "v": v}, loss


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(forward(params, x), -1) == y)


def main():
    devices = jax.devices()
    print(f"training on {len(devices)} x {devices[0].device_kind} ({jax.default_backend()}): "
          f"{devices[0].client.platform_version}")
    mesh = Mesh(np.array(devices), ("data",))
    batch_sharding, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    (xtr, ytr), (xte, yte) = load("train"), load("test")
    batch = PER_DEVICE_BATCH * len(devices)
    params = jax.device_put(init(jax.random.PRNGKey(0)), replicated)
    opt = jax.device_put({"t": jnp.zeros((), jnp.int32), "m": jax.tree.map(jnp.zeros_like, params),
                          "v": jax.tree.map(jnp.zeros_like, params)}, replicated)
    rng = np.random.RandomState(0)
    order = rng.permutation(len(xtr))
    start, pos = time.time(), 0
    for step in range(1, STEPS + 1):
        if pos + batch > len(order):
            order, pos = rng.permutation(len(xtr)), 0
        idx = order[pos:pos + batch]
        pos += batch
        x, y = jax.device_put((xtr[idx], ytr[idx]), batch_sharding)
        params, opt, loss = train_step(params, opt, x, y)
        if step % 15 == 0 or step == 1:
            print(f"step {step:4d}  loss {float(loss):.4f}")
    elapsed = time.time() - start
    acc = float(accuracy(params, *jax.device_put((xte, yte), replicated)))
    print(f"test accuracy {100 * acc:.2f}% after {STEPS} steps of {batch} examples "
          f"({STEPS / elapsed:.0f} steps/s on this host)")
    return acc


if __name__ == "__main__":
    main()
