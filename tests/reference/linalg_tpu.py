#!/usr/bin/env python3
"""linalg_tpu.py — golden values for the TPU linear-algebra custom-calls and bf16 sums (tests/t_linalg_tpu.c).

For TPUs, jax.numpy.linalg lowers to custom-calls of the TPU compiler: LuDecomposition (solve, inv, det,
slogdet, lu), Qr and ProductOfElementaryHouseholderReflectors (qr, svd) and Eigh (eigh, svd). Each case here is
a jax function lowered with `.trace(...).lower(lowering_platforms=('tpu',))` — the program a TPU user hands
tpusim — and the same function run by jax on the CPU (LAPACK) on the same inputs gives the golden outputs.
Functions whose results are unique only up to signs (eigenvectors, singular vectors) return the absolute
values of the vectors. Each program is also compiled ahead of time by libtpu (v5e), to record that the real
compiler accepts it.

A second kind of case is HLO text written here: a bf16 `reduce` whose reducer adds in bf16. XLA accumulates
such sums in f32 on TPUs; the golden value is jnp.sum on the CPU, which widens bf16 to f32, sums, and rounds
once (XLA:CPU run on the raw text does not widen, so it is not the reference here).

    python3 -m venv build/venv-ref && build/venv-ref/bin/pip install 'jax[tpu]==0.10.2'
    build/venv-ref/bin/python tests/reference/linalg_tpu.py

writes tests/reference/linalg/NAME.hlo, NAME.inputs.npz (arg0..), NAME.golden.npz (out0..) and cases.json.
`make test` reads only those files.
"""
import json
import os
import zlib

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
os.environ.setdefault("TPU_STDERR_LOG_LEVEL", "3")
os.environ.setdefault("TPU_MIN_LOG_LEVEL", "3")

import jax                      # noqa: E402
import jax.numpy as jnp         # noqa: E402
import ml_dtypes                # noqa: E402
import numpy as np              # noqa: E402
from jax import lax             # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "linalg")


def rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def well_conditioned(r, shape):
    a = r.standard_normal(shape).astype(np.float32)
    n = shape[-1]
    return a + n * np.eye(n, dtype=np.float32) * 0.5


def symmetric(r, shape):
    a = r.standard_normal(shape).astype(np.float32)
    return (a + np.swapaxes(a, -1, -2)) / 2


def abs_vecs(f):
    """f returns (vals, vecs...): vectors only up to sign, so their absolute values."""
    def g(*a):
        out = f(*a)
        return tuple(out[:1]) + tuple(jnp.abs(v) for v in out[1:])
    return g


def svd_abs(a):
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return s, jnp.abs(u), jnp.abs(vt)


def eigh_abs(a):
    w, v = jnp.linalg.eigh(a)
    return w, jnp.abs(v)


# (name, function, inputs, what the test compares: tolerance relative to each output's largest value)
def cases():
    r = rng("solve")
    yield "solve", jnp.linalg.solve, [well_conditioned(r, (6, 6)), r.standard_normal((6, 3)).astype(np.float32)]
    r = rng("solve_batched")
    yield ("solve_batched", jnp.linalg.solve,
           [well_conditioned(r, (3, 5, 5)), r.standard_normal((3, 5, 2)).astype(np.float32)])
    r = rng("inv")
    yield "inv", jnp.linalg.inv, [well_conditioned(r, (8, 8))]
    r = rng("det")
    yield "det", jnp.linalg.det, [well_conditioned(r, (2, 7, 7))]
    r = rng("slogdet")
    yield "slogdet", lambda a: tuple(jnp.linalg.slogdet(a)), [r.standard_normal((5, 5)).astype(np.float32)]
    r = rng("lu")
    yield "lu", lambda a: tuple(lax.linalg.lu(a)), [r.standard_normal((6, 6)).astype(np.float32)]
    r = rng("lu_wide")
    yield "lu_wide", lambda a: tuple(lax.linalg.lu(a)), [r.standard_normal((2, 4, 7)).astype(np.float32)]
    r = rng("lu_tall")
    yield "lu_tall", lambda a: tuple(lax.linalg.lu(a)), [r.standard_normal((7, 3)).astype(np.float32)]
    r = rng("qr")
    yield "qr", lambda a: tuple(jnp.linalg.qr(a)), [r.standard_normal((6, 4)).astype(np.float32)]
    r = rng("qr_complete")
    yield "qr_complete", lambda a: tuple(jnp.linalg.qr(a, mode="complete")), [r.standard_normal((5, 3)).astype(np.float32)]
    r = rng("qr_batched_wide")
    yield "qr_batched_wide", lambda a: tuple(jnp.linalg.qr(a)), [r.standard_normal((2, 3, 5)).astype(np.float32)]
    r = rng("eigh")
    yield "eigh", eigh_abs, [symmetric(r, (6, 6))]
    r = rng("eigh_batched")
    yield "eigh_batched", eigh_abs, [symmetric(r, (3, 4, 4))]
    r = rng("eigvalsh_upper")
    yield "eigvalsh_upper", lambda a: jnp.linalg.eigvalsh(a, UPLO="U"), [r.standard_normal((5, 5)).astype(np.float32)]
    r = rng("svd")
    yield "svd", svd_abs, [r.standard_normal((6, 4)).astype(np.float32)]
    r = rng("pinv")
    yield "pinv", jnp.linalg.pinv, [r.standard_normal((5, 3)).astype(np.float32)]


BF16_SUM = """HloModule bf16_sum

add_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}

ENTRY e {
  x = bf16[6,4096] parameter(0)
  z = bf16[] constant(0)
  rows = bf16[6] reduce(x, z), dimensions={1}, to_apply=add_bf16
  one = bf16[] constant(1)
  cols = bf16[4096] reduce(x, one), dimensions={0}, to_apply=add_bf16
  all = bf16[] reduce(x, z), dimensions={0,1}, to_apply=add_bf16
  ROOT t = (bf16[6], bf16[4096], bf16[]) tuple(rows, cols, all)
}
"""


def bf16_sum_case():
    r = rng("bf16_sum")
    x = np.ones((6, 4096), np.float32)            # row 0: 4096 ones (bf16 steps: 256)
    x[1] = 0.1
    x[2] = np.linspace(0, 3, 4096)
    x[3] = r.standard_normal(4096)
    x[4] = r.uniform(0, 1, 4096)
    x[5] = 1e-3 * r.standard_normal(4096) + 1.0
    x = x.astype(ml_dtypes.bfloat16)
    cpu = jax.devices("cpu")[0]
    xj = jax.device_put(x, cpu)
    f32, bf = jnp.float32, jnp.bfloat16
    outs = (jnp.sum(xj, axis=1), (jnp.sum(xj.astype(f32), axis=0) + 1).astype(bf), jnp.sum(xj))
    return BF16_SUM, [x], [np.asarray(o) for o in outs]


def save(name, text, inputs, outputs, meta):
    with open(os.path.join(OUT, name + ".hlo"), "w") as fh:
        fh.write(text)
    np.savez(os.path.join(OUT, name + ".inputs.npz"), **{f"arg{i}": a for i, a in enumerate(inputs)})
    outs = {f"out{i}": np.asarray(o) for i, o in enumerate(outputs)}
    # bf16 golden values stored as float32 holding the exact value
    meta["bf16_as_f32"] = [k for k, v in outs.items() if v.dtype == ml_dtypes.bfloat16]
    np.savez(os.path.join(OUT, name + ".golden.npz"), **{k: (v.astype(np.float32) if k in meta["bf16_as_f32"] else v)
                                                          for k, v in outs.items()})
    return meta


def main():
    os.makedirs(OUT, exist_ok=True)
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    cpu = jax.devices("cpu")[0]
    index = []
    for name, f, inputs in cases():
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs]
        text = jax.jit(f).trace(*specs).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
        targets = sorted(set(t for t in ("LuDecomposition", "Qr", "ProductOfElementaryHouseholderReflectors", "Eigh")
                             if f'custom_call_target="{t}"' in text))
        outs = jax.jit(f)(*[jax.device_put(a, cpu) for a in inputs])
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        try:   # the real compiler accepts the program (ahead of time, no TPU needed)
            sh = SingleDeviceSharding(dev)
            jax.jit(f).lower(*[jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh) for a in inputs]).compile()
            libtpu = "compiles"
        except Exception as e:  # noqa: BLE001
            libtpu = "refused: " + str(e).splitlines()[0][:200]
        index.append(save(name, text, inputs, outs, {"name": name, "custom_calls": targets, "libtpu_v5e": libtpu}))
        print(name, targets, libtpu)
    text, inputs, outs = bf16_sum_case()
    index.append(save("bf16_sum", text, inputs, outs, {"name": "bf16_sum", "custom_calls": [],
                                                       "golden": "jnp.sum on the CPU (f32 accumulation)"}))
    with open(os.path.join(OUT, "cases.json"), "w") as fh:
        json.dump({"jax": jax.__version__, "cases": index}, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
