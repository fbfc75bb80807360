"""Writes the StableHLO files of tests/cli/t_formats.sh: one jax function as jax writes it by default
(lowered.as_text(): mlp.mlir), as MLIR bytecode (the portable artifact: mlp.mlirbc) and as a jax.export
serialization (mlp.jax_exported), with the inputs (inputs.npz) and what XLA:CPU computes (expected.npz).

    build/venv/bin/python tests/golden/stablehlo/gen.py      # jax 0.10.2, flatbuffers
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

HERE = os.path.dirname(os.path.abspath(__file__))


def mlp(x, w, b):
    return jnp.tanh(x @ w + b).sum(axis=0)


def main():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    with open(os.path.join(HERE, "mlp.mlir"), "w") as f:
        f.write(jax.jit(mlp).lower(x, w, b).as_text())
    exp = export.export(jax.jit(mlp))(x, w, b)
    with open(os.path.join(HERE, "mlp.mlirbc"), "wb") as f:
        f.write(exp.mlir_module_serialized)
    with open(os.path.join(HERE, "mlp.jax_exported"), "wb") as f:
        f.write(exp.serialize())
    np.savez(os.path.join(HERE, "inputs.npz"), x=x, w=w, b=b)
    with jax.default_matmul_precision("highest"):
        np.savez(os.path.join(HERE, "expected.npz"), out0=np.asarray(jax.jit(mlp)(x, w, b)))


if __name__ == "__main__":
    main()
