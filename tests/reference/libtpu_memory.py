#!/usr/bin/env python3
"""libtpu_memory.py — tpusim's memory model against the real TPU compiler, compiled ahead of time on a CPU.

The real XLA:TPU compiler ships in PyPI's `libtpu` wheel. JAX can compile for a TPU *topology description*
without any TPU attached (jax.experimental.topologies.get_topology_desc): layout assignment, fusion,
rematerialization and buffer assignment all run for real, only execution is impossible. This script
compiles a set of programs that way and records, per program:

  - memory_analysis(): argument/output/temp/generated-code bytes and peak_memory_in_bytes;
  - the largest buffers of the real buffer assignment (the XLA dump's *-buffer-assignment.txt) with the
    tiled layouts the compiler picked;
  - the program before optimization (tests/reference/hlo/NAME.hlo, jax .lower().as_text(dialect="hlo"))
    and after (tests/reference/hlo/NAME.opt.hlo, compiled.as_text(), backend_config stripped);
  - `tpusim memory --json` on both.

It writes tests/reference/libtpu_memory.json (the numbers; tests/t_libtpu_reference.c reads it) and
tests/reference/libtpu_memory.md (the table). Run from the repository root:

    python3 -m venv /work/aot-venv && /work/aot-venv/bin/pip install "jax[tpu]==0.10.2"   # libtpu 0.0.42.1
    make BUILD=build/aot
    /work/aot-venv/bin/python tests/reference/libtpu_memory.py --tpusim build/aot/tpusim

`make test` does not need this script, Python or the network: the committed json and HLO files are enough.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

DUMP = os.environ.get("LIBTPU_DUMP_DIR") or tempfile.mkdtemp(prefix="libtpu_dump_")
# The XLA dump gives the real buffer assignment (per-buffer sizes and layouts). Set before jax loads.
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={DUMP} --xla_dump_hlo_as_text"
os.environ.setdefault("TPU_STDERR_LOG_LEVEL", "3")
os.environ.setdefault("TPU_MIN_LOG_LEVEL", "3")
# no TPU is used: let several processes (this one, the out-of-memory children, another run) load libtpu
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.experimental.layout import Format, Layout  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
HLO_DIR = os.path.join(HERE, "hlo")

# jax topology name -> tpusim slice name (one device of each is compiled for)
TOPOLOGIES = {"v2": ("v2:2x2", "v2-8"), "v3": ("v3:2x2", "v3-8"), "v4": ("v4:2x2x1", "v4-8"),
              "v5e": ("v5e:2x2", "v5litepod-4"), "v5p": ("v5p:2x2x1", "v5p-8"), "v6e": ("v6e:2x2", "v6e-4"),
              "v7": ("tpu7x:2x2x1", "tpu7x-8")}

_devices = {}


def device(gen):
    if gen not in _devices:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[gen][0])
        _devices[gen] = topo.devices[0]
    return _devices[gen]


# ---------------------------------------------------------------------------------------------------------
# The programs. Each returns (function, [argument specs], jit kwargs).
# ---------------------------------------------------------------------------------------------------------

class S:
    """An argument's shape and dtype (a pytree leaf)."""

    def __init__(self, shape, dtype=jnp.float32):
        self.shape, self.dtype = tuple(shape), dtype


def sgd(loss):
    def step(params, *batch):
        l, g = jax.value_and_grad(loss)(params, *batch)
        return l, jax.tree_util.tree_map(lambda p, q: p - 0.01 * q.astype(p.dtype), params, g)
    return step


def mlp_loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    logp = jax.nn.log_softmax(h.astype(jnp.float32))
    return -jnp.mean(jnp.sum(logp * jax.nn.one_hot(y, h.shape[-1]), axis=-1))


def mlp_params(sizes, dtype=jnp.float32):
    return [(S((a, b), dtype), S((b,), dtype)) for a, b in zip(sizes[:-1], sizes[1:])]


def prog_mlp_fwd():
    return (lambda a, b: jnp.tanh(a @ b)), [S((128, 256)), S((256, 10))], {}


def prog_mlp_train():
    return sgd(mlp_loss), [mlp_params([784, 512, 512, 10]), S((256, 784)), S((256,), jnp.int32)], {}


def prog_mlp_train_bf16():
    return (sgd(mlp_loss), [mlp_params([1024, 4096, 1024, 1000], jnp.bfloat16), S((512, 1024), jnp.bfloat16),
                            S((512,), jnp.int32)], {})


def conv(x, w, dn):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)


def cnn_loss(dn):
    def loss(params, x, y):
        (w1, w2, w3, wd) = params
        h = jax.nn.relu(conv(x, w1, dn))
        h = jax.nn.relu(conv(h, w2, dn))
        h = jax.nn.relu(conv(h, w3, dn))
        sp = (1, 2) if dn[0] == "NHWC" else (2, 3)
        h = jnp.mean(h, axis=sp)
        logits = h @ wd
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), axis=-1))
    return loss


def prog_cnn_nhwc_train():
    dn = ("NHWC", "HWIO", "NHWC")
    params = [S((3, 3, 3, 16)), S((3, 3, 16, 32)), S((3, 3, 32, 64)), S((64, 10))]
    return sgd(cnn_loss(dn)), [params, S((32, 32, 32, 3)), S((32,), jnp.int32)], {}


def prog_cnn_nchw_train():
    dn = ("NCHW", "OIHW", "NCHW")
    params = [S((16, 3, 3, 3)), S((32, 16, 3, 3)), S((64, 32, 3, 3)), S((64, 10))]
    return sgd(cnn_loss(dn)), [params, S((32, 3, 32, 32)), S((32,), jnp.int32)], {}


def prog_conv_small_features():
    # the activations/kernels with few features: 3 colour channels in, 8 features out, batch 8
    dn = ("NHWC", "HWIO", "NHWC")
    return (lambda x, w: jax.nn.relu(conv(x, w, dn))), [S((8, 64, 64, 3)), S((3, 3, 3, 8))], {}


def transformer_loss(params, x):
    def block(h, p):
        wq, wk, wv, wo, w1, w2 = p
        b, t, d = h.shape
        nh = 4
        q = (h @ wq).reshape(b, t, nh, d // nh)
        k = (h @ wk).reshape(b, t, nh, d // nh)
        v = (h @ wv).reshape(b, t, nh, d // nh)
        a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // nh).astype(h.dtype)
        a = jax.nn.softmax(a.astype(jnp.float32), axis=-1).astype(h.dtype)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, d)
        h = h + o @ wo
        h = h + jax.nn.gelu(h @ w1) @ w2
        return h
    for p in params:
        x = block(x, p)
    return jnp.mean(jnp.square(x.astype(jnp.float32)))


def transformer_params(layers, d, dtype):
    return [(S((d, d), dtype), S((d, d), dtype), S((d, d), dtype), S((d, d), dtype), S((d, 4 * d), dtype),
             S((4 * d, d), dtype)) for _ in range(layers)]


def prog_transformer_train():
    return sgd(transformer_loss), [transformer_params(2, 256, jnp.float32), S((8, 128, 256))], {}


def prog_transformer_train_bf16():
    return (sgd(transformer_loss), [transformer_params(1, 512, jnp.bfloat16), S((8, 256, 512), jnp.bfloat16)],
            {"donate_argnums": (0,)})


def prog_onehot_output():
    # design §5: s32[29360128,10] one-hot. Here the compiler picks the output layout.
    return (lambda y: jax.nn.one_hot(y, 10, dtype=jnp.int32)), [S((29360128,), jnp.int32)], {}


def prog_onehot_rowmajor():
    # the same one-hot forced to {1,0} (as the TensorFlow program in the design's report had it)
    return ((lambda y: jax.nn.one_hot(y, 10, dtype=jnp.int32)), [S((29360128,), jnp.int32)],
            {"out_layout": (0, 1)})


def prog_onehot_loss():
    # one-hot against logits in a loss: is the [N,10] one-hot ever materialized?
    def f(logits, y):
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), axis=-1))
    return f, [S((2097152, 10)), S((2097152,), jnp.int32)], {}


def prog_while_fori():
    def f(x, w):
        def body(i, c):
            return jnp.tanh(c @ w + i.astype(jnp.float32))
        return lax.fori_loop(0, 10, body, x)
    return f, [S((512, 512)), S((512, 512))], {}


def prog_scan_rnn():
    def f(h0, xs, w, u):
        def step(h, x):
            h = jnp.tanh(h @ w + x @ u)
            return h, h
        return lax.scan(step, h0, xs)
    return f, [S((64, 256)), S((50, 64, 128)), S((256, 256)), S((128, 256))], {}


def prog_rank1_degenerate():
    def f(v, x, s):
        a = jnp.cumsum(v) * s
        b = jnp.sum(x, axis=(1, 3), keepdims=True) + x[:, :1, :, :1]
        return a, b, jnp.sort(v)
    return f, [S((1000,)), S((1, 1000, 1, 3)), S(())], {}


def prog_embedding():
    def f(table, ids):
        e = jnp.take(table, ids, axis=0)
        return jnp.mean(e, axis=1)
    return f, [S((32000, 512)), S((8, 128), jnp.int32)], {}


def prog_odd_shapes_bf16():
    # bf16 arrays whose minor dims are not multiples of 128 (or 16): padding of 16-bit types
    def f(a, b, c):
        return (a @ b).astype(jnp.bfloat16) * 2, jnp.sin(c)
    return f, [S((1000, 300), jnp.bfloat16), S((300, 77), jnp.bfloat16), S((7, 9, 5), jnp.bfloat16)], {}


def prog_int8_pred():
    def f(x, m):
        return jnp.where(m, x, 0).astype(jnp.int8), x > 0
    return f, [S((1000, 100), jnp.float32), S((1000, 100), jnp.bool_)], {}



# ---- added for issue 13: programs of the kinds users hand tpusim (CNNs, attention, large-vocabulary losses,
# ---- transformer blocks and stacks, scans, remat, embeddings, optimizers), each on three generations

def ln(x, eps=1e-6):
    xf = x.astype(jnp.float32)
    m = jnp.mean(xf, axis=-1, keepdims=True)
    v = jnp.mean(jnp.square(xf - m), axis=-1, keepdims=True)
    return ((xf - m) * lax.rsqrt(v + eps)).astype(x.dtype)


def xent(logits, y):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))


def prog_cnn_bf16_train():
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(params, x, y):
        w1, w2, w3, wd = params
        h = jax.nn.relu(conv(x, w1, dn))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(conv(h, w2, dn))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(conv(h, w3, dn))
        return xent(jnp.mean(h, axis=(1, 2)) @ wd, y)
    bf = jnp.bfloat16
    params = [S((3, 3, 3, 64), bf), S((3, 3, 64, 128), bf), S((3, 3, 128, 256), bf), S((256, 100), bf)]
    return sgd(loss), [params, S((64, 64, 64, 3), bf), S((64,), jnp.int32)], {}


def bn_train(x, g, b):
    xf = x.astype(jnp.float32)
    m = jnp.mean(xf, axis=(0, 1, 2))
    v = jnp.mean(jnp.square(xf - m), axis=(0, 1, 2))
    return ((xf - m) * lax.rsqrt(v + 1e-5) * g + b).astype(x.dtype)


def prog_resnet_block_train():
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(params, x):
        w1, g1, b1, w2, g2, b2 = params
        h = jax.nn.relu(bn_train(conv(x, w1, dn), g1, b1))
        h = bn_train(conv(h, w2, dn), g2, b2)
        return jnp.mean(jnp.square(jax.nn.relu(h + x)))
    c = 64
    params = [S((3, 3, c, c)), S((c,)), S((c,)), S((3, 3, c, c)), S((c,)), S((c,))]
    return sgd(loss), [params, S((32, 56, 56, c))], {}


def prog_conv_bn_relu_infer():
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x, w1, s1, w2, s2):
        h = jax.nn.relu(conv(x, w1, dn) * s1)
        return jax.nn.relu(conv(h, w2, dn) * s2)
    return f, [S((64, 56, 56, 64)), S((3, 3, 64, 128)), S((128,)), S((3, 3, 128, 128)), S((128,))], {}


def prog_depthwise_train():
    # a MobileNetV2 inverted-residual block: 1x1 expand, 3x3 depthwise, 1x1 project
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(params, x):
        we, wd, wp = params
        h = jax.nn.relu6(conv(x, we, dn))
        h = jax.nn.relu6(lax.conv_general_dilated(h, wd, (1, 1), "SAME", dimension_numbers=dn,
                                                  feature_group_count=h.shape[-1]))
        return jnp.mean(jnp.square(conv(h, wp, dn) + x))
    c, e = 32, 192
    return sgd(loss), [[S((1, 1, c, e)), S((3, 3, 1, e)), S((1, 1, e, c))], S((32, 56, 56, c))], {}


def prog_conv_transpose_train():
    # a decoder step: transposed convolution upsampling (lhs dilation in the backward pass too)
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(params, z):
        w1, w2 = params
        h = jax.nn.relu(lax.conv_transpose(z, w1, (2, 2), "SAME", dimension_numbers=dn))
        h = lax.conv_transpose(h, w2, (2, 2), "SAME", dimension_numbers=dn)
        return jnp.mean(jnp.square(jnp.tanh(h)))
    return sgd(loss), [[S((4, 4, 128, 64)), S((4, 4, 64, 3))], S((32, 32, 32, 128))], {}


def prog_vit_patch_train():
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(params, x, y):
        wp, w1, w2, wh = params
        t = lax.conv_general_dilated(x, wp, (16, 16), "VALID", dimension_numbers=dn)
        t = t.reshape(t.shape[0], -1, t.shape[-1])
        t = t + jax.nn.gelu(ln(t) @ w1) @ w2
        return xent(jnp.mean(t, axis=1) @ wh, y)
    d = 384
    params = [S((16, 16, 3, d)), S((d, 4 * d)), S((4 * d, d)), S((d, 1000))]
    return sgd(loss), [params, S((32, 224, 224, 3)), S((32,), jnp.int32)], {}


def prog_conv1d_train():
    dn = ("NWC", "WIO", "NWC")

    def loss(params, x):
        w1, w2 = params
        h = jax.nn.gelu(lax.conv_general_dilated(x, w1, (1,), "SAME", dimension_numbers=dn))
        h = lax.conv_general_dilated(h, w2, (2,), "SAME", dimension_numbers=dn)
        return jnp.mean(jnp.square(h))
    return sgd(loss), [[S((5, 80, 256)), S((3, 256, 256))], S((16, 3000, 80))], {}


def mha(x, wq, wk, wv, wo, nh, causal=False):
    b, t, d = x.shape
    q = (x @ wq).reshape(b, t, nh, d // nh)
    k = (x @ wk).reshape(b, t, nh, d // nh)
    v = (x @ wv).reshape(b, t, nh, d // nh)
    a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // nh).astype(x.dtype)
    if causal:
        mask = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
        a = jnp.where(mask, a, jnp.finfo(a.dtype).min)
    a = jax.nn.softmax(a.astype(jnp.float32), axis=-1).astype(x.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, d) @ wo


def prog_attention_fwd():
    def f(x, wq, wk, wv, wo):
        return mha(x, wq, wk, wv, wo, 8)
    d = 512
    return f, [S((4, 512, d)), S((d, d)), S((d, d)), S((d, d)), S((d, d))], {}


def prog_attention_train_bf16():
    def loss(params, x):
        return jnp.mean(jnp.square(mha(x, *params, 8, causal=True).astype(jnp.float32)))
    d, bf = 512, jnp.bfloat16
    return sgd(loss), [[S((d, d), bf)] * 4, S((4, 1024, d), bf)], {}


def prog_long_attention_bf16():
    # long sequences: the [heads, T, T] scores dominate
    def f(q, k, v):
        a = jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.088
        a = jax.nn.softmax(a.astype(jnp.float32), axis=-1).astype(q.dtype)
        return jnp.einsum("bhqk,bkhd->bqhd", a, v)
    s = S((1, 8192, 8, 128), jnp.bfloat16)
    return f, [s, s, s], {}


def prog_long_attention_train_bf16():
    def loss(q, k, v):
        a = jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.088
        a = jax.nn.softmax(a.astype(jnp.float32), axis=-1).astype(q.dtype)
        return jnp.mean(jnp.einsum("bhqk,bkhd->bqhd", a, v).astype(jnp.float32))
    s = S((1, 4096, 8, 128), jnp.bfloat16)
    return jax.grad(loss, argnums=(0, 1, 2)), [s, s, s], {}


def prog_xent_vocab_fwd():
    def f(h, w, y):
        return xent(h @ w, y)
    return f, [S((4096, 1024), jnp.bfloat16), S((1024, 32000), jnp.bfloat16), S((4096,), jnp.int32)], {}


def prog_xent_vocab_train():
    def loss(w, h, y):
        return xent(h @ w, y)
    return (jax.value_and_grad(loss, argnums=(0, 1)),
            [S((1024, 32000), jnp.bfloat16), S((4096, 1024), jnp.bfloat16), S((4096,), jnp.int32)], {})


def block_bf16(h, p, nh, causal=True):
    wq, wk, wv, wo, w1, w2 = p
    h = h + mha(ln(h), wq, wk, wv, wo, nh, causal)
    return h + jax.nn.gelu(ln(h) @ w1) @ w2


def prog_transformer_block_bf16_train():
    def loss(p, x):
        return jnp.mean(jnp.square(block_bf16(x, p, 16).astype(jnp.float32)))
    d, bf = 1024, jnp.bfloat16
    p = [S((d, d), bf)] * 4 + [S((d, 4 * d), bf), S((4 * d, d), bf)]
    return sgd(loss), [p, S((4, 512, d), bf)], {"donate_argnums": (0,)}


def stacked(L, d, dtype):
    return [S((L, d, d), dtype)] * 4 + [S((L, d, 4 * d), dtype), S((L, 4 * d, d), dtype)]


def scan_loss(remat=None):
    def loss(p, x):
        def body(h, lp):
            lp = [w.astype(jnp.bfloat16) for w in lp]
            return block_bf16(h, lp, 8), None
        if remat == "full":
            body = jax.checkpoint(body)
        elif remat == "dots":
            body = jax.checkpoint(body, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
        h, _ = lax.scan(body, x.astype(jnp.bfloat16), p)
        return jnp.mean(jnp.square(h.astype(jnp.float32)))
    return loss


def prog_transformer_scan_train():
    return sgd(scan_loss()), [stacked(4, 512, jnp.float32), S((4, 512, 512))], {"donate_argnums": (0,)}


def prog_transformer_remat_train():
    return sgd(scan_loss("full")), [stacked(4, 512, jnp.float32), S((4, 512, 512))], {"donate_argnums": (0,)}


def prog_transformer_remat_dots_train():
    return sgd(scan_loss("dots")), [stacked(4, 512, jnp.float32), S((4, 512, 512))], {"donate_argnums": (0,)}


def prog_embedding_grad():
    # d/dtable of a lookup: a scatter-add into a zero table
    def loss(table, ids, g):
        return jnp.sum(jnp.take(table, ids, axis=0) * g)
    return jax.grad(loss), [S((50000, 256)), S((4096,), jnp.int32), S((4096, 256))], {}


def prog_embedding_train():
    def loss(p, ids, y):
        table, w = p
        e = jnp.mean(jnp.take(table, ids, axis=0), axis=1)
        return xent(e @ w, y)
    return (sgd(loss), [[S((100000, 128)), S((128, 10))], S((256, 64), jnp.int32), S((256,), jnp.int32)],
            {"donate_argnums": (0,)})


def lstm_cell(carry, x, w, u, b):
    h, c = carry
    z = x @ w + h @ u + b
    i, f, g, o = jnp.split(z, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (h, c), h


def prog_lstm_train():
    def loss(p, xs):
        w, u, b, wo = p
        bsz, hd = xs.shape[1], u.shape[0]
        init = (jnp.zeros((bsz, hd)), jnp.zeros((bsz, hd)))
        _, hs = lax.scan(lambda c, x: lstm_cell(c, x, w, u, b), init, xs)
        return jnp.mean(jnp.square(hs @ wo))
    hd, din = 256, 128
    return sgd(loss), [[S((din, 4 * hd)), S((hd, 4 * hd)), S((4 * hd,)), S((hd, 32))], S((100, 64, din))], {}


def prog_gru_fwd():
    def f(xs, wz, uz, wr, ur, wh, uh):
        def step(h, x):
            z = jax.nn.sigmoid(x @ wz + h @ uz)
            r = jax.nn.sigmoid(x @ wr + h @ ur)
            n = jnp.tanh(x @ wh + (r * h) @ uh)
            h = (1 - z) * n + z * h
            return h, h
        return lax.scan(step, jnp.zeros((xs.shape[1], uz.shape[0])), xs)
    hd, din = 512, 256
    return f, [S((64, 128, din))] + [S((din, hd)), S((hd, hd))] * 3, {}


def prog_dus_loop():
    # a loop that writes one row block per iteration into a buffer (dynamic-update-slice in place)
    def f(x, w):
        def body(i, buf):
            row = jnp.tanh(lax.dynamic_slice_in_dim(buf, i * 64, 64) @ w)
            return lax.dynamic_update_slice_in_dim(buf, row, (i + 1) * 64 % buf.shape[0], 0)
        return lax.fori_loop(0, 32, body, x)
    return f, [S((2048, 1024)), S((1024, 1024))], {}


def prog_layernorm_train():
    def loss(p, x):
        g, b, w = p
        return jnp.mean(jnp.square((ln(x) * g + b) @ w))
    return sgd(loss), [[S((1024,)), S((1024,)), S((1024, 1024))], S((8192, 1024))], {}


def prog_adam_mlp_train():
    def step(params, m, v, x, y):
        l, g = jax.value_and_grad(mlp_loss)(params, x, y)
        m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
        v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
        params = jax.tree_util.tree_map(lambda p, a, b: p - 1e-3 * a / (jnp.sqrt(b) + 1e-8), params, m, v)
        return l, params, m, v
    ps = mlp_params([1024, 2048, 2048, 1000])
    return step, [ps, ps, ps, S((256, 1024)), S((256,), jnp.int32)], {"donate_argnums": (0, 1, 2)}


def prog_topk():
    return (lambda x: lax.top_k(x, 64)), [S((1024, 32000))], {}


def prog_segment_sum():
    def f(data, seg, idx):
        s = jax.ops.segment_sum(data, seg, num_segments=4096)
        return s[idx] * 2.0
    return f, [S((65536, 128)), S((65536,), jnp.int32), S((8192,), jnp.int32)], {}


def prog_softmax_rows():
    return (lambda x: jax.nn.softmax(x, axis=-1)), [S((4096, 32000))], {}


def prog_moe_dispatch():
    # top-1 expert routing with one-hot dispatch and combine tensors (Switch-style), one layer, gradients
    def loss(p, x):
        wg, w1, w2 = p
        gates = jax.nn.softmax(x @ wg, axis=-1)                        # [T, E]
        e = jnp.argmax(gates, axis=-1)
        pos = jnp.cumsum(jax.nn.one_hot(e, wg.shape[1]), axis=0) * jax.nn.one_hot(e, wg.shape[1])
        disp = jax.nn.one_hot(pos.sum(-1).astype(jnp.int32) - 1, 256)[:, None, :] * jax.nn.one_hot(e, wg.shape[1])[:, :, None]
        xe = jnp.einsum("tec,td->ecd", disp, x)                          # [E, C, D]
        he = jnp.einsum("ecf,efd->ecd", jax.nn.relu(jnp.einsum("ecd,edf->ecf", xe, w1)), w2)
        out = jnp.einsum("tec,ecd->td", disp * gates[:, :, None], he)
        return jnp.mean(jnp.square(out))
    E, d = 8, 512
    return sgd(loss), [[S((d, E)), S((E, d, 4 * d)), S((E, 4 * d, d))], S((2048, d))], {}


def prog_mlp_infer_bf16():
    def f(x, w1, w2, w3):
        return jax.nn.softmax((jax.nn.gelu(jax.nn.gelu(x @ w1) @ w2) @ w3).astype(jnp.float32))
    bf = jnp.bfloat16
    return f, [S((8192, 1024), bf), S((1024, 4096), bf), S((4096, 4096), bf), S((4096, 1000), bf)], {}


def prog_batchnorm_nchw_train():
    dn = ("NCHW", "OIHW", "NCHW")

    def bn(x, g, b):
        m = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
        v = jnp.mean(jnp.square(x - m), axis=(0, 2, 3), keepdims=True)
        return (x - m) * lax.rsqrt(v + 1e-5) * g[None, :, None, None] + b[None, :, None, None]

    def loss(p, x):
        w1, g1, b1, w2, g2, b2 = p
        h = jax.nn.relu(bn(conv(x, w1, dn), g1, b1))
        return jnp.mean(jnp.square(bn(conv(h, w2, dn), g2, b2)))
    c = 96
    return sgd(loss), [[S((c, 3, 3, 3)), S((c,)), S((c,)), S((c, c, 3, 3)), S((c,)), S((c,))], S((16, 3, 64, 64))], {}


def prog_reduce_window_rowmax():
    # a running max along rows written as a reduce-window (cummax), and a sum pooling
    def f(x):
        return lax.cummax(x, axis=1), lax.reduce_window(x, 0.0, lax.add, (1, 8), (1, 8), "VALID")
    return f, [S((1024, 2048))], {}

def prog_big_mlp_train():
    # about 21 GiB: too big for v3 (15.48G) and v5e (15.75G), fits v6e (31.25G); the out-of-memory verdict
    return sgd(mlp_loss), [mlp_params([16384] * 9), S((8192, 16384)), S((8192,), jnp.int32)], {}


# Programs whose compile got a constraint the text before optimization does not carry: their *pre* figure is
# not a test of tpusim (it cannot know), and the summary statistics leave them out.
CONSTRAINED = {"onehot_rowmajor": "the result layout {1,0} is forced through jit's out_shardings, not written in "
                                  "the program text (which is identical to onehot_output's)"}

# every program on three generations: v3 (no VMEM for temporaries), v5e and v6e (temporaries in VMEM)
GENS = ["v3", "v5e", "v6e"]
PROGRAMS = [
    ("mlp_fwd", prog_mlp_fwd, GENS),
    ("mlp_train", prog_mlp_train, GENS),
    ("mlp_train_bf16", prog_mlp_train_bf16, GENS),
    ("cnn_nhwc_train", prog_cnn_nhwc_train, GENS),
    ("cnn_nchw_train", prog_cnn_nchw_train, GENS),
    ("conv_small_features", prog_conv_small_features, GENS),
    ("transformer_train", prog_transformer_train, GENS),
    ("transformer_train_bf16", prog_transformer_train_bf16, ["v4"] + GENS),
    ("onehot_output", prog_onehot_output, GENS),
    ("onehot_rowmajor", prog_onehot_rowmajor, GENS),
    ("onehot_loss", prog_onehot_loss, GENS),
    ("while_fori", prog_while_fori, GENS),
    ("scan_rnn", prog_scan_rnn, GENS),
    ("rank1_degenerate", prog_rank1_degenerate, GENS),
    ("embedding", prog_embedding, GENS),
    ("odd_shapes_bf16", prog_odd_shapes_bf16, GENS),
    ("int8_pred", prog_int8_pred, GENS),
    ("cnn_bf16_train", prog_cnn_bf16_train, GENS),
    ("resnet_block_train", prog_resnet_block_train, GENS),
    ("conv_bn_relu_infer", prog_conv_bn_relu_infer, GENS),
    ("depthwise_train", prog_depthwise_train, GENS),
    ("conv_transpose_train", prog_conv_transpose_train, GENS),
    ("vit_patch_train", prog_vit_patch_train, GENS),
    ("conv1d_train", prog_conv1d_train, GENS),
    ("attention_fwd", prog_attention_fwd, GENS),
    ("attention_train_bf16", prog_attention_train_bf16, GENS),
    ("long_attention_bf16", prog_long_attention_bf16, GENS),
    ("long_attention_train_bf16", prog_long_attention_train_bf16, GENS),
    ("xent_vocab_fwd", prog_xent_vocab_fwd, GENS),
    ("xent_vocab_train", prog_xent_vocab_train, GENS),
    ("transformer_block_bf16_train", prog_transformer_block_bf16_train, GENS),
    ("transformer_scan_train", prog_transformer_scan_train, GENS),
    ("transformer_remat_train", prog_transformer_remat_train, GENS),
    ("transformer_remat_dots_train", prog_transformer_remat_dots_train, GENS),
    ("embedding_grad", prog_embedding_grad, GENS),
    ("embedding_train", prog_embedding_train, GENS),
    ("lstm_train", prog_lstm_train, GENS),
    ("gru_fwd", prog_gru_fwd, GENS),
    ("dus_loop", prog_dus_loop, GENS),
    ("layernorm_train", prog_layernorm_train, GENS),
    ("adam_mlp_train", prog_adam_mlp_train, GENS),
    ("topk", prog_topk, GENS),
    ("segment_sum", prog_segment_sum, GENS),
    ("softmax_rows", prog_softmax_rows, GENS),
    ("moe_dispatch", prog_moe_dispatch, GENS),
    ("mlp_infer_bf16", prog_mlp_infer_bf16, GENS),
    ("batchnorm_nchw_train", prog_batchnorm_nchw_train, GENS),
    ("reduce_window_rowmax", prog_reduce_window_rowmax, GENS),
    ("big_mlp_train", prog_big_mlp_train, GENS),
]

# ---------------------------------------------------------------------------------------------------------


def to_specs(tree, sh):
    return jax.tree_util.tree_map(lambda t: jax.ShapeDtypeStruct(t.shape, t.dtype, sharding=sh), tree,
                                  is_leaf=lambda t: isinstance(t, S))


def strip_metadata(text):
    """Drops metadata={...} and the stack-frame tables (FileNames ... StackFrames) of an optimized program: the
    tests need its layouts and instructions, not its source locations (a third of the text)."""
    out, skip = [], False
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            skip = True
            continue
        if skip and (not line or line[0].isdigit()):
            continue
        skip = False
        line = re.sub(r", metadata=\{[^{}]*\}", "", line)
        out.append(line)
    return "\n".join(out) + "\n"


def strip_backend_config(text):
    """Drops backend_config={...} (kernel tiling JSON, most of the text) and the stack-frame tables."""
    out = []
    for line in text.splitlines():
        i = line.find(", backend_config=")
        if i >= 0:
            j = i + len(", backend_config=")
            if line[j] == "{":
                depth, k = 0, j
                while k < len(line):
                    if line[k] == "{":
                        depth += 1
                    elif line[k] == "}":
                        depth -= 1
                        if depth == 0:
                            break
                    k += 1
                line = line[:i] + line[k + 1:]
            else:  # backend_config="..."
                m = re.match(r'"(?:[^"\\]|\\.)*"', line[j:])
                if m:
                    line = line[:i] + line[j + m.end():]
        out.append(line)
    return "\n".join(out) + "\n"


BA_ALLOC = re.compile(r"^allocation (\d+): size (\d+)(.*)$")
BA_VALUE = re.compile(r"^ value: <\d+ (\S+) @\d+> \(size=(\d+),offset=(\d+)\): (.*)$")


def read_buffer_assignment(module_name):
    files = glob.glob(os.path.join(DUMP, f"*.{module_name}.*after_optimizations-buffer-assignment.txt"))
    if not files:
        return None
    allocs = []
    cur = None
    with open(max(files, key=os.path.getmtime)) as fh:
        for line in fh:
            line = line.rstrip("\n")
            m = BA_ALLOC.match(line)
            if m:
                what = m.group(3)
                kind = ("parameter" if "parameter" in what else "output" if "output" in what else
                        "live-out" if "maybe-live-out" in what else
                        "constant" if "constant" in what else "thread-local" if "thread-local" in what else
                        "temp" if "preallocated-temp" in what else "other")
                cur = {"size": int(m.group(2)), "kind": kind, "values": []}
                allocs.append(cur)
                continue
            m = BA_VALUE.match(line)
            if m and cur is not None:
                cur["values"].append({"name": m.group(1), "size": int(m.group(2)), "offset": int(m.group(3)),
                                      "shape": m.group(4)})
            if line.startswith("Total bytes used"):
                break
    return allocs


def read_usage_report(module_name):
    """Total bytes per memory space (default = HBM, vmem, smem, cmem...) from the memory-usage report."""
    files = glob.glob(os.path.join(DUMP, f"*.{module_name}.*after_optimizations-memory-usage-report.txt"))
    if not files:
        return None
    spaces, cur = {}, None
    with open(max(files, key=os.path.getmtime)) as fh:
        for line in fh:
            m = re.match(r"^Memory Space: (\S+) \(color=(\d+)\)", line)
            if m:
                cur = m.group(1)
            m = re.match(r"^Total bytes: (\d+)", line)
            if m and cur:
                spaces[cur] = int(m.group(1))
    return spaces


def largest_values(allocs, n=8):
    """The largest HLO values (array buffers) with their tiled layouts."""
    vals = []
    for a in allocs or []:
        for v in a["values"]:
            if "(" in v["shape"][:1]:
                continue  # tuple index tables
            vals.append({"name": v["name"], "shape": v["shape"], "bytes": v["size"], "alloc": a["kind"]})
    seen, out = set(), []
    for v in sorted(vals, key=lambda v: -v["bytes"]):
        key = (v["name"], v["shape"])
        if key in seen:
            continue
        seen.add(key)
        out.append(v)
        if len(out) == n:
            break
    return out


def run_tpusim(tpusim, path, chip):
    r = subprocess.run([tpusim, "memory", path, "--chip", chip, "--json"], capture_output=True, text=True)
    if r.returncode not in (0, 1) or not r.stdout.strip().startswith("{"):
        return {"error": (r.stderr or r.stdout).strip()[:500]}
    j = json.loads(r.stdout)
    return {k: j.get(k) for k in ("peak_bytes", "argument_bytes", "output_bytes", "temp_bytes", "program_bytes",
                                  "constant_bytes", "hbm_capacity_bytes", "fits")}


def pct(a, b):
    return None if not b else round(100.0 * (a - b) / b, 1)


def real_hbm(real):
    """What the program needs in HBM: the memory-usage report's HBM space (default, plus on v4 a space named
    `hbm` where it puts temporaries), which is what libtpu's out-of-memory check totals ("Used X of Y hbm":
    tests/reference/libtpu_oom_fragmentation.md). memory_analysis' arguments + outputs + temp - aliased is
    larger wherever the heap is fragmented: its temp_size_in_bytes is the heap plus the heap's fragmentation
    again. (peak_memory_in_bytes also counts VMEM buffers on v5e and later: no HBM figure there.)"""
    ms = real.get("memory_spaces") or {}
    if "default" in ms:
        return ms["default"] + ms.get("hbm", 0)
    return real["argument_bytes"] + real["output_bytes"] + real["temp_bytes"] - real["alias_bytes"]


def analysis_hbm(real):
    """memory_analysis' sum (the heap's fragmentation counted twice), for comparison."""
    return (real["argument_bytes"] + real["output_bytes"] + real["temp_bytes"] - real["alias_bytes"] +
            (real.get("memory_spaces") or {}).get("hbm", 0))


def add_errors(rec):
    real = rec["real"]
    real["hbm_bytes"] = real_hbm(real)
    for k in ("tpusim_pre", "tpusim_opt"):
        t = rec[k]
        if "error" not in t:
            t["peak_err_pct"] = pct(t["peak_bytes"], real["hbm_bytes"])
            t["args_err_pct"] = pct(t["argument_bytes"], real["argument_bytes"])
            # tpusim's program bytes = its heap of temporaries and outputs; the real one's temp
            # excludes outputs, so compare temp+output (less aliased outputs) on both sides
            t["program_err_pct"] = pct(t["program_bytes"], real["hbm_bytes"] - real["argument_bytes"])


def refresh_tpusim(out, tpusim):
    """Re-runs only tpusim on the stored programs and arrays (no libtpu needed): for a tpusim change."""
    root = os.path.dirname(os.path.dirname(HERE))
    for rec in out["programs"]:
        if "real" not in rec:
            continue
        rec["tpusim_pre"] = run_tpusim(tpusim, os.path.join(root, rec["hlo"]), rec["chip"])
        if rec["real"].get("oom"):
            continue
        rec["tpusim_opt"] = run_tpusim(tpusim, os.path.join(root, rec["opt_hlo"]), rec["chip"])
        add_errors(rec)
    for rec in (out.get("oom") or {}).values():
        rec["tpusim"] = run_tpusim(tpusim, os.path.join(HLO_DIR, "oom_sort.hlo"), rec["chip"])
    for rec in out.get("shapes") or []:
        if "shape" not in rec:
            continue
        for key, text in (("tpusim_same_layout", rec["shape"]), ("tpusim_default_layout", re.sub(r"\{.*\}", "", rec["shape"]))):
            path = os.path.join(DUMP, "probe.hlo")
            with open(path, "w") as fh:
                fh.write(f"HloModule p\n\nENTRY e {{\n  ROOT p = {text} parameter(0)\n}}\n")
            rec[key] = run_tpusim(tpusim, path, rec["chip"]).get("argument_bytes")


def compile_one(name, make, gen):
    fn, args, kw = make()
    dev = device(gen)
    sh = SingleDeviceSharding(dev)
    specs = to_specs(args, sh)
    jkw = {}
    if "donate_argnums" in kw:
        jkw["donate_argnums"] = kw["donate_argnums"]
    if "out_layout" in kw:
        jkw["out_shardings"] = Format(Layout(major_to_minor=kw["out_layout"]), sh)
    fn.__name__ = name
    lowered = jax.jit(fn, **jkw).lower(*specs)
    pre = lowered.as_text(dialect="hlo")
    try:
        compiled = lowered.compile()
    except Exception as e:  # noqa: BLE001 - out of memory is a result here, not a failure
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        return pre, None, str(e).splitlines()[0]
    ma = compiled.memory_analysis()
    opt = compiled.as_text()
    return pre, opt, ma


# ---------------------------------------------------------------------------------------------------------
# Single arrays: the layout and tiles the compiler picks for an argument (it chooses entry layouts itself when
# JAX leaves them at "default"), and the bytes it allocates.
# ---------------------------------------------------------------------------------------------------------

PROBE_SHAPES = [(), (1,), (100,), (256,), (257,), (1000,), (1025,), (100000,), (1, 128), (2, 128), (3, 128),
                (5, 128), (9, 128), (3, 1000), (1000, 3), (256, 10), (10, 256), (7, 9), (1, 1000, 1, 3),
                (2, 3, 5), (16, 16, 3), (8, 64, 64, 3), (4096, 1), (29360128, 10), (4, 1024), (6, 1024), (16, 1024),
                (32, 1024), (33, 1024), (64, 1024)]
PROBE_DTYPES = ["float32", "bfloat16", "int8", "bool"]   # (float64 is f32 without jax_enable_x64)
PROBE_GENS = ["v3", "v5e", "v6e", "v7"]


def probe_shapes(tpusim):
    out = []
    for gen in PROBE_GENS:
        sh = SingleDeviceSharding(device(gen))
        for dt in PROBE_DTYPES:
            for shape in PROBE_SHAPES:
                f = (lambda x: ~x) if dt == "bool" else (lambda x: x + 1)
                try:
                    c = jax.jit(f).lower(jax.ShapeDtypeStruct(shape, jnp.dtype(dt), sharding=sh)).compile()
                except Exception as e:  # noqa: BLE001
                    out.append({"gen": gen, "dtype": dt, "dims": list(shape), "error": str(e).splitlines()[0][:200]})
                    continue
                lay = re.search(r"entry_computation_layout=\{\((.*?)\)->", c.as_text()).group(1)
                rec = {"gen": gen, "chip": TOPOLOGIES[gen][1], "dtype": dt, "dims": list(shape), "shape": lay,
                       "bytes": c.memory_analysis().argument_size_in_bytes}
                # tpusim: with the compiler's layout, and with the default layout (what a user's program says)
                for key, text in (("tpusim_same_layout", lay), ("tpusim_default_layout", re.sub(r"\{.*\}", "", lay))):
                    path = os.path.join(DUMP, "probe.hlo")
                    with open(path, "w") as fh:
                        fh.write(f"HloModule p\n\nENTRY e {{\n  ROOT p = {text} parameter(0)\n}}\n")
                    rec[key] = run_tpusim(tpusim, path, rec["chip"]).get("argument_bytes")
                out.append(rec)
        print(f"== shapes {gen}: {sum(1 for r in out if r.get('gen') == gen)} arrays", file=sys.stderr)
    return out


# ---------------------------------------------------------------------------------------------------------
# Out of memory on purpose: the real compiler's messages and each generation's usable HBM.
# ---------------------------------------------------------------------------------------------------------

OOM_N = 100000   # three f32[100000,100000] temporaries (37.25 GiB each): too big for every generation


def oom_fn(v, w):
    a = jnp.sin(v[:, None] * w[None, :])
    return jnp.sort(a, axis=0)[0] + jnp.sort(a.T, axis=0)[0]


def oom_child(gen):
    """Compiles the oversize program for `gen`; libtpu logs its full report to stderr (parsed by oom_run)."""
    sh = SingleDeviceSharding(device(gen))
    spec = jax.ShapeDtypeStruct((OOM_N,), jnp.float32, sharding=sh)
    lowered = jax.jit(oom_fn).lower(spec, spec)
    if gen == "v3":
        with open(os.path.join(HLO_DIR, "oom_sort.hlo"), "w") as fh:
            fh.write(lowered.as_text(dialect="hlo"))
    try:
        lowered.compile()
        print("OOM-EXCEPTION: none (compiled)")
    except Exception as e:  # noqa: BLE001
        print("OOM-EXCEPTION: " + str(e).splitlines()[0])


GIB_RE = r"([0-9.]+)([KMGT]?)"


def to_bytes(num, unit):
    return int(round(float(num) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]))


def oom_run(gens):
    out = {}
    # a child process per generation so that libtpu's log (which holds the full report) can be read; run
    # before this process initializes libtpu (a second process could not take the TPU lock otherwise)
    env = dict(os.environ, TPU_STDERR_LOG_LEVEL="0", TPU_MIN_LOG_LEVEL="0", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    for gen in gens:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--oom-child", gen], capture_output=True,
                           text=True, env=env)
        text = r.stdout + r.stderr
        rec = {"topology": TOPOLOGIES[gen][0], "chip": TOPOLOGIES[gen][1]}
        m = re.search(r"OOM-EXCEPTION: (.*)", text)
        rec["exception"] = m.group(1).strip() if m else None
        m = re.search(r"(XLA:TPU compile permanent error\. Ran out of memory in memory space hbm\. Used .*?)"
                      r" Memory usage report:", text)
        rec["log_message"] = m.group(1) if m else None
        m = re.search(r"Used " + GIB_RE + r" of " + GIB_RE + r" hbm", text)
        if m:
            rec["used_bytes_approx"] = to_bytes(m.group(1), m.group(2))
            rec["usable_hbm_approx"] = to_bytes(m.group(3), m.group(4))
        m = re.search(r"rematerialization limit (.*)", text)
        rec["remat_limit_line"] = m.group(1).strip() if m else None
        m = re.search(r"Memory Space: default \(color=0\)\nTotal bytes: (\d+)", text)
        rec["report_total_bytes"] = int(m.group(1)) if m else None
        out[gen] = rec
        print(f"== oom {gen}: {rec['log_message'] or rec['exception']}", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tpusim", default="build/aot/tpusim")
    ap.add_argument("--only", nargs="*", help="program names")
    ap.add_argument("--keep-dump", action="store_true")
    ap.add_argument("--oom-child", help=argparse.SUPPRESS)
    ap.add_argument("--programs-only", action="store_true", help="redo the programs, keep the rest of the json")
    ap.add_argument("--gens", nargs="*", help="only these generations (with --only)")
    ap.add_argument("--oom-only", action="store_true", help="only redo the out-of-memory part of the json")
    ap.add_argument("--shapes-only", action="store_true", help="only redo the single-array part of the json")
    ap.add_argument("--tpusim-only", action="store_true",
                    help="keep the compiler's figures, re-run tpusim on the stored programs (no libtpu needed)")
    a = ap.parse_args()
    if a.tpusim_only:
        path = os.path.join(HERE, "libtpu_memory.json")
        with open(path) as fh:
            out = json.load(fh)
        refresh_tpusim(out, a.tpusim)
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")
        write_table(out)
        shutil.rmtree(DUMP, ignore_errors=True)
        return
    if a.oom_child:
        try:
            oom_child(a.oom_child)
        finally:
            shutil.rmtree(DUMP, ignore_errors=True)
        return
    os.makedirs(HLO_DIR, exist_ok=True)
    oom = oom_run(list(TOPOLOGIES)) if not a.only and not a.shapes_only and not a.programs_only else None
    if oom:
        for gen, rec in oom.items():
            rec["tpusim"] = run_tpusim(a.tpusim, os.path.join(HLO_DIR, "oom_sort.hlo"), rec["chip"])
    if a.oom_only or a.shapes_only:
        path = os.path.join(HERE, "libtpu_memory.json")
        with open(path) as fh:
            out = json.load(fh)
        if a.oom_only:
            out["oom"] = oom
        if a.shapes_only:
            out["shapes"] = probe_shapes(a.tpusim)
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")
        write_table(out)
        return
    os.makedirs(HLO_DIR, exist_ok=True)
    results = []
    for name, make, gens in PROGRAMS:
        if a.only and name not in a.only:
            continue
        for gen in gens:
            if a.gens and gen not in a.gens:
                continue
            tag = name if gen == gens[0] else f"{name}.{gen}"
            print(f"== {tag} ({gen})", file=sys.stderr)
            t0 = time.time()
            try:
                pre, opt, ma = compile_one(name, make, gen)
            except Exception as e:  # noqa: BLE001 - record why, go on
                results.append({"program": tag, "gen": gen, "error": str(e).splitlines()[0][:300]})
                print("   failed:", str(e).splitlines()[0][:300], file=sys.stderr)
                continue
            # the program before optimization does not depend on the generation: one file per program
            pre_path = os.path.join(HLO_DIR, f"{name}.hlo")
            if opt is None:   # the real compiler ran out of memory: ma is its message
                with open(pre_path, "w") as fh:
                    fh.write(pre)
                chip = TOPOLOGIES[gen][1]
                rec = {"program": tag, "gen": gen, "topology": TOPOLOGIES[gen][0], "chip": chip,
                       "hlo": f"tests/reference/hlo/{name}.hlo", "real": {"oom": True, "message": ma},
                       "tpusim_pre": run_tpusim(a.tpusim, pre_path, chip)}
                results.append(rec)
                print("   real: out of memory:", ma[:160], " tpusim fits:", rec["tpusim_pre"].get("fits"),
                      file=sys.stderr)
                continue
            opt_path = os.path.join(HLO_DIR, f"{tag}.opt.hlo")
            with open(pre_path, "w") as fh:
                fh.write(pre)
            with open(opt_path, "w") as fh:
                fh.write(strip_metadata(strip_backend_config(opt)))
            mod = re.search(r"^HloModule (\S+?),", opt, re.M).group(1)
            allocs = read_buffer_assignment(mod)
            real = {"argument_bytes": ma.argument_size_in_bytes, "output_bytes": ma.output_size_in_bytes,
                    "alias_bytes": ma.alias_size_in_bytes, "temp_bytes": ma.temp_size_in_bytes,
                    "generated_code_bytes": ma.generated_code_size_in_bytes,
                    "peak_bytes": ma.peak_memory_in_bytes}
            real["memory_spaces"] = read_usage_report(mod)
            real["hbm_bytes"] = real_hbm(real)
            chip = TOPOLOGIES[gen][1]
            rel = "tests/reference/hlo"
            rec = {"program": tag, "gen": gen, "topology": TOPOLOGIES[gen][0], "chip": chip,
                   "hlo": f"{rel}/{name}.hlo", "opt_hlo": f"{rel}/{tag}.opt.hlo", "real": real,
                   "real_largest": largest_values(allocs),
                   "tpusim_pre": run_tpusim(a.tpusim, pre_path, chip),
                   "tpusim_opt": run_tpusim(a.tpusim, opt_path, chip)}
            if name in CONSTRAINED:
                rec["constrained"] = CONSTRAINED[name]
            add_errors(rec)
            results.append(rec)
            print("   real peak %d  tpusim pre %s  opt %s  (%.1fs)" % (
                real["peak_bytes"], rec["tpusim_pre"].get("peak_bytes"), rec["tpusim_opt"].get("peak_bytes"),
                time.time() - t0), file=sys.stderr)
    meta = {"jax": jax.__version__, "libtpu": libtpu_version(),
            "note": "real = XLA:TPU (libtpu) ahead-of-time compile for one device of the topology; sizes in "
                    "bytes; tpusim_pre = tpusim memory on the program before optimization, tpusim_opt = on "
                    "the compiler's optimized program (its layouts, fusion and schedule)"}
    out = {"meta": meta, "programs": results}
    if oom:
        out["oom"] = oom
    if not a.only and not a.programs_only:
        out["shapes"] = probe_shapes(a.tpusim)
    path = os.path.join(HERE, "libtpu_memory.json")
    if a.only or a.programs_only:
        # keep the parts not redone (other programs, out of memory, single arrays) from the committed json
        with open(path) as fh:
            old = json.load(fh)
        redone = {r["program"] for r in results}
        kept = [r for r in old["programs"] if r["program"] not in redone] if a.only else []
        order = {n: i for i, (n, _, _) in enumerate(PROGRAMS)}
        out["programs"] = sorted(kept + results, key=lambda r: (order.get(r["program"].split(".")[0], 999),
                                                                 r["program"]))
        for k in ("oom", "shapes"):
            if k not in out and k in old:
                out[k] = old[k]
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    write_table(out)
    if not a.keep_dump:
        shutil.rmtree(DUMP, ignore_errors=True)
    else:
        print("dump kept in", DUMP, file=sys.stderr)


def libtpu_version():
    try:
        from importlib.metadata import version
        return version("libtpu")
    except Exception:  # noqa: BLE001
        return "?"


def human(n):
    if n is None:
        return "-"
    for u, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if abs(n) >= s:
            return f"{n / s:.2f}{u}"
    return f"{n}B"


def summary_lines(out):
    """Median and largest |error| of tpusim's HBM figure, before and after optimization, per generation."""
    import statistics
    rows = [r for r in out["programs"] if "real" in r and not r["real"].get("oom")]
    lines = ["## Summary", "",
             "|error| of tpusim's HBM figure against the real compiler's, over the programs compiled (those marked "
             "constrained are left out of *pre*: the compiler got a layout their text does not carry). "
             "Out-of-memory verdicts: tpusim's `fits` against whether libtpu compiled the program.", "",
             "| set | generation | programs | median | max | within 10% | within 30% |", "|---|---|---|---|---|---|---|"]
    for key, label in (("tpusim_pre", "before optimization"), ("tpusim_opt", "optimized by libtpu")):
        for gen in ["all"] + sorted({r["gen"] for r in rows}):
            errs = [abs(r[key]["peak_err_pct"]) for r in rows if (gen == "all" or r["gen"] == gen) and
                    r.get(key) and r[key].get("peak_err_pct") is not None and
                    not (key == "tpusim_pre" and r.get("constrained"))]
            if not errs:
                continue
            lines.append(f"| {label} | {gen} | {len(errs)} | {statistics.median(errs):.1f}% | {max(errs):.1f}% "
                         f"| {sum(e <= 10 for e in errs)} | {sum(e <= 30 for e in errs)} |")
    # the former reference: memory_analysis' arguments + outputs + temp - aliased, whose temp counts the heap's
    # fragmentation twice (libtpu's log: temp = heap + fragmentation); not what the out-of-memory check adds up
    for key, label in (("tpusim_pre", "before optimization, against memory_analysis' sum (fragmentation twice)"),):
        errs = []
        for r in rows:
            t = r.get(key) or {}
            hbm = analysis_hbm(r["real"])
            if hbm and t.get("peak_bytes") is not None and not r.get("constrained"):
                errs.append(abs(100.0 * (t["peak_bytes"] - hbm) / hbm))
        if errs:
            lines.append(f"| {label} | all | {len(errs)} | {statistics.median(errs):.1f}% | {max(errs):.1f}% "
                         f"| {sum(e <= 10 for e in errs)} | {sum(e <= 30 for e in errs)} |")
    verdicts = [(r["real"].get("oom", False), r.get("tpusim_pre", {}).get("fits")) for r in out["programs"] if "real" in r]
    agree = sum(1 for oom, fits in verdicts if fits is (not oom))
    lines += ["", f"Out-of-memory verdict: tpusim agrees with libtpu on {agree} of {len(verdicts)} compiles "
              f"({sum(1 for oom, _ in verdicts if oom)} of them out of memory)."]
    return lines


def write_table(out):
    m = out["meta"]
    lines = ["# tpusim vs the real TPU compiler (libtpu, ahead of time)", "",
             f"Generated by `tests/reference/libtpu_memory.py` with jax {m['jax']} and libtpu {m['libtpu']}: "
             "each program is compiled by XLA:TPU for one device of a TPU topology on a CPU-only machine "
             "(no TPU attached), and `tpusim memory` runs on the same program before optimization (*pre*) "
             "and on the compiler's optimized program (*opt*). Sizes per device, 1024-based. "
             "*real HBM* = the HBM space of the compiler's memory-usage report (`default`, plus on v4 the space "
             "it calls `hbm` where it puts temporaries): arguments, outputs not aliased, the heap of temporaries "
             "once, constants; what the compiler's own out-of-memory check totals (`Used X of Y hbm`, "
             "tests/reference/libtpu_oom_fragmentation.md). *real args/temp/out* are memory_analysis()'s; its temp "
             "is the heap plus the heap's fragmentation again, so args + out + temp - aliased exceeds real HBM "
             "wherever the heap is fragmented. *peak_memory* (peak_memory_in_bytes) also counts VMEM buffers on "
             "v5e and later. tpusim's figure is its peak_bytes (arguments + heap of temporaries and outputs). "
             "Error = (tpusim - real) / real.", "",
             "| program | chip | real HBM | real args | real temp | real out | real peak_memory | tpusim pre (err) "
             "| pre args (err) | tpusim opt (err) | opt args (err) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["programs"]:
        if "error" in r:
            lines.append(f"| {r['program']} | {r['gen']} | compile failed: {r['error']} |||||||||")
            continue
        if r["real"].get("oom"):
            t = r["tpusim_pre"]
            verdict = "agrees" if t.get("fits") is False else "DISAGREES"
            lines.append(f"| {r['program']} | {r['chip']} | out of memory | | | | | tpusim {human(t.get('peak_bytes'))} "
                         f"of {human(t.get('hbm_capacity_bytes'))}: {'does not fit' if t.get('fits') is False else 'fits'} "
                         f"({verdict}) | | | |")
            continue
        real, pre, opt = r["real"], r["tpusim_pre"], r["tpusim_opt"]

        def cell(t, k, e):
            if "error" in t:
                return "does not read: " + t["error"].split(": ")[-1][:60].replace("|", "/")
            return f"{human(t[k])} ({t[e]:+.1f}%)" if t[e] is not None else human(t[k])
        lines.append(f"| {r['program']} | {r['chip']} | {human(real['hbm_bytes'])} | {human(real['argument_bytes'])} "
                     f"| {human(real['temp_bytes'])} | {human(real['output_bytes'])} | {human(real['peak_bytes'])} "
                     f"| {cell(pre, 'peak_bytes', 'peak_err_pct')} | {cell(pre, 'argument_bytes', 'args_err_pct')} "
                     f"| {cell(opt, 'peak_bytes', 'peak_err_pct')} | {cell(opt, 'argument_bytes', 'args_err_pct')} |")
    lines += [""] + summary_lines(out)
    if out.get("oom"):
        lines += ["", "## Out of memory on purpose (`oom_sort.hlo`: three f32[100000,100000] temporaries)", "",
                  "| chip | topology | the real compiler's message (libtpu log) | usable HBM | tpusim capacity "
                  "| tpusim peak |", "|---|---|---|---|---|---|"]
        for gen, o in out["oom"].items():
            t = o.get("tpusim") or {}
            lines.append(f"| {o['chip']} | {o['topology']} | {o.get('log_message') or o.get('exception')} "
                         f"| {human(o.get('usable_hbm_approx'))} | {human(t.get('hbm_capacity_bytes'))} "
                         f"| {human(t.get('peak_bytes'))} |")
        lines += ["", "The exception JAX raises is the short form, e.g. `" +
                  (next(iter(out["oom"].values())).get("exception") or "") + "`; the report above is in libtpu's "
                  "log (TPU_STDERR_LOG_LEVEL=0), followed by a memory-usage report per memory space. The "
                  "rematerialization limit it logs: `" + (out["oom"].get("v3", {}).get("remat_limit_line") or "") +
                  "`."]
    if out.get("shapes"):
        lines += ["", "## Single arrays: the layout the compiler picks for an argument, and its bytes", "",
                  "tpusim *same* = tpusim's size for the compiler's layout (its T(...) tiles as written); *default* = "
                  "for the array written with the default layout, as in an unoptimized program. Mismatches in bold.",
                  "", "| chip | array | real layout | real bytes | tpusim same | tpusim default |", "|---|---|---|---|---|---|"]
        for r in out["shapes"]:
            if "error" in r:
                continue

            def b(v):
                return str(v) if v == r["bytes"] else f"**{v}**"
            lines.append(f"| {r['chip']} | {r['dtype']}{r['dims']} | `{r['shape']}` | {r['bytes']} "
                         f"| {b(r['tpusim_same_layout'])} | {b(r['tpusim_default_layout'])} |")
    lines += ["", "## Largest buffers the real compiler assigned (its layouts)", ""]
    for r in out["programs"]:
        if "error" in r or not r.get("real_largest"):
            continue
        lines.append(f"**{r['program']}** ({r['chip']}): " + "; ".join(
            f"`{v['shape']}` {human(v['bytes'])} ({v['alloc']})" for v in r["real_largest"][:5]))
        lines.append("")
    with open(os.path.join(HERE, "libtpu_memory.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
