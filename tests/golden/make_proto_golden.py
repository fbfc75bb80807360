#!/usr/bin/env python3
"""Golden binary HLO protos for the binary proto reader (tests/t_hlo_proto_bin.c, src/hlo/hlo_proto_bin.c).

For each case NAME it writes tests/golden/proto/NAME.pb and NAME.hlo:
  NAME.pb   the binary proto: a serialized xla.HloModuleProto (what jax hands a PJRT plugin, from
            compiler_ir('hlo').as_serialized_hlo_module_proto(), or from XLA's own HLO text parser for the
            cases that need attributes jax does not emit), or, for the dump_* cases, the HloProto / HloSnapshot
            files XLA writes with XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_proto --xla_dump_hlo_snapshots.
  NAME.hlo  the HLO text XLA prints for the module it reads from those bytes (HloModule
            .from_serialized_hlo_module_proto, printed with metadata and large constants), i.e. what the same
            program prints as HLO text. The test reads both with tpusim and wants equal modules, equal prints
            and, where the program runs, identical outputs.
Needs jax 0.10.2 (python3 -m venv build/venv-pb && build/venv-pb/bin/pip install jax==0.10.2). Run from the
repository root: build/venv-pb/bin/python tests/golden/make_proto_golden.py
"""
import glob
import os
import subprocess
import sys
import tempfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proto")


def varint(b, i):
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return x, i


def field1(b):
    """The payload of field 1 (length-delimited) of a serialized message: HloProto.hlo_module, HloSnapshot.hlo."""
    i = 0
    while i < len(b):
        tag, i = varint(b, i)
        wt = tag & 7
        if wt == 0:
            _, i = varint(b, i)
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        elif wt == 2:
            n, i = varint(b, i)
            if tag >> 3 == 1:
                return b[i:i + n]
            i += n
        else:
            raise ValueError("group in a wrapper")
    raise ValueError("no field 1")


def text_of(module_bytes):
    import jaxlib._hlo as H
    o = H.HloPrintOptions()
    o.print_metadata = True
    o.print_large_constants = True
    return H.HloModule.from_serialized_hlo_module_proto(module_bytes).to_string(o)


def save(name, pb, module_bytes=None):
    with open(os.path.join(OUT, name + ".pb"), "wb") as f:
        f.write(pb)
    with open(os.path.join(OUT, name + ".hlo"), "w") as f:
        f.write(text_of(module_bytes if module_bytes is not None else pb))
    print(f"  {name}: {len(pb)} bytes")


def from_text(text):
    import jaxlib._hlo as H
    return H.hlo_module_from_text(text).as_serialized_hlo_module_proto()


# ---- programs from jax ----

def jax_cases():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def lower(f, *args):
        return jax.jit(f).lower(*args).compiler_ir("hlo").as_serialized_hlo_module_proto()

    f32 = jnp.float32

    def mlp(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    save("mlp", lower(mlp, jnp.ones((4, 8), f32), jnp.ones((8, 16), f32), jnp.ones((16, 3), f32)))

    def conv(x, k):
        y = lax.conv_general_dilated(x, k, window_strides=(2, 1), padding=((1, 2), (0, 1)), lhs_dilation=(1, 1),
                                     rhs_dilation=(1, 2), feature_group_count=2,
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=lax.Precision.HIGHEST)
        # max pooling and its gradient: reduce-window and select-and-scatter
        pool = lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 1, 1), "VALID")
        g = jax.grad(lambda v: pool(v).sum())(y)
        return pool(y), g

    save("conv", lower(conv, jnp.ones((1, 4, 7, 6), f32), jnp.ones((6, 2, 3, 2), f32)))

    def gather_scatter(x, idx, u):
        g = x[idx]                          # gather
        s = x.at[idx].add(u)                # scatter with an add computation
        t = jnp.take_along_axis(x[:4], idx[:, None] % 3, axis=1)
        return g, s, t

    save("gather_scatter", lower(gather_scatter, jnp.ones((6, 3), f32), jnp.zeros((4,), jnp.int32),
                                 jnp.ones((4, 3), f32)))

    def control(x, i):
        def body(k, c):
            a, b = c
            return a * 0.5 + b, b + k.astype(f32)
        a, b = lax.fori_loop(0, 4, body, (x, x))       # while with a tuple state
        c = lax.cond(a.sum() > 0, lambda v: v * 2, lambda v: v - 1, a)
        d = lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], b)
        return c, d

    save("control", lower(control, jnp.ones((3,), f32), jnp.int32(1)))

    def sorting(x, y):
        s = lax.sort((x, y), dimension=1, is_stable=True, num_keys=1)
        v, i = lax.top_k(x, 2)
        return s, v, i, jnp.argsort(y, axis=0)

    save("sort", lower(sorting, jnp.ones((3, 5), f32), jnp.ones((3, 5), jnp.int32)))

    def rng(key_data, lo, hi):
        u = lax.rng_uniform(lo, hi, (2, 3))                       # rng, distribution=rng_uniform
        _, bits = lax.rng_bit_generator(key_data, (4,), dtype=jnp.uint32)
        return u, bits

    save("rng", lower(rng, jnp.zeros((4,), jnp.uint32), f32(0), f32(1)))

    def misc(x, y, i):
        b = x.astype(jnp.bfloat16)
        d = lax.dot_general(b, b, (((2,), (2,)), ((0,), (0,))), preferred_element_type=f32)   # batch dims
        p = lax.pad(x, f32(0), ((0, 1, 1), (1, 0, 0), (0, 0, 0)))
        ds = lax.dynamic_slice(x, (i, 0, 0), (1, 2, 4))
        up = lax.dynamic_update_slice(x, ds * 2, (0, i, 0))
        sl = x[:, ::2, 1:3]
        c = jnp.concatenate([x, x[::-1]], axis=1)
        r = lax.reduce_precision(x, exponent_bits=5, mantissa_bits=2)
        bc = lax.bitcast_convert_type(x, jnp.int32)
        cl = jnp.clip(y, -1, 1)
        sel = jnp.where(x > 0, x, jnp.float32(0))
        io = lax.iota(jnp.int8, 5)
        return d, p, up, sl, c, r, bc, cl, sel, io, jnp.transpose(x, (2, 0, 1))

    save("misc", lower(misc, jnp.ones((2, 3, 4), f32), jnp.ones((5,), jnp.int8), jnp.int32(1)))


# ---- programs written as HLO text, for attributes jax does not emit ----

DTYPES_TILES = """HloModule dtypes_tiles, entry_computation_layout={(f32[8,128]{1,0:T(8,128)}, bf16[16,128]{1,0:T(8,128)(2,1)})->(f32[8,128]{1,0:T(8,128)}, bf16[16,128]{1,0:T(8,128)(2,1)}, (bf16[3], s8[4], pred[3], u8[2], f16[2], s32[2], s64[2], f64[2], c64[1], u32[2], (f32[], s16[2])))}

ENTRY main {
  p0 = f32[8,128]{1,0:T(8,128)} parameter(0)
  p1 = bf16[16,128]{1,0:T(8,128)(2,1)} parameter(1)
  n0 = f32[8,128]{1,0:T(8,128)} negate(p0)
  n1 = bf16[16,128]{1,0:T(8,128)(2,1)} abs(p1)
  c_bf16 = bf16[3]{0} constant({1.5, -2.25, 3e+38})
  c_s8 = s8[4]{0} constant({-128, -1, 0, 127})
  c_pred = pred[3]{0} constant({true, false, true})
  c_u8 = u8[2]{0} constant({0, 255})
  c_f16 = f16[2]{0} constant({0.5, -65504})
  c_s32 = s32[2]{0} constant({-2147483648, 2147483647})
  c_s64 = s64[2]{0} constant({-9223372036854775808, 9223372036854775807})
  c_f64 = f64[2]{0} constant({0.1, -1e-300})
  c_c64 = c64[1]{0} constant({(1.5, -2)})
  c_u32 = u32[2]{0} constant({0, 4294967295})
  c_tuple = (f32[], s16[2]{0}) constant((0.25, {-7, 7}))
  t = (bf16[3]{0}, s8[4]{0}, pred[3]{0}, u8[2]{0}, f16[2]{0}, s32[2]{0}, s64[2]{0}, f64[2]{0}, c64[1]{0}, u32[2]{0}, (f32[], s16[2]{0})) tuple(c_bf16, c_s8, c_pred, c_u8, c_f16, c_s32, c_s64, c_f64, c_c64, c_u32, c_tuple)
  ROOT r = (f32[8,128]{1,0:T(8,128)}, bf16[16,128]{1,0:T(8,128)(2,1)}, (bf16[3]{0}, s8[4]{0}, pred[3]{0}, u8[2]{0}, f16[2]{0}, s32[2]{0}, s64[2]{0}, f64[2]{0}, c64[1]{0}, u32[2]{0}, (f32[], s16[2]{0}))) tuple(n0, n1, t)
}
"""

COLLECTIVES = """HloModule collectives, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,4]{1,0} parameter(0)
  ar_iota = f32[8,4]{1,0} all-reduce(p), channel_id=1, replica_groups=[2,2]<=[4], use_global_device_ids=true, to_apply=add
  ar_perm = f32[8,4]{1,0} all-reduce(p), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=add
  ar_list = f32[8,4]{1,0} all-reduce(p), channel_id=3, replica_groups={{0,3},{1,2}}, use_global_device_ids=true, to_apply=add
  ag = f32[8,16]{1,0} all-gather(p), channel_id=4, replica_groups=[1,4]<=[4], dimensions={1}, use_global_device_ids=true
  rs = f32[2,4]{1,0} reduce-scatter(p), channel_id=5, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  a2a = f32[8,4]{1,0} all-to-all(p), channel_id=6, replica_groups={{0,1},{2,3}}, dimensions={0}
  cp = f32[8,4]{1,0} collective-permute(p), channel_id=7, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  pid = u32[] partition-id()
  ROOT t = (f32[8,4]{1,0}, f32[8,4]{1,0}, f32[8,4]{1,0}, f32[8,16]{1,0}, f32[2,4]{1,0}, f32[8,4]{1,0}, f32[8,4]{1,0}, u32[]) tuple(ar_iota, ar_perm, ar_list, ag, rs, a2a, cp, pid)
}
"""

ATTRIBUTES = """HloModule attributes, input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, must-alias) }, frontend_attributes={attr_a="x",attr_b="{\\"k\\": 1}"}

ENTRY main {
  p0 = f32[4,8]{1,0} parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}, frontend_attributes={_xla_compute_type="host"}
  p1 = s32[4]{0} parameter(1), sharding={maximal device=1}
  cc = f32[4,8]{0,1} custom-call(p0, p1), custom_call_target="my_kernel", operand_layout_constraints={f32[4,8]{1,0}, s32[4]{0}}, custom_call_has_side_effect=true, backend_config="opaque \\"config\\" \\x01", api_version=API_VERSION_TYPED_FFI, metadata={op_type="MyKernel" op_name="jit(f)/my_kernel" source_file="model.py" source_line=42}
  cp = f32[4,8]{1,0} copy(cc), sharding={devices=[2,2]0,2,1,3}
  n = s32[4]{0} negate(p1), control-predecessors={cp}, sharding={replicated}
  ROOT t = (f32[4,8]{1,0}, s32[4]{0}) tuple(cp, n), sharding={{devices=[4,1]<=[2,2]T(1,0)}, {manual}}
}
"""


def text_cases():
    save("dtypes_tiles", from_text(DTYPES_TILES))
    save("collectives", from_text(COLLECTIVES))
    save("attributes", from_text(ATTRIBUTES))


# ---- XLA's own dump files (run in a child: XLA_FLAGS must be set before jax starts) ----

def dump_child(d):
    import jax
    import jax.numpy as jnp
    f = jax.jit(lambda x, y: (jnp.maximum(x * y + 1, 0).sum(axis=1), x.T @ y))
    f(jnp.arange(6.0).reshape(2, 3), jnp.ones((2, 3)))


def dump_cases():
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d} --xla_dump_hlo_as_proto --xla_dump_hlo_snapshots")
        subprocess.run([sys.executable, __file__, "--dump-child", d], env=env, check=True)
        files = sorted(glob.glob(os.path.join(d, "*jit__lambda*.pb")))
        pick = {"dump_before": ".before_optimizations.hlo.pb", "dump_after": ".cpu_after_optimizations.hlo.pb",
                "dump_snapshot": ".snapshot."}
        for name, tail in pick.items():
            path = [p for p in files if tail in os.path.basename(p)][0]
            pb = open(path, "rb").read()
            mod = field1(field1(pb)) if name == "dump_snapshot" else field1(pb)
            save(name, pb, mod)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--dump-child":
        dump_child(sys.argv[2])
        return
    os.makedirs(OUT, exist_ok=True)
    jax_cases()
    text_cases()
    dump_cases()


if __name__ == "__main__":
    main()
