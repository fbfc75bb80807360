"""Programs over several devices of the simulated v3-8: data parallel and FSDP training steps jit'ed over a
Mesh (partitioned by XLA's SPMD partitioner, run with collectives on tpusim's replicated runtime), shard_map
collectives, pmap. References: the same program on jax's CPU backend (one device) and numpy."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from conftest import assert_close

R = np.random.RandomState(1)


def f32(*shape, scale=1.0):
    return (R.randn(*shape) * scale).astype(np.float32)


def mesh8(tpu, shape=(8,), names=("data",)):
    return Mesh(np.array(tpu[:int(np.prod(shape))]).reshape(shape), names)


def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] - y) ** 2)


def sgd_step(p, x, y):
    l, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.2 * b, p, g), l


def params():
    return {"w1": f32(16, 32, scale=0.3), "b1": np.zeros(32, np.float32), "w2": f32(32, 4, scale=0.3)}


def train(step, p, x, y, n=8):
    losses = []
    for _ in range(n):
        p, l = step(p, x, y)
        losses.append(float(l))
    return p, np.array(losses)


@pytest.fixture(scope="module")
def data():
    return params(), f32(64, 16), f32(64, 4)


def cpu_reference(cpu, data, n=8):
    p0, x, y = data
    return train(jax.jit(sgd_step), *jax.device_put((p0, x, y), cpu), n=n)


@pytest.mark.parametrize("numerics,rtol", [("exact", 1e-5), ("tpu", 2e-2)])
def test_data_parallel_training_matches_cpu(tpu, cpu, data, numerics, rtol):
    """Batch sharded over the 8 cores, parameters replicated: the partitioner inserts the gradient all-reduce."""
    p0, x, y = data
    m = mesh8(tpu)
    rep, bat = NamedSharding(m, P()), NamedSharding(m, P("data"))
    step = jax.jit(sgd_step, compiler_options={"tpusim_numerics": numerics})
    p, losses = train(step, jax.device_put(p0, rep), jax.device_put(x, bat), jax.device_put(y, bat))
    p_ref, ref = cpu_reference(cpu, data)
    np.testing.assert_allclose(losses, ref, rtol=rtol)
    assert ref[-1] < ref[0]
    assert p["w1"].sharding.is_fully_replicated
    assert_close(jax.device_get(p), jax.device_get(p_ref), 10 * rtol, "parameters")


def test_fsdp_training_matches_cpu(tpu, cpu, data):
    """FSDP: parameters sharded along their first axis over the mesh, gathered for use, gradients scattered."""
    p0, x, y = data
    m = mesh8(tpu)
    shard = {"w1": NamedSharding(m, P("data", None)), "b1": NamedSharding(m, P("data")),
             "w2": NamedSharding(m, P("data", None))}
    bat = NamedSharding(m, P("data"))
    step = jax.jit(sgd_step, in_shardings=(shard, bat, bat), out_shardings=(shard, NamedSharding(m, P())),
                   compiler_options={"tpusim_numerics": "exact"})
    p, losses = train(step, jax.device_put(p0, shard), jax.device_put(x, bat), jax.device_put(y, bat))
    _, ref = cpu_reference(cpu, data)
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    assert p["w1"].sharding.spec == P("data", None)
    assert p["w1"].addressable_shards[3].data.shape == (2, 32)


def test_tensor_parallel_2d_mesh(tpu, cpu):
    """A 4x2 mesh: batch over 'data', the hidden dimension over 'model' (Megatron-style matmuls)."""
    m = mesh8(tpu, (4, 2), ("data", "model"))
    x, w1, w2 = f32(8, 16), f32(16, 8), f32(8, 6)
    f = jax.jit(lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2, compiler_options={"tpusim_numerics": "exact"})
    got = f(jax.device_put(x, NamedSharding(m, P("data", None))), jax.device_put(w1, NamedSharding(m, P(None, "model"))),
            jax.device_put(w2, NamedSharding(m, P("model", None))))
    np.testing.assert_allclose(np.asarray(got), np.maximum(x @ w1, 0) @ w2, rtol=1e-5, atol=1e-5)


def test_shard_map_collectives(tpu):
    m = mesh8(tpu, (8,), ("i",))
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)

    def body(b):   # b: this device's [1, 4] block
        s = lax.psum(b, "i")
        g = lax.all_gather(b, "i", tiled=True)
        r = lax.ppermute(b, "i", [(k, (k + 1) % 8) for k in range(8)])
        a = lax.all_to_all(jnp.tile(b, (8, 1)), "i", 0, 0, tiled=True)
        rs = lax.psum_scatter(jnp.tile(b, (8, 1)), "i", scatter_dimension=0, tiled=True)
        i = lax.axis_index("i")
        return s, g[None], r, a[None], rs, jnp.full((1, 1), i, jnp.int32)

    f = jax.jit(jax.shard_map(body, mesh=m, in_specs=P("i"), out_specs=(P("i"), P("i"), P("i"), P("i"), P("i"), P("i"))))
    s, g, r, a, rs, idx = (np.asarray(v) for v in f(jax.device_put(x, NamedSharding(m, P("i")))))
    np.testing.assert_array_equal(s, np.tile(x.sum(0), (8, 1)))              # psum
    np.testing.assert_array_equal(g, np.tile(x[None], (8, 1, 1)))            # all_gather
    np.testing.assert_array_equal(r, np.roll(x, 1, axis=0))                  # ppermute k -> k+1
    np.testing.assert_array_equal(a, np.tile(x[None], (8, 1, 1)))            # all_to_all of tiled copies
    np.testing.assert_array_equal(rs, np.tile(x.sum(0), (8, 1)))             # psum_scatter: row k summed
    np.testing.assert_array_equal(idx.ravel(), np.arange(8))                 # axis_index


def test_pmap_replicas(tpu):
    """pmap compiles one program for 8 replicas (replica_count=8) with a cross-replica all-reduce."""
    x = f32(8, 3)
    out = jax.pmap(lambda v: v - lax.pmean(v, "r"), axis_name="r")(x)
    np.testing.assert_allclose(np.asarray(out), x - x.mean(0), rtol=1e-5, atol=1e-6)
    assert out.sharding.device_set == set(tpu)


def test_output_shardings_follow_the_partitioner(tpu):
    m = mesh8(tpu)
    x = jax.device_put(f32(16, 8), NamedSharding(m, P("data")))
    y = jax.jit(lambda a: (a * 2, jnp.sum(a)))(x)
    assert y[0].sharding.spec == P("data") or y[0].sharding.spec == P("data", None)
    assert y[1].sharding.is_fully_replicated
    assert len(y[0].addressable_shards) == 8 and y[0].addressable_shards[0].data.shape == (2, 8)


def test_partitioned_program_keeps_its_large_constants(tpu):
    """Constants of thousands of elements survive the partitioner's dump (XLA's text elides them as {...})."""
    m = mesh8(tpu)
    c = np.linspace(0, 1, 4000, dtype=np.float32)
    x = jax.device_put(np.ones((8, 4000), np.float32), NamedSharding(m, P("data")))
    got = jax.jit(lambda x: jnp.sum(x * c, axis=1))(x)
    np.testing.assert_allclose(np.asarray(got), np.full(8, c.sum()), rtol=1e-5)


def test_host_callback_inside_a_partitioned_program(tpu, capfd):
    """The partitioner runs inside XLA:CPU's compiler, which cannot emit host transfers itself: the program
    is taken after partitioning, so jax.debug.print works in a jit over a mesh (once per device)."""
    m = mesh8(tpu)
    x = jax.device_put(np.arange(16, dtype=np.float32).reshape(8, 2), NamedSharding(m, P("data")))

    def f(v):
        jax.debug.print("total {}", v.sum())
        return v * 2
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), np.arange(16).reshape(8, 2) * 2)
    assert capfd.readouterr().out.count("total 120.0") == 8
