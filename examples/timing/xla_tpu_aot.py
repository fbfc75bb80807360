#!/usr/bin/env python3
"""Compiles the ResNet-50 train step of make_programs.py with the real XLA:TPU compiler, ahead of time on a
CPU (no TPU attached: jax.experimental.topologies), and writes the optimized per-device program and XLA's
own cost analysis. docs/timing-validation.md profiles these optimized programs beside the unoptimized ones,
to separate the timing model's error from the fusion's.

    python3 -m venv /work/aot-venv && /work/aot-venv/bin/pip install "jax[tpu]==0.10.2"   # libtpu wheel
    /work/aot-venv/bin/python examples/timing/xla_tpu_aot.py v3:2x2 1 128 OUTDIR   # one core, batch 128
    /work/aot-venv/bin/python examples/timing/xla_tpu_aot.py v3:4x4 32 32 OUTDIR   # 32 cores, data parallel

Each compile takes minutes of CPU. Writes OUTDIR/resnet50_<gen>_b<B>_dp<N>.opt.hlo (1-3 MB: not committed)
and prints {"optimal_seconds", "flops", "bytes accessed", ...} from compiled.cost_analysis().
Set ALLOW_MULTIPLE_LIBTPU_LOAD=1 when another process holds libtpu's lock file.
"""
import json
import os
import sys
import time

os.environ.setdefault("TPU_STDERR_LOG_LEVEL", "3")
os.environ.setdefault("TPU_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import make_programs as mp  # noqa: E402


def main():
    topo_name, ndev, batch, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    topo = topologies.get_topology_desc(platform="tpu", topology_name=topo_name)
    mesh = Mesh(np.array(topo.devices[:ndev]), ("batch",))
    params = mp.resnet_params()
    rep, bat = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    ps = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=rep) for k, v in params.items()}
    imgs = jax.ShapeDtypeStruct((batch * ndev, 224, 224, 3), jnp.float32, sharding=bat)
    labels = jax.ShapeDtypeStruct((batch * ndev,), jnp.int32, sharding=bat)
    specs = {k: P() for k in params}
    axis = "batch" if ndev > 1 else None
    step = jax.shard_map(lambda p, m, x, y: mp.train_step(p, m, x, y, axis), mesh=mesh,
                         in_specs=(specs, specs, P("batch"), P("batch")), out_specs=(specs, specs), check_vma=False)
    t = time.time()
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(ps, ps, imgs, labels).compile()
    print(f"compiled in {time.time() - t:.0f} s", file=sys.stderr)
    ca = compiled.cost_analysis()
    if isinstance(ca, list):
        ca = ca[0]
    print(json.dumps({k: v for k, v in ca.items() if not k.startswith("utilization") and "{" not in k}))
    name = f"resnet50_{topo_name.split(':')[0]}_b{batch}_dp{ndev}.opt.hlo"
    with open(os.path.join(out, name), "w") as f:
        f.write(compiled.as_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
