"""Benchmark programs: train steps at sizes where the arithmetic, not the per-op overhead, is the work.

Each builder returns (fn, args) like tests/conformance/cases_jax.py (whose model code it reuses); export()
lowers it with jax to HLO text (`as_text(dialect="hlo")`, the text XLA:CPU and tpusim both run) and the
inputs as an .npz (arg0, arg1, ... in parameter order). Deterministic (seeded numpy).

    python3 bench/programs.py OUTDIR [NAME ...]      writes OUTDIR/NAME/{program.hlo,inputs.npz}
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'tests', 'conformance'))

import numpy as np                      # noqa: E402
import jax                              # noqa: E402
import jax.numpy as jnp                 # noqa: E402

import cases_jax as cj                  # noqa: E402


def mlp_train(rng):
    """MLP 784-1024-1024-10, batch 512, relu, softmax cross-entropy, Adam."""
    params = cj.mlp_params(rng, [784, 1024, 1024, 10])
    m = jax.tree_util.tree_map(lambda p: cj.normal(rng, p.shape, 0.01), params)
    v = jax.tree_util.tree_map(lambda p: np.abs(cj.normal(rng, p.shape, 1e-4)), params)
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
    h = cj.conv(x, p['c1'])                                                      # 32x32x32
    h = jax.nn.relu(cj.batch_norm(h, p['g1'], p['b1'], (0, 1, 2)))
    h = cj.conv(h, p['c2'])                                                      # 32x32x64
    h = jax.nn.relu(cj.batch_norm(h, p['g2'], p['b2'], (0, 1, 2)))
    h = cj.max_pool(h, (1, 2, 2, 1), (1, 2, 2, 1))                               # 16x16
    h = jax.nn.relu(cj.conv(h, p['c3']) + p['cb3'])                              # 16x16x128
    h = jax.nn.relu(cj.conv(h, p['c4'], stride=(2, 2)) + p['cb4'])               # 8x8x128
    h = jnp.mean(h, axis=(1, 2))
    return h @ p['d'] + p['db']


def cnn_train(rng):
    """CNN NHWC, batch 32 of 32x32x3: 4 convs 3x3 (32-64-128-128, one strided), batch-norm, max-pool,
    global average pool, dense; cross-entropy, SGD."""
    p = _cnn_params(rng)
    x = cj.normal(rng, (32, 32, 32, 3))
    y = rng.integers(0, 10, size=(32,)).astype(np.int32)

    def step(p, x, y, lr):
        loss, g = jax.value_and_grad(lambda p: cj.xent(_cnn_apply(p, x), y))(p)
        return loss, jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)
    return step, (p, x, y, cj.f32(0.05))


def lstm_train(rng):
    """LSTM T=32, batch 64, input 128, hidden 256 (lax.scan), linear readout, MSE, BPTT, SGD."""
    p = cj.lstm_params(rng, 128, 256)
    xs = cj.normal(rng, (32, 64, 128))
    ys = cj.normal(rng, (32, 64, 1))

    def step(p, xs, ys, lr):
        def loss(p):
            hs, _ = cj.lstm_run(p, xs)
            return jnp.mean((hs @ p['wo'] + p['bo'] - ys) ** 2)
        lv, g = jax.value_and_grad(loss)(p)
        return lv, jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)
    return step, (p, xs, ys, cj.f32(0.1))


def transformer_train(rng):
    """Transformer LM block train step: vocab 1024, batch 8, sequence 128, d 256, 4 heads, ff 1024,
    embedding gather, erf-gelu, tied output projection, next-token cross-entropy, Adam."""
    B, S, D, V = 8, 128, 256, 1024
    p = cj.block_params(rng, D, 4 * D)
    p['emb'] = cj.normal(rng, (V, D), 0.5)
    p['pos'] = cj.normal(rng, (S, D), 0.1)
    ids = rng.integers(0, V, size=(B, S)).astype(np.int32)
    m = jax.tree_util.tree_map(lambda a: cj.normal(rng, a.shape, 1e-3), p)
    v = jax.tree_util.tree_map(lambda a: np.abs(cj.normal(rng, a.shape, 1e-5)), p)

    def step(p, m, v, t, ids, lr):
        lv, g = jax.value_and_grad(cj.lm_loss)(p, ids)
        p2, m2, v2 = cj.tree_adam(p, g, m, v, t, lr)
        return lv, p2, m2, v2
    return step, (p, m, v, np.int32(5), ids, cj.f32(1e-3))


def matmul_4096(rng):
    """C = A @ B, f32[4096,4096] x f32[4096,4096] (default precision)."""
    a = cj.normal(rng, (4096, 4096))
    b = cj.normal(rng, (4096, 4096))
    return (lambda a, b: a @ b), (a, b)


PROGRAMS = {
    'mlp_train': mlp_train,
    'cnn_train': cnn_train,
    'lstm_train': lstm_train,
    'transformer_train': transformer_train,
    'matmul_4096': matmul_4096,
}


def export(name, outdir):
    """Writes outdir/program.hlo and outdir/inputs.npz for PROGRAMS[name]; returns outdir."""
    import zlib
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    fn, args = PROGRAMS[name](rng)
    text = jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect='hlo')
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, 'program.hlo'), 'w') as f:
        f.write(text)
    leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    np.savez(os.path.join(outdir, 'inputs.npz'), **{'arg%d' % i: a for i, a in enumerate(leaves)})
    return outdir


if __name__ == '__main__':
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    for n in sys.argv[2:] or list(PROGRAMS):
        print(export(n, os.path.join(sys.argv[1], n)))
