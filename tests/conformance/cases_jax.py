"""Conformance programs written in JAX (lowered to HLO text by gen_cases.py).

Each builder gets a seeded numpy Generator and returns (fn, args): args is a tuple of numpy arrays or
pytrees of them; the entry parameters are jax.tree_util.tree_leaves(args) in order.
Shapes are kept small (batch 4-8, hidden 16-64, images 8x8, sequences 6).
"""

import functools

import numpy as np
import ml_dtypes

import jax
import jax.numpy as jnp
from jax import lax
import jax._src.lax.lax as lax_internal

from casedef import jax_case

BF16 = ml_dtypes.bfloat16
HIGHEST = lax.Precision.HIGHEST
HIGH = lax.Precision.HIGH
DEFAULT = lax.Precision.DEFAULT


def normal(rng, shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def glorot(rng, shape, dtype=np.float32):
    fan_in = int(np.prod(shape[:-1]))
    return normal(rng, shape, 1.0 / np.sqrt(fan_in), dtype)


def f32(x):
    return np.asarray(x, np.float32)


# ============================================================================ MLP

def mlp_params(rng, sizes, dtype=np.float32):
    return [(glorot(rng, (a, b), dtype), normal(rng, (b,), 0.1, dtype)) for a, b in zip(sizes[:-1], sizes[1:])]


def mlp_apply(params, x):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    return h


def xent(logits, labels):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


@jax_case('mlp_fwd', 'MLP forward 16-32-32-10, relu, softmax (f32), with metadata/stack frames',
          debug_info=True, verify_jit=True)
def _mlp_fwd(rng):
    params = mlp_params(rng, [16, 32, 32, 10])
    x = normal(rng, (8, 16))
    return (lambda p, x: jax.nn.softmax(mlp_apply(p, x), axis=-1)), (params, x)


def _mlp_train_inputs(rng, dtype=np.float32):
    params = mlp_params(rng, [16, 32, 32, 10], dtype)
    x = normal(rng, (8, 16), 1.0, dtype)
    y = rng.integers(0, 10, size=(8,)).astype(np.int32)
    return params, x, y


@jax_case('mlp_train_sgd', 'MLP train step f32: softmax cross-entropy loss, grads, SGD update (lr input)',
          verify_jit=True)
def _mlp_train_sgd(rng):
    params, x, y = _mlp_train_inputs(rng)

    def step(params, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: xent(mlp_apply(p, x), y))(params)
        return loss, jax.tree_util.tree_map(lambda p, g: p - lr * g, params, g)
    return step, (params, x, y, f32(0.1))


def adam_update(p, g, m, v, t, lr, b1=0.9, b2=0.999, eps=1e-8):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    tf = t.astype(jnp.float32)
    mhat = m / (1 - jnp.power(b1, tf))
    vhat = v / (1 - jnp.power(b2, tf))
    return p - lr * mhat / (jnp.sqrt(vhat) + eps), m, v


def tree_adam(params, grads, m, v, t, lr):
    out = jax.tree_util.tree_map(lambda p, g, m, v: adam_update(p, g, m, v, t, lr), params, grads, m, v)
    is_leaf = lambda x: isinstance(x, tuple) and len(x) == 3 and not isinstance(x[0], tuple)
    p2 = jax.tree_util.tree_map(lambda o: o[0], out, is_leaf=is_leaf)
    m2 = jax.tree_util.tree_map(lambda o: o[1], out, is_leaf=is_leaf)
    v2 = jax.tree_util.tree_map(lambda o: o[2], out, is_leaf=is_leaf)
    return p2, m2, v2


@jax_case('mlp_train_adam', 'MLP train step f32 with Adam (step count s32 input, bias correction via power)')
def _mlp_train_adam(rng):
    params, x, y = _mlp_train_inputs(rng)
    m = jax.tree_util.tree_map(lambda p: normal(rng, p.shape, 0.01), params)
    v = jax.tree_util.tree_map(lambda p: np.abs(normal(rng, p.shape, 1e-4)), params)

    def step(params, m, v, t, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: xent(mlp_apply(p, x), y))(params)
        p2, m2, v2 = tree_adam(params, g, m, v, t, lr)
        return loss, p2, m2, v2
    return step, (params, m, v, np.int32(3), x, y, f32(1e-3))


@jax_case('mlp_train_bf16', 'MLP train step with bf16 params and activations (loss in f32), SGD in bf16')
def _mlp_train_bf16(rng):
    params, x, y = _mlp_train_inputs(rng, BF16)

    def step(params, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: xent(mlp_apply(p, x), y))(params)
        return loss, jax.tree_util.tree_map(lambda p, g: (p - lr.astype(p.dtype) * g), params, g)
    return step, (params, x, y, f32(0.1))


@jax_case('mlp_train_mixed_adam', 'mixed precision MLP train step: f32 master weights and Adam, bf16 compute, '
          'static loss scaling')
def _mlp_train_mixed(rng):
    params, x, y = _mlp_train_inputs(rng)
    m = jax.tree_util.tree_map(lambda p: normal(rng, p.shape, 0.01), params)
    v = jax.tree_util.tree_map(lambda p: np.abs(normal(rng, p.shape, 1e-4)), params)

    def step(params, m, v, t, x, y, lr):
        def loss_fn(p):
            pb = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), p)
            return xent(mlp_apply(pb, x.astype(jnp.bfloat16)), y) * 128.0
        sl, g = jax.value_and_grad(loss_fn)(params)
        g = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32) / 128.0, g)
        p2, m2, v2 = tree_adam(params, g, m, v, t, lr)
        return sl / 128.0, p2, m2, v2
    return step, (params, m, v, np.int32(4), x, y, f32(1e-3))


# ============================================================================ CNN

def conv(x, w, stride=(1, 1), padding='SAME', lhs_dil=None, rhs_dil=None, dn=('NHWC', 'HWIO', 'NHWC'),
         groups=1, precision=None):
    return lax.conv_general_dilated(x, w, stride, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
                                    dimension_numbers=dn, feature_group_count=groups, precision=precision)


def batch_norm(x, gamma, beta, axes, eps=1e-5):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * gamma + beta


def max_pool(x, window, strides, padding='VALID'):
    return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding)


def avg_pool(x, window, strides, padding='VALID'):
    s = lax.reduce_window(x, 0.0, lax.add, window, strides, padding)
    return s / float(np.prod(window))


def cnn_params(rng):
    return {
        'c1': glorot(rng, (3, 3, 3, 8)), 'g1': 1 + normal(rng, (8,), 0.1), 'b1': normal(rng, (8,), 0.1),
        'c2': glorot(rng, (3, 3, 8, 16)), 'cb2': normal(rng, (16,), 0.1),
        'd': glorot(rng, (16, 10)), 'db': normal(rng, (10,), 0.1),
    }


def cnn_apply(p, x):
    h = conv(x, p['c1'])                                            # 8x8x8, stride 1 SAME
    h = jax.nn.relu(batch_norm(h, p['g1'], p['b1'], (0, 1, 2)))
    h = max_pool(h, (1, 2, 2, 1), (1, 2, 2, 1))                     # 4x4
    h = conv(h, p['c2'], stride=(2, 2), padding=((1, 1), (1, 1))) + p['cb2']  # 2x2
    h = jax.nn.relu(h)
    h = avg_pool(h, (1, 2, 2, 1), (1, 1, 1, 1))                     # 1x1
    return h.reshape(h.shape[0], -1) @ p['d'] + p['db']


@jax_case('cnn_fwd_nhwc', 'CNN forward NHWC: conv SAME, batch-norm (batch stats), relu, max-pool, strided conv, '
          'avg-pool, dense', verify_jit=True)
def _cnn_fwd(rng):
    return cnn_apply, (cnn_params(rng), normal(rng, (4, 8, 8, 3)))


@jax_case('cnn_train_nhwc', 'CNN train step NHWC (cross-entropy, grads through conv/batch-norm/max-pool '
          '(select-and-scatter)/avg-pool, SGD)')
def _cnn_train(rng):
    p = cnn_params(rng)
    x = normal(rng, (4, 8, 8, 3))
    y = rng.integers(0, 10, size=(4,)).astype(np.int32)

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: xent(cnn_apply(p, x), y))(p)
        return loss, jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)
    return step, (p, x, y, f32(0.05))


def cnn_nchw_apply(p, x):
    dn = ('NCHW', 'OIHW', 'NCHW')
    h = conv(x, p['c1'], padding='SAME', rhs_dil=(2, 2), dn=dn)          # 8x8, dilated kernel
    h = jax.nn.relu(batch_norm(h, p['g1'][None, :, None, None], p['b1'][None, :, None, None], (0, 2, 3)))
    h = max_pool(h, (1, 1, 3, 3), (1, 1, 2, 2), padding=((0, 0), (0, 0), (1, 1), (1, 1)))   # 4x4
    h = conv(h, p['c2'], stride=(1, 1), padding=((1, 2), (2, 1)), lhs_dil=(2, 2), dn=dn)      # transposed: 8x8
    h = jnp.tanh(h)
    h = avg_pool(h, (1, 1, 2, 2), (1, 1, 2, 2))                             # 4x4
    return jnp.mean(h, axis=(2, 3)) @ p['d']


def cnn_nchw_params(rng):
    return {'c1': glorot(rng, (8, 3, 3, 3)), 'g1': 1 + normal(rng, (8,), 0.1), 'b1': normal(rng, (8,), 0.1),
            'c2': glorot(rng, (6, 8, 4, 4)), 'd': glorot(rng, (6, 5))}


@jax_case('cnn_fwd_nchw', 'CNN forward NCHW/OIHW: dilated conv, batch-norm, padded 3x3/2 max-pool, '
          'lhs-dilated (transposed) conv with asymmetric padding, tanh, avg-pool')
def _cnn_nchw(rng):
    return cnn_nchw_apply, (cnn_nchw_params(rng), normal(rng, (2, 3, 8, 8)))


@jax_case('cnn_train_nchw', 'train step of cnn_fwd_nchw (MSE loss, grads, SGD)')
def _cnn_nchw_train(rng):
    p = cnn_nchw_params(rng)
    x = normal(rng, (2, 3, 8, 8))
    t = normal(rng, (2, 5))

    def step(p, x, t, lr):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((cnn_nchw_apply(p, x) - t) ** 2))(p)
        return loss, jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)
    return step, (p, x, t, f32(0.1))


@jax_case('conv_variants', 'convolutions: strides, asymmetric padding, rhs/lhs dilation, 1x1, 1-D, 3-D, '
          'unusual dimension orders (CNHW/IHWO/NWHC... via dimension_numbers)')
def _conv_variants(rng):
    x = normal(rng, (2, 7, 9, 4))
    w = glorot(rng, (3, 2, 4, 5))
    x1 = normal(rng, (2, 11, 3))
    w1 = glorot(rng, (3, 3, 4))
    x3 = normal(rng, (1, 4, 5, 6, 2))
    w3 = glorot(rng, (2, 2, 3, 2, 3))

    def f(x, w, x1, w1, x3, w3):
        outs = [
            conv(x, w, stride=(2, 1), padding=((2, 1), (0, 2))),
            conv(x, w, padding='VALID', rhs_dil=(2, 3)),
            conv(x, w, stride=(1, 2), padding=((1, 1), (2, 2)), lhs_dil=(2, 1)),
            conv(x, w[:1, :1], padding='VALID'),
            lax.conv_general_dilated(x1, w1, (2,), 'SAME', dimension_numbers=('NWC', 'WIO', 'NWC')),
            lax.conv_general_dilated(x3, w3, (1, 1, 2), 'SAME', dimension_numbers=('NDHWC', 'DHWIO', 'NDHWC')),
            # same conv as the first with permuted dimension orders on all three arrays
            lax.conv_general_dilated(jnp.transpose(x, (3, 0, 1, 2)), jnp.transpose(w, (2, 0, 1, 3)), (2, 1),
                                     ((2, 1), (0, 2)), dimension_numbers=('CNHW', 'IHWO', 'NWHC')),
            conv(x, w, padding=((-1, 0), (0, -1))),   # negative padding crops
        ]
        return tuple(outs)
    return f, (x, w, x1, w1, x3, w3)


@jax_case('depthwise_conv_fwd', 'depthwise conv (feature_group_count=6, channel multiplier 2) + grouped conv '
          '(2 groups)')
def _depthwise(rng):
    x = normal(rng, (2, 8, 8, 6))
    wd = glorot(rng, (3, 3, 1, 12))
    wg = glorot(rng, (3, 3, 3, 4))

    def f(x, wd, wg):
        return conv(x, wd, groups=6), conv(x, wg, stride=(2, 2), groups=2)
    return f, (x, wd, wg)


@jax_case('depthwise_conv_grad', 'gradients of depthwise and grouped convs w.r.t. input and kernel '
          '(kernel grads lower to batch_group_count convolutions)')
def _depthwise_grad(rng):
    x = normal(rng, (2, 8, 8, 6))
    wd = glorot(rng, (3, 3, 1, 12))
    wg = glorot(rng, (3, 3, 3, 4))
    gd = normal(rng, (2, 8, 8, 12))
    gg = normal(rng, (2, 4, 4, 4))

    def f(x, wd, wg, gd, gg):
        def loss(x, wd, wg):
            return jnp.sum(conv(x, wd, groups=6) * gd) + jnp.sum(conv(x, wg, stride=(2, 2), groups=2) * gg)
        return jax.grad(loss, argnums=(0, 1, 2))(x, wd, wg)
    return f, (x, wd, wg, gd, gg)


# ============================================================================ LSTM

def lstm_params(rng, n_in=8, n_h=16):
    return {'wx': glorot(rng, (n_in, 4 * n_h)), 'wh': glorot(rng, (n_h, 4 * n_h)),
            'b': normal(rng, (4 * n_h,), 0.1), 'wo': glorot(rng, (n_h, 1)), 'bo': f32(np.zeros(1))}


def lstm_run(p, xs):
    n_h = p['wh'].shape[0]
    B = xs.shape[1]

    def cell(carry, x):
        h, c = carry
        z = x @ p['wx'] + h @ p['wh'] + p['b']
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    init = (jnp.zeros((B, n_h), xs.dtype), jnp.zeros((B, n_h), xs.dtype))
    (h, c), hs = lax.scan(cell, init, xs)
    return hs, c


@jax_case('lstm_fwd', 'LSTM over a time series (T=6, B=4, in 8, hidden 16) via lax.scan -> while loop',
          verify_jit=True)
def _lstm_fwd(rng):
    return lstm_run, (lstm_params(rng), normal(rng, (6, 4, 8)))


@jax_case('lstm_train', 'LSTM train step: per-step linear readout, MSE vs targets, BPTT grads (scan '
          'backward), SGD')
def _lstm_train(rng):
    p = lstm_params(rng)
    xs = normal(rng, (6, 4, 8))
    ys = normal(rng, (6, 4, 1))

    def step(p, xs, ys, lr):
        def loss(p):
            hs, _ = lstm_run(p, xs)
            return jnp.mean((hs @ p['wo'] + p['bo'] - ys) ** 2)
        l, g = jax.value_and_grad(loss)(p)
        return l, jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)
    return step, (p, xs, ys, f32(0.1))


# ============================================================================ transformer

def layer_norm(x, g, b, eps=1e-5):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + eps) * g + b


def block_params(rng, d=32, ff=64):
    return {'ln1g': 1 + normal(rng, (d,), 0.1), 'ln1b': normal(rng, (d,), 0.1),
            'wqkv': glorot(rng, (d, 3 * d)), 'wo': glorot(rng, (d, d)),
            'ln2g': 1 + normal(rng, (d,), 0.1), 'ln2b': normal(rng, (d,), 0.1),
            'w1': glorot(rng, (d, ff)), 'b1': normal(rng, (ff,), 0.1), 'w2': glorot(rng, (ff, d)),
            'b2': normal(rng, (d,), 0.1)}


def block_apply(p, x, heads=4, approximate=True):
    B, S, D = x.shape
    dh = D // heads
    h = layer_norm(x, p['ln1g'], p['ln1b'])
    qkv = h @ p['wqkv'].astype(h.dtype)
    q, k, v = jnp.split(qkv, 3, axis=-1)
    q = q.reshape(B, S, heads, dh)
    k = k.reshape(B, S, heads, dh)
    v = v.reshape(B, S, heads, dh)
    s = jnp.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(dh).astype(np.float32)
    mask = jnp.tril(jnp.ones((S, S), bool))
    s = jnp.where(mask, s.astype(jnp.float32), -jnp.inf)
    a = jax.nn.softmax(s, axis=-1).astype(x.dtype)
    o = jnp.einsum('bhqk,bkhd->bqhd', a, v).reshape(B, S, D)
    x = x + o @ p['wo'].astype(x.dtype)
    h = layer_norm(x, p['ln2g'], p['ln2b'])
    h = jax.nn.gelu(h @ p['w1'].astype(h.dtype) + p['b1'], approximate=approximate)
    return x + h @ p['w2'].astype(h.dtype) + p['b2']


@jax_case('transformer_fwd', 'transformer block forward (B=2, S=6, D=32, 4 heads): pre-LN, causal softmax '
          'attention, tanh-gelu MLP, with metadata', debug_info=True, verify_jit=True)
def _tf_fwd(rng):
    return block_apply, (block_params(rng), normal(rng, (2, 6, 32)))


@jax_case('transformer_fwd_bf16', 'transformer block forward in bf16 (softmax and layer-norm statistics '
          'in f32 via jnp promotion of the mask)')
def _tf_fwd_bf16(rng):
    p = jax.tree_util.tree_map(lambda a: a.astype(BF16), block_params(rng))
    return block_apply, (p, normal(rng, (2, 6, 32), 1.0, BF16))


def lm_params(rng, vocab=40, d=32):
    p = block_params(rng, d)
    p['emb'] = normal(rng, (vocab, d), 0.5)
    p['pos'] = normal(rng, (6, d), 0.1)
    return p


def lm_loss(p, ids):
    x = p['emb'][ids] + p['pos'][None]
    x = block_apply(p, x, approximate=False)
    logits = x @ p['emb'].T
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    tgt = ids[:, 1:]
    return -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], axis=-1))


@jax_case('transformer_train', 'tiny LM train step: embedding gather, transformer block with erf-gelu, tied '
          'output projection, next-token cross-entropy, grads (scatter-add into embedding), Adam')
def _tf_train(rng):
    p = lm_params(rng)
    ids = rng.integers(0, 40, size=(2, 6)).astype(np.int32)
    m = jax.tree_util.tree_map(lambda a: normal(rng, a.shape, 1e-3), p)
    v = jax.tree_util.tree_map(lambda a: np.abs(normal(rng, a.shape, 1e-5)), p)

    def step(p, m, v, t, ids, lr):
        l, g = jax.value_and_grad(lm_loss)(p, ids)
        p2, m2, v2 = tree_adam(p, g, m, v, t, lr)
        return l, p2, m2, v2
    return step, (p, m, v, np.int32(5), ids, f32(1e-3))


# ============================================================================ gather / scatter / dynamic slicing

@jax_case('embedding_grad', 'embedding lookup (gather) and its gradient (scatter-add with repeated ids)')
def _emb(rng):
    table = normal(rng, (50, 16))
    ids = rng.integers(0, 50, size=(8, 5)).astype(np.int32)
    ids[0, :3] = 7   # repeats
    w = normal(rng, (8, 5, 16))

    def f(table, ids, w):
        def loss(t):
            return jnp.sum(jnp.tanh(t[ids]) * w)
        return table[ids], jax.grad(loss)(table)
    return f, (table, ids, w)


@jax_case('scatter_combiners', 'scatter with add/max/min/mul/replace combiners, 2-D index vectors, '
          'out-of-bounds updates dropped', perturb=False)
def _scatter(rng):
    x = normal(rng, (10, 4))
    idx = np.array([1, 3, 3, 9, 0, 12], np.int32)      # 12 is out of bounds -> dropped
    uidx = np.array([2, 5, 7, 11], np.int32)            # unique for replace (11 dropped)
    u = normal(rng, (6, 4))
    uu = normal(rng, (4, 4))
    ij = np.array([[0, 1], [2, 3], [2, 3], [9, 0], [4, 4]], np.int32)   # [4,4] is out of bounds
    v = normal(rng, (5,))

    def f(x, idx, uidx, u, uu, ij, v):
        return (x.at[idx].add(u), x.at[idx].max(u), x.at[idx].min(u), x.at[idx].mul(u),
                x.at[uidx].set(uu, unique_indices=True), x.at[ij[:, 0], ij[:, 1]].add(v),
                x.at[ij[:, 0], ij[:, 1]].max(v))
    return f, (x, idx, uidx, u, uu, ij, v)


@jax_case('dynamic_slice_update', 'dynamic-slice / dynamic-update-slice with runtime start indices, '
          'including out-of-range starts (clamped)', bit_exact=True)
def _dyn(rng):
    x = normal(rng, (8, 6))
    upd = normal(rng, (2, 3))
    starts = np.array([2, 1, 7, 5, -3, 4], np.int32)

    def f(x, upd, s):
        outs = []
        for k in range(3):
            i, j = s[2 * k], s[2 * k + 1]
            outs.append(lax.dynamic_slice(x, (i, j), (3, 4)))
            outs.append(lax.dynamic_update_slice(x, upd, (i, j)))
        return tuple(outs)
    return f, (x, upd, starts)


@jax_case('gather_variants', 'gathers: take_along_axis, 2-D point indexing, clipped take, vmapped '
          'dynamic_slice (batched gather), column fancy-index', bit_exact=True)
def _gather(rng):
    x = normal(rng, (6, 7))
    ia = rng.integers(0, 7, size=(6, 3)).astype(np.int32)
    pts = rng.integers(0, 6, size=(5, 2)).astype(np.int32)
    tk = np.array([0, 5, 9, -1], np.int32)
    st = np.array([0, 2, 4, 5, 1, 3], np.int32)

    def f(x, ia, pts, tk, st):
        return (jnp.take_along_axis(x, ia, axis=1), x[pts[:, 0], pts[:, 1]],
                jnp.take(x, tk, axis=0, mode='clip'),
                jax.vmap(lambda r, s: lax.dynamic_slice(r, (s,), (3,)))(x, st),
                x[:, jnp.array([1, 3, 3])])
    return f, (x, ia, pts, tk, st)


# ============================================================================ sort / top-k / argmax

@jax_case('sort_multi', 'sort: multi-operand stable sort by f32 keys with NaN/-0/+0/inf/duplicates '
          '(TOTALORDER comparator), descending, argsort, 2-D along axis 0', bit_exact=True)
def _sort(rng):
    keys = np.array([3.0, -0.0, np.nan, 1.0, 0.0, -np.inf, 1.0, np.inf, -2.5, 1.0, -np.nan, 0.5], np.float32)
    vals = np.arange(12, dtype=np.int32)
    vf = normal(rng, (12,))
    m = rng.integers(0, 4, size=(5, 3)).astype(np.float32)

    def f(keys, vals, vf, m):
        sk, sv, sf = lax.sort((keys, vals, vf), num_keys=1, is_stable=True)
        return sk, sv, sf, jnp.sort(keys)[::-1], jnp.argsort(keys, stable=True).astype(jnp.int32), \
            jnp.sort(m, axis=0), jnp.argsort(-m, axis=0, stable=True).astype(jnp.int32)
    return f, (keys, vals, vf, m)


@jax_case('topk', 'lax.top_k on f32 rows with ties (lowers to the HLO `topk` op on CPU) and on s32',
          bit_exact=True)
def _topk(rng):
    x = rng.integers(0, 5, size=(5, 9)).astype(np.float32)
    xi = rng.integers(-50, 50, size=(3, 10)).astype(np.int32)

    def f(x, xi):
        v, i = lax.top_k(x, 3)
        vi, ii = lax.top_k(xi, 4)
        return v, i, vi, ii
    return f, (x, xi)


@jax_case('argmax_argmin', 'argmax/argmin (variadic reduce with index), incl. NaN and ties; max/min reduce '
          'with NaN', bit_exact=True)
def _argmax(rng):
    x = rng.integers(0, 4, size=(4, 6)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, 0] = -np.inf

    def f(x):
        return (jnp.argmax(x, axis=1).astype(jnp.int32), jnp.argmin(x, axis=0).astype(jnp.int32),
                jnp.max(x, axis=1), jnp.min(x, axis=0), jnp.argmax(x.reshape(-1)).astype(jnp.int32))
    return f, (x,)


# ============================================================================ control flow

@jax_case('while_fori_dynamic', 'fori_loop with a dynamic trip count (s32 input) -> while with tuple state',
          verify_jit=True)
def _fori(rng):
    x = normal(rng, (4, 5))
    w = glorot(rng, (5, 5))

    def f(x, w, n):
        def body(i, c):
            x, acc = c
            x = jnp.tanh(x @ w) + 0.1 * i.astype(jnp.float32)
            return x, acc + jnp.sum(x)
        return lax.fori_loop(0, n, body, (x, jnp.float32(0)))
    return f, (x, w, np.int32(5))


@jax_case('while_nested', 'while_loop with data-dependent exit (Newton sqrt until converged) with a nested '
          'fixed-count fori_loop', perturb=False)
def _while_nested(rng):
    a = np.abs(normal(rng, (6,), 3.0)) + 0.5

    def f(a):
        def cond(c):
            x, it = c
            return jnp.logical_and(jnp.max(jnp.abs(x * x - a)) > 1e-5 * jnp.max(a), it < 50)

        def body(c):
            x, it = c
            x = lax.fori_loop(0, 2, lambda i, y: 0.5 * (y + a / y), x)
            return x, it + 1
        return lax.while_loop(cond, body, (a, jnp.int32(0)))
    return f, (a,)


@jax_case('cond_pred', 'lax.cond on a predicate computed from an input (two conds, one taken each way)')
def _cond(rng):
    x = normal(rng, (3, 4))

    def f(x, p, q):
        a = lax.cond(p > 0, lambda x: jnp.sin(x) * 2, lambda x: jnp.cos(x) - 1, x)
        b = lax.cond(q > 0, lambda x: (x @ x.T, jnp.sum(x)), lambda x: (x[:, :3] * 0.0, jnp.max(x)), x)
        return a, b
    return f, (x, f32(1.0), f32(-1.0))


@jax_case('switch_index', 'lax.switch with s32 branch index (indexed conditional, 3 branches), in-range and '
          'out-of-range index (clamped by jax)')
def _switch(rng):
    x = normal(rng, (5,))
    branches = [lambda x: x + 1, lambda x: jnp.exp(x), lambda x: jnp.sort(x)]

    def f(x, i, j):
        return lax.switch(i, branches, x), lax.switch(j, branches, x)
    return f, (x, np.int32(1), np.int32(7))


# ============================================================================ random numbers

def _rng_ops(key):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return (jax.random.normal(k1, (4, 5)), jax.random.uniform(k2, (7,), minval=-2.0, maxval=3.0),
            jax.random.bernoulli(k3, 0.3, (8,)), jax.random.randint(k4, (6,), 0, 10).astype(jnp.int32),
            jax.random.permutation(k1, 8).astype(jnp.int32), jax.random.key_data(jax.random.fold_in(key, 3)))


@jax_case('rng_threefry', 'jax.random (default threefry2x32 impl, lowered to plain integer HLO): split, '
          'normal, uniform, bernoulli, randint, permutation (sort), fold_in', perturb=False)
def _rng_tf(rng):
    return (lambda s: _rng_ops(jax.random.key(s, impl='threefry2x32'))), (np.int32(42),)


@jax_case('rng_bit_generator_threefry', 'rng-bit-generator algorithm=rng_three_fry, u32 and f32 '
          'from bits, odd shapes', bit_exact=True)
def _rbg_tf(rng):
    key = np.array([1, 2, 3, 4], np.uint32)
    alg = lax.RandomAlgorithm.RNG_THREE_FRY

    def f(key):
        k2, b = lax.rng_bit_generator(key, (4, 8), algorithm=alg)
        k3, c = lax.rng_bit_generator(k2, (5, 3), algorithm=alg)
        u = lax.bitcast_convert_type((c >> 9) | np.uint32(0x3F800000), jnp.float32) - 1.0
        k4, d = lax.rng_bit_generator(k3, (3, 7), dtype=jnp.uint8, algorithm=alg)
        return b, k3, u, d, k4
    return f, (key,)


@jax_case('rng_bit_generator_philox', 'rng-bit-generator algorithm=rng_philox, u32/u8/u16 outputs, odd '
          'shapes', bit_exact=True)
def _rbg_ph(rng):
    key = np.array([0xDEADBEEF, 7, 0, 1], np.uint32)
    alg = lax.RandomAlgorithm.RNG_PHILOX

    def f(key):
        k2, b = lax.rng_bit_generator(key, (4, 8), algorithm=alg)
        k3, c = lax.rng_bit_generator(k2, (5, 3), algorithm=alg)
        k4, d = lax.rng_bit_generator(k3, (3, 7), dtype=jnp.uint8, algorithm=alg)
        k5, e = lax.rng_bit_generator(k4, (9,), dtype=jnp.uint16, algorithm=alg)
        return b, k2, c, d, e, k5
    return f, (key,)


def _rng_default_check(text, inputs, outs):
    import xla_runner
    if 'rng_default' not in text:
        return None
    notes = []
    for alg in ('rng_philox', 'rng_three_fry'):
        alt = xla_runner.run_hlo_text(text.replace('algorithm=rng_default', 'algorithm=' + alg), inputs)
        same = all(np.array_equal(a, b) for a, b in zip(alt, outs))
        notes.append('%s: %s' % (alg, 'identical' if same else 'different'))
    return 'On XLA:CPU algorithm=rng_default gives the same outputs as ' \
        + '/'.join(n.split(':')[0] for n in notes if n.endswith('identical')) \
        + ' (checked by rewriting the attribute: %s). A real TPU may differ.' % ', '.join(notes)


@jax_case('rng_rbg', "jax.random with impl 'rbg' and 'unsafe_rbg' (rng-bit-generator algorithm=rng_default)",
          perturb=False, check=_rng_default_check)
def _rng_rbg(rng):
    k = np.array([11, 22, 33, 44], np.uint32)

    def f(k):
        out = []
        for impl in ('rbg', 'unsafe_rbg'):
            key = jax.random.wrap_key_data(k, impl=impl)
            a, b = jax.random.split(key)
            out += [jax.random.normal(a, (3, 4)), jax.random.uniform(b, (5,)),
                    jax.random.key_data(jax.random.fold_in(key, 9))]
        return tuple(out)
    return f, (k,)


# ============================================================================ elementwise

def special_f32(rng, n):
    # no subnormals here (XLA:CPU flushes them, inconsistently across ops): see case `denormals`
    sp = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.2e-38, -1.2e-38, 1e30, -1e30, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5,
          3.5, 1e-7, 88.0, -88.0, 100.0, -104.0, np.pi, 3e-30, 3.4e38]
    x = np.concatenate([np.array(sp, np.float32), (rng.standard_normal(n - len(sp)) * 3).astype(np.float32)])
    return x


@jax_case('elementwise_unary', 'unary f32 ops over random and special values (0, -0, inf, nan, subnormal, '
          'huge): exp log log1p expm1 tanh logistic rsqrt sqrt cbrt erf sin cos tan abs neg sign floor ceil '
          'round-afz round-even is-finite atan2-based atan, erf_inv, lgamma, digamma', perturb=False)
def _unary(rng):
    x = special_f32(rng, 48)

    def f(x):
        return (jnp.exp(x), jnp.log(x), jnp.log1p(x), jnp.expm1(x), jnp.tanh(x), jax.nn.sigmoid(x),
                lax.rsqrt(x), jnp.sqrt(x), jnp.cbrt(x), lax.erf(x), jnp.sin(x), jnp.cos(x), lax.tan(x),
                jnp.abs(x), -x, jnp.sign(x), jnp.floor(x), jnp.ceil(x),
                lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), jnp.round(x), jnp.isfinite(x),
                jnp.arctan(x), lax.erf_inv(jnp.clip(x, -1, 1)), lax.lgamma(x), lax.digamma(x))
    return f, (x,)


@jax_case('elementwise_binary', 'binary f32 ops with special values: power atan2 remainder divide max min '
          '(NaN-propagating) nextafter hypot, jnp.remainder/floor_divide, integer power', perturb=False)
def _binary(rng):
    a = special_f32(rng, 48)
    b = np.concatenate([np.array([2.0, -1.0, 0.5, 3.0, np.nan, -0.0, 0.0, np.inf, -np.inf, 1.0, 2.0, -3.0,
                                  0.0, 1.5, -2.0, 0.25], np.float32),
                        (rng.standard_normal(32) * 2).astype(np.float32)])

    def f(a, b):
        return (lax.pow(a, b), jnp.arctan2(a, b), lax.rem(a, b), a / b, jnp.maximum(a, b), jnp.minimum(a, b),
                jnp.nextafter(a, b), jnp.hypot(a, b), jnp.remainder(a, b), jnp.floor_divide(a, b),
                lax.integer_pow(a, 3), lax.integer_pow(a, -2), lax.pow(jnp.abs(a), b), a * b - a)
    return f, (a, b)


@jax_case('elementwise_low_precision', 'elementwise ops on bf16 and f16 arrays (XLA computes in f32 and '
          'rounds): add mul div exp tanh log sqrt, mixed bf16+f32 promotion', perturb=False)
def _lowp(rng):
    xb = normal(rng, (32,), 2.0, BF16)
    yb = normal(rng, (32,), 2.0, BF16)
    xh = normal(rng, (32,), 2.0, np.float16)
    yh = normal(rng, (32,), 2.0, np.float16)
    z = normal(rng, (32,))

    def f(xb, yb, xh, yh, z):
        outs = []
        for x, y in ((xb, yb), (xh, yh)):
            outs += [x + y, x * y, x / y, jnp.exp(x), jnp.tanh(x), jnp.log(jnp.abs(x)), jnp.sqrt(jnp.abs(y)),
                     jax.nn.sigmoid(x), x * x * x - y]
        outs.append(xb.astype(jnp.float32) * z + xh.astype(jnp.float32))
        return tuple(outs)
    return f, (xb, yb, xh, yh, z)


@jax_case('integer_ops', 'integer ops on s32/u32/s8/u8: wrapping add/mul, div/rem incl. by zero and '
          'INT_MIN/-1, shifts incl. amounts >= width and negative, popcnt, clz, and/or/xor/not, abs, sign, '
          'max/min, compares', bit_exact=True)
def _ints(rng):
    a = np.concatenate([np.array([0, 1, -1, 2**31 - 1, -2**31, 7, -7, 100, -100, 12345, 65536, 3],
                                 np.int32), rng.integers(-1000, 1000, 12).astype(np.int32)])
    b = np.concatenate([np.array([0, 0, -1, 2, -1, 3, 2, -7, 33, 32, 31, -1], np.int32),
                        rng.integers(-40, 40, 12).astype(np.int32)])
    au = a.view(np.uint32)
    bu = b.view(np.uint32)
    a8 = rng.integers(-128, 128, 24).astype(np.int8)
    b8 = rng.integers(0, 256, 24).astype(np.uint8)

    def f(a, b, au, bu, a8, b8):
        outs = []
        for x, y in ((a, b), (au, bu)):
            outs += [x + y, x * y, lax.div(x, y), lax.rem(x, y), lax.shift_left(x, y),
                     lax.shift_right_logical(x, y), lax.shift_right_arithmetic(x, y), lax.population_count(x),
                     lax.clz(x), x & y, x | y, x ^ y, ~x, jnp.maximum(x, y), jnp.minimum(x, y), x < y, x >= y]
        outs += [jnp.abs(a), jnp.sign(a), -a, a8 * np.int8(3), b8 + np.uint8(200), lax.clz(b8),
                 lax.population_count(a8), lax.shift_right_arithmetic(a8, np.int8(2)),
                 lax.div(b8, np.uint8(7)), jnp.right_shift(a, 3), jnp.floor_divide(a, 7), jnp.mod(a, -7)]
        return tuple(outs)
    return f, (a, b, au, bu, a8, b8)


@jax_case('compare_select_clamp', 'compare EQ/NE/LT/LE/GT/GE on f32 with NaN/-0, TOTALORDER compares '
          '(lt_to/le_to/eq_to), signed/unsigned compares, select, clamp with array and scalar bounds',
          bit_exact=True)
def _cmp(rng):
    x = np.array([0.0, -0.0, 1.0, np.nan, -np.nan, np.inf, -np.inf, 2.0, -3.0, 1e-40, 5.0, 0.5], np.float32)
    y = np.array([-0.0, 0.0, 1.0, 1.0, np.nan, np.inf, 0.0, np.nan, -3.0, 0.0, 4.0, 0.5], np.float32)
    i = np.array([-1, 0, 5, 2**31 - 1, -2**31, 3, 4, 4, -2, 1, 9, 6], np.int32)
    j = np.array([1, 0, -5, 0, 0, 3, 5, 3, -1, 1, 9, 7], np.int32)

    def f(x, y, i, j):
        return (x == y, x != y, x < y, x <= y, x > y, x >= y,
                lax_internal.lt_to_p.bind(x, y), lax_internal.le_to_p.bind(x, y),
                lax_internal.eq_to_p.bind(x, y),
                i < j, i.view(jnp.uint32) < j.view(jnp.uint32), jnp.where(x < y, x, y),
                jnp.where(i > 0, i, j), lax.clamp(-1.0, x, 1.5), lax.clamp(y, x, y + 1.0),
                lax.clamp(np.int32(-3), i, np.int32(7)))
    return f, (x, y, i, j)


@jax_case('convert_types', 'convert between f32/bf16/f16/f64-free/s32/u8/s8/pred/f8e4m3fn/f8e5m2 (in-range '
          'values, round-to-nearest-even ties, f8 overflow)', bit_exact=True)
def _convert(rng):
    x = np.concatenate([np.array([1.0, 1.00390625, 1.01171875, -1.00390625, 0.1, 300.0, 448.0, 464.0,
                                  500.0, 57344.0, 61440.0, 70000.0, 0.0, -0.0, 1e-3, 2.0**-10, np.inf,
                                  -np.inf, np.nan, 65504.0, 65520.0, 1e-8, 3.0, -2.75], np.float32),
                        (rng.standard_normal(24) * 10).astype(np.float32)])
    n = np.array([0, 1, -1, 255, 256, 127, -128, 3, 100000, -7, 2**24 + 1, 2**31 - 1], np.int32)

    def f(x, n):
        fin = jnp.where(jnp.isfinite(x), x, 0.0)
        return (x.astype(jnp.bfloat16), x.astype(jnp.float16), x.astype(jnp.float8_e4m3fn),
                x.astype(jnp.float8_e5m2), x.astype(jnp.bfloat16).astype(jnp.float32),
                x.astype(jnp.float8_e4m3fn).astype(jnp.float32), x.astype(jnp.float8_e5m2).astype(jnp.bfloat16),
                jnp.clip(fin, -1000, 1000).astype(jnp.int32), jnp.clip(fin, 0, 255).astype(jnp.uint8),
                jnp.clip(fin, -128, 127).astype(jnp.int8), x != 0,
                x.astype(jnp.float16).astype(jnp.bfloat16), n.astype(jnp.float32), n.astype(jnp.bfloat16),
                n.astype(jnp.uint8), n.astype(jnp.int8), n.astype(bool).astype(jnp.int32),
                (n > 0).astype(jnp.float32), n.astype(jnp.float16))
    return f, (x, n)


@jax_case('convert_float_to_int_edge', 'convert f32 -> s32/u32/u8 for NaN, +-inf and out-of-range values '
          '(XLA:CPU behaviour recorded; compare exactly)', bit_exact=True)
def _convert_edge(rng):
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2147483520.0, -2147483648.0, 4294967040.0, 5e9, -1.0,
                  -0.9, 255.5, 256.0, 1e20, -1e20, 2.5, -2.5], np.float32)

    def f(x):
        return x.astype(jnp.int32), x.astype(jnp.uint32), x.astype(jnp.uint8), x.astype(jnp.int8)
    return f, (x,)


@jax_case('bitcast_reduce_precision', 'bitcast-convert f32<->s32/u32, f32->u8[...,4], u16->bf16, '
          'reduce-precision to e5m10, e8m7, e4m3, e2m1 (with specials)', bit_exact=True)
def _bitcast(rng):
    x = special_f32(rng, 32)
    h = rng.integers(0, 65536, 16).astype(np.uint16)

    def f(x, h):
        return (lax.bitcast_convert_type(x, jnp.int32), lax.bitcast_convert_type(x, jnp.uint32),
                lax.bitcast_convert_type(x[:4], jnp.uint8),
                lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.int32) + 1, jnp.float32),
                lax.bitcast_convert_type(h, jnp.bfloat16), lax.bitcast_convert_type(h.reshape(8, 2), jnp.uint32),
                lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
                lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7),
                lax.reduce_precision(x, exponent_bits=4, mantissa_bits=3),
                lax.reduce_precision(x, exponent_bits=2, mantissa_bits=1))
    return f, (x, h)


@jax_case('shape_ops', 'iota, broadcast, transpose (3-D), reverse, pad (negative and interior), concatenate, '
          'strided slice, reshape, on f32 and s32', bit_exact=True)
def _shapes(rng):
    x = normal(rng, (3, 4, 5))
    n = np.arange(12, dtype=np.int32).reshape(3, 4)

    def f(x, n):
        return (lax.iota(jnp.int32, 7), lax.broadcasted_iota(jnp.float32, (3, 4), 1),
                jnp.broadcast_to(x[:, :1, :], (3, 4, 5)) + lax.broadcast_in_dim(n[:, :1].astype(jnp.float32),
                                                                                (3, 4, 5), (0, 1)),
                jnp.transpose(x, (2, 0, 1)), lax.rev(x, (0, 2)),
                lax.pad(x, 0.5, ((1, -1, 1), (-2, 2, 0), (0, 0, 2))),
                lax.pad(n, np.int32(-1), ((0, 0, 1), (1, -1, 0))),
                jnp.concatenate([x, x[:, :2] * 2, x[:, 3:]], axis=1),
                x[::2, 1::2, ::3], lax.slice(n, (0, 1), (3, 4), (2, 2)), x.reshape(12, 5).T.reshape(5, 3, 4),
                jnp.tile(n, (2, 1)))
    return f, (x, n)


@jax_case('reduce_ops', 'reductions: sum over dims, max, min, prod, all/any (and/or), mean/var, logsumexp, '
          'cumsum/cumprod/cummax (associative scan on CPU)', verify_jit=True)
def _reduce(rng):
    x = normal(rng, (4, 6, 5))
    b = rng.random((4, 6)) > 0.3

    def f(x, b):
        return (jnp.sum(x, axis=(0, 2)), jnp.max(x, axis=1), jnp.min(x), jnp.prod(x[:, :, 0] * 0.5 + 1, axis=1),
                jnp.all(b, axis=1), jnp.any(b, axis=0), jnp.mean(x, axis=-1), jnp.var(x, axis=0),
                jax.nn.logsumexp(x, axis=1), jnp.cumsum(x, axis=1), jnp.cumprod(x[0] * 0.3 + 1, axis=0),
                lax.cummax(x, axis=2))
    return f, (x, b)


@jax_case('reduce_window_variants', 'reduce-window: padding, strides, window dilation, base dilation, max/'
          'min/sum, cumsum lowered for TPU (reduce-window form)', platform='tpu')
def _rw(rng):
    x = normal(rng, (2, 9, 8))

    def f(x):
        return (lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3), (1, 2, 2), ((0, 0), (1, 1), (0, 1))),
                lax.reduce_window(x, 0.0, lax.add, (1, 2, 3), (1, 1, 2), 'VALID', window_dilation=(1, 2, 2)),
                lax.reduce_window(x, jnp.inf, lax.min, (2, 2, 2), (1, 3, 1), 'SAME', base_dilation=(1, 2, 1)),
                jnp.cumsum(x, axis=1), lax.cummax(x, axis=2))
    return f, (x,)


# ============================================================================ dots

@jax_case('dot_general_dims', 'dot_general with batch dims and contracting dims in unusual positions, '
          'multiple contracting dims, outer product, matvec, s32 dot, bf16 x bf16 -> f32', verify_jit=True)
def _dots(rng):
    a = normal(rng, (3, 4, 5, 2))
    b = normal(rng, (5, 2, 6, 3))
    c = normal(rng, (4, 7))
    v = normal(rng, (7,))
    ia = rng.integers(-5, 5, size=(3, 4)).astype(np.int32)
    ib = rng.integers(-5, 5, size=(4, 2)).astype(np.int32)
    ba = normal(rng, (6, 8), 1.0, BF16)
    bb = normal(rng, (8, 5), 1.0, BF16)

    def f(a, b, c, v, ia, ib, ba, bb):
        return (
            # batch dims a:(3 at 0), b:(3 at 3); contract a:(2 at 1... ) -> a dims 2,3 with b dims 0,1
            lax.dot_general(a, b, (((2, 3), (0, 1)), ((0,), (3,)))),
            # batch dim in the middle of lhs and last of rhs, contracting dim first of rhs
            lax.dot_general(jnp.transpose(a, (1, 0, 2, 3)), b, (((2,), (0,)), ((1, 3), (3, 1)))),
            jnp.einsum('ij,k->ijk', c, v), c @ v, c.T @ c,
            lax.dot_general(ia, ib, (((1,), (0,)), ((), ()))),
            lax.dot_general(ba, bb, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32),
            ba @ bb)
    return f, (a, b, c, v, ia, ib, ba, bb)


@jax_case('dot_precisions', 'the same f32 dots and a conv with precision DEFAULT, HIGH, HIGHEST and mixed '
          '(HIGHEST, DEFAULT) -> operand_precision attributes; the tpu reference differs per precision')
def _dot_prec(rng):
    a = normal(rng, (8, 64))
    b = normal(rng, (64, 16))
    x = normal(rng, (2, 6, 6, 8))
    w = glorot(rng, (3, 3, 8, 4))

    def f(a, b, x, w):
        return (jnp.dot(a, b, precision=DEFAULT), jnp.dot(a, b, precision=HIGH), jnp.dot(a, b, precision=HIGHEST),
                jnp.dot(a, b, precision=(HIGHEST, DEFAULT)), jnp.dot(a, b),
                conv(x, w, precision=DEFAULT), conv(x, w, precision=HIGH), conv(x, w, precision=HIGHEST))
    return f, (a, b, x, w)


@jax_case('f64_programs', 'f64 program (jax_enable_x64): MLP with tanh, exp/log/erf, f64 dot_general with '
          'batch dims, sum reductions, f64->f32 convert', x64=True)
def _f64(rng):
    w1 = rng.standard_normal((8, 16)) / 3
    w2 = rng.standard_normal((16, 4)) / 4
    x = rng.standard_normal((5, 8))
    bm = rng.standard_normal((3, 4, 5))

    def f(w1, w2, x, bm):
        h = jnp.tanh(x @ w1)
        y = h @ w2
        return (y, jnp.exp(y) + jnp.log1p(jnp.abs(y)), lax.erf(y), jnp.einsum('bij,bkj->bik', bm, bm),
                jnp.sum(y, axis=0), y.astype(jnp.float32))
    return f, (w1, w2, x, bm)


# ============================================================================ linear algebra (TPU lowering)

def _spd(rng, n, batch=()):
    a = rng.standard_normal(batch + (n, n)).astype(np.float32)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=np.float32)).astype(np.float32)


@jax_case('linalg_cholesky_trsm', 'cholesky and triangular-solve HLO ops (lowered for platform tpu: on CPU '
          'jax emits LAPACK custom-calls instead): batched cholesky, left/right, lower/upper, transpose_a, '
          'unit_diagonal', platform='tpu')
def _linalg(rng):
    a = _spd(rng, 5, (2,))
    b = rng.standard_normal((2, 5, 3)).astype(np.float32)
    c = rng.standard_normal((2, 4, 5)).astype(np.float32)

    def f(a, b, c):
        L = lax.linalg.cholesky(a)
        U = lax.linalg.cholesky(a, symmetrize_input=False)
        x1 = lax.linalg.triangular_solve(L, b, left_side=True, lower=True)
        x2 = lax.linalg.triangular_solve(L, c, left_side=False, lower=True, transpose_a=True)
        x3 = lax.linalg.triangular_solve(jnp.swapaxes(L, -1, -2), b, left_side=True, lower=False,
                                         unit_diagonal=True)
        return L, U, x1, x2, x3, jnp.einsum('bij,bkj->bik', L, L, precision=HIGHEST)
    return f, (a, b, c)


@jax_case('linalg_f64', 'f64 cholesky + triangular solves (tpu lowering, jax_enable_x64): exact reference',
          platform='tpu', x64=True)
def _linalg64(rng):
    a = _spd(rng, 6).astype(np.float64)
    b = rng.standard_normal((6, 2))

    def f(a, b):
        L = lax.linalg.cholesky(a)
        y = lax.linalg.triangular_solve(L, b, left_side=True, lower=True)
        x = lax.linalg.triangular_solve(L, y, left_side=True, lower=True, transpose_a=True)
        return L, x
    return f, (a, b)


# ============================================================================ XLA:CPU optimized forms

@jax_case('opt_mlp_train_sgd', 'mlp_train_sgd as XLA:CPU optimized HLO (fusions kLoop/kInput/kOutput, '
          'layouts, bitcasts, scheduled)', optimized=True, verify_jit=True)
def _opt_mlp(rng):
    return _mlp_train_sgd(rng)


@jax_case('opt_cnn_fwd_nhwc', 'cnn_fwd_nhwc as XLA:CPU optimized HLO', optimized=True, verify_jit=True)
def _opt_cnn(rng):
    return _cnn_fwd(rng)


@jax_case('opt_transformer_fwd', 'transformer_fwd as XLA:CPU optimized HLO', optimized=True, verify_jit=True)
def _opt_tf(rng):
    return _tf_fwd(rng)


@jax_case('opt_lstm_fwd', 'lstm_fwd as XLA:CPU optimized HLO (while loop with fused body)', optimized=True,
          verify_jit=True)
def _opt_lstm(rng):
    return _lstm_fwd(rng)


@jax_case('opt_elementwise', 'elementwise_binary as XLA:CPU optimized HLO', optimized=True, perturb=False,
          verify_jit=True)
def _opt_elem(rng):
    return _binary(rng)


@jax_case('denormals', 'f32 subnormal inputs and results: XLA:CPU runs with denormals flushed to zero on '
          'input and output of arithmetic (DAZ/FTZ), as TPUs do; these are its exact results', bit_exact=True,
          notes='Subnormal handling is XLA:CPU behaviour (MXCSR FTZ/DAZ); data movement ops and bitcasts keep '
                'the bits.',
          tpu_skip={11: 'f32 -> bf16 convert of a subnormal: XLA:CPU keeps the bf16 subnormal (an integer rounding), the '
                        'TPU flushes subnormal bf16 results (design 4); the XLA:CPU-based TPU reference cannot show that'})
def _denormals(rng):
    x = np.array([1e-40, -1e-40, 1.4e-45, 1.1754942e-38, 1.1754944e-38, -5e-39, 3e-39, 0.0, 1.0, 2e-38],
                 np.float32)

    def f(x):
        return (x + 0.0, x * 1.0, x * np.float32(2.0 ** 24), np.float32(2e-38) * x * np.float32(2.0 ** 120),
                x * np.float32(2.0 ** -10), jnp.sqrt(jnp.abs(x)), x == 0, x > 0, jnp.maximum(x, 0.0), -x,
                jnp.abs(x), x.astype(jnp.bfloat16).astype(jnp.float32), lax.bitcast_convert_type(x, jnp.int32),
                jnp.where(x != 0, 1.0, 2.0), x[::-1])
    return f, (x,)


@jax_case('fft_real_imag', 'rfft/fft/irfft on f32 data (complex intermediates: fft, real, imag, complex ops); '
          'outputs are real and imaginary parts as f32')
def _fft(rng):
    x = normal(rng, (4, 16))

    def f(x):
        r = jnp.fft.rfft(x, axis=-1)
        c = jnp.fft.fft(x[:, :8] + 1j * x[:, 8:], axis=-1)
        back = jnp.fft.irfft(r * (1 + 0.5j), n=16, axis=-1)
        return jnp.real(r), jnp.imag(r), jnp.real(c), jnp.imag(c), jnp.abs(c), back
    return f, (x,)
