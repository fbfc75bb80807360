#!/usr/bin/env python3
"""Makes the golden values for tests/t_kernels_golden.c: small HLO modules run on XLA:CPU.

    pip install jax ml_dtypes        # jax/jaxlib 0.10.x
    python3 tests/golden/make_kernel_golden.py          # writes tests/golden/kernels/<case>.{hlo,npz}

Each case is a handwritten HLO module (gather, scatter, reduce-window, select-and-scatter, sort, topk,
rng-bit-generator, cholesky, triangular-solve, batch-norm-*, fft) and inputs from a fixed numpy seed. The
module text is run unchanged on XLA:CPU through tests/conformance/xla_runner.py (HLO text -> StableHLO ->
XLA:CPU's full pipeline, i.e. its own expanders for rng-bit-generator, cholesky, batch norm, topk...).

<case>.hlo  the module text (what tpusim parses)
<case>.npz  in0..inK: the inputs, out0..outM: XLA:CPU's outputs (a tuple root flattened in order)

A few cases are cross-checked here against jax's own functions (jax.random with the threefry and rbg
implementations, jax.grad of a max-pool, lax.top_k, jnp.fft) so the handwritten HLO means what we think.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'conformance'))
import xla_runner  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

OUT = os.path.join(HERE, 'kernels')
CASES = []


def case(name, hlo, inputs):
    CASES.append((name, hlo.strip() + '\n', inputs))


def module(name, entry, *comps):
    return 'HloModule %s\n\n%s\n\nENTRY main {\n%s\n}\n' % (name, '\n\n'.join(comps), entry.strip('\n'))


def scalar_comp(name, ty, op):
    return '%s {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n  ROOT r = %s[] %s(a, b)\n}' % (name, ty, ty, ty, op)


ADD_F32 = scalar_comp('add_f32', 'f32', 'add')
MAX_F32 = scalar_comp('max_f32', 'f32', 'maximum')
MIN_F32 = scalar_comp('min_f32', 'f32', 'minimum')
MUL_F32 = scalar_comp('mul_f32', 'f32', 'multiply')
ADD_S32 = scalar_comp('add_s32', 's32', 'add')
MIN_S32 = scalar_comp('min_s32', 's32', 'minimum')
SUB_F32 = scalar_comp('sub_f32', 'f32', 'subtract')
REPLACE_F32 = 'replace_f32 {\n  a = f32[] parameter(0)\n  ROOT b = f32[] parameter(1)\n}'
# a non-trivial combiner: cur * 0.5 + upd (neither commutative nor associative)
HALF_F32 = ('half_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  h = f32[] constant(0.5)\n'
            '  m = f32[] multiply(a, h)\n  ROOT r = f32[] add(m, b)\n}')
GE_F32 = ('ge_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n'
          '  ROOT r = pred[] compare(a, b), direction=GE\n}')
LE_F32 = ('le_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n'
          '  ROOT r = pred[] compare(a, b), direction=LE\n}')

rng = np.random.default_rng(20240611)


def f32(*shape, lo=-4, hi=4):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def ints(lo, hi, *shape, dt=np.int32):
    return rng.integers(lo, hi, size=shape).astype(dt)


# ---------------------------------------------------------------------------------------------------------
# gather
# ---------------------------------------------------------------------------------------------------------
case('gather_rows', module('g', '''
  x = f32[6,5] parameter(0)
  i = s32[7] parameter(1)
  ROOT g = f32[7,5] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}
'''), [f32(6, 5), np.array([0, 5, -3, 9, 2, 2, 6], np.int32)])

case('gather_points', module('g', '''
  x = f32[5,6,4] parameter(0)
  i = s32[3,2,2] parameter(1)
  ROOT g = f32[3,2,3,2] gather(x, i), offset_dims={2,3}, collapsed_slice_dims={0}, start_index_map={0,2}, index_vector_dim=2, slice_sizes={1,3,2}
'''), [f32(5, 6, 4), ints(-2, 7, 3, 2, 2)])

case('gather_ivd0', module('g', '''
  x = f32[7,8] parameter(0)
  i = s32[2,3] parameter(1)
  ROOT g = f32[2,3,3] gather(x, i), offset_dims={0,2}, collapsed_slice_dims={}, start_index_map={1,0}, index_vector_dim=0, slice_sizes={2,3}
'''), [f32(7, 8), ints(-1, 9, 2, 3)])

case('gather_offset_first', module('g', '''
  x = s32[4,9] parameter(0)
  i = u32[2,3] parameter(1)
  ROOT g = s32[4,2,3] gather(x, i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=2, slice_sizes={4,1}
'''), [ints(-100, 100, 4, 9), np.array([[0, 8, 9], [4294967295, 3, 7]], np.uint32)])

case('gather_batching', module('g', '''
  x = f32[3,5,4] parameter(0)
  i = s32[3,2,1] parameter(1)
  ROOT g = f32[3,2,2] gather(x, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,2}
'''), [f32(3, 5, 4), ints(-1, 6, 3, 2, 1)])

case('gather_batching_mid', module('g', '''
  x = f32[4,6,3] parameter(0)
  i = s64[5,3,1] parameter(1)
  ROOT g = f32[5,3,6] gather(x, i), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, operand_batching_dims={2}, start_indices_batching_dims={1}, index_vector_dim=2, slice_sizes={1,6,1}
'''), [f32(4, 6, 3), ints(-1, 5, 5, 3, 1, dt=np.int64)])

# ---------------------------------------------------------------------------------------------------------
# scatter
# ---------------------------------------------------------------------------------------------------------
def scatter_rows(name, comp, cname):
    case(name, module('s', '''
  x = f32[6,3] parameter(0)
  i = s32[7,1] parameter(1)
  u = f32[7,3] parameter(2)
  ROOT s = f32[6,3] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%s
''' % cname, comp), [f32(6, 3), np.array([[1], [4], [1], [-1], [6], [4], [1]], np.int32), f32(7, 3)])


scatter_rows('scatter_add_dup', ADD_F32, 'add_f32')
scatter_rows('scatter_replace_dup', REPLACE_F32, 'replace_f32')
scatter_rows('scatter_max', MAX_F32, 'max_f32')
scatter_rows('scatter_min', MIN_F32, 'min_f32')
scatter_rows('scatter_mul', MUL_F32, 'mul_f32')
scatter_rows('scatter_sub', SUB_F32, 'sub_f32')
scatter_rows('scatter_half', HALF_F32, 'half_f32')

# window dim before the scatter dim, duplicates: shows the order positions are applied in
case('scatter_window_first', module('s', '''
  x = f32[4,7] parameter(0)
  i = s32[5] parameter(1)
  u = f32[4,5] parameter(2)
  ROOT s = f32[4,7] scatter(x, i, u), update_window_dims={0}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, index_vector_dim=1, to_apply=half_f32
''', HALF_F32), [f32(4, 7), np.array([2, 5, 2, 7, 2], np.int32), f32(4, 5)])

# windows of 2 rows: a start of 4 in a 5-row operand would write out of bounds, so the whole window is dropped
case('scatter_window_oob', module('s', '''
  x = f32[5,4] parameter(0)
  i = s32[4,1] parameter(1)
  u = f32[4,2,3] parameter(2)
  ROOT s = f32[5,4] scatter(x, i, u), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_f32
''', ADD_F32), [f32(5, 4), np.array([[0], [4], [3], [-1]], np.int32), f32(4, 2, 3)])

case('scatter_points_s32', module('s', '''
  x = s32[4,5] parameter(0)
  i = s32[6,2] parameter(1)
  u = s32[6] parameter(2)
  ROOT s = s32[4,5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=add_s32
''', ADD_S32), [ints(-9, 9, 4, 5), np.array([[0, 0], [3, 4], [0, 0], [4, 0], [1, -1], [2, 3]], np.int32),
                 ints(-5, 5, 6)])

case('scatter_batching', module('s', '''
  x = f32[3,6] parameter(0)
  i = s32[3,4] parameter(1)
  u = f32[3,4] parameter(2)
  ROOT s = f32[3,6] scatter(x, i, u), update_window_dims={}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add_f32
''', ADD_F32), [f32(3, 6), ints(-1, 7, 3, 4), f32(3, 4)])

ARGMAX_COMB = '''argmax_comb {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v1, v0), direction=GT
  eq = pred[] compare(v1, v0), direction=EQ
  lt = pred[] compare(i1, i0), direction=LT
  tie = pred[] and(eq, lt)
  take = pred[] or(gt, tie)
  v = f32[] select(take, v1, v0)
  i = s32[] select(take, i1, i0)
  ROOT r = (f32[], s32[]) tuple(v, i)
}'''
case('scatter_variadic', module('s', '''
  x = f32[5] parameter(0)
  xi = s32[5] parameter(1)
  i = s32[8,1] parameter(2)
  u = f32[8] parameter(3)
  ui = s32[8] parameter(4)
  ROOT s = (f32[5], s32[5]) scatter(x, xi, i, u, ui), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=argmax_comb
''', ARGMAX_COMB), [np.full(5, -np.inf, np.float32), np.full(5, -1, np.int32),
                    np.array([[0], [2], [0], [4], [2], [0], [5], [2]], np.int32),
                    np.array([1, 3, 1, -2, 3, 0.5, 9, 2], np.float32), np.arange(8, dtype=np.int32)[::-1].copy()])

ADD_C64 = scalar_comp('add_c64', 'c64', 'add')
case('scatter_add_c64', module('s', '''
  x = c64[5,2] parameter(0)
  i = s32[4,1] parameter(1)
  u = c64[4,2] parameter(2)
  ROOT s = c64[5,2] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_c64
''', ADD_C64), [(f32(5, 2) + 1j * f32(5, 2)).astype(np.complex64), np.array([[1], [4], [1], [7]], np.int32),
                  (f32(4, 2) + 1j * f32(4, 2)).astype(np.complex64)])

# ---------------------------------------------------------------------------------------------------------
# reduce-window
# ---------------------------------------------------------------------------------------------------------
case('rw_max_pad_stride', module('r', '''
  x = f32[2,9,8] parameter(0)
  c = f32[] constant(-inf)
  ROOT r = f32[2,5,4] reduce-window(x, c), window={size=1x3x3 stride=1x2x2 pad=0_0x1_1x1_0}, to_apply=max_f32
''', MAX_F32), [f32(2, 9, 8)])

case('rw_sum_dilated', module('r', '''
  x = f32[7,6] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[5,3] reduce-window(x, c), window={size=2x3 stride=3x2 pad=1_2x2_1 lhs_dilate=2x1 rhs_dilate=1x2}, to_apply=add_f32
''', ADD_F32), [f32(7, 6)])

case('rw_sum_init_pad', module('r', '''
  x = f32[5,5] parameter(0)
  c = f32[] constant(1.5)
  ROOT r = f32[5,5] reduce-window(x, c), window={size=3x3 pad=1_1x1_1}, to_apply=add_f32
''', ADD_F32), [f32(5, 5)])

case('rw_cumsum', module('r', '''
  x = f32[3,33] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[3,33] reduce-window(x, c), window={size=1x33 pad=0_0x32_0}, to_apply=add_f32
''', ADD_F32), [f32(3, 33)])

# scans: XLA:CPU rewrites these into a two-level tree of 16-element tiles (ReduceWindowRewriter)
case('rw_scan_long', module('r', '''
  x = f32[300] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[301] reduce-window(x, c), window={size=300 pad=300_0}, to_apply=add_f32
''', ADD_F32), [f32(300)])

case('rw_scan_rev', module('r', '''
  x = f32[40,2] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[40,2] reduce-window(x, c), window={size=40x1 pad=0_39x0_0}, to_apply=add_f32
''', ADD_F32), [f32(40, 2)])

case('rw_scan_rev_excl_long', module('r', '''
  x = f32[290] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[291] reduce-window(x, c), window={size=290 pad=0_290}, to_apply=add_f32
''', ADD_F32), [f32(290)])

case('rw_scan_init', module('r', '''
  x = f32[2,40] parameter(0)
  c = f32[] constant(1)
  ROOT r = f32[2,40] reduce-window(x, c), window={size=1x40 pad=0_0x39_0}, to_apply=add_f32
''', ADD_F32), [f32(2, 40)])

ADD_PAIR = '''add_pair {
  a0 = f32[] parameter(0)
  a1 = s32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  m0 = f32[] multiply(a0, b0)
  m1 = s32[] add(a1, b1)
  ROOT r = (f32[], s32[]) tuple(m0, m1)
}'''
case('rw_scan_variadic', module('r', '''
  x = f32[20] parameter(0)
  y = s32[20] parameter(1)
  c = f32[] constant(1)
  ci = s32[] constant(0)
  ROOT r = (f32[20], s32[20]) reduce-window(x, y, c, ci), window={size=20 pad=19_0}, to_apply=add_pair
''', ADD_PAIR), [f32(20, lo=0.8, hi=1.2), ints(-9, 9, 20)])

case('rw_sum_c64', module('r', '''
  x = c64[6,5] parameter(0)
  c = c64[] constant((0, 0))
  ROOT r = c64[3,4] reduce-window(x, c), window={size=2x2 stride=2x1}, to_apply=add_c64
''', ADD_C64), [(f32(6, 5) + 1j * f32(6, 5)).astype(np.complex64)])

case('rw_min_s32', module('r', '''
  x = s32[6,7] parameter(0)
  c = s32[] constant(2147483647)
  ROOT r = s32[3,3] reduce-window(x, c), window={size=2x3 stride=2x2}, to_apply=min_s32
''', MIN_S32), [ints(-1000, 1000, 6, 7)])

ARGMAX_RW = '''argmax_rw {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v1, v0), direction=GT
  v = f32[] select(gt, v1, v0)
  i = s32[] select(gt, i1, i0)
  ROOT r = (f32[], s32[]) tuple(v, i)
}'''
case('rw_variadic_argmax', module('r', '''
  x = f32[4,10] parameter(0)
  xi = s32[4,10] iota(), iota_dimension=1
  c = f32[] constant(-inf)
  ci = s32[] constant(-1)
  ROOT r = (f32[4,3], s32[4,3]) reduce-window(x, xi, c, ci), window={size=1x4 stride=1x3 pad=0_0x1_1}, to_apply=argmax_rw
''', ARGMAX_RW), [np.round(f32(4, 10))])

case('rw_max_nan', module('r', '''
  x = f32[12] parameter(0)
  c = f32[] constant(-inf)
  ROOT r = f32[5] reduce-window(x, c), window={size=4 stride=2}, to_apply=max_f32
''', MAX_F32), [np.array([1, np.nan, 3, -0.0, 0.0, -1, 2, 2, -np.inf, 5, np.nan, 0], np.float32)])

# ---------------------------------------------------------------------------------------------------------
# select-and-scatter
# ---------------------------------------------------------------------------------------------------------
case('ss_maxpool_grad', module('s', '''
  x = f32[2,6,6,3] parameter(0)
  g = f32[2,3,3,3] parameter(1)
  c = f32[] constant(0)
  ROOT s = f32[2,6,6,3] select-and-scatter(x, g, c), window={size=1x2x2x1 stride=1x2x2x1}, select=ge_f32, scatter=add_f32
''', GE_F32, ADD_F32), [np.round(f32(2, 6, 6, 3)), f32(2, 3, 3, 3)])

# overlapping windows, padding, ties (integer values) and all-negative inputs (padding must not win)
case('ss_overlap_pad', module('s', '''
  x = f32[7,7] parameter(0)
  g = f32[4,4] parameter(1)
  c = f32[] constant(0.25)
  ROOT s = f32[7,7] select-and-scatter(x, g, c), window={size=3x3 stride=2x2 pad=1_1x1_1}, select=ge_f32, scatter=add_f32
''', GE_F32, ADD_F32), [np.round(f32(7, 7, lo=-3, hi=-0.5)), f32(4, 4)])

case('ss_min_generic', module('s', '''
  x = f32[6,5] parameter(0)
  g = f32[3,2] parameter(1)
  c = f32[] constant(1)
  ROOT s = f32[6,5] select-and-scatter(x, g, c), window={size=3x3 stride=2x2 pad=1_0x0_0}, select=le_f32, scatter=mul_f32
''', LE_F32, MUL_F32), [np.round(f32(6, 5)), f32(3, 2, lo=0.5, hi=2)])


# ---------------------------------------------------------------------------------------------------------
# sort and topk
# ---------------------------------------------------------------------------------------------------------
def lt_comp(name, ty, direction='LT', typ=None, nparams=2, extra_types=()):
    params = ['  p0 = %s[] parameter(0)' % ty, '  p1 = %s[] parameter(1)' % ty]
    for k, t in enumerate(extra_types):
        params.append('  q%d = %s[] parameter(%d)' % (k, t, k + 2))
    tt = ', type=%s' % typ if typ else ''
    return '%s {\n%s\n  ROOT r = pred[] compare(p0, p1), direction=%s%s\n}' % (name, '\n'.join(params), direction, tt)


SPECIAL = np.array([3, np.nan, -0.0, 0.0, 1, -np.inf, np.inf, 1, -np.nan, 2, 0.0, -0.0, 3, 1], np.float32)
case('sort_f32_total', module('s', '''
  x = f32[14] parameter(0)
  i = s32[14] iota(), iota_dimension=0
  ROOT s = (f32[14], s32[14]) sort(x, i), dimensions={0}, is_stable=true, to_apply=cmp
''', lt_comp('cmp', 'f32', 'LT', 'TOTALORDER', extra_types=('s32', 's32'))), [SPECIAL])

case('sort_f32_desc_2d', module('s', '''
  x = f32[5,6] parameter(0)
  y = s32[5,6] parameter(1)
  ROOT s = (f32[5,6], s32[5,6]) sort(x, y), dimensions={0}, is_stable=true, to_apply=cmp
''', lt_comp('cmp', 'f32', 'GT', None, extra_types=('s32', 's32'))), [np.round(f32(5, 6)), ints(0, 100, 5, 6)])

LEX = '''lex {
  a0 = s32[] parameter(0)
  b0 = s32[] parameter(1)
  a1 = f32[] parameter(2)
  b1 = f32[] parameter(3)
  a2 = u8[] parameter(4)
  b2 = u8[] parameter(5)
  lt0 = pred[] compare(a0, b0), direction=LT
  eq0 = pred[] compare(a0, b0), direction=EQ
  gt1 = pred[] compare(a1, b1), direction=GT, type=TOTALORDER
  t = pred[] and(eq0, gt1)
  ROOT r = pred[] or(lt0, t)
}'''
case('sort_lex_3ops', module('s', '''
  k = s32[3,9] parameter(0)
  v = f32[3,9] parameter(1)
  w = u8[3,9] parameter(2)
  ROOT s = (s32[3,9], f32[3,9], u8[3,9]) sort(k, v, w), dimensions={1}, is_stable=true, to_apply=lex
''', LEX), [ints(0, 3, 3, 9), np.round(f32(3, 9)), ints(0, 255, 3, 9, dt=np.uint8)])

CMP_REAL = '''cmp_real {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ra = f32[] real(a)
  rb = f32[] real(b)
  ROOT r = pred[] compare(ra, rb), direction=LT
}'''
case('sort_c64_by_real', module('s', '''
  k = c64[11] parameter(0)
  ROOT s = c64[11] sort(k), dimensions={0}, is_stable=true, to_apply=cmp_real
''', CMP_REAL), [(np.round(f32(11)) + 1j * f32(11)).astype(np.complex64)])

# is_stable=false with many ties: XLA:CPU's order is libstdc++ std::sort's (introsort), not the stable one
for n, seed in ((17, 1), (200, 2), (1000, 3)):
    case('sort_unstable_ties_%d' % n, module('s', '''
  k = s32[%d] parameter(0)
  i = s32[%d] iota(), iota_dimension=0
  ROOT s = (s32[%d], s32[%d]) sort(k, i), dimensions={0}, is_stable=false, to_apply=cmp
''' % (n, n, n, n), lt_comp('cmp', 's32', 'LT', extra_types=('s32', 's32'))), [ints(0, 5, n)])
case('sort_unstable_generic_desc', module('s', '''
  k = f32[4,300] parameter(0)
  i = s32[4,300] iota(), iota_dimension=1
  ROOT s = (f32[4,300], s32[4,300]) sort(k, i), dimensions={1}, is_stable=false, to_apply=lex_desc
''', '''lex_desc {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  fa = f32[] floor(a)
  fb = f32[] floor(b)
  ROOT r = pred[] compare(fa, fb), direction=GT
}'''), [f32(4, 300, lo=-3, hi=3)])
# already sorted and reversed inputs (introsort's median-of-three paths)
case('sort_unstable_sorted', module('s', '''
  k = s32[2,100] parameter(0)
  i = s32[2,100] iota(), iota_dimension=1
  ROOT s = (s32[2,100], s32[2,100]) sort(k, i), dimensions={1}, is_stable=false, to_apply=cmp
''', lt_comp('cmp', 's32', 'LT', extra_types=('s32', 's32'))), [np.stack([np.arange(100) // 7, (99 - np.arange(100)) // 7]).astype(np.int32)])

# a FLOAT compare with NaNs is not a strict weak order: the result is std::stable_sort's
_k = rng.integers(0, 20, 300).astype(np.float32)
_k[rng.random(300) < 0.1] = np.nan
case('sort_stable_float_nan', module('s', '''
  k = f32[300] parameter(0)
  i = s32[300] iota(), iota_dimension=0
  ROOT s = (f32[300], s32[300]) sort(k, i), dimensions={0}, is_stable=true, to_apply=cmp
''', lt_comp('cmp', 'f32', 'LT', extra_types=('s32', 's32'))), [_k])
_k2 = _k.copy()
case('sort_unstable_float_nan', module('s', '''
  k = f32[300] parameter(0)
  i = s32[300] iota(), iota_dimension=0
  ROOT s = (f32[300], s32[300]) sort(k, i), dimensions={0}, is_stable=false, to_apply=cmp
''', lt_comp('cmp', 'f32', 'LT', extra_types=('s32', 's32'))), [_k2])

case('sort_s32_single', module('s', '''
  k = s32[4,7] parameter(0)
  ROOT s = s32[4,7] sort(k), dimensions={1}, to_apply=cmp
''', lt_comp('cmp', 's32', 'LT')), [ints(-5, 5, 4, 7)])

case('sort_f32_unstable_unique', module('s', '''
  k = f32[40] parameter(0)
  ROOT s = f32[40] sort(k), dimensions={0}, to_apply=cmp
''', lt_comp('cmp', 'f32', 'LT')), [rng.permutation(40).astype(np.float32) - 20])

case('topk_f32', module('t', '''
  x = f32[5,9] parameter(0)
  t = (f32[5,3], s32[5,3]) topk(x), k=3, largest=true
  v = f32[5,3] get-tuple-element(t), index=0
  i = s32[5,3] get-tuple-element(t), index=1
  ROOT r = (f32[5,3], s32[5,3]) tuple(v, i)
'''), [np.concatenate([np.round(f32(4, 9)), SPECIAL[None, :9]], axis=0)])

case('topk_smallest_s32', module('t', '''
  x = s32[3,10] parameter(0)
  t = (s32[3,4], s32[3,4]) topk(x), k=4, largest=false
  v = s32[3,4] get-tuple-element(t), index=0
  i = s32[3,4] get-tuple-element(t), index=1
  ROOT r = (s32[3,4], s32[3,4]) tuple(v, i)
'''), [ints(-3, 3, 3, 10)])

case('topk_f32_1d_nan', module('t', '''
  x = f32[14] parameter(0)
  t = (f32[6], s32[6]) topk(x), k=6, largest=false
  v = f32[6] get-tuple-element(t), index=0
  i = s32[6] get-tuple-element(t), index=1
  ROOT r = (f32[6], s32[6]) tuple(v, i)
'''), [SPECIAL])

# ---------------------------------------------------------------------------------------------------------
# rng-bit-generator
# ---------------------------------------------------------------------------------------------------------
RBG_SHAPES = ['u32[4,8]', 'u32[5,3]', 'u32[7]', 'u32[]', 'u32[3,5,7]', 'u64[3,5]', 'u64[7]', 'u8[3,7]',
              'u16[9]', 's32[2,3]', 'u64[]']
STATES = [np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFF0], np.uint64),
          np.array([42, 7], np.uint64)]


def rbg_module(alg, state_shape='u64[2]'):
    lines = ['  st0 = %s parameter(0)' % state_shape]
    outs, shapes = [], []
    prev = 'st0'
    for k, sh in enumerate(RBG_SHAPES):
        lines.append('  r%d = (%s, %s) rng-bit-generator(%s), algorithm=%s' % (k, state_shape, sh, prev, alg))
        lines.append('  b%d = %s get-tuple-element(r%d), index=1' % (k, sh, k))
        lines.append('  st%d = %s get-tuple-element(r%d), index=0' % (k + 1, state_shape, k))
        outs.append('b%d' % k)
        shapes.append(sh)
        prev = 'st%d' % (k + 1)
    outs.append(prev)
    shapes.append(state_shape)
    lines.append('  ROOT t = (%s) tuple(%s)' % (', '.join(shapes), ', '.join(outs)))
    return module('rbg', '\n'.join(lines))


for si, st in enumerate(STATES):
    case('rbg_threefry_%d' % si, rbg_module('rng_three_fry'), [st])
    case('rbg_philox_%d' % si, rbg_module('rng_philox'), [st])
case('rbg_default', rbg_module('rng_default'), [STATES[0]])
case('rbg_philox_u64x3', rbg_module('rng_philox', 'u64[3]'),
     [np.array([0x1234, 0xFFFFFFFFFFFFFFFE, 0x7FFFFFFFFFFFFFFF], np.uint64)])


# ---------------------------------------------------------------------------------------------------------
# cholesky, triangular-solve
# ---------------------------------------------------------------------------------------------------------
def spd(b, n, dt):
    a = rng.normal(size=(b, n, n))
    return (a @ a.transpose(0, 2, 1) + n * np.eye(n)).astype(dt)


for dt, ty in ((np.float32, 'f32'), (np.float64, 'f64')):
    for lower in ('true', 'false'):
        case('chol_%s_%s' % (ty, 'lower' if lower == 'true' else 'upper'), module('c', '''
  a = %s[3,5,5] parameter(0)
  ROOT l = %s[3,5,5] cholesky(a), lower=%s
''' % (ty, ty, lower)), [spd(3, 5, dt)])
a_bad = spd(3, 4, np.float32)
a_bad[1, 2, 2] = -50.0
a_bad[2, 0, 0] = 0.0
case('chol_not_pd', module('c', '''
  a = f32[3,4,4] parameter(0)
  ROOT l = f32[3,4,4] cholesky(a), lower=true
'''), [a_bad])
a_g = spd(2, 6, np.float32)
a_g[0][np.triu_indices(6, 1)] = 99.0         # lower=true reads only the lower triangle
a_g[1][np.tril_indices(6, -1)] = -7.0        # lower=false reads only the upper one
case('chol_f32_garbage_lower', module('c', '''
  a = f32[6,6] parameter(0)
  ROOT l = f32[6,6] cholesky(a), lower=true
'''), [a_g[0]])
case('chol_f32_garbage_upper', module('c', '''
  a = f32[6,6] parameter(0)
  ROOT l = f32[6,6] cholesky(a), lower=false
'''), [a_g[1]])
case('chol_big', module('c', '''
  a = f32[140,140] parameter(0)
  ROOT l = f32[140,140] cholesky(a), lower=true
'''), [spd(1, 140, np.float32)[0]])


def tri(b, n, dt):
    a = rng.normal(size=(b, n, n)) * 0.3
    a += np.eye(n) * 2.0 * np.sign(rng.normal(size=(b, n, 1)))
    return a.astype(dt)


for dt, ty in ((np.float32, 'f32'), (np.float64, 'f64')):
    k = 0
    for left in ('true', 'false'):
        for lower in ('true', 'false'):
            for trans in ('NO_TRANSPOSE', 'TRANSPOSE', 'ADJOINT'):
                unit = 'true' if k % 3 == 1 else 'false'
                k += 1
                if ty == 'f64' and trans == 'ADJOINT':
                    continue
                bshape = '2,4,3' if left == 'true' else '2,3,4'
                case('trsm_%s_%s_%s_%s%s' % (ty, 'l' if left == 'true' else 'r', 'lo' if lower == 'true' else 'up',
                                             trans.lower(), '_unit' if unit == 'true' else ''), module('t', '''
  a = %s[2,4,4] parameter(0)
  b = %s[%s] parameter(1)
  ROOT x = %s[%s] triangular-solve(a, b), left_side=%s, lower=%s, unit_diagonal=%s, transpose_a=%s
''' % (ty, ty, bshape, ty, bshape, left, lower, unit, trans)),
                    [tri(2, 4, dt), rng.normal(size=tuple(int(v) for v in bshape.split(','))).astype(dt)])

# ---------------------------------------------------------------------------------------------------------
# batch norm (XLA:CPU runs its batchnorm expander)
# ---------------------------------------------------------------------------------------------------------
for fi, shape in ((1, (4, 3, 5, 5)), (3, (2, 4, 4, 6)), (0, (5, 7))):
    sh = ','.join(map(str, shape))
    c = shape[fi]
    x = f32(*shape, lo=-2, hi=3) + 1.0
    case('bn_training_f%d' % fi, module('bn', '''
  x = f32[%s] parameter(0)
  s = f32[%d] parameter(1)
  o = f32[%d] parameter(2)
  t = (f32[%s], f32[%d], f32[%d]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=%d
  y = f32[%s] get-tuple-element(t), index=0
  m = f32[%d] get-tuple-element(t), index=1
  v = f32[%d] get-tuple-element(t), index=2
  ROOT r = (f32[%s], f32[%d], f32[%d]) tuple(y, m, v)
''' % (sh, c, c, sh, c, c, fi, sh, c, c, sh, c, c)), [x, f32(c), f32(c)])
    case('bn_inference_f%d' % fi, module('bn', '''
  x = f32[%s] parameter(0)
  s = f32[%d] parameter(1)
  o = f32[%d] parameter(2)
  m = f32[%d] parameter(3)
  v = f32[%d] parameter(4)
  ROOT y = f32[%s] batch-norm-inference(x, s, o, m, v), epsilon=0.0001, feature_index=%d
''' % (sh, c, c, c, c, sh, fi)), [x, f32(c), f32(c), f32(c), f32(c, lo=0.1, hi=2)])
    case('bn_grad_f%d' % fi, module('bn', '''
  x = f32[%s] parameter(0)
  s = f32[%d] parameter(1)
  m = f32[%d] parameter(2)
  v = f32[%d] parameter(3)
  g = f32[%s] parameter(4)
  t = (f32[%s], f32[%d], f32[%d]) batch-norm-grad(x, s, m, v, g), epsilon=0.001, feature_index=%d
  gx = f32[%s] get-tuple-element(t), index=0
  gs = f32[%d] get-tuple-element(t), index=1
  go = f32[%d] get-tuple-element(t), index=2
  ROOT r = (f32[%s], f32[%d], f32[%d]) tuple(gx, gs, go)
''' % (sh, c, c, c, sh, sh, c, c, fi, sh, c, c, sh, c, c)), [x, f32(c), f32(c), f32(c, lo=0.1, hi=2), f32(*shape)])

# ---------------------------------------------------------------------------------------------------------
# fft
# ---------------------------------------------------------------------------------------------------------
def cplx(*shape, dt=np.complex64):
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt)


for ty, dt, rt, rdt in (('c64', np.complex64, 'f32', np.float32), ('c128', np.complex128, 'f64', np.float64)):
    case('fft_%s_1d' % ty, module('f', '''
  x = %s[3,8] parameter(0)
  ROOT y = %s[3,8] fft(x), fft_type=FFT, fft_length={8}
''' % (ty, ty)), [cplx(3, 8, dt=dt)])
    case('fft_%s_1d_odd' % ty, module('f', '''
  x = %s[2,12] parameter(0)
  ROOT y = %s[2,12] fft(x), fft_type=IFFT, fft_length={12}
''' % (ty, ty)), [cplx(2, 12, dt=dt)])
    case('fft_%s_2d' % ty, module('f', '''
  x = %s[2,6,5] parameter(0)
  ROOT y = %s[2,6,5] fft(x), fft_type=FFT, fft_length={6,5}
''' % (ty, ty)), [cplx(2, 6, 5, dt=dt)])
    case('fft_%s_3d_inv' % ty, module('f', '''
  x = %s[3,4,8] parameter(0)
  ROOT y = %s[3,4,8] fft(x), fft_type=IFFT, fft_length={3,4,8}
''' % (ty, ty)), [cplx(3, 4, 8, dt=dt)])
    case('fft_%s_rfft' % ty, module('f', '''
  x = %s[3,10] parameter(0)
  ROOT y = %s[3,6] fft(x), fft_type=RFFT, fft_length={10}
''' % (rt, ty)), [rng.normal(size=(3, 10)).astype(rdt)])
    case('fft_%s_rfft2' % ty, module('f', '''
  x = %s[4,7] parameter(0)
  ROOT y = %s[4,4] fft(x), fft_type=RFFT, fft_length={4,7}
''' % (rt, ty)), [rng.normal(size=(4, 7)).astype(rdt)])
    case('fft_%s_irfft' % ty, module('f', '''
  x = %s[2,5] parameter(0)
  ROOT y = %s[2,9] fft(x), fft_type=IRFFT, fft_length={9}
''' % (ty, rt)), [cplx(2, 5, dt=dt)])
    case('fft_%s_irfft2_even' % ty, module('f', '''
  x = %s[3,5] parameter(0)
  ROOT y = %s[3,8] fft(x), fft_type=IRFFT, fft_length={3,8}
''' % (ty, rt)), [cplx(3, 5, dt=dt)])
case('fft_c64_big', module('f', '''
  x = c64[2,1024] parameter(0)
  ROOT y = c64[2,1024] fft(x), fft_type=FFT, fft_length={1024}
'''), [cplx(2, 1024)])
case('fft_c64_big_odd', module('f', '''
  x = c64[1000] parameter(0)
  ROOT y = c64[1000] fft(x), fft_type=FFT, fft_length={1000}
'''), [cplx(1000)])


# ---------------------------------------------------------------------------------------------------------
# cross-checks against jax's own functions
# ---------------------------------------------------------------------------------------------------------
def cross_checks(results):
    # jax.random.bits with the threefry implementation is not the HLO op; the rbg implementations are:
    # lax.rng_bit_generator must agree with our handwritten rng-bit-generator module
    st = STATES[0]
    key32 = st.view(np.uint32)
    for alg_name, alg in (('three_fry', lax.RandomAlgorithm.RNG_THREE_FRY), ('philox', lax.RandomAlgorithm.RNG_PHILOX)):
        _, bits = jax.jit(lambda k: lax.rng_bit_generator(k, (4, 8), np.uint32, algorithm=alg))(key32)
        want = results['rbg_%s_0' % ('threefry' if alg_name == 'three_fry' else 'philox')][1][0]
        assert np.array_equal(np.asarray(bits), want), alg_name
    # max-pool gradient via jax.grad == our select-and-scatter case
    x = CASES_BY_NAME['ss_maxpool_grad'][2][0]
    g = CASES_BY_NAME['ss_maxpool_grad'][2][1]

    def pool(v):
        return lax.reduce_window(v, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), 'VALID')
    _, vjp = jax.vjp(pool, jnp.asarray(x))
    assert np.array_equal(np.asarray(vjp(jnp.asarray(g))[0]), results['ss_maxpool_grad'][1][0])
    # lax.top_k
    x = CASES_BY_NAME['topk_f32'][2][0]
    v, i = lax.top_k(jnp.asarray(x), 3)
    assert np.array_equal(np.asarray(i), results['topk_f32'][1][1])
    # fft
    x = CASES_BY_NAME['fft_c128_2d'][2][0]
    assert np.allclose(np.fft.fftn(x, axes=(1, 2)), results['fft_c128_2d'][1][0], atol=1e-12)
    x = CASES_BY_NAME['fft_c128_irfft'][2][0]
    assert np.allclose(np.fft.irfft(x, 9), results['fft_c128_irfft'][1][0], atol=1e-12)


CASES_BY_NAME = {}


def main():
    jax.config.update('jax_enable_x64', True)
    only = set(sys.argv[1:])
    os.makedirs(OUT, exist_ok=True)
    results = {}
    total = 0
    for name, hlo, inputs in CASES:
        CASES_BY_NAME[name] = (name, hlo, inputs)
        if only and name not in only:
            continue
        outs = xla_runner.Compiled(hlo).run(inputs)
        if name.startswith('rbg_'):
            # XLA:CPU hands the s32 bits back typed u32 (its expander builds them unsigned): same bits
            outs = [o.view(np.int32) if sh.startswith('s32') else o for o, sh in zip(outs, RBG_SHAPES + ['u64'])]
        results[name] = (inputs, outs)
        with open(os.path.join(OUT, name + '.hlo'), 'w') as f:
            f.write(hlo)
        arrays = {'in%d' % k: np.asarray(a) for k, a in enumerate(inputs)}
        arrays.update({'out%d' % k: np.asarray(a) for k, a in enumerate(outs)})
        path = os.path.join(OUT, name + '.npz')
        np.savez_compressed(path, **arrays)
        total += os.path.getsize(path) + len(hlo)
    if not only:
        cross_checks(results)
    print('%d cases, %.1f KB' % (len(results), total / 1024))


if __name__ == '__main__':
    main()
