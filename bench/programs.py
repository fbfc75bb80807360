"""The benchmark set: programs people run, at sizes where XLA:CPU takes milliseconds to a few hundred.

Each builder gets a seeded numpy Generator and returns (fn, args) like tests/conformance/cases_jax.py (whose
model code it reuses); the entry parameters are jax.tree_util.tree_leaves(args) in order. The HLO text
(jax `as_text(dialect="hlo")`, no metadata) is committed in bench/programs/NAME.hlo so the set stays fixed
whatever jax version is installed; the inputs are regenerated from the seed (crc32 of the name) on first use.
(No TensorFlow programs yet: tensorflow-cpu 2.21 installs from pip, 274 MB, but none were written.)

    python3 bench/programs.py --regen [NAME ...]    rewrite bench/programs/NAME.hlo from the builders
    python3 bench/programs.py OUTDIR [NAME ...]     write OUTDIR/NAME/{program.hlo,inputs.npz}
    python3 bench/programs.py --list                names, kinds and descriptions
"""

import os
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'tests', 'conformance'))
PROGRAM_DIR = os.path.join(HERE, 'programs')

import numpy as np                      # noqa: E402
import ml_dtypes                        # noqa: E402
import jax                              # noqa: E402
import jax.numpy as jnp                 # noqa: E402
from jax import lax                     # noqa: E402

import cases_jax as cj                  # noqa: E402

BF16 = ml_dtypes.bfloat16
PROGRAMS = {}


def program(name, doc):
    def deco(fn):
        PROGRAMS[name] = (fn, doc)
        return fn
    return deco


def _tree_normal(rng, tree, scale, absval=False):
    def one(a):
        x = cj.normal(rng, a.shape, scale)
        return np.abs(x) if absval else x
    return jax.tree_util.tree_map(one, tree)


def adamw(p, g, m, v, t, lr, wd=0.01, b1=0.9, b2=0.999, eps=1e-8):
    """AdamW on a tree, state and update in f32 whatever the parameter dtype."""
    tf = t.astype(jnp.float32)

    def one(p, g, m, v):
        g32 = g.astype(jnp.float32)
        m = b1 * m + (1 - b1) * g32
        v = b2 * v + (1 - b2) * g32 * g32
        mh = m / (1 - jnp.power(b1, tf))
        vh = v / (1 - jnp.power(b2, tf))
        p32 = p.astype(jnp.float32)
        p32 = p32 - lr * (mh / (jnp.sqrt(vh) + eps) + wd * p32)
        return p32.astype(p.dtype), m, v
    out = jax.tree_util.tree_map(one, p, g, m, v)
    leaf = lambda x: isinstance(x, tuple) and len(x) == 3 and not isinstance(x[0], tuple)
    return tuple(jax.tree_util.tree_map(lambda o: o[i], out, is_leaf=leaf) for i in range(3))


def _sgd(p, g, lr):
    return jax.tree_util.tree_map(lambda a, b: (a - lr.astype(a.dtype) * b).astype(a.dtype), p, g)


# ============================================================================ the original six

@program('mlp_train', 'MLP 784-1024-1024-10, batch 512, relu, softmax cross-entropy, Adam')
def mlp_train(rng):
    params = cj.mlp_params(rng, [784, 1024, 1024, 10])
    m = _tree_normal(rng, params, 0.01)
    v = _tree_normal(rng, params, 1e-4, True)
    x = cj.normal(rng, (512, 784))
    y = rng.integers(0, 10, size=(512,)).astype(np.int32)

    def step(params, m, v, t, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: cj.xent(cj.mlp_apply(p, x), y))(params)
        p2, m2, v2 = cj.tree_adam(params, g, m, v, t, lr)
        return loss, p2, m2, v2
    return step, (params, m, v, np.int32(3), x, y, cj.f32(1e-3))


def _cnn_params(rng):
    return {
        'c1': cj.glorot(rng, (3, 3, 3, 32)), 'g1': 1 + cj.normal(rng, (32,), 0.1), 'b1': cj.normal(rng, (32,), 0.1),
        'c2': cj.glorot(rng, (3, 3, 32, 64)), 'g2': 1 + cj.normal(rng, (64,), 0.1), 'b2': cj.normal(rng, (64,), 0.1),
        'c3': cj.glorot(rng, (3, 3, 64, 128)), 'cb3': cj.normal(rng, (128,), 0.1),
        'c4': cj.glorot(rng, (3, 3, 128, 128)), 'cb4': cj.normal(rng, (128,), 0.1),
        'd': cj.glorot(rng, (128, 10)), 'db': cj.normal(rng, (10,), 0.1),
    }


def _cnn_apply(p, x):
    h = cj.conv(x, p['c1'])
    h = jax.nn.relu(cj.batch_norm(h, p['g1'], p['b1'], (0, 1, 2)))
    h = cj.conv(h, p['c2'])
    h = jax.nn.relu(cj.batch_norm(h, p['g2'], p['b2'], (0, 1, 2)))
    h = cj.max_pool(h, (1, 2, 2, 1), (1, 2, 2, 1))
    h = jax.nn.relu(cj.conv(h, p['c3']) + p['cb3'])
    h = jax.nn.relu(cj.conv(h, p['c4'], stride=(2, 2)) + p['cb4'])
    h = jnp.mean(h, axis=(1, 2))
    return h @ p['d'] + p['db']


@program('cnn_train', 'CNN NHWC batch 32 of 32x32x3: 4 convs 3x3 (32-64-128-128), batch-norm, max-pool, SGD')
def cnn_train(rng):
    p = _cnn_params(rng)
    x = cj.normal(rng, (32, 32, 32, 3))
    y = rng.integers(0, 10, size=(32,)).astype(np.int32)

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: cj.xent(_cnn_apply(p, x), y))(p)
        return loss, _sgd(p, g, lr)
    return step, (p, x, y, cj.f32(0.05))


@program('lstm_train', 'LSTM T=32, batch 64, input 128, hidden 256 (lax.scan), MSE, BPTT, SGD')
def lstm_train(rng):
    p = cj.lstm_params(rng, 128, 256)
    xs = cj.normal(rng, (32, 64, 128))
    ys = cj.normal(rng, (32, 64, 1))

    def step(p, xs, ys, lr):
        def loss(p):
            hs, _ = cj.lstm_run(p, xs)
            return jnp.mean((hs @ p['wo'] + p['bo'] - ys) ** 2)
        lv, g = jax.value_and_grad(loss)(p)
        return lv, _sgd(p, g, lr)
    return step, (p, xs, ys, cj.f32(0.1))


def _lm_params(rng, B, S, D, V, dtype=np.float32):
    p = cj.block_params(rng, D, 4 * D)
    p['emb'] = cj.normal(rng, (V, D), 0.5)
    p['pos'] = cj.normal(rng, (S, D), 0.1)
    return jax.tree_util.tree_map(lambda a: a.astype(dtype), p)


@program('transformer_train', 'LM block train step: vocab 1024, batch 8, seq 128, d 256, 4 heads, erf-gelu, Adam')
def transformer_train(rng):
    B, S, D, V = 8, 128, 256, 1024
    p = _lm_params(rng, B, S, D, V)
    ids = rng.integers(0, V, size=(B, S)).astype(np.int32)
    m = _tree_normal(rng, p, 1e-3)
    v = _tree_normal(rng, p, 1e-5, True)

    def step(p, m, v, t, ids, lr):
        lv, g = jax.value_and_grad(cj.lm_loss)(p, ids)
        p2, m2, v2 = cj.tree_adam(p, g, m, v, t, lr)
        return lv, p2, m2, v2
    return step, (p, m, v, np.int32(5), ids, cj.f32(1e-3))


@program('matmul_2048', 'C = A @ B, f32[2048,2048] x f32[2048,2048] (default precision)')
def matmul_2048(rng):
    return (lambda a, b: a @ b), (cj.normal(rng, (2048, 2048)), cj.normal(rng, (2048, 2048)))


# ============================================================================ transformers

def _lm_stack_loss(p, ids, layers, heads):
    x = p['emb'][ids] + p['pos'][None]
    for i in range(layers):
        x = cj.block_apply(p['blocks'][i], x, heads=heads)
    x = cj.layer_norm(x.astype(jnp.float32), p['lnfg'], p['lnfb']).astype(x.dtype)
    logits = (x @ p['emb'].T).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1))


def _lm_stack(rng, B, S, D, V, layers, dtype):
    p = {'blocks': [cj.block_params(rng, D, 4 * D) for _ in range(layers)],
         'emb': cj.normal(rng, (V, D), 0.5), 'pos': cj.normal(rng, (S, D), 0.1),
         'lnfg': 1 + cj.normal(rng, (D,), 0.1), 'lnfb': cj.normal(rng, (D,), 0.1)}
    p = jax.tree_util.tree_map(lambda a: a.astype(dtype), p)
    m = _tree_normal(rng, p, 1e-3)
    v = _tree_normal(rng, p, 1e-5, True)
    ids = rng.integers(0, V, size=(B, S)).astype(np.int32)

    def step(p, m, v, t, ids, lr):
        lv, g = jax.value_and_grad(lambda p: _lm_stack_loss(p, ids, layers, 4))(p)
        p2, m2, v2 = adamw(p, g, m, v, t, lr)
        return lv, p2, m2, v2
    return step, (p, m, v, np.int32(7), ids, cj.f32(3e-4))


@program('gpt2L_adamw_f32', '2-layer GPT (batch 8, seq 128, d 256, vocab 2048), tanh-gelu, AdamW, f32')
def gpt2l_adamw_f32(rng):
    return _lm_stack(rng, 8, 128, 256, 2048, 2, np.float32)


@program('gpt2L_adamw_bf16', 'the same 2-layer GPT with bf16 parameters and activations, AdamW state in f32')
def gpt2l_adamw_bf16(rng):
    return _lm_stack(rng, 8, 128, 256, 2048, 2, BF16)


def _attention(q, k, v, causal):
    s = jnp.einsum('bqhd,bkhd->bhqk', q, k) / np.float32(np.sqrt(q.shape[-1]))
    s = s.astype(jnp.float32)
    if causal:
        S = q.shape[1]
        s = jnp.where(jnp.tril(jnp.ones((S, S), bool)), s, -1e30)
    a = jax.nn.softmax(s, axis=-1).astype(q.dtype)
    return jnp.einsum('bhqk,bkhd->bqhd', a, v)


@program('attention_fwd_f32', 'causal multi-head attention forward, batch 4, seq 512, 8 heads of 64, f32')
def attention_fwd_f32(rng):
    sh = (4, 512, 8, 64)
    return (lambda q, k, v: _attention(q, k, v, True)), tuple(cj.normal(rng, sh) for _ in range(3))


@program('attention_fwd_bf16', 'the same attention in bf16 (softmax in f32)')
def attention_fwd_bf16(rng):
    sh = (4, 512, 8, 64)
    return (lambda q, k, v: _attention(q, k, v, True)), tuple(cj.normal(rng, sh, 1.0, BF16) for _ in range(3))


@program('attention_train_f32', 'attention layer (projections + softmax attention) value and grads, batch 4, '
         'seq 256, d 256, 4 heads')
def attention_train_f32(rng):
    D = 256
    p = {'wq': cj.glorot(rng, (D, D)), 'wk': cj.glorot(rng, (D, D)), 'wv': cj.glorot(rng, (D, D)),
         'wo': cj.glorot(rng, (D, D))}
    x = cj.normal(rng, (4, 256, D))

    def loss(p, x):
        B, S, _ = x.shape
        q, k, v = [(x @ p[w]).reshape(B, S, 4, D // 4) for w in ('wq', 'wk', 'wv')]
        o = _attention(q, k, v, False).reshape(B, S, D) @ p['wo']
        return jnp.mean(o * o)
    return (lambda p, x: jax.value_and_grad(loss)(p, x)), (p, x)


@program('bert_fwd_bf16', 'BERT-style encoder inference in bf16: embeddings, 2 layers (d 512, 8 heads, '
         'ff 2048, erf-gelu), pooled classifier; batch 8, seq 128')
def bert_fwd_bf16(rng):
    D, V, S = 512, 4096, 128
    p = {'blocks': [cj.block_params(rng, D, 4 * D) for _ in range(2)],
         'emb': cj.normal(rng, (V, D), 0.5), 'pos': cj.normal(rng, (S, D), 0.1),
         'cls': cj.glorot(rng, (D, 2))}
    p = jax.tree_util.tree_map(lambda a: a.astype(BF16), p)
    ids = rng.integers(0, V, size=(8, S)).astype(np.int32)

    def f(p, ids):
        x = p['emb'][ids] + p['pos'][None]
        for b in p['blocks']:
            x = cj.block_apply(b, x, heads=8, approximate=False)
        return jax.nn.softmax((x[:, 0] @ p['cls']).astype(jnp.float32))
    return f, (p, ids)


# ============================================================================ CNNs

def _res_params(rng, widths):
    p = {'stem': cj.glorot(rng, (3, 3, 3, widths[0])), 'blocks': []}
    cin = widths[0]
    for w in widths:
        b = {'c1': cj.glorot(rng, (3, 3, cin, w)), 'g1': 1 + cj.normal(rng, (w,), 0.1),
             'b1': cj.normal(rng, (w,), 0.1), 'c2': cj.glorot(rng, (3, 3, w, w)),
             'g2': 1 + cj.normal(rng, (w,), 0.1), 'b2': cj.normal(rng, (w,), 0.1)}
        if cin != w:
            b['proj'] = cj.glorot(rng, (1, 1, cin, w))
        p['blocks'].append(b)
        cin = w
    p['fc'] = cj.glorot(rng, (cin, 10))
    return p


def _res_apply(p, x):
    h = cj.conv(x, p['stem'])
    for i, b in enumerate(p['blocks']):
        s = (2, 2) if i > 0 else (1, 1)
        y = cj.conv(h, b['c1'], stride=s)
        y = jax.nn.relu(cj.batch_norm(y, b['g1'], b['b1'], (0, 1, 2)))
        y = cj.conv(y, b['c2'])
        y = cj.batch_norm(y, b['g2'], b['b2'], (0, 1, 2))
        sc = cj.conv(h, b['proj'], stride=s) if 'proj' in b else h
        h = jax.nn.relu(y + sc)
    h = jnp.mean(h.astype(jnp.float32), axis=(1, 2))
    return h @ p['fc'].astype(jnp.float32)


def _resnet(rng, dtype):
    p = jax.tree_util.tree_map(lambda a: a.astype(dtype), _res_params(rng, [32, 64, 128]))
    x = cj.normal(rng, (32, 32, 32, 3), 1.0, dtype)
    y = rng.integers(0, 10, size=(32,)).astype(np.int32)

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: cj.xent(_res_apply(p, x), y))(p)
        return loss, _sgd(p, g, lr)
    return step, (p, x, y, cj.f32(0.05))


@program('resnet_bn_f32', 'residual CNN (3 stages 32-64-128, batch-norm, projection shortcuts), batch 32 of '
         '32x32x3, SGD, f32')
def resnet_bn_f32(rng):
    return _resnet(rng, np.float32)


@program('resnet_bn_bf16', 'the same residual CNN train step in bf16')
def resnet_bn_bf16(rng):
    return _resnet(rng, BF16)


@program('mobilenet_block_train', 'MobileNet-style blocks: 1x1 expand, 3x3 depthwise (feature groups), 1x1 '
         'project, relu6, batch 16 of 32x32x32; grads, SGD')
def mobilenet_block_train(rng):
    C, E = 32, 128
    p = [{'e': cj.glorot(rng, (1, 1, C, E)), 'd': cj.glorot(rng, (3, 3, 1, E)), 'p': cj.glorot(rng, (1, 1, E, C))}
         for _ in range(2)]
    x = cj.normal(rng, (16, 32, 32, C))

    def f(p, x):
        h = x
        for b in p:
            y = jnp.clip(cj.conv(h, b['e']), 0, 6)
            y = jnp.clip(cj.conv(y, b['d'], groups=E), 0, 6)
            h = h + cj.conv(y, b['p'])
        return jnp.mean(h * h)

    def step(p, x, lr):
        lv, g = jax.value_and_grad(f)(p, x)
        return lv, _sgd(p, g, lr)
    return step, (p, x, cj.f32(0.01))


@program('pool_cnn_train', 'pooling-heavy CNN: conv, 3x3/2 max-pools (padded), avg-pools, grads through '
         'select-and-scatter; batch 32 of 64x64x16')
def pool_cnn_train(rng):
    p = {'c1': cj.glorot(rng, (3, 3, 16, 32)), 'c2': cj.glorot(rng, (3, 3, 32, 32)), 'd': cj.glorot(rng, (32, 10))}
    x = cj.normal(rng, (32, 64, 64, 16))
    y = rng.integers(0, 10, size=(32,)).astype(np.int32)

    def apply(p, x):
        h = jax.nn.relu(cj.conv(x, p['c1']))
        h = cj.max_pool(h, (1, 3, 3, 1), (1, 2, 2, 1), 'SAME')
        h = cj.avg_pool(h, (1, 3, 3, 1), (1, 1, 1, 1), 'SAME')
        h = jax.nn.relu(cj.conv(h, p['c2']))
        h = cj.max_pool(h, (1, 3, 3, 1), (1, 2, 2, 1), 'SAME')
        return jnp.mean(h, axis=(1, 2)) @ p['d']

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: cj.xent(apply(p, x), y))(p)
        return loss, _sgd(p, g, lr)
    return step, (p, x, y, cj.f32(0.05))


@program('unet_down_up_train', 'encoder-decoder: strided convs down, conv_transpose up, skip concatenation, '
         'MSE; batch 8 of 64x64x8')
def unet_train(rng):
    p = {'d1': cj.glorot(rng, (3, 3, 8, 32)), 'd2': cj.glorot(rng, (3, 3, 32, 64)),
         'u1': cj.glorot(rng, (3, 3, 64, 32)), 'u2': cj.glorot(rng, (3, 3, 64, 8))}
    x = cj.normal(rng, (8, 64, 64, 8))

    def f(p, x):
        h1 = jax.nn.relu(cj.conv(x, p['d1'], stride=(2, 2)))      # 32
        h2 = jax.nn.relu(cj.conv(h1, p['d2'], stride=(2, 2)))     # 16
        u1 = jax.nn.relu(lax.conv_transpose(h2, p['u1'], (2, 2), 'SAME', dimension_numbers=('NHWC', 'HWIO', 'NHWC')))
        u = jnp.concatenate([u1, h1], axis=-1)
        out = lax.conv_transpose(u, p['u2'], (2, 2), 'SAME', dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
        return jnp.mean((out - x) ** 2)

    def step(p, x, lr):
        lv, g = jax.value_and_grad(f)(p, x)
        return lv, _sgd(p, g, lr)
    return step, (p, x, cj.f32(0.01))


@program('lenet_small_train', 'LeNet-5 train step, batch 16 of 28x28x1 (a small program: per-op overhead)')
def lenet_small_train(rng):
    p = {'c1': cj.glorot(rng, (5, 5, 1, 6)), 'c2': cj.glorot(rng, (5, 5, 6, 16)),
         'f1': cj.glorot(rng, (256, 120)), 'f2': cj.glorot(rng, (120, 84)), 'f3': cj.glorot(rng, (84, 10))}
    x = cj.normal(rng, (16, 28, 28, 1))
    y = rng.integers(0, 10, size=(16,)).astype(np.int32)

    def apply(p, x):
        h = jax.nn.relu(cj.conv(x, p['c1'], padding='VALID'))
        h = cj.avg_pool(h, (1, 2, 2, 1), (1, 2, 2, 1))
        h = jax.nn.relu(cj.conv(h, p['c2'], padding='VALID'))
        h = cj.avg_pool(h, (1, 2, 2, 1), (1, 2, 2, 1)).reshape(x.shape[0], -1)
        h = jax.nn.relu(h @ p['f1'])
        h = jax.nn.relu(h @ p['f2'])
        return h @ p['f3']

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: cj.xent(apply(p, x), y))(p)
        return loss, _sgd(p, g, lr)
    return step, (p, x, y, cj.f32(0.05))


# ============================================================================ RNNs and loops

@program('gru_train', 'GRU T=64, batch 32, input 64, hidden 128 (lax.scan), BPTT, SGD')
def gru_train(rng):
    I, H = 64, 128
    p = {'wx': cj.glorot(rng, (I, 3 * H)), 'wh': cj.glorot(rng, (H, 3 * H)), 'b': cj.normal(rng, (3 * H,), 0.1),
         'wo': cj.glorot(rng, (H, 1))}
    xs = cj.normal(rng, (64, 32, I))
    ys = cj.normal(rng, (64, 32, 1))

    def run(p, xs):
        def cell(h, x):
            zx = x @ p['wx'] + p['b']
            zh = h @ p['wh']
            r = jax.nn.sigmoid(zx[:, :H] + zh[:, :H])
            z = jax.nn.sigmoid(zx[:, H:2 * H] + zh[:, H:2 * H])
            n = jnp.tanh(zx[:, 2 * H:] + r * zh[:, 2 * H:])
            h = (1 - z) * n + z * h
            return h, h
        _, hs = lax.scan(cell, jnp.zeros((xs.shape[1], H), jnp.float32), xs)
        return hs

    def step(p, xs, ys, lr):
        lv, g = jax.value_and_grad(lambda p: jnp.mean((run(p, xs) @ p['wo'] - ys) ** 2))(p)
        return lv, _sgd(p, g, lr)
    return step, (p, xs, ys, cj.f32(0.1))


@program('scan_small_steps', 'lax.scan of 2000 steps over a small state (f32[64] and f32[8,8]): '
         'while-loop overhead')
def scan_small_steps(rng):
    def f(x, w, xs):
        def body(c, xt):
            h, m = c
            h = jnp.tanh(h * 0.9 + xt)
            m = m @ w * 0.5 + jnp.outer(h[:8], h[:8]) * 0.01
            return (h, m), jnp.sum(h)
        (h, m), ys = lax.scan(body, (x, w), xs)
        return h, m, ys
    return f, (cj.normal(rng, (64,)), cj.normal(rng, (8, 8), 0.3), cj.normal(rng, (2000, 64), 0.1))


@program('while_newton', 'while_loop with a data-dependent exit: Newton iterations for sqrt on f32[65536] '
         'until converged, inside a fori_loop of 20 restarts')
def while_newton(rng):
    def f(a):
        def outer(i, acc):
            x0 = a + i.astype(jnp.float32)

            def cond(c):
                x, k = c
                return jnp.logical_and(jnp.max(jnp.abs(x * x - x0)) > 1e-3 * jnp.max(x0), k < 50)

            def body(c):
                x, k = c
                return 0.5 * (x + x0 / x), k + 1
            x, _ = lax.while_loop(cond, body, (x0, jnp.int32(0)))
            return acc + x
        return lax.fori_loop(0, 20, outer, jnp.zeros_like(a))
    return f, (np.abs(cj.normal(rng, (65536,))) + 1.0,)


# ============================================================================ MoE, dropout, per-example

@program('moe_train', 'mixture of experts: 8 experts, top-2 routing with capacity (one-hot dispatch via '
         'cumsum, gather/scatter), 1024 tokens of d 256, aux loss; grads, SGD')
def moe_train(rng):
    E, D, F, T, C = 8, 256, 512, 1024, 320
    p = {'router': cj.glorot(rng, (D, E)), 'w1': cj.normal(rng, (E, D, F), 0.05), 'w2': cj.normal(rng, (E, F, D), 0.05)}
    x = cj.normal(rng, (T, D))

    def moe(p, x):
        logits = x @ p['router']
        probs = jax.nn.softmax(logits, -1)
        gate, idx = lax.top_k(probs, 2)                       # [T,2]
        onehot = jax.nn.one_hot(idx, E, dtype=jnp.int32)      # [T,2,E]
        pos = jnp.cumsum(onehot.reshape(T * 2, E), axis=0).reshape(T, 2, E) * onehot - 1
        slot = jnp.sum(pos, -1)                               # [T,2] position within expert
        keep = (slot >= 0) & (slot < C)
        slot = jnp.where(keep, slot, C)                       # overflow slot dropped
        buf = jnp.zeros((E, C + 1, D), x.dtype)
        buf = buf.at[idx, slot].add(jnp.where(keep[..., None], x[:, None, :], 0.0))
        h = jax.nn.gelu(jnp.einsum('ecd,edf->ecf', buf[:, :C], p['w1']))
        y = jnp.einsum('ecf,efd->ecd', h, p['w2'])
        y = jnp.concatenate([y, jnp.zeros((E, 1, D), y.dtype)], 1)
        out = jnp.sum(y[idx, slot] * (gate * keep)[..., None], 1)
        aux = jnp.sum(jnp.mean(probs, 0) * jnp.mean(onehot[:, 0].astype(jnp.float32), 0)) * E
        return out, aux

    def step(p, x, lr):
        def loss(p):
            out, aux = moe(p, x)
            return jnp.mean((out - x) ** 2) + 0.01 * aux
        lv, g = jax.value_and_grad(loss)(p)
        return lv, _sgd(p, g, lr)
    return step, (p, x, cj.f32(0.01))


@program('dropout_mlp_train', 'MLP 512-2048-2048-10 with dropout 0.1 after each layer (threefry RNG from a '
         'key input), batch 256, SGD: RNG-heavy')
def dropout_mlp_train(rng):
    params = cj.mlp_params(rng, [512, 2048, 2048, 10])
    x = cj.normal(rng, (256, 512))
    y = rng.integers(0, 10, size=(256,)).astype(np.int32)

    def apply(p, x, key):
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                key, sub = jax.random.split(key)
                keep = jax.random.bernoulli(sub, 0.9, h.shape)
                h = jnp.where(keep, jax.nn.relu(h) / 0.9, 0.0)
        return h

    def step(p, x, y, seed, lr):
        key = jax.random.key(seed)
        loss, g = jax.value_and_grad(lambda p: cj.xent(apply(p, x, key), y))(p)
        return loss, _sgd(p, g, lr)
    return step, (params, x, y, np.uint32(7), cj.f32(0.05))


@program('dp_sgd_per_example', 'per-example gradients (vmap of grad) of an MLP 256-512-10, batch 128, '
         'clipped and noised (DP-SGD, threefry normal noise)')
def dp_sgd(rng):
    params = cj.mlp_params(rng, [256, 512, 10])
    x = cj.normal(rng, (128, 256))
    y = rng.integers(0, 10, size=(128,)).astype(np.int32)

    def step(p, x, y, seed, lr):
        def loss1(p, xi, yi):
            return cj.xent(cj.mlp_apply(p, xi[None]), yi[None])
        g = jax.vmap(jax.grad(loss1), in_axes=(None, 0, 0))(p, x, y)
        leaves, tdef = jax.tree_util.tree_flatten(g)
        norms = jnp.sqrt(sum(jnp.sum(l.reshape(l.shape[0], -1) ** 2, 1) for l in leaves))
        scale = jnp.minimum(1.0, 1.0 / (norms + 1e-6))
        keys = jax.random.split(jax.random.key(seed), len(leaves))
        noisy = [jnp.mean(l * scale.reshape((-1,) + (1,) * (l.ndim - 1)), 0) +
                 0.01 * jax.random.normal(k, l.shape[1:]) for l, k in zip(leaves, keys)]
        return _sgd(p, jax.tree_util.tree_unflatten(tdef, noisy), lr)
    return step, (params, x, y, np.uint32(11), cj.f32(0.1))


@program('vae_train', 'VAE on 784-d inputs: encoder 784-512-2x64, reparameterisation with threefry normal '
         'noise, decoder 64-512-784, ELBO, Adam; batch 128')
def vae_train(rng):
    p = {'e1': cj.mlp_params(rng, [784, 512])[0], 'mu': cj.mlp_params(rng, [512, 64])[0],
         'lv': cj.mlp_params(rng, [512, 64])[0], 'd1': cj.mlp_params(rng, [64, 512])[0],
         'd2': cj.mlp_params(rng, [512, 784])[0]}
    m = _tree_normal(rng, p, 1e-3)
    v = _tree_normal(rng, p, 1e-5, True)
    x = (rng.random((128, 784)) < 0.3).astype(np.float32)

    def lin(w, h):
        return h @ w[0] + w[1]

    def elbo(p, x, key):
        h = jax.nn.relu(lin(p['e1'], x))
        mu, lv = lin(p['mu'], h), lin(p['lv'], h)
        z = mu + jnp.exp(0.5 * lv) * jax.random.normal(key, mu.shape)
        logits = lin(p['d2'], jax.nn.relu(lin(p['d1'], z)))
        rec = jnp.sum(jnp.logaddexp(0.0, logits) - x * logits, -1)
        kl = -0.5 * jnp.sum(1 + lv - mu ** 2 - jnp.exp(lv), -1)
        return jnp.mean(rec + kl)

    def step(p, m, v, t, x, seed, lr):
        lv, g = jax.value_and_grad(elbo)(p, x, jax.random.key(seed))
        p2, m2, v2 = cj.tree_adam(p, g, m, v, t, lr)
        return lv, p2, m2, v2
    return step, (p, m, v, np.int32(2), x, np.uint32(3), cj.f32(1e-3))


# ============================================================================ RNG, integers

@program('rng_normal_uniform', 'jax.random: normal f32[2M], uniform f32[2M], bernoulli [1M], randint [1M] '
         '(threefry2x32 lowered to u32 HLO)')
def rng_mix(rng):
    def f(seed):
        k = jax.random.split(jax.random.key(seed), 4)
        return (jax.random.normal(k[0], (2048, 1024)), jax.random.uniform(k[1], (2048, 1024)),
                jax.random.bernoulli(k[2], 0.3, (1 << 20,)), jax.random.randint(k[3], (1 << 20,), 0, 1000))
    return f, (np.uint32(5),)


@program('rng_bit_generator', 'rng-bit-generator (rng_default) u32[4M] as jax\'s rbg PRNG uses it, plus '
         'uniform floats from the bits')
def rng_bitgen(rng):
    def f(key):
        k, bits = lax.rng_bit_generator(key, (4096, 1024), jnp.uint32)
        u = lax.bitcast_convert_type((bits >> 9) | np.uint32(0x3F800000), jnp.float32) - 1.0
        return k, jnp.sum(u, 0)
    return f, (np.array([1, 2, 3, 4], np.uint32),)


@program('int_hash_u32', 'integer hashing on u32[4M]: murmur3 finaliser rounds (xor, shifts, multiplies), '
         'bucket counts by compare; s32 arithmetic')
def int_hash(rng):
    def f(x, salt):
        h = x ^ salt
        for c in (0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F):
            h = h ^ (h >> 16)
            h = h * np.uint32(c)
            h = h ^ (h >> 13)
            h = (h << 5) | (h >> 27)
        b = (h & 1023).astype(jnp.int32)
        s = b * 3 - (b >> 2) + jnp.int32(7)
        return h, jnp.sum(jnp.where(s > 1500, 1, 0)), jnp.max(s)
    return f, (rng.integers(0, 2 ** 32, size=(1 << 22,), dtype=np.uint32), np.uint32(0x9E3779B9))


@program('int8_matmul', 'int8 quantised matmul: s8[1024,1024] x s8[1024,1024] -> s32 accumulation, per-row '
         'and per-column scales, dequantise to f32, requantise')
def int8_matmul(rng):
    def f(a, b, sa, sb):
        acc = lax.dot(a, b, preferred_element_type=jnp.int32)
        y = acc.astype(jnp.float32) * sa[:, None] * sb[None, :]
        q = jnp.clip(jnp.round(y / jnp.max(jnp.abs(y)) * 127), -127, 127).astype(jnp.int8)
        return y, q
    a = rng.integers(-127, 128, size=(1024, 1024)).astype(np.int8)
    b = rng.integers(-127, 128, size=(1024, 1024)).astype(np.int8)
    return f, (a, b, np.abs(cj.normal(rng, (1024,), 0.01)), np.abs(cj.normal(rng, (1024,), 0.01)))


# ============================================================================ sort, top-k, gather, scatter

@program('sort_f32_1m', 'jnp.sort of f32[1M] and argsort of f32[256,4096] rows')
def sort_f32(rng):
    return (lambda x, y: (jnp.sort(x), jnp.argsort(y, axis=-1))), (cj.normal(rng, (1 << 20,)), cj.normal(rng, (256, 4096)))


@program('sort_kv_stable', 'stable multi-operand sort: s32 keys with duplicates carrying f32 and s32 values, '
         '[64, 16384]')
def sort_kv(rng):
    def f(k, v, w):
        return lax.sort((k, v, w), dimension=-1, num_keys=1, is_stable=True)
    return f, (rng.integers(0, 1000, size=(64, 16384)).astype(np.int32), cj.normal(rng, (64, 16384)),
               rng.integers(0, 1 << 20, size=(64, 16384)).astype(np.int32))


@program('topk_rows', 'lax.top_k k=64 over f32[512, 32768] rows (large-vocabulary sampling)')
def topk_rows(rng):
    return (lambda x: lax.top_k(x, 64)), (cj.normal(rng, (512, 32768)),)


@program('segment_sum_scatter', 'jax.ops.segment_sum of f32[1M,8] into 16384 segments (scatter-add), '
         'segment_max, and the gathered-back means')
def segment_sum(rng):
    N, S = 1 << 20, 16384

    def f(x, seg):
        s = jax.ops.segment_sum(x, seg, S)
        mx = jax.ops.segment_max(x[:, 0], seg, S)
        cnt = jax.ops.segment_sum(jnp.ones((N,), jnp.float32), seg, S)
        return s, mx, x - (s / jnp.maximum(cnt, 1)[:, None])[seg]
    return f, (cj.normal(rng, (N, 8)), rng.integers(0, S, size=(N,)).astype(np.int32))


@program('embedding_train', 'embedding bag: gather 64 ids per example from a 65536x128 table, batch 256, '
         'mean-pool, linear, grads scattered back into the table, SGD')
def embedding_train(rng):
    p = {'emb': cj.normal(rng, (65536, 128), 0.1), 'w': cj.glorot(rng, (128, 16))}
    ids = rng.integers(0, 65536, size=(256, 64)).astype(np.int32)
    y = cj.normal(rng, (256, 16))

    def step(p, ids, y, lr):
        def loss(p):
            h = jnp.mean(p['emb'][ids], 1)
            return jnp.mean((h @ p['w'] - y) ** 2)
        lv, g = jax.value_and_grad(loss)(p)
        return lv, _sgd(p, g, lr)
    return step, (p, ids, y, cj.f32(0.5))


@program('gather_take_along', 'take_along_axis on f32[1024,4096] with s32 indices, 2-D point gathers, '
         'dynamic_slice in a fori_loop of 64 steps')
def gather_take(rng):
    def f(x, idx, pts):
        a = jnp.take_along_axis(x, idx, axis=1)
        b = x[pts[:, 0], pts[:, 1]]

        def body(i, acc):
            return acc + lax.dynamic_slice(x, (i * 8, i * 16), (256, 512))
        c = lax.fori_loop(0, 64, body, jnp.zeros((256, 512), jnp.float32))
        return a, b, c
    return f, (cj.normal(rng, (1024, 4096)), rng.integers(0, 4096, size=(1024, 512)).astype(np.int32),
               np.stack([rng.integers(0, 1024, size=(200000,)), rng.integers(0, 4096, size=(200000,))], 1).astype(np.int32))


@program('kmeans_step', 'k-means iteration: distances of 65536 points (d 32) to 256 centroids, argmin, '
         'one-hot counts and segment sums, new centroids')
def kmeans_step(rng):
    def f(x, c):
        d = jnp.sum(x * x, 1)[:, None] - 2 * x @ c.T + jnp.sum(c * c, 1)[None]
        a = jnp.argmin(d, 1)
        sums = jax.ops.segment_sum(x, a, 256)
        cnt = jax.ops.segment_sum(jnp.ones(x.shape[0]), a, 256)
        return sums / jnp.maximum(cnt, 1)[:, None], jnp.mean(jnp.min(d, 1))
    return f, (cj.normal(rng, (65536, 32)), cj.normal(rng, (256, 32)))


# ============================================================================ elementwise and reductions

@program('layernorm_gelu_train', 'layer norm + erf-gelu + residual on f32[64,512,1024] forward and backward '
         '(elementwise and reductions only)')
def layernorm_gelu(rng):
    def f(x, g, b):
        def loss(x, g, b):
            h = cj.layer_norm(x, g, b)
            return jnp.sum(jax.nn.gelu(h, approximate=False) + x)
        return jax.value_and_grad(loss, argnums=(0, 1, 2))(x, g, b)
    return f, (cj.normal(rng, (16, 512, 1024)), 1 + cj.normal(rng, (1024,), 0.1), cj.normal(rng, (1024,), 0.1))


@program('softmax_xent_bf16', 'softmax cross-entropy over a 32000-entry vocabulary, bf16 logits [512, 32000], '
         'value and gradient (bf16 elementwise, f32 reductions)')
def softmax_xent_bf16(rng):
    def f(logits, y):
        def loss(l):
            lp = jax.nn.log_softmax(l.astype(jnp.float32), -1)
            return -jnp.mean(jnp.take_along_axis(lp, y[:, None], 1))
        return jax.value_and_grad(loss)(logits)
    return f, (cj.normal(rng, (512, 32000), 2.0, BF16), rng.integers(0, 32000, size=(512,)).astype(np.int32))


@program('adamw_update_bf16', 'AdamW update alone on 16M bf16 parameters with f32 moments (optimizer step '
         'of a 16M-parameter model)')
def adamw_bf16(rng):
    p = {'a': cj.normal(rng, (4096, 2048), 0.05, BF16), 'b': cj.normal(rng, (2048, 4096), 0.05, BF16)}
    g = _tree_normal(rng, p, 1e-2)
    g = jax.tree_util.tree_map(lambda a: a.astype(BF16), g)
    m = _tree_normal(rng, p, 1e-3)
    v = _tree_normal(rng, p, 1e-5, True)
    return (lambda p, g, m, v, t, lr: adamw(p, g, m, v, t, lr)), (p, g, m, v, np.int32(9), cj.f32(1e-3))


@program('cumsum_reduce_window', 'cumsum along rows of f32[512,4096] and columns, cummax, a 1-D moving '
         'average (reduce-window 32) on f32[1M]')
def cumsum_rw(rng):
    def f(x, y):
        ma = lax.reduce_window(y, 0.0, lax.add, (32,), (1,), 'VALID') / 32
        return jnp.cumsum(x, 1), jnp.cumsum(x, 0), lax.cummax(x, axis=1), ma
    return f, (cj.normal(rng, (512, 4096)), cj.normal(rng, (1 << 20,)))


@program('tiny_mlp_step', 'MLP 32-64-10 train step, batch 8 (dispatch-bound: microseconds of arithmetic)')
def tiny_mlp_step(rng):
    params = cj.mlp_params(rng, [32, 64, 10])
    x = cj.normal(rng, (8, 32))
    y = rng.integers(0, 10, size=(8,)).astype(np.int32)

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: cj.xent(cj.mlp_apply(p, x), y))(p)
        return loss, _sgd(p, g, lr)
    return step, (params, x, y, cj.f32(0.1))


@program('batched_matmul_bf16', 'batched matmul bf16[64,256,512] x bf16[64,512,256] -> f32 accumulation, '
         'and an f32 einsum with a contraction over two dims')
def bmm_bf16(rng):
    def f(a, b, c, d):
        return (lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32),
                jnp.einsum('bijk,jkl->bil', c, d))
    return f, (cj.normal(rng, (64, 256, 512), 1.0, BF16), cj.normal(rng, (64, 512, 256), 1.0, BF16),
               cj.normal(rng, (16, 256, 16, 32)), cj.normal(rng, (16, 32, 256)))


# ============================================================================ export

def order():
    return list(PROGRAMS)


def builder(name):
    return PROGRAMS[name][0]


def make_args(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return PROGRAMS[name][0](rng)


def lower_text(name):
    fn, args = make_args(name)
    return jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect='hlo')


def write_inputs(name, path):
    _, args = make_args(name)
    leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    np.savez(path, **{'arg%d' % i: a for i, a in enumerate(leaves)})


def export(name, outdir):
    """Writes outdir/program.hlo (the committed text) and outdir/inputs.npz for PROGRAMS[name]."""
    os.makedirs(outdir, exist_ok=True)
    src = os.path.join(PROGRAM_DIR, name + '.hlo')
    text = open(src).read() if os.path.exists(src) else lower_text(name)
    with open(os.path.join(outdir, 'program.hlo'), 'w') as f:
        f.write(text)
    write_inputs(name, os.path.join(outdir, 'inputs.npz'))
    return outdir


def regen(names):
    os.makedirs(PROGRAM_DIR, exist_ok=True)
    for n in names:
        text = lower_text(n)
        with open(os.path.join(PROGRAM_DIR, n + '.hlo'), 'w') as f:
            f.write(text)
        print('%-24s %7d bytes' % (n, len(text)))


if __name__ == '__main__':
    a = sys.argv[1:]
    if not a:
        print(__doc__)
        sys.exit(2)
    if a[0] == '--list':
        for n, (_, doc) in PROGRAMS.items():
            print('%-24s %s' % (n, doc))
    elif a[0] == '--regen':
        regen(a[1:] or order())
    else:
        for n in a[1:] or order():
            print(export(n, os.path.join(a[0], n)))
