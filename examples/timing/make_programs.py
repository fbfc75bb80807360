#!/usr/bin/env python3
"""Builds the HLO programs of the timing validation (docs/timing-validation.md) with JAX.

Each program is what one TPU device runs for one published measurement, lowered to HLO text with
jax.jit(f).lower(...).as_text(dialect='hlo'). Data-parallel programs are written with shard_map and a psum
(as the Flax ImageNet example does with pmap/pmean); the per-device body with its all-reduce is cut out of
the lowered module and becomes the entry computation. tpusim profiles shapes only, so big shapes cost
nothing; metadata is stripped to keep the files small.

    python3 examples/timing/make_programs.py          # writes examples/timing/*.hlo
    python3 examples/timing/make_programs.py --sync-bn   # what-if only (not committed): the 32/core step
                                                         # with cross-replica batch norm, *_syncbn.hlo

Needs jax (CPU is enough). Not run by `make test`; the .hlo files are committed.
"""
import functools
import os
import re
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=32")

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

OUT = os.path.dirname(os.path.abspath(__file__))


def strip(text):
    text = re.sub(r", metadata=\{[^{}]*\}", "", text)
    text = re.sub(r", frontend_attributes=\{[^{}]*\}", "", text)
    text = re.sub(r", sharding=\{[^{}]*\}", "", text)
    return text


def write(name, text):
    path = os.path.join(OUT, name + ".hlo")
    with open(path, "w") as f:
        f.write(strip(text))
    print(f"{path}: {os.path.getsize(path)} bytes")


def split_computations(text):
    """[(header_line, body_text)] of an HLO module, in order."""
    comps, cur = [], None
    for line in text.splitlines():
        if cur is None:
            if line.endswith("{") and not line.startswith("HloModule"):
                cur = [line]
        else:
            cur.append(line)
            if line == "}":
                comps.append(cur)
                cur = None
    return comps


def per_device(text, module_name):
    """The body of the (single) shard_map in `text` as the entry of a new module."""
    body = re.search(r"to_apply=(xla\.sdy\.manual_computation_body[.\w]*)", text).group(1)
    out = [f"HloModule {module_name}", ""]
    for comp in split_computations(text):
        head = comp[0]
        if head.startswith("ENTRY"):
            continue
        name = head.split()[0].lstrip("%")
        if name == body:
            comp = ["ENTRY " + head] + comp[1:]
        out.extend(comp)
        out.append("")
    return "\n".join(out)


# ---- matmul: the JAX Pallas TPU guide's XLA baseline (jnp.matmul, bf16, NxNxN) ----

def matmuls():
    for n in (1024, 4096, 8192):
        a = jax.ShapeDtypeStruct((n, n), jnp.bfloat16)
        write(f"matmul_bf16_{n}", jax.jit(jnp.matmul).lower(a, a).as_text(dialect="hlo"))


# ---- ResNet-50 v1.5 train step in plain jax.numpy / lax (the Flax ImageNet example's model and optimizer) ----

STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))
CDT = jnp.bfloat16   # half_precision: convolutions and activations in bfloat16, parameters in float32


def conv_shape(kh, kw, cin, cout):
    return jax.ShapeDtypeStruct((kh, kw, cin, cout), jnp.float32)


def resnet_params():
    """Shapes of every parameter and batch-norm statistic, as a flat dict."""
    p = {}

    def bn(name, c):
        for k in ("scale", "bias", "mean", "var"):
            p[f"{name}/{k}"] = jax.ShapeDtypeStruct((c,), jnp.float32)

    p["stem/w"] = conv_shape(7, 7, 3, 64)
    bn("stem/bn", 64)
    cin = 64
    for s, (blocks, width) in enumerate(STAGES):
        for b in range(blocks):
            n = f"s{s}b{b}"
            p[n + "/c1"] = conv_shape(1, 1, cin, width)
            bn(n + "/bn1", width)
            p[n + "/c2"] = conv_shape(3, 3, width, width)
            bn(n + "/bn2", width)
            p[n + "/c3"] = conv_shape(1, 1, width, width * 4)
            bn(n + "/bn3", width * 4)
            if b == 0:
                p[n + "/proj"] = conv_shape(1, 1, cin, width * 4)
                bn(n + "/bnp", width * 4)
            cin = width * 4
    p["head/w"] = jax.ShapeDtypeStruct((2048, 1000), jnp.float32)
    p["head/b"] = jax.ShapeDtypeStruct((1000,), jnp.float32)
    return p


def conv(x, w, stride=1):
    k = w.shape[0]
    pad = ((k - 1) // 2, k // 2) if stride == 1 else ((k - 1) // 2, (k - 1) // 2)
    return jax.lax.conv_general_dilated(x, w.astype(CDT), (stride, stride), (pad, pad),
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def batchnorm(x, params, name, train, new_stats, sync_axis=None):
    scale, bias = params[name + "/scale"], params[name + "/bias"]
    if train and sync_axis:
        # cross-replica statistics, as flax.linen.BatchNorm(axis_name=...) computes them: one pmean of
        # [mean, mean of squares] per layer (not what the measured Flax runs used: see --sync-bn)
        xf = x.astype(jnp.float32)
        both = jnp.concatenate([jnp.mean(xf, axis=(0, 1, 2)), jnp.mean(jnp.square(xf), axis=(0, 1, 2))])
        mean, mean2 = jnp.split(jax.lax.pmean(both, sync_axis), 2)
        var = mean2 - jnp.square(mean)
        new_stats[name + "/mean"] = 0.9 * params[name + "/mean"] + 0.1 * mean
        new_stats[name + "/var"] = 0.9 * params[name + "/var"] + 0.1 * var
    elif train:
        xf = x.astype(jnp.float32)
        mean = jnp.mean(xf, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(xf), axis=(0, 1, 2)) - jnp.square(mean)
        new_stats[name + "/mean"] = 0.9 * params[name + "/mean"] + 0.1 * mean
        new_stats[name + "/var"] = 0.9 * params[name + "/var"] + 0.1 * var
    else:
        mean, var = params[name + "/mean"], params[name + "/var"]
    y = (x.astype(jnp.float32) - mean) * (scale * jax.lax.rsqrt(var + 1e-5)) + bias
    return y.astype(CDT)


def resnet_forward(params, images, train, sync_axis=None):
    stats = {}
    bn = functools.partial(batchnorm, sync_axis=sync_axis)
    x = images.astype(CDT)
    x = jax.nn.relu(bn(conv(x, params["stem/w"], 2), params, "stem/bn", train, stats))
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    for s, (blocks, width) in enumerate(STAGES):
        for b in range(blocks):
            n = f"s{s}b{b}"
            stride = 2 if (b == 0 and s > 0) else 1
            y = jax.nn.relu(bn(conv(x, params[n + "/c1"]), params, n + "/bn1", train, stats))
            y = jax.nn.relu(bn(conv(y, params[n + "/c2"], stride), params, n + "/bn2", train, stats))
            y = bn(conv(y, params[n + "/c3"]), params, n + "/bn3", train, stats)
            if b == 0:
                x = bn(conv(x, params[n + "/proj"], stride), params, n + "/bnp", train, stats)
            x = jax.nn.relu(x + y)
    x = jnp.mean(x.astype(jnp.float32), axis=(1, 2))
    logits = x @ params["head/w"] + params["head/b"]
    return logits, stats


def is_weight(name):
    return name.endswith("/w") or name.rsplit("/", 1)[-1] in ("c1", "c2", "c3", "proj")


def train_step(params, momentum, images, labels, axis=None, sync_bn=False):
    def loss_fn(p):
        logits, stats = resnet_forward(p, images, True, axis if sync_bn else None)
        onehot = jax.nn.one_hot(labels, 1000)
        ce = -jnp.mean(jnp.sum(onehot * jax.nn.log_softmax(logits), axis=-1))
        l2 = sum(jnp.sum(jnp.square(v)) for k, v in p.items() if is_weight(k))
        return ce + 0.5e-4 * l2, stats

    grads, stats = jax.grad(loss_fn, has_aux=True)(params)
    if axis:
        grads = jax.lax.pmean(grads, axis)
    new_p, new_m = {}, {}
    for k, v in params.items():
        if k in stats:
            new_p[k] = stats[k]
            new_m[k] = momentum[k]
            continue
        m = 0.9 * momentum[k] + grads[k]
        new_m[k] = m
        new_p[k] = v - 0.1 * (grads[k] + 0.9 * m)   # SGD with Nesterov momentum (optax.sgd(nesterov=True))
    return new_p, new_m


def resnet_train(per_device_batch, devices, sync_bn=False):
    params = resnet_params()
    mom = dict(params)
    images = jax.ShapeDtypeStruct((per_device_batch * devices, 224, 224, 3), jnp.float32)
    labels = jax.ShapeDtypeStruct((per_device_batch * devices,), jnp.int32)
    mesh = Mesh(jax.devices()[:devices], ("batch",))
    rep = {k: P() for k in params}
    step = jax.shard_map(lambda p, m, x, y: train_step(p, m, x, y, "batch", sync_bn), mesh=mesh,
                         in_specs=(rep, rep, P("batch"), P("batch")), out_specs=(rep, rep), check_vma=False)
    name = f"resnet50_train_b{per_device_batch}_dp{devices}" + ("_syncbn" if sync_bn else "")
    text = jax.jit(step, donate_argnums=(0, 1)).lower(params, mom, images, labels).as_text(dialect="hlo")
    write(name, per_device(text, name))


# ---- GEMM sweeps (docs/timing-validation.md): bf16 A[M,K] @ B[K,N] as jnp.matmul lowers it ----

GEMMS = sorted({(n, n, n) for n in (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)} |
               {(m, n, k) for m in (8192, 12288, 16384) for (n, k) in ((8192, 8192), (12288, 12288),
                                                                      (16384, 16384), (16384, 18432))} |
               {(m, n, k) for m in (128, 256, 512, 1024, 2048, 4096, 8192)
                for (n, k) in ((4096, 4096), (8192, 8192), (4096, 7168), (7168, 4096))})


def gemms():
    for m, n, k in GEMMS:
        a = jax.ShapeDtypeStruct((m, k), jnp.bfloat16)
        b = jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
        write(f"gemm_bf16_{m}_{n}_{k}", jax.jit(jnp.matmul).lower(a, b).as_text(dialect="hlo"))


def main():
    if "--sync-bn" in sys.argv[1:]:
        # what-if, not committed: the v2-32/v3-32 step with cross-replica batch norm (docs/timing-validation.md)
        resnet_train(32, 32, sync_bn=True)
        return 0
    matmuls()
    gemms()
    resnet_train(128, 8)    # Flax ImageNet on a v3-8 / v2-8: global batch 1024 over 8 cores
    resnet_train(32, 32)    # the same global batch on a v2-32 / v3-32
    return 0


if __name__ == "__main__":
    sys.exit(main())
