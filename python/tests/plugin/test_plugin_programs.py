"""Ordinary jax programs on the simulated TPU against jax's CPU backend.

Every program runs twice on tpusim: with exact numerics (f32 dots, compared tightly with XLA:CPU) and with
TPU numerics (bf16 MXU passes, compared within the bf16 noise the program accumulates). Integer results
(sorting, indices, random bits) must be identical in both.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import assert_close, run_both

R = np.random.RandomState(0)


def f32(*shape, scale=1.0):
    return (R.randn(*shape) * scale).astype(np.float32)


# ---- models: train steps ----

def mlp_params():
    return {"w1": f32(32, 64, scale=0.2), "b1": np.zeros(64, np.float32), "w2": f32(64, 10, scale=0.2),
            "b2": np.zeros(10, np.float32)}


def mlp_step(p, x, y):
    def loss(p):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        logits = h @ p["w2"] + p["b2"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), -1))
    l, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), l


def cnn_step(w, x, y):
    def loss(w):
        h = lax.conv_general_dilated(x, w["k1"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h + w["b1"])
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = lax.conv_general_dilated(h, w["k2"], (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jnp.mean(jax.nn.relu(h), axis=(1, 2))
        logits = h @ w["d"]
        return jnp.mean(optax_xent(logits, y))
    l, g = jax.value_and_grad(loss)(w)
    return jax.tree.map(lambda a, b: a - 0.05 * b, w, g), l


def optax_xent(logits, y):
    return -jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), -1)


def lstm_step(p, xs, y):
    def cell(carry, x):
        h, c = carry
        z = x @ p["wx"] + h @ p["wh"] + p["b"]
        i, f, g, o = jnp.split(z, 4, -1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def loss(p):
        h0 = jnp.zeros((xs.shape[1], 16), jnp.float32)
        (h, _), _ = lax.scan(cell, (h0, h0), xs)
        return jnp.mean((h @ p["wo"] - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), l


def attention(x, p):
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    B, T, D = q.shape
    q, k, v = (a.reshape(B, T, 4, D // 4) for a in (q, k, v))
    s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D // 4)
    mask = jnp.tril(jnp.ones((T, T), bool))
    s = jnp.where(mask, s, -1e9)
    a = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, -1), v).reshape(B, T, D)
    return a @ p["wo"]


def layer_norm(x, g, b):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean((x - m) ** 2, -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def transformer_step(p, x, y):
    def loss(p):
        h = x + attention(layer_norm(x, p["g1"], p["b1"]), p)
        h = h + jax.nn.gelu(layer_norm(h, p["g2"], p["b2"]) @ p["w1"]) @ p["w2"]
        return jnp.mean((h - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    # AdamW-like update with its square roots and divisions
    upd = jax.tree.map(lambda w, gw: w - 1e-2 * gw / (jnp.sqrt(gw * gw) + 1e-3) - 1e-4 * w, p, g)
    return upd, l


def transformer_params(D=32):
    return {"wq": f32(D, D, scale=0.2), "wk": f32(D, D, scale=0.2), "wv": f32(D, D, scale=0.2),
            "wo": f32(D, D, scale=0.2), "w1": f32(D, 4 * D, scale=0.2), "w2": f32(4 * D, D, scale=0.2),
            "g1": np.ones(D, np.float32), "b1": np.zeros(D, np.float32), "g2": np.ones(D, np.float32),
            "b2": np.zeros(D, np.float32)}


def bf16_block(x, w1, w2):
    h = jax.nn.gelu(x.astype(jnp.bfloat16) @ w1.astype(jnp.bfloat16))
    return jnp.sum(h @ w2.astype(jnp.bfloat16), -1).astype(jnp.float32)


def per_example_grads(w, x, y):
    return jax.vmap(jax.grad(lambda w, x, y: jnp.sum((jnp.tanh(x @ w) - y) ** 2)), (None, 0, 0))(w, x, y)


def moe_route(x, wg, we):
    logits = x @ wg
    top_v, top_i = lax.top_k(logits, 2)
    gates = jax.nn.softmax(top_v, -1)
    out = jnp.einsum("td,edh->teh", x, we)
    picked = jnp.take_along_axis(out, top_i[:, :, None], axis=1)
    return jnp.sum(gates[:, :, None] * picked, 1), top_i


KEY = np.array([0, 42], np.uint32)

# name, function, arguments, TPU-mode tolerance (None: same tolerance as exact)
PROGRAMS = [
    ("mlp_train_step", mlp_step, (mlp_params(), f32(16, 32), R.randint(0, 10, 16).astype(np.int32)), 3e-2),
    ("cnn_train_step", cnn_step, ({"k1": f32(3, 3, 3, 8, scale=0.3), "b1": np.zeros(8, np.float32),
                                   "k2": f32(3, 3, 8, 16, scale=0.2), "d": f32(16, 5, scale=0.3)},
                                  f32(4, 12, 12, 3), R.randint(0, 5, 4).astype(np.int32)), 3e-2),
    ("lstm_train_step", lstm_step, ({"wx": f32(8, 64, scale=0.3), "wh": f32(16, 64, scale=0.3),
                                     "b": np.zeros(64, np.float32), "wo": f32(16, 1, scale=0.3)},
                                    f32(6, 4, 8), f32(4, 1)), 3e-2),
    ("transformer_train_step", transformer_step, (transformer_params(), f32(2, 8, 32), f32(2, 8, 32)), 5e-2),
    ("bf16_mlp_block", bf16_block, (f32(8, 32), f32(32, 64, scale=0.2), f32(64, 16, scale=0.2)), None),
    ("per_example_grads_vmap", per_example_grads, (f32(8, 4, scale=0.5), f32(6, 8), f32(6, 4)), 3e-2),
    ("moe_top2_routing", moe_route, (f32(16, 8), f32(8, 4), f32(4, 8, 6, scale=0.3)), 3e-2),
    # random numbers: the threefry bits are integer arithmetic, identical everywhere
    ("rng_normal", lambda k: jax.random.normal(jax.random.wrap_key_data(k), (5, 7)), (KEY,), None),
    ("rng_uniform_dropout", lambda k, x: jnp.where(jax.random.bernoulli(jax.random.wrap_key_data(k), 0.7, x.shape),
                                                     x / 0.7, 0.0), (KEY, f32(6, 6)), None),
    ("rng_split_fold_in", lambda k: jax.random.key_data(jax.random.split(
        jax.random.fold_in(jax.random.wrap_key_data(k), 7), 4)), (KEY,), None),
    ("rng_categorical", lambda k, l: jax.random.categorical(jax.random.wrap_key_data(k), l, shape=(20, 3)),
     (KEY, f32(3, 5)), None),
    ("rng_bits_permutation", lambda k: jax.random.permutation(jax.random.wrap_key_data(k), 16), (KEY,), None),
    # sorting
    ("sort", lambda x: jnp.sort(x, axis=-1), (f32(4, 33),), None),
    ("argsort_stable", lambda x: jnp.argsort(x, axis=0, stable=True), (np.round(f32(40, 3), 1),), None),
    ("top_k", lambda x: lax.top_k(x, 5), (f32(3, 50),), None),
    ("sort_key_value", lambda k, v: lax.sort((k, v), num_keys=1), (R.randint(0, 9, 30).astype(np.int32), f32(30)), None),
    # gather / scatter
    ("scatter_add", lambda x, i, u: x.at[i].add(u), (f32(10, 4), R.randint(0, 10, 7).astype(np.int32), f32(7, 4)), None),
    ("scatter_max_set", lambda x, i: (x.at[i].max(3.0), x.at[i, 1].set(-1.0)),
     (f32(8, 3), R.randint(0, 8, 5).astype(np.int32)), None),
    ("gather_take", lambda x, i: (jnp.take(x, i, axis=0), x[i[:3], 1:3]), (f32(9, 5), R.randint(0, 9, 6).astype(np.int32)), None),
    ("segment_sum", lambda d, s: jax.ops.segment_sum(d, s, num_segments=5),
     (f32(12, 3), R.randint(0, 5, 12).astype(np.int32)), None),
    ("dynamic_slice_update", lambda x, i: lax.dynamic_update_slice(x, lax.dynamic_slice(x, (i, 0), (2, 3)) * 2, (0, i)),
     (f32(6, 6), np.int32(3)), None),
    # control flow
    ("fori_loop", lambda x: lax.fori_loop(0, 10, lambda i, c: c * 0.9 + jnp.sin(c + i), x), (f32(8),), None),
    ("while_loop_count", lambda x: lax.while_loop(lambda c: c[1] < 100.0, lambda c: (c[0] + 1, c[1] * 1.5 + 1), (0, x)),
     (np.float32(1.0),), None),
    ("scan_cumulative", lambda x: lax.scan(lambda c, a: (c * 0.5 + a, c), jnp.zeros(3), x), (f32(7, 3),), None),
    ("cond_switch", lambda p, x: (lax.cond(p > 0, jnp.sin, jnp.cos, x),
                                  lax.switch(jnp.int32(p) % 3, [jnp.exp, jnp.tanh, jnp.abs], x)), (np.float32(2.0), f32(5)), None),
    # reductions and math
    ("cumsum_cumprod", lambda x: (jnp.cumsum(x, 0), jnp.cumprod(x * 0.1 + 1, 1)), (f32(6, 5),), None),
    ("reductions", lambda x: (jnp.mean(x, 0), jnp.var(x, 1), jnp.max(x), jnp.argmax(x, 1), jnp.any(x > 2)), (f32(9, 7),), None),
    ("logsumexp_special", lambda x: (jax.nn.logsumexp(x, -1), jax.scipy.special.erf(x), jnp.log1p(jnp.abs(x)),
                                     jax.nn.softplus(x)), (f32(4, 6),), None),
    ("softmax_cross_entropy", lambda l, y: jnp.mean(optax_xent(l, y)), (f32(8, 100, scale=3), R.randint(0, 100, 8).astype(np.int32)), None),
    ("layer_norm", layer_norm, (f32(4, 16), f32(16), f32(16)), None),
    ("avg_pool_conv_transpose", lambda x, k: (lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") / 9,
                                               lax.conv_transpose(x, k, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
     (f32(2, 6, 6, 3), f32(3, 3, 3, 4, scale=0.3)), 3e-2),
    ("einsum_batched", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (f32(3, 4, 5), f32(3, 5, 6)), 3e-2),
    # integer and low-precision arithmetic
    ("int8_matmul", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
     (R.randint(-128, 128, (8, 32)).astype(np.int8), R.randint(-128, 128, (32, 4)).astype(np.int8)), None),
    ("integer_bit_ops", lambda a, b: (a ^ b, a >> 3, a << 2, lax.population_count(a), a // 7, a % 5, jnp.clip(a, -9, 9)),
     (R.randint(-1000, 1000, 16).astype(np.int32), R.randint(0, 1000, 16).astype(np.int32)), None),
    ("bf16_elementwise", lambda x: (jnp.exp(x.astype(jnp.bfloat16)) * 3 + 1).astype(jnp.float32), (f32(20),), None),
    # shapes
    ("pad_concat_reverse", lambda x: (jnp.pad(x, ((1, 2), (0, 3))), jnp.concatenate([x, x[::-1]], 0), jnp.flip(x, 1)),
     (f32(3, 4),), None),
    ("large_constant", lambda x: x * np.linspace(-3, 3, 3000, dtype=np.float32), (f32(3000),), None),
    ("dce_sink", lambda x: (lax.dce_sink(x * 2, prevent_mlir_dce=True), x + 1)[1], (f32(4),), None),
    ("where_select_clip", lambda x, y: (jnp.where(x > y, x, y), jnp.clip(x, -0.5, 0.5), jnp.sign(x) * jnp.floor(y)),
     (f32(10), f32(10)), None),
    ("fft", lambda x: jnp.abs(jnp.fft.rfft(x)), (f32(4, 16),), None),
    ("linalg_cholesky_triangular", lambda a: (jnp.linalg.cholesky(a @ a.T + 4 * jnp.eye(4)),
                                              jax.scipy.linalg.solve_triangular(jnp.tril(a) + 4 * jnp.eye(4), a, lower=True)),
     (f32(4, 4),), 3e-2),
]


# programs computing in bf16: each rounding may land one bf16 step (2^-8 relative) away from XLA:CPU's, whose
# fusions keep some intermediates in f32
BF16_TOL = {"bf16_mlp_block": 1e-2, "bf16_elementwise": 8e-3}


@pytest.mark.parametrize("name,f,args,tpu_tol", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_program_exact_numerics_matches_xla_cpu(tpu, name, f, args, tpu_tol):
    got, want = run_both(f, args, numerics="exact")
    assert_close(got, want, BF16_TOL.get(name, 2e-4), name)


@pytest.mark.parametrize("name,f,args,tpu_tol", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_program_tpu_numerics_within_bf16_noise(tpu, name, f, args, tpu_tol):
    got, want = run_both(f, args, numerics="tpu")
    assert_close(got, want, tpu_tol or BF16_TOL.get(name, 2e-4), name)


def test_tpu_numerics_dot_equals_bf16_operand_reference(tpu, cpu):
    """DEFAULT precision on a TPU: one MXU pass on bf16-rounded operands, f32 accumulation."""
    a, b = f32(16, 64), f32(64, 8)
    got = np.asarray(jax.jit(lambda a, b: a @ b)(jax.device_put(a, tpu[0]), jax.device_put(b, tpu[0])))
    ref = np.asarray(jax.jit(lambda a, b: lax.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                                                  preferred_element_type=jnp.float32))(
        jax.device_put(a, cpu), jax.device_put(b, cpu)))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))      # the same products, summed in f32
    assert np.max(np.abs(got - exact)) > 1e-3 * np.max(np.abs(exact))  # and not an f32 matmul
    hi = np.asarray(jax.jit(lambda a, b: jnp.dot(a, b, precision=lax.Precision.HIGHEST))(
        jax.device_put(a, tpu[0]), jax.device_put(b, tpu[0])))
    assert np.max(np.abs(hi - exact)) <= 1e-5 * np.max(np.abs(exact))   # HIGHEST: f32 accuracy


def test_training_loop_losses_match_cpu(tpu, cpu):
    """An MLP trained for 20 steps: the same losses as on jax's CPU backend (exact numerics: tightly)."""
    x, y, p0 = f32(64, 32), R.randint(0, 10, 64).astype(np.int32), mlp_params()
    out = {}
    for name, dev, opts in (("tpusim", tpu[0], {"tpusim_numerics": "exact"}), ("cpu", cpu, None)):
        step = jax.jit(mlp_step, compiler_options=opts) if opts else jax.jit(mlp_step)
        p = jax.device_put(p0, dev)
        xs, ys = jax.device_put(x, dev), jax.device_put(y, dev)
        losses = []
        for _ in range(20):
            p, l = step(p, xs, ys)
            losses.append(float(l))
        out[name] = np.array(losses)
    assert out["cpu"][-1] < out["cpu"][0] * 0.7
    np.testing.assert_allclose(out["tpusim"], out["cpu"], rtol=1e-4)
