#!/usr/bin/env python3
"""libtpu_msa_probe.py — read libtpu's memory-space assignment (MSA) ranking off its own debug tables.

libtpu writes MSA's tables (XLA's MsaAlgorithm::DumpDebugStringsIfEnabled) when its dump directory is set:
*-memory-space-assignment-bufferinfo.txt lists every buffer with `alt_mem_benefit` (XLA's
CostAnalysis::GetMemoryBoundedness: the buffer's benefit over the square root of its size), size, use times
and use names. This script compiles ahead of time (no TPU needed, as libtpu_memory.py) and prints that table
with the benefit in "uses": benefit x sqrt(size) / (size x one use's benefit per byte), so a buffer whose N
readers and writer are memory-bound shows N + 1 and a compute-bound use adds nothing
(docs/libtpu-reference.md, round 9).

    AOT=/work/aot-venv/bin/python   # jax[tpu] 0.10.2 with libtpu, as for libtpu_memory.py
    $AOT tests/reference/libtpu_msa_probe.py program v6e vit_patch_train        # a reference program
    $AOT tests/reference/libtpu_msa_probe.py chain v6e exp 4 5 8                  # k exps on f32[2048,2048]
    $AOT tests/reference/libtpu_msa_probe.py matmul v6e 6272 1536 384 gelu fma4   # g(x) @ w, f32

A compute-bound op's own output (nothing memory-bound reads it) shows its memory time minus its compute
time, which gives the cost model's compute time (chain exp: 2.34 us per 4M exps on v6e, 1.536e12/s on v5e).
"""
import csv
import glob
import math
import os
import shutil
import sys
import tempfile

DUMP = tempfile.mkdtemp(prefix="libtpu_msa_")
os.environ["LIBTPU_INIT_ARGS"] = (os.environ.get("LIBTPU_INIT_ARGS", "") + f" --xla_jf_dump_to={DUMP}"
                                  " --xla_jf_dump_category_filter=msa --xla_jf_dump_llo_text=false")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
os.environ.setdefault("TPU_STDERR_LOG_LEVEL", "3")
os.environ.setdefault("TPU_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

TOPO = {"v5e": "v5e:2x2", "v6e": "v6e:2x2"}
# one memory-bound use of a whole buffer, in seconds per byte (read off the tables: a copy's output)
USE_S_PER_BYTE = {"v5e": 1.2954e-12, "v6e": 0.5635e-12}

G = {
    "plain": lambda x: x,
    "fma1": lambda x: x * x + 0.25,
    "fma2": lambda x: (x * x + 0.25) * x + 0.5,
    "fma3": lambda x: ((x * x + 0.25) * x + 0.5) * x + 0.1,
    "fma4": lambda x: (((x * x + 0.25) * x + 0.5) * x + 0.1) * x + 0.3,
    "tanh": jnp.tanh,
    "gelu": jax.nn.gelu,
}
CHAIN = {
    "exp": lambda y: jnp.exp(y * 0.001),
    "tanh": jnp.tanh,
    "log": lambda y: jnp.log(y * y + 1.0),
    "rsqrt": lambda y: jax.lax.rsqrt(y * y + 1.0),
    "div": lambda y: 1.0 / (y + 2.0),
    "fma": lambda y: y * y + 0.25,
}


def sharding(gen):
    return SingleDeviceSharding(topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0])


def compile_and_print(label, gen, fn, specs, min_bytes=0):
    before = set(glob.glob(DUMP + "/*memory-space-assignment-bufferinfo*"))
    jax.jit(fn).lower(*specs).compile()
    for path in sorted(set(glob.glob(DUMP + "/*memory-space-assignment-bufferinfo*")) - before):
        rows = list(csv.reader(open(path)))[1:]
        for row in sorted(rows, key=lambda r: -float(r[2])):
            ben, size = float(row[2]), int(row[3])
            if size < min_bytes or size == 0:
                continue
            total = ben * math.sqrt(size)
            print(f"{label:24s} {row[1]:40s} benefit {ben:11.4g}  {size / 2**20:8.2f} MiB  "
                  f"{total / (size * USE_S_PER_BYTE[gen]):7.3f} uses  {total * 1e6:9.3f} us  {row[6][:120]}")


def main():
    mode, gen = sys.argv[1], sys.argv[2]
    sh = sharding(gen)
    if mode == "program":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import libtpu_memory as L
        make = {p[0]: p[1] for p in L.PROGRAMS}[sys.argv[3]]
        fn, args, kw = make()
        fn.__name__ = sys.argv[3]
        compile_and_print(sys.argv[3], gen, fn, L.to_specs(args, sh), min_bytes=1 << 20)
    elif mode == "chain":
        spec = jax.ShapeDtypeStruct((2048, 2048), jnp.float32, sharding=sh)
        for k in (int(v) for v in sys.argv[4:]):
            def f(x, k=k):
                for _ in range(k):
                    x = CHAIN[sys.argv[3]](x)
                return jnp.sum(x, axis=1)
            compile_and_print(f"{sys.argv[3]} x{k}", gen, f, [spec])
    elif mode == "matmul":
        m, k, n = (int(v) for v in sys.argv[3:6])
        dt = jnp.bfloat16 if "bf16" in sys.argv[6:] else jnp.float32
        specs = [jax.ShapeDtypeStruct((m, k), dt, sharding=sh), jax.ShapeDtypeStruct((k, n), dt, sharding=sh)]
        for name in (a for a in sys.argv[6:] if a in G):
            compile_and_print(f"{name}(x) @ w", gen, lambda x, w, g=G[name]: g(x) @ w, specs)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(DUMP, ignore_errors=True)   # the dump holds every fusion's LLO too (0.5 GB for vit_patch_train)
