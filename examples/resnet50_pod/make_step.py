#!/usr/bin/env python3
"""Writes the per-core ResNet-50 v1.5 train step that `tpusim scale` times on TPU pods (docs/pods.md).

    build/venv/bin/python examples/resnet50_pod/make_step.py              # step_b32.hlo (committed)
    build/venv/bin/python examples/resnet50_pod/make_step.py 16 32 64     # step_b16.hlo, step_b32.hlo, ...

The model, loss and optimizer are examples/timing/make_programs.py's (the Flax ImageNet example's ResNet-50
v1.5 in plain jax: bf16 convolutions and activations, f32 parameters, batch norm, L2 0.5e-4, SGD with Nesterov
momentum 0.9): imported, not copied. The step is data parallel as Google's pod runs were: each core computes
its gradients on B images and a pmean over every core averages them. It is lowered with shard_map over 2 CPU
devices and the per-core body is cut out (make_programs.per_device); the all-reduces' groups, which name the
2 lowering devices, are then left empty (replica_groups={}, a cross-replica all-reduce): every device of
whatever slice the step runs on,
so one file serves v2-8 ... v2-512. Shapes only: tpusim profiles it analytically; it is never run.

B = 32 is the per-core batch of the MLPerf v0.5 pod runs (global batch 16384 on v2-512 and v3-512); the
v2-8 / v3-8 runs used 128 (global 1024): make_step.py 128 writes that one.
"""
import os
import re
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "timing"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

import make_programs as rn  # noqa: E402  (examples/timing/make_programs.py)


def step_text(batch):
    params = rn.resnet_params()
    mom = dict(params)
    images = jax.ShapeDtypeStruct((batch * 2, 224, 224, 3), jnp.float32)
    labels = jax.ShapeDtypeStruct((batch * 2,), jnp.int32)
    mesh = Mesh(jax.devices()[:2], ("batch",))
    rep = {k: P() for k in params}
    step = jax.shard_map(lambda p, m, x, y: rn.train_step(p, m, x, y, "batch"), mesh=mesh,
                         in_specs=(rep, rep, P("batch"), P("batch")), out_specs=(rep, rep), check_vma=False)
    name = f"resnet50_pod_step_b{batch}"
    text = jax.jit(step, donate_argnums=(0, 1)).lower(params, mom, images, labels).as_text(dialect="hlo")
    text = rn.strip(rn.per_device(text, name))
    # the lowering's 2 devices -> every replica of the slice (a cross-replica all-reduce: no channel_id, no
    # global device ids, empty groups)
    text, n = re.subn(r"channel_id=\d+, replica_groups=\{\{0,1\}\}, use_global_device_ids=true",
                      "replica_groups={}", text)
    if n == 0:
        raise SystemExit("no all-reduce over the 2 lowering devices found (jax changed?)")
    return text, n


def main():
    batches = [int(a) for a in sys.argv[1:]] or [32]
    for b in batches:
        text, n = step_text(b)
        path = os.path.join(HERE, f"step_b{b}.hlo")
        with open(path, "w") as f:
            f.write(text)
        print(f"{path}: {os.path.getsize(path)} bytes, {n} all-reduces over every device")


if __name__ == "__main__":
    main()
