"""Run HLO *text* on XLA:CPU through the jaxlib that pip installs (jax/jaxlib 0.10.x).

How (found by reading jaxlib's Python surface; there is no public "compile HLO text" call any more):

    module = xla_client.hlo.hlo_module_from_text(text)          # XLA's own HLO text parser
    proto  = module.as_serialized_hlo_module_proto()
    mlir   = jaxlib._jax.mlir.hlo_to_stablehlo(proto)          # HLO -> MHLO -> StableHLO bytecode
    exe    = cpu_client.compile_and_load(mlir, DeviceList(cpu0), CompileOptions())
    outs   = exe.execute_sharded([device_put(a) for a in inputs])

XLA:CPU then runs its full pipeline on it (its own expanders for cholesky, triangular-solve, batch-norm-*,
rng-bit-generator, topk, ...).  A root tuple comes back flattened, one array per leaf.

The HLO -> StableHLO importer drops layouts, so layout-dependent `bitcast` instructions (which appear in
XLA's *optimized* text) cannot run as is: `executable_text()` rewrites each
    y = T[b]{lb} bitcast(x: T[a]{la})
into its value meaning transpose(x, physical order) -> reshape -> transpose(back to logical order of y).
Likewise XLA:CPU will not compile the `fusion` instructions of optimized text once imported (no backend
config), so each `fusion(...), calls=C` is run as the equivalent `call(...), to_apply=C`.
Everything else in the text is run unchanged.
"""

import time

import numpy as np
import ml_dtypes

import jax
from jax._src.lib import xla_client as xc
from jax._src.lib import _jax

import hlo_text as ht

NP_DTYPES = {
    'pred': np.dtype(bool), 's8': np.dtype(np.int8), 's16': np.dtype(np.int16), 's32': np.dtype(np.int32),
    's64': np.dtype(np.int64), 'u8': np.dtype(np.uint8), 'u16': np.dtype(np.uint16),
    'u32': np.dtype(np.uint32), 'u64': np.dtype(np.uint64), 'f16': np.dtype(np.float16),
    'f32': np.dtype(np.float32), 'f64': np.dtype(np.float64), 'bf16': np.dtype(ml_dtypes.bfloat16),
    'f8e4m3fn': np.dtype(ml_dtypes.float8_e4m3fn), 'f8e5m2': np.dtype(ml_dtypes.float8_e5m2),
    'c64': np.dtype(np.complex64), 'c128': np.dtype(np.complex128),
}
HLO_DTYPES = {v: k for k, v in NP_DTYPES.items()}


def _default_layout(rank):
    return tuple(range(rank - 1, -1, -1))


def _rewrite_bitcasts(text):
    mod = ht.Module(text)
    if not any(i.opcode == 'bitcast' for c in mod.computations for i in c.instrs):
        return text
    lines = list(mod.lines)
    used = mod.all_names()
    counter = [0]

    def fresh(base):
        while True:
            counter[0] += 1
            n = '%s.bc%d' % (base, counter[0])
            if n not in used:
                used.add(n)
                return n

    for comp in mod.computations:
        shapes = {i.name: i.shape for i in comp.instrs}
        for ins in comp.instrs:
            if ins.opcode != 'bitcast':
                continue
            src = shapes[ins.operands[0]]
            et_a, a, la = ht.parse_shape(src)
            et_b, b, lb = ht.parse_shape(ins.shape)
            if et_a != et_b:
                raise ValueError('bitcast changing element type: %s' % lines[ins.line_no])
            la = la if la is not None else _default_layout(len(a))
            lb = lb if lb is not None else _default_layout(len(b))
            rev_a, rev_b = list(reversed(la)), list(reversed(lb))
            phys_a = [a[d] for d in rev_a]
            phys_b = [b[d] for d in rev_b]
            perm_b = [rev_b.index(i) for i in range(len(b))]
            t1, r = fresh(ins.name), fresh(ins.name)
            sh = lambda dims: '%s[%s]' % (et_a, ','.join(str(d) for d in dims))
            new = [
                '  %s = %s transpose(%s), dimensions={%s}' % (t1, sh(phys_a), ins.operands[0],
                                                               ','.join(map(str, rev_a))),
                '  %s = %s reshape(%s)' % (r, sh(phys_b), t1),
                '%s%s = %s transpose(%s), dimensions={%s}' % (ins.prefix, ins.name, sh(b), r,
                                                              ','.join(map(str, perm_b))),
            ]
            lines[ins.line_no] = '\n'.join(new)
    return '\n'.join(lines)


def _fusions_to_calls(text):
    """`fusion(...), kind=.., calls=C` -> `call(...), to_apply=C` (same value; XLA:CPU re-fuses itself).

    XLA:CPU refuses to compile imported fusion instructions (they lack its backend config)."""
    mod = ht.Module(text)
    lines = list(mod.lines)
    for comp in mod.computations:
        for ins in comp.instrs:
            if ins.opcode != 'fusion':
                continue
            callee = ins.attrs['calls']
            keep = ['to_apply=' + callee]
            if 'metadata' in ins.attrs:
                keep.append('metadata=' + ins.attrs['metadata'])
            lines[ins.line_no] = '%s%s = %s call(%s), %s' % (ins.prefix, ins.name, ins.shape, ins.operands_text,
                                                             ', '.join(keep))
    return '\n'.join(lines)


def executable_text(text):
    """The text that is actually compiled: `text` with fusions as calls and layout bitcasts as value ops."""
    return _rewrite_bitcasts(_fusions_to_calls(text))


_CLIENT = None


def _client():
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = jax.devices('cpu')[0].client
    return _CLIENT


class Compiled:
    def __init__(self, text):
        self.text = text
        t0 = time.perf_counter()
        run_text = executable_text(text)
        module = xc.hlo.hlo_module_from_text(run_text)
        mlir = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        dev = jax.devices('cpu')[0]
        self.exe = _client().compile_and_load(mlir, xc.DeviceList((dev,)), xc.CompileOptions())
        self.compile_s = time.perf_counter() - t0
        self.device = dev
        self.params = ht.Module(text).entry_parameters()

    def run(self, inputs):
        if len(inputs) != len(self.params):
            raise ValueError('program has %d parameters, got %d inputs' % (len(self.params), len(inputs)))
        # device_put canonicalizes 64-bit types to 32-bit unless x64 is on: turn it on while feeding
        old_x64 = jax.config.jax_enable_x64
        jax.config.update('jax_enable_x64', True)
        try:
            return self._run(inputs)
        finally:
            jax.config.update('jax_enable_x64', old_x64)

    def _run(self, inputs):
        args = []
        for k, ((name, shape), a) in enumerate(zip(self.params, inputs)):
            et, dims, _ = ht.parse_shape(shape)
            want = NP_DTYPES[et]
            a = np.asarray(a)
            if a.dtype != want:
                a = a.astype(want)
            if tuple(a.shape) != tuple(dims):
                raise ValueError('input %d (%s): shape %s, program wants %s' % (k, name, a.shape, shape))
            args.append(jax.device_put(a, self.device))
        t0 = time.perf_counter()
        res = self.exe.execute_sharded(args)
        arrs = [x[0] for x in res.disassemble_into_single_device_arrays()]
        outs = [np.asarray(x) for x in arrs]
        self.run_s = time.perf_counter() - t0
        return outs


def run_hlo_text(text, inputs):
    return Compiled(text).run(inputs)
