"""Handwritten HLO programs for ops JAX does not emit (batch-norm-*, map, u64 rng-bit-generator, ...).

XLA:CPU still runs them (after its own expansion passes), so they get real golden values too.
"""

import numpy as np

from casedef import hand_case


def _n(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@hand_case('hand_batch_norm_training', 'batch-norm-training, feature_index=1 (NCHW) and feature_index=3 (NHWC)')
def _bn_train(rng):
    text = """HloModule bn_training

ENTRY main {
  x = f32[4,3,5,5]{3,2,1,0} parameter(0)
  scale = f32[3]{0} parameter(1)
  offset = f32[3]{0} parameter(2)
  y = f32[2,4,4,6]{3,2,1,0} parameter(3)
  scale6 = f32[6]{0} parameter(4)
  offset6 = f32[6]{0} parameter(5)
  bn1 = (f32[4,3,5,5]{3,2,1,0}, f32[3]{0}, f32[3]{0}) batch-norm-training(x, scale, offset), epsilon=0.001, feature_index=1
  bn2 = (f32[2,4,4,6]{3,2,1,0}, f32[6]{0}, f32[6]{0}) batch-norm-training(y, scale6, offset6), epsilon=1e-05, feature_index=3
  o1 = f32[4,3,5,5]{3,2,1,0} get-tuple-element(bn1), index=0
  m1 = f32[3]{0} get-tuple-element(bn1), index=1
  v1 = f32[3]{0} get-tuple-element(bn1), index=2
  o2 = f32[2,4,4,6]{3,2,1,0} get-tuple-element(bn2), index=0
  m2 = f32[6]{0} get-tuple-element(bn2), index=1
  v2 = f32[6]{0} get-tuple-element(bn2), index=2
  ROOT t = (f32[4,3,5,5]{3,2,1,0}, f32[3]{0}, f32[3]{0}, f32[2,4,4,6]{3,2,1,0}, f32[6]{0}, f32[6]{0}) tuple(o1, m1, v1, o2, m2, v2)
}
"""
    return text, [_n(rng, (4, 3, 5, 5), 2.0) + 1.0, 1 + _n(rng, (3,), 0.2), _n(rng, (3,), 0.2),
                  _n(rng, (2, 4, 4, 6)) - 0.5, 1 + _n(rng, (6,), 0.2), _n(rng, (6,), 0.2)]


@hand_case('hand_batch_norm_inference', 'batch-norm-inference with given mean/variance, feature_index=1 and 2')
def _bn_inf(rng):
    text = """HloModule bn_inference

ENTRY main {
  x = f32[4,3,5,5]{3,2,1,0} parameter(0)
  scale = f32[3]{0} parameter(1)
  offset = f32[3]{0} parameter(2)
  mean = f32[3]{0} parameter(3)
  var = f32[3]{0} parameter(4)
  z = f32[3,2,7]{2,1,0} parameter(5)
  sc7 = f32[7]{0} parameter(6)
  o7 = f32[7]{0} parameter(7)
  m7 = f32[7]{0} parameter(8)
  v7 = f32[7]{0} parameter(9)
  a = f32[4,3,5,5]{3,2,1,0} batch-norm-inference(x, scale, offset, mean, var), epsilon=0.001, feature_index=1
  b = f32[3,2,7]{2,1,0} batch-norm-inference(z, sc7, o7, m7, v7), epsilon=0.0001, feature_index=2
  ROOT t = (f32[4,3,5,5]{3,2,1,0}, f32[3,2,7]{2,1,0}) tuple(a, b)
}
"""
    return text, [_n(rng, (4, 3, 5, 5), 2.0), 1 + _n(rng, (3,), 0.2), _n(rng, (3,), 0.2), _n(rng, (3,), 0.3),
                  np.abs(_n(rng, (3,))) + 0.5, _n(rng, (3, 2, 7)), 1 + _n(rng, (7,), 0.2), _n(rng, (7,), 0.2),
                  _n(rng, (7,), 0.3), np.abs(_n(rng, (7,))) + 0.1]


@hand_case('hand_batch_norm_grad', 'batch-norm-grad (feature_index=1 and 3), with batch statistics from '
           'batch-norm-training as in a PyTorch/XLA train step')
def _bn_grad(rng):
    text = """HloModule bn_grad

ENTRY main {
  x = f32[4,3,5,5]{3,2,1,0} parameter(0)
  scale = f32[3]{0} parameter(1)
  offset = f32[3]{0} parameter(2)
  gy = f32[4,3,5,5]{3,2,1,0} parameter(3)
  bn = (f32[4,3,5,5]{3,2,1,0}, f32[3]{0}, f32[3]{0}) batch-norm-training(x, scale, offset), epsilon=1e-05, feature_index=1
  mean = f32[3]{0} get-tuple-element(bn), index=1
  var = f32[3]{0} get-tuple-element(bn), index=2
  g = (f32[4,3,5,5]{3,2,1,0}, f32[3]{0}, f32[3]{0}) batch-norm-grad(x, scale, mean, var, gy), epsilon=1e-05, feature_index=1
  y = f32[2,3,3,4]{3,2,1,0} parameter(4)
  sc4 = f32[4]{0} parameter(5)
  mu4 = f32[4]{0} parameter(6)
  var4 = f32[4]{0} parameter(7)
  gy4 = f32[2,3,3,4]{3,2,1,0} parameter(8)
  g4 = (f32[2,3,3,4]{3,2,1,0}, f32[4]{0}, f32[4]{0}) batch-norm-grad(y, sc4, mu4, var4, gy4), epsilon=0.001, feature_index=3
  a0 = f32[4,3,5,5]{3,2,1,0} get-tuple-element(g), index=0
  a1 = f32[3]{0} get-tuple-element(g), index=1
  a2 = f32[3]{0} get-tuple-element(g), index=2
  b0 = f32[2,3,3,4]{3,2,1,0} get-tuple-element(g4), index=0
  b1 = f32[4]{0} get-tuple-element(g4), index=1
  b2 = f32[4]{0} get-tuple-element(g4), index=2
  ROOT t = (f32[4,3,5,5]{3,2,1,0}, f32[3]{0}, f32[3]{0}, f32[2,3,3,4]{3,2,1,0}, f32[4]{0}, f32[4]{0}) tuple(a0, a1, a2, b0, b1, b2)
}
"""
    return text, [_n(rng, (4, 3, 5, 5), 2.0) + 1.0, 1 + _n(rng, (3,), 0.2), _n(rng, (3,), 0.2),
                  _n(rng, (4, 3, 5, 5)), _n(rng, (2, 3, 3, 4)), 1 + _n(rng, (4,), 0.2), _n(rng, (4,), 0.3),
                  np.abs(_n(rng, (4,))) + 0.5, _n(rng, (2, 3, 3, 4))]


@hand_case('hand_misc_ops', 'map, clamp with scalar bounds, sort with a custom 2-key descending comparator, '
           'variadic reduce (sum and max together), variadic reduce-window, s32 power/remainder, pred not/xor, '
           'compare type=TOTALORDER and type=UNSIGNED, call, conditional with true/false computations, '
           'opt-barrier, replica-id/partition-id, s64 and u32 dynamic-slice indices', perturb=False)
def _misc(rng):
    text = """HloModule misc_ops

add_mul {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  s = f32[] add(a, b)
  ROOT m = f32[] multiply(s, a)
}

desc2 {
  k0 = f32[] parameter(0)
  k1 = f32[] parameter(1)
  i0 = s32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(k0, k1), direction=GT, type=TOTALORDER
  eq = pred[] compare(k0, k1), direction=EQ, type=TOTALORDER
  lt2 = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt2)
  ROOT r = pred[] or(gt, tie)
}

summax {
  a0 = f32[] parameter(0)
  a1 = f32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = f32[] parameter(3)
  s = f32[] add(a0, b0)
  m = f32[] maximum(a1, b1)
  ROOT t = (f32[], f32[]) tuple(s, m)
}

sq {
  p = f32[5]{0} parameter(0)
  ROOT q = f32[5]{0} multiply(p, p)
}

on_true {
  t = (f32[5]{0}, s32[]) parameter(0)
  v = f32[5]{0} get-tuple-element(t), index=0
  ROOT e = f32[5]{0} exponential(v)
}

on_false {
  t = (f32[5]{0}, s32[]) parameter(0)
  v = f32[5]{0} get-tuple-element(t), index=0
  n = s32[] get-tuple-element(t), index=1
  c = f32[] convert(n)
  b = f32[5]{0} broadcast(c), dimensions={}
  ROOT r = f32[5]{0} subtract(v, b)
}

ENTRY main {
  a = f32[8]{0} parameter(0)
  b = f32[8]{0} parameter(1)
  keys = f32[10]{0} parameter(2)
  ids = s32[10]{0} parameter(3)
  m = f32[3,4]{1,0} parameter(4)
  i = s32[6]{0} parameter(5)
  j = s32[6]{0} parameter(6)
  p = pred[6]{0} parameter(7)
  q = pred[6]{0} parameter(8)
  flag = pred[] parameter(9)
  x5 = f32[5]{0} parameter(10)
  n = s32[] parameter(11)
  st64 = s64[] parameter(12)
  stu = u32[] parameter(13)
  mapped = f32[8]{0} map(a, b), dimensions={0}, to_apply=add_mul
  lo = f32[] constant(-0.5)
  hi = f32[] constant(0.75)
  clamped = f32[8]{0} clamp(lo, a, hi)
  sorted = (f32[10]{0}, s32[10]{0}) sort(keys, ids), dimensions={0}, is_stable=false, to_apply=desc2
  sk = f32[10]{0} get-tuple-element(sorted), index=0
  si = s32[10]{0} get-tuple-element(sorted), index=1
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  red = (f32[3]{0}, f32[3]{0}) reduce(m, m, z, ninf), dimensions={1}, to_apply=summax
  rs = f32[3]{0} get-tuple-element(red), index=0
  rm = f32[3]{0} get-tuple-element(red), index=1
  rw = (f32[3,3]{1,0}, f32[3,3]{1,0}) reduce-window(m, m, z, ninf), window={size=1x2 stride=1x1}, to_apply=summax
  rws = f32[3,3]{1,0} get-tuple-element(rw), index=0
  rwm = f32[3,3]{1,0} get-tuple-element(rw), index=1
  pw = s32[6]{0} power(i, j)
  rem = s32[6]{0} remainder(i, j)
  np = pred[6]{0} not(p)
  xp = pred[6]{0} xor(p, q)
  iu = u32[6]{0} bitcast-convert(i)
  ju = u32[6]{0} bitcast-convert(j)
  cu = pred[6]{0} compare(iu, ju), direction=LT, type=UNSIGNED
  ct = pred[8]{0} compare(a, b), direction=LE, type=TOTALORDER
  called = f32[5]{0} call(x5), to_apply=sq
  tup = (f32[5]{0}, s32[]) tuple(called, n)
  cond = f32[5]{0} conditional(flag, tup, tup), true_computation=on_true, false_computation=on_false
  nflag = pred[] not(flag)
  cond2 = f32[5]{0} conditional(nflag, tup, tup), true_computation=on_true, false_computation=on_false
  bar = (f32[5]{0}, f32[5]{0}) opt-barrier((f32[5]{0}, f32[5]{0}) tuple(cond, cond2))
  bar0 = f32[5]{0} get-tuple-element(bar), index=0
  rid = u32[] replica-id()
  pid = u32[] partition-id()
  z64 = s64[] constant(0)
  ds1 = f32[2,3]{1,0} dynamic-slice(m, st64, z64), dynamic_slice_sizes={2,3}
  zu = u32[] constant(1)
  ds2 = f32[2,3]{1,0} dynamic-slice(m, stu, zu), dynamic_slice_sizes={2,3}
  ROOT t = (f32[8]{0}, f32[8]{0}, f32[10]{0}, s32[10]{0}, f32[3]{0}, f32[3]{0}, f32[3,3]{1,0}, f32[3,3]{1,0}, s32[6]{0}, s32[6]{0}, pred[6]{0}, pred[6]{0}, pred[6]{0}, pred[8]{0}, f32[5]{0}, f32[5]{0}, u32[], u32[], f32[2,3]{1,0}, f32[2,3]{1,0}) tuple(mapped, clamped, sk, si, rs, rm, rws, rwm, pw, rem, np, xp, cu, ct, bar0, cond2, rid, pid, ds1, ds2)
}
"""
    keys = np.array([1.0, -0.0, 0.0, 3.0, np.nan, 1.0, -2.0, np.inf, 1.0, -np.nan], np.float32)
    ids = np.array([5, 3, 9, 1, 0, 2, 8, 7, 4, 6], np.int32)
    a = _n(rng, (8,))
    b = _n(rng, (8,))
    b[0] = -0.0
    a[0] = 0.0
    a[1] = np.nan
    i = np.array([2, -3, 5, 0, 7, -8], np.int32)
    j = np.array([3, 2, 0, 0, -1, 3], np.int32)
    return text, [a, b, keys, ids, _n(rng, (3, 4)), i, j, np.array([1, 0, 1, 0, 1, 1], bool),
                  np.array([1, 1, 0, 0, 0, 1], bool), np.array(True), _n(rng, (5,)), np.int32(3),
                  np.int64(5), np.uint32(1)]


@hand_case('hand_rng_bit_generator_u64', 'rng-bit-generator with u64 and f32-from-u32 outputs: three_fry with '
           'u64[2] state, philox with u64[2] and u64[3] state', bit_exact=True)
def _rbg64(rng):
    text = """HloModule rbg_u64

ENTRY main {
  s = u64[2]{0} parameter(0)
  st3 = u64[3]{0} parameter(1)
  a = (u64[2]{0}, u64[3,5]{1,0}) rng-bit-generator(s), algorithm=rng_three_fry
  b = (u64[2]{0}, u64[7]{0}) rng-bit-generator(s), algorithm=rng_philox
  c = (u64[3]{0}, u32[2,5]{1,0}) rng-bit-generator(st3), algorithm=rng_philox
  a0 = u64[2]{0} get-tuple-element(a), index=0
  a1 = u64[3,5]{1,0} get-tuple-element(a), index=1
  b0 = u64[2]{0} get-tuple-element(b), index=0
  b1 = u64[7]{0} get-tuple-element(b), index=1
  c0 = u64[3]{0} get-tuple-element(c), index=0
  c1 = u32[2,5]{1,0} get-tuple-element(c), index=1
  ROOT t = (u64[2]{0}, u64[3,5]{1,0}, u64[2]{0}, u64[7]{0}, u64[3]{0}, u32[2,5]{1,0}) tuple(a0, a1, b0, b1, c0, c1)
}
"""
    return text, [np.array([0x0123456789ABCDEF, 42], np.uint64), np.array([1, 2, 3], np.uint64)]


@hand_case('hand_select_and_scatter', 'select-and-scatter with overlapping padded windows (GE select, add '
           'scatter) and a min-selecting variant (LE select)', perturb=False)
def _sas(rng):
    text = """HloModule select_and_scatter

ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE
}

le {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LE
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

ENTRY main {
  x = f32[1,7,6,2]{3,2,1,0} parameter(0)
  g = f32[1,4,3,2]{3,2,1,0} parameter(1)
  g2 = f32[1,3,3,2]{3,2,1,0} parameter(2)
  zero = f32[] constant(0)
  sas_a = f32[1,7,6,2]{3,2,1,0} select-and-scatter(x, g, zero), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, select=ge, scatter=add
  sas_b = f32[1,7,6,2]{3,2,1,0} select-and-scatter(x, g2, zero), window={size=1x3x2x1 stride=1x2x2x1}, select=le, scatter=add
  ROOT t = (f32[1,7,6,2]{3,2,1,0}, f32[1,7,6,2]{3,2,1,0}) tuple(sas_a, sas_b)
}
"""
    x = rng.integers(0, 5, size=(1, 7, 6, 2)).astype(np.float32)   # ties: the first maximum wins
    return text, [x, _n(rng, (1, 4, 3, 2)), _n(rng, (1, 3, 3, 2))]


@hand_case('hand_collectives_single_device', 'all-reduce, all-gather, reduce-scatter, all-to-all, '
           'collective-permute on one device (replica_groups={{0}}): identities, for parsing/semantics',
           bit_exact=True)
def _coll(rng):
    text = """HloModule collectives_1dev, replica_count=1

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,3]{1,0} parameter(0)
  ar = f32[4,3]{1,0} all-reduce(x), replica_groups={{0}}, to_apply=sum
  ag = f32[4,3]{1,0} all-gather(x), replica_groups={{0}}, dimensions={0}
  rs = f32[4,3]{1,0} reduce-scatter(x), replica_groups={{0}}, dimensions={0}, to_apply=sum
  a2a = f32[4,3]{1,0} all-to-all(x), replica_groups={{0}}, dimensions={0}
  cp = f32[4,3]{1,0} collective-permute(x), source_target_pairs={{0,0}}
  ROOT t = (f32[4,3]{1,0}, f32[4,3]{1,0}, f32[4,3]{1,0}, f32[4,3]{1,0}, f32[4,3]{1,0}) tuple(ar, ag, rs, a2a, cp)
}
"""
    return text, [_n(rng, (4, 3))]


@hand_case('hand_conv_misc', 'convolution forms jax does not print: window with rhs_reversal, '
           'batch_group_count with explicit dim_labels, f32 conv with operand_precision={high,high}')
def _conv(rng):
    text = """HloModule conv_misc

ENTRY main {
  x = f32[2,6,6,4]{3,2,1,0} parameter(0)
  w = f32[3,3,4,5]{3,2,1,0} parameter(1)
  xb = f32[3,5,5,4]{3,2,1,0} parameter(2)
  gb = f32[3,3,3,6]{3,2,1,0} parameter(3)
  c1 = f32[2,6,6,5]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1 rhs_reversal=1x0}, dim_labels=b01f_01io->b01f
  c2 = f32[3,3,2,6]{3,2,1,0} convolution(xb, gb), window={size=3x3}, dim_labels=f01b_i01o->01bf, batch_group_count=2
  c3 = f32[2,6,6,5]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, operand_precision={high,high}
  ROOT t = (f32[2,6,6,5]{3,2,1,0}, f32[3,3,2,6]{3,2,1,0}, f32[2,6,6,5]{3,2,1,0}) tuple(c1, c2, c3)
}
"""
    return text, [_n(rng, (2, 6, 6, 4)), _n(rng, (3, 3, 4, 5), 0.3), _n(rng, (3, 5, 5, 4)), _n(rng, (3, 3, 3, 6))]


@hand_case('hand_elementwise_extra', 'ops JAX on CPU expands away: logistic (f32, bf16), complex/real/imag and '
           'complex multiply/exp/abs, bf16 round-nearest-even, exponential-minus-one, tanh', perturb=False)
def _extra(rng):
    text = """HloModule elementwise_extra

ENTRY main {
  x = f32[16]{0} parameter(0)
  y = f32[16]{0} parameter(1)
  xb = bf16[16]{0} parameter(2)
  lg = f32[16]{0} logistic(x)
  lgb = bf16[16]{0} logistic(xb)
  c = c64[16]{0} complex(x, y)
  cm = c64[16]{0} multiply(c, c)
  re = f32[16]{0} real(cm)
  im = f32[16]{0} imag(cm)
  ab = f32[16]{0} abs(c)
  ex = c64[16]{0} exponential(c)
  exr = f32[16]{0} real(ex)
  exi = f32[16]{0} imag(ex)
  rne = bf16[16]{0} round-nearest-even(xb)
  em1 = bf16[16]{0} exponential-minus-one(xb)
  tb = bf16[16]{0} tanh(xb)
  ROOT t = (f32[16]{0}, bf16[16]{0}, f32[16]{0}, f32[16]{0}, f32[16]{0}, f32[16]{0}, f32[16]{0}, bf16[16]{0}, bf16[16]{0}, bf16[16]{0}) tuple(lg, lgb, re, im, ab, exr, exi, rne, em1, tb)
}
"""
    x = _n(rng, (16,), 3.0)
    x[:4] = [0.0, -0.0, 20.0, -20.0]
    xb = (_n(rng, (16,), 3.0) * 2).astype(np.float32)
    xb[:4] = [0.5, 1.5, 2.5, -2.5]   # round-half-even ties
    import ml_dtypes
    return text, [x, _n(rng, (16,)), xb.astype(ml_dtypes.bfloat16)]


@hand_case('hand_dot_algorithms', 'f32 dots with algorithm=dot_bf16_bf16_f32, dot_bf16_bf16_f32_x3, '
           'dot_bf16_bf16_f32_x6, dot_f32_f32_f32 (the tpu reference maps them to 1, 3, and full-f32 passes)')
def _algos(rng):
    text = """HloModule dot_algorithms

ENTRY main {
  a = f32[8,64]{1,0} parameter(0)
  b = f32[64,16]{1,0} parameter(1)
  d1 = f32[8,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_bf16_bf16_f32
  d3 = f32[8,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_bf16_bf16_f32_x3
  d6 = f32[8,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_bf16_bf16_f32_x6
  df = f32[8,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_f32_f32_f32
  ROOT t = (f32[8,16]{1,0}, f32[8,16]{1,0}, f32[8,16]{1,0}, f32[8,16]{1,0}) tuple(d1, d3, d6, df)
}
"""
    return text, [_n(rng, (8, 64)), _n(rng, (64, 16))]
