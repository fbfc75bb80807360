#!/usr/bin/env python3
"""Golden values for the replicated runtime (tests/t_runtime.c, runtime_golden_shard_map): a jax shard_map
program over a 2x2 mesh (4 devices as partitions) with every collective XLA emits for it — all-reduce over
subgroups with flattened ids, all-gather, all-to-all (tuple form), collective-permute, reduce-scatter,
partition-id, and a while loop with a collective-permute and an all-reduce inside — compiled by XLA:CPU and
run there. Writes tests/golden/runtime/shard_map.hlo and shard_map.npz (members arg{k}_dev{d}: inputs,
want{i}_dev{d}: XLA:CPU's outputs). Values are chosen so that summation order does not matter (integers, and
f32 sums of two terms), since tpusim sums in the TPU ring order and XLA:CPU in its own.

Run from the repository root: python3 tests/golden/make_runtime_golden.py
"""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))


def f(x, y):
    s = jax.lax.psum(x, "a")
    g = jax.lax.all_gather(x, "b", axis=1, tiled=True)
    t = jax.lax.all_to_all(y, "b", 0, 0, tiled=True)
    p = jax.lax.ppermute(x, "a", [(0, 1), (1, 0)])
    rs = jax.lax.psum_scatter(y, ("a", "b"), scatter_dimension=0, tiled=True)
    idx = (jax.lax.axis_index("a") * 10 + jax.lax.axis_index("b")).reshape(1)

    def body(i, v):
        v = jax.lax.ppermute(v, "b", [(0, 1), (1, 0)])
        return jax.lax.psum(v, "a") + i

    w = jax.lax.fori_loop(0, 3, body, y)
    return s, g, t, p, rs, idx, w


specs = (P("a", "b"),) * 5 + (P(("a", "b")),) + (P("a", "b"),)
sm = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("a", "b"), P("a", "b")), out_specs=specs, check_vma=False))
rng = np.random.default_rng(0)
x = rng.standard_normal((4, 6)).astype(np.float32)
y = rng.integers(-9, 9, (16, 4)).astype(np.int32)
out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "shard_map.hlo"), "w") as fh:
    fh.write(sm.lower(x, y).compile().as_text())
outs = sm(x, y)
devs = list(mesh.devices.flat)
members = {}
for k, arr in enumerate((x, y)):
    for sh in jax.device_put(arr, NamedSharding(mesh, P("a", "b"))).addressable_shards:
        members["arg%d_dev%d" % (k, devs.index(sh.device))] = np.asarray(sh.data)
for i, o in enumerate(outs):
    for sh in o.addressable_shards:
        members["want%d_dev%d" % (i, devs.index(sh.device))] = np.asarray(sh.data)
np.savez(os.path.join(out_dir, "shard_map.npz"), **members)
print("wrote", out_dir, "with", len(members), "arrays;", "jax", jax.__version__)
