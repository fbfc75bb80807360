"""libtpu_check_rules.py — the experiments behind the TPU compatibility rules in src/verify/ver_check.c.

Each case is compiled ahead of time by the real TPU compiler (libtpu, through JAX, on a machine without a
TPU; see docs/libtpu-reference.md for the venv) and prints OK or FAIL with the compiler's message. Results
with libtpu 0.0.42.1 (jax 0.10.2) for v4:2x2x1, v5e:2x2, v6e:2x2 and tpu7x:2x2x1 are summarised at the top
of ver_check.c. Run:  /work/aot-venv/bin/python tests/reference/libtpu_check_rules.py v5e:2x2
Some custom-call targets are the compiler's own emitters and abort the process when called with made-up
operands (PartialReduce, TopK, X64Combine, PadToStatic): those are listed, not run.
"""
import os
import sys

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import jax
import jax.numpy as jnp
from jax import lax

jax.config.update("jax_enable_x64", True)
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
from jax._src import compiler
from jax._src.interpreters import mlir
from jax._src.lib import xla_client as xc
from jax._src.lib.mlir import ir

topo = topologies.get_topology_desc(platform="tpu", topology_name=sys.argv[1] if len(sys.argv) > 1 else "v5e:2x2")
dev = topo.devices[0]
sh = SingleDeviceSharding(dev)


def S(shape, dt):
    return jax.ShapeDtypeStruct(shape, dt, sharding=sh)


def report(name, fn):
    try:
        fn()
        print(f"OK   {name}")
    except Exception as e:  # the compiler's message is the result
        print(f"FAIL {name}: {str(e).splitlines()[0][:300]}")


def jit(name, f, *specs):
    report(name, lambda: jax.jit(f).lower(*specs).compile())


def stablehlo(name, text):
    def go():
        with mlir.make_ir_context():
            module = ir.Module.parse(text)
            opts = compiler.get_compile_options(num_replicas=1, num_partitions=1)
            compiler.backend_compile_and_load(dev.client, module, xc.DeviceList((dev,)), opts, [])
    report(name, go)


# element types
jit("f64 mul", lambda x: x * x + 1.0, S((128,), jnp.float64))
jit("f64 dot", lambda x, y: x @ y, S((64, 64), jnp.float64), S((64, 64), jnp.float64))
jit("f64 conv", lambda x, k: lax.conv(x, k, (1, 1), "SAME"), S((1, 3, 8, 8), jnp.float64), S((4, 3, 3, 3), jnp.float64))
jit("f64 bitcast->s64", lambda x: lax.bitcast_convert_type(x, jnp.int64), S((4,), jnp.float64))
jit("f64 reduce_precision", lambda x: lax.reduce_precision(x, 8, 7), S((4,), jnp.float64))
jit("f64 rfft", lambda x: jnp.fft.rfft(x), S((8,), jnp.float64))
jit("c128 mul", lambda x: x * x, S((8,), jnp.complex128))
jit("c128 fft", lambda x: jnp.fft.fft(x), S((8,), jnp.complex128))
jit("c64 fft", lambda x: jnp.fft.fft(x), S((8,), jnp.complex64))
jit("pure_callback", lambda x: jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), x),
    S((8,), jnp.float32))
for f in ["float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3",
          "float8_e3m4", "float4_e2m1fn", "float8_e8m0fnu"]:
    if hasattr(jnp, f):
        dt = getattr(jnp, f)
        jit(f"{f} dot", lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32), S((128, 128), dt),
            S((128, 128), dt))
# custom-calls
for tgt in ["Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost", "MoveToDevice",
            "LayoutConstraint", "annotate_device_placement", "xla_python_cpu_callback", "xla_ffi_python_cpu_callback",
            "PyFunc", "InspectSharding", "cu_threefry2x32", "my_custom_target"]:
    stablehlo(f"custom_call {tgt}", f"""module @m {{ func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {{
  %0 = stablehlo.custom_call @{tgt}(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32> }} }}""")
# dynamic shapes
stablehlo("bounded dynamic", """module @m { func.func public @main(%a: tensor<?x16xf32, #stablehlo.bounds<8, ?>>,
    %w: tensor<16x4xf32>) -> tensor<?x4xf32, #stablehlo.bounds<8, ?>> {
  %d = stablehlo.dot_general %a, %w, contracting_dims = [1] x [0] : (tensor<?x16xf32, #stablehlo.bounds<8, ?>>,
    tensor<16x4xf32>) -> tensor<?x4xf32, #stablehlo.bounds<8, ?>>
  return %d : tensor<?x4xf32, #stablehlo.bounds<8, ?>> } }""")
stablehlo("set_dimension_size", """module @m { func.func public @main(%arg0: tensor<8xf32>, %n: tensor<i32>)
    -> tensor<?xf32, #stablehlo.bounds<8>> {
  %0 = stablehlo.set_dimension_size %arg0, %n, dim = 0 : (tensor<8xf32>, tensor<i32>) -> tensor<?xf32, #stablehlo.bounds<8>>
  return %0 : tensor<?xf32, #stablehlo.bounds<8>> } }""")
stablehlo("unbounded dynamic", """module @m { func.func public @main(%arg0: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.negate %arg0 : tensor<?xf32>
  return %0 : tensor<?xf32> } }""")
