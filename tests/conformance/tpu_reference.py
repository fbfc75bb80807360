"""Rewrite HLO text so that XLA:CPU computes dots and convolutions with TPU (MXU) numerics.

XLA:CPU computes every f32 dot/convolution in f32 and ignores `operand_precision`. A TPU feeds its matrix
unit bf16 values and accumulates in f32, so an f32 dot's precision decides how many bf16 passes it gets
(design.md section 4). This module turns HLO text into HLO text whose f32 dots/convolutions do exactly
that with plain HLO ops, so that XLA:CPU run on the result is a TPU-numerics reference:

Rule, for every `dot` and `convolution` whose two operands are both f32 (in any computation, fused ones too):

  * precision DEFAULT -- `operand_precision` absent, or `{default,default}`; also
    `algorithm=dot_bf16_bf16_f32`:  one pass.  Both operands are rounded to bf16 once:
        a' = convert_f32(convert_bf16(a)),  b' likewise,  result = dot(a', b')
  * precision HIGH -- the larger of the two operand precisions is `high`; also
    `algorithm=dot_bf16_bf16_f32_x3`:  three passes (bf16x3 split):
        a_hi = convert_f32(convert_bf16(a)),  a_lo = convert_f32(convert_bf16(a - a_hi)),  b likewise
        result = (dot(a_hi, b_lo) + dot(a_lo, b_hi)) + dot(a_hi, b_hi)
    (the two small cross terms are added first, then the big one; each dot is an f32 dot of
    bf16-exact values, i.e. exact products accumulated in f32 as the MXU does)
  * precision HIGHEST (either operand `highest`), `algorithm=dot_f32_f32_f32` or `dot_bf16_bf16_f32_x6`:
    left as is (f32 accuracy).
  * dots whose operands are not both f32 (bf16 x bf16, f64, integers, mixed) are left as is; XLA:CPU
    already accumulates bf16 x bf16 in f32 and rounds once to the result type.
  * if the dot's result type is not f32 (preferred type bf16 for f32 operands), the passes are summed in
    f32 and converted to the result type at the end.

The precision of an instruction is the larger of its operand precisions (default < high < highest),
which is what XLA's TPU backend does with mixed per-operand settings.  f32 -> bf16 conversion is XLA's
`convert` (round to nearest even).  Nothing else in the program changes; elementwise f32 math is the same
on both machines.

Use:  python3 tpu_reference.py program.hlo > program_tpu.hlo     (or import rewrite_for_tpu)
"""

import sys

import hlo_text as ht

_PREC_RANK = {'default': 0, 'high': 1, 'highest': 2}
_ALGO_MODE = {
    'dot_bf16_bf16_f32': 'default',
    'dot_bf16_bf16_f32_x3': 'high',
    'dot_bf16_bf16_f32_x6': 'highest',
    'dot_f32_f32_f32': 'highest',
}


def precision_mode(ins):
    """'default' | 'high' | 'highest' for a dot/convolution instruction."""
    algo = ins.attrs.get('algorithm')
    if algo is not None:
        if algo not in _ALGO_MODE:
            raise ValueError('dot algorithm %s has no TPU rule in this rewriter' % algo)
        return _ALGO_MODE[algo]
    prec = ins.attrs.get('operand_precision')
    if prec is None:
        return 'default'
    vals = [p.strip().lower() for p in prec.strip('{}').split(',') if p.strip()]
    best = 'default'
    for v in vals:
        if v not in _PREC_RANK:
            raise ValueError('unknown operand precision %r' % v)
        if _PREC_RANK[v] > _PREC_RANK[best]:
            best = v
    return best


def _retype(shape, et):
    """Shape string with its element type replaced (layout kept)."""
    i = 0
    while i < len(shape) and shape[i] != '[':
        i += 1
    return et + shape[i:]


def rewrite_for_tpu(text, stats=None):
    """Return the TPU-numerics version of HLO `text`.  `stats` (dict) counts rewritten ops by mode."""
    mod = ht.Module(text)
    lines = list(mod.lines)
    used = mod.all_names()
    if stats is None:
        stats = {}

    def fresh(base, tag):
        n = '%s.%s' % (base, tag)
        k = 1
        while n in used:
            k += 1
            n = '%s.%s%d' % (base, tag, k)
        used.add(n)
        return n

    for comp in mod.computations:
        shapes = {i.name: i.shape for i in comp.instrs}
        for ins in comp.instrs:
            if ins.opcode not in ('dot', 'convolution'):
                continue
            if len(ins.operands) != 2:
                raise ValueError('%s with %d operands' % (ins.opcode, len(ins.operands)))
            a, b = ins.operands
            sa, sb = shapes[a], shapes[b]
            if ht.element_type(sa) != 'f32' or ht.element_type(sb) != 'f32':
                stats['untouched_non_f32'] = stats.get('untouched_non_f32', 0) + 1
                continue
            mode = precision_mode(ins)
            stats[mode] = stats.get(mode, 0) + 1
            if mode == 'highest':
                continue
            new = []

            def round_bf16(x, sx, tag):
                mid = fresh(ins.name, tag + '_bf16')
                out = fresh(ins.name, tag)
                new.append('  %s = %s convert(%s)' % (mid, _retype(sx, 'bf16'), x))
                new.append('  %s = %s convert(%s)' % (out, sx, mid))
                return out

            def call(ops, name, shape):
                attrs = (', ' + ins.attrs_text) if ins.attrs_text else ''
                return '%s = %s %s(%s)%s' % (name, shape, ins.opcode, ', '.join(ops), attrs)

            res_et = ht.element_type(ins.shape)
            f32_shape = _retype(ins.shape, 'f32')
            final_needs_convert = res_et != 'f32'
            if mode == 'default':
                a1 = round_bf16(a, sa, 'tpu_lhs')
                b1 = round_bf16(b, sb, 'tpu_rhs')
                if final_needs_convert:
                    d = fresh(ins.name, 'tpu_dot')
                    new.append('  ' + call([a1, b1], d, f32_shape))
                    new.append('%s%s = %s convert(%s)' % (ins.prefix, ins.name, ins.shape, d))
                else:
                    new.append(ins.prefix + call([a1, b1], ins.name, ins.shape))
            else:  # high: bf16x3
                parts = {}
                for x, sx, tag in ((a, sa, 'tpu_lhs'), (b, sb, 'tpu_rhs')):
                    hi = round_bf16(x, sx, tag + '_hi')
                    diff = fresh(ins.name, tag + '_rem')
                    new.append('  %s = %s subtract(%s, %s)' % (diff, sx, x, hi))
                    lo = round_bf16(diff, sx, tag + '_lo')
                    parts[tag] = (hi, lo)
                (ahi, alo), (bhi, blo) = parts['tpu_lhs'], parts['tpu_rhs']
                d_hl = fresh(ins.name, 'tpu_hi_lo')
                d_lh = fresh(ins.name, 'tpu_lo_hi')
                d_hh = fresh(ins.name, 'tpu_hi_hi')
                s1 = fresh(ins.name, 'tpu_cross')
                new.append('  ' + call([ahi, blo], d_hl, f32_shape))
                new.append('  ' + call([alo, bhi], d_lh, f32_shape))
                new.append('  ' + call([ahi, bhi], d_hh, f32_shape))
                new.append('  %s = %s add(%s, %s)' % (s1, f32_shape, d_hl, d_lh))
                if final_needs_convert:
                    s2 = fresh(ins.name, 'tpu_sum')
                    new.append('  %s = %s add(%s, %s)' % (s2, f32_shape, s1, d_hh))
                    new.append('%s%s = %s convert(%s)' % (ins.prefix, ins.name, ins.shape, s2))
                else:
                    new.append('%s%s = %s add(%s, %s)' % (ins.prefix, ins.name, ins.shape, s1, d_hh))
            lines[ins.line_no] = '\n'.join(new)
    return '\n'.join(lines)


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit('usage: tpu_reference.py program.hlo > program_tpu.hlo')
    with open(sys.argv[1]) as f:
        sys.stdout.write(rewrite_for_tpu(f.read()))
