"""Data-parallel training of a small MLP on a tpusim slice, unchanged whether it runs in one process or as one
process per simulated host under mpirun (python/tests/plugin/test_plugin_dist.py runs it both ways):

    JAX_PLATFORMS=tpusim TPUSIM_SLICE=v4-16 python train_dp.py OUT.npz             # one process, 8 devices
    mpirun -np 2 python train_dp.py OUT.npz --distributed                            # 2 processes x 4 devices

Each process writes OUT.p<process_index>.npz with the trained parameters (its first local copy of the
replicated arrays), the per-device values of an order-sensitive all-reduce (its local shards) and what jax says
about the processes; the test compares them with the one-process run bit for bit.
"""
import json
import sys

import numpy as np

import jax

if "--distributed" in sys.argv:
    jax.distributed.initialize()   # Open MPI's environment (OMPI_*) names the coordinator, the rank and the size

import jax.numpy as jnp  # noqa: E402
from jax import shard_map  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

out = sys.argv[1]
devs = jax.devices()
n = len(devs)
mesh = Mesh(np.array(devs), ("data",))
rep = NamedSharding(mesh, P())
shard = NamedSharding(mesh, P("data"))

rng = np.random.default_rng(0)
D, H, C, per = 16, 32, 4, 8
G = per * n
x_all = rng.standard_normal((G, D)).astype(np.float32) * np.float32(3)
y_all = (np.arange(G) % C).astype(np.int32)
# values of every magnitude: the all-reduce's order shows in the last bits
v_all = (rng.standard_normal((n, 64)) * 10.0 ** rng.integers(-4, 5, (n, 64))).astype(np.float32)


def global_array(a, sharding):
    return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])


x = global_array(x_all, shard)
y = global_array(y_all, shard)
v = global_array(v_all, shard)
params = {
    "w1": global_array(rng.standard_normal((D, H)).astype(np.float32) * np.float32(0.3), rep),
    "b1": global_array(np.zeros(H, np.float32), rep),
    "w2": global_array(rng.standard_normal((H, C)).astype(np.float32) * np.float32(0.3), rep),
}


def loss_fn(p, xb, yb):
    h = jax.nn.relu(xb @ p["w1"] + p["b1"])
    logits = h @ p["w2"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], axis=1))


@jax.jit
def step(p, xb, yb):
    loss, g = jax.value_and_grad(loss_fn)(p, xb, yb)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), loss


psum = jax.jit(shard_map(lambda a: jax.lax.psum(a, "data"), mesh=mesh, in_specs=P("data"), out_specs=P("data")))

losses = []
for _ in range(4):
    params, loss = step(params, x, y)
    losses.append(np.asarray(loss.addressable_shards[0].data))
s = psum(v)

res = {k: np.asarray(a.addressable_shards[0].data) for k, a in params.items()}
res["losses"] = np.stack(losses)
for sh in s.addressable_shards:
    res["psum_dev%d" % sh.device.id] = np.asarray(sh.data)
info = {"process_index": jax.process_index(), "process_count": jax.process_count(), "devices": n,
        "local_devices": [d.id for d in jax.local_devices()], "device_processes": [d.process_index for d in devs],
        "kind": devs[0].device_kind}
res["info"] = np.array(json.dumps(info))
np.savez(f"{out}.p{jax.process_index()}.npz", **res)
print(json.dumps(info), flush=True)
