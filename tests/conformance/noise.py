"""Program variants used only to *estimate tolerances* (never stored as references).

Two implementations of the same HLO (XLA:CPU and tpusim) differ by f32 rounding noise (summation order,
transcendental approximations).  Where the program rounds a computed value to bf16/f16, that noise
occasionally moves the value across a rounding boundary ("flip"), which then propagates.  The golden
generator measures how much the outputs move under such disturbances:

  promote_f64(text)          every f32 array type made f64: the f32 rounding noise of the whole program
  jitter_rounding(text, ...) every rounding to bf16/f16 of a value that the two implementations may
                             compute differently in the last f32 bits (convert of such a value; dot,
                             convolution and transcendental functions with a low-precision result) first
                             scales the f32 value by (1 +- delta), so a fraction ~delta/ulp of them flips,
                             as they would under f32 noise of relative size delta.  Values known exactly on
                             both sides (parameters, constants, data movement and correctly rounded
                             arithmetic of those) are rounded identically by both and are not touched.
"""

import re

import hlo_text as ht

LOW = ('bf16', 'f16')
# elementwise ops that are not correctly rounded (implementations differ in the last f32 bits)
ARITH = {'exponential', 'exponential-minus-one', 'log', 'log-plus-one', 'tanh', 'logistic', 'rsqrt', 'cbrt',
         'power', 'sine', 'cosine', 'tan', 'erf', 'atan2'}


def promote_f64(text):
    """Same program with every f32 array type made f64 (bf16/f16/f8 parts untouched)."""
    return re.sub(r'(?<![\w.%])f32\[', 'f64[', text)


def _retype(shape, et):
    i = shape.index('[')
    return et + shape[i:]


# Ops whose result is bit-identical on any IEEE implementation when their operands are (data movement,
# exact or correctly rounded arithmetic).  Anything else (dot, convolution, add-reductions, transcendental
# functions, ...) may differ in the last bits between XLA:CPU and tpusim.
EXACT_OPS = {
    'parameter', 'constant', 'iota', 'reshape', 'transpose', 'broadcast', 'copy', 'bitcast', 'slice',
    'concatenate', 'reverse', 'pad', 'dynamic-slice', 'dynamic-update-slice', 'gather', 'get-tuple-element',
    'tuple', 'convert', 'bitcast-convert', 'add', 'subtract', 'multiply', 'divide', 'sqrt', 'maximum',
    'minimum', 'negate', 'abs', 'compare', 'select', 'clamp', 'and', 'or', 'xor', 'not', 'floor', 'ceil',
    'round-nearest-afz', 'round-nearest-even', 'sign', 'remainder', 'shift-left', 'shift-right-logical',
    'shift-right-arithmetic', 'reduce-precision', 'is-finite', 'sort', 'opt-barrier', 'popcnt',
    'count-leading-zeros', 'rng-bit-generator',
}
_ORDER_FREE_REDUCERS = {'maximum', 'minimum', 'and', 'or'}


def _callee(v):
    return v.strip().lstrip('%')


def exact_values(mod):
    """{computation name: {instruction name: bool or [bool per tuple element]}}: which values are
    bit-identical across implementations (entry parameters are; see EXACT_OPS), with while/call/fusion/
    conditional followed into their computations (fixed point)."""
    comps = {c.name: c for c in mod.computations}
    entry = mod.entry().name
    param_in = {entry: None}          # comp -> list of purity per parameter (None = all True)
    result = {}

    def all_(p):
        return all(all_(x) for x in p) if isinstance(p, list) else bool(p)

    def meet(a, b):
        if a is None:
            return b
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            return [meet(x, y) for x, y in zip(a, b)]
        return all_(a) and all_(b)

    def reducer_exact(name):
        c = comps.get(_callee(name))
        return c is not None and c.root().opcode in _ORDER_FREE_REDUCERS

    def evaluate(comp):
        vals = {}
        params = param_in.get(comp.name)
        root_val = None
        for ins in comp.instrs:
            op = ins.opcode
            ops = [vals.get(o, False) for o in ins.operands]
            if op == 'parameter':
                k = int(ins.operands_text)
                v = True if params is None else (params[k] if k < len(params) else False)
            elif op == 'get-tuple-element':
                src = ops[0] if ops else False
                k = int(ins.attrs.get('index', 0))
                v = src[k] if isinstance(src, list) and k < len(src) else all_(src)
            elif op == 'tuple':
                v = [all_(x) for x in ops]
            elif op in ('while',):
                body, cond = comps[_callee(ins.attrs['body'])], comps[_callee(ins.attrs['condition'])]
                init = ops[0] if ops else False
                cur = init
                for _ in range(20):
                    param_in[body.name] = [cur]
                    r = evaluate(body)
                    nxt = meet(init, r) if isinstance(r, list) == isinstance(init, list) else all_(init) and all_(r)
                    if nxt == cur:
                        break
                    cur = nxt
                param_in[body.name] = [cur]
                param_in[cond.name] = [cur]
                v = cur
            elif op in ('call', 'fusion'):
                callee = comps[_callee(ins.attrs.get('to_apply') or ins.attrs['calls'])]
                param_in[callee.name] = meet(param_in.get(callee.name, None), ops) \
                    if callee.name in param_in else ops
                v = evaluate(callee)
            elif op == 'conditional':
                names = []
                if 'branch_computations' in ins.attrs:
                    names = [_callee(x) for x in ins.attrs['branch_computations'].strip('{}').split(',')]
                else:
                    names = [_callee(ins.attrs['true_computation']), _callee(ins.attrs['false_computation'])]
                v = all_(ops[0]) if ops else False
                outs = []
                for k, n in enumerate(names):
                    param_in[n] = [ops[k + 1]] if k + 1 < len(ops) else [False]
                    outs.append(evaluate(comps[n]))
                r = outs[0]
                for o in outs[1:]:
                    r = meet(r, o)
                v = meet(r, v) if isinstance(r, list) else (all_(r) and v)
            elif op in ('reduce', 'reduce-window'):
                v = all(all_(x) for x in ops) and reducer_exact(ins.attrs.get('to_apply', ''))
            elif op in EXACT_OPS:
                v = all(all_(x) for x in ops)
            else:
                v = False
            vals[ins.name] = v
            if ins.is_root:
                root_val = v
        result[comp.name] = vals
        if root_val is None and comp.instrs:
            root_val = vals[comp.instrs[-1].name]
        return root_val

    evaluate(comps[entry])
    return result


def jitter_rounding(text, delta, rng):
    """Scale every computed value by (1 +- delta) (sign drawn per instruction) just before it is rounded
    to bf16/f16.  Values that are bit-identical on both sides (see exact_values) are not touched: both
    implementations round them the same way.  Returns (new_text, number of instructions changed)."""
    mod = ht.Module(text)
    exact = exact_values(mod)
    lines = list(mod.lines)
    used = mod.all_names()
    changed = 0

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
        ex = exact.get(comp.name, {})
        for ins in comp.instrs:
            if ins.shape.startswith('('):
                continue
            et = ht.element_type(ins.shape)
            if et not in LOW:
                continue
            op = ins.opcode
            new = []
            factor = 1.0 + delta * (1 if rng.random() < 0.5 else -1)
            attrs = (', ' + ins.attrs_text) if ins.attrs_text else ''
            if op == 'convert':
                src = shapes[ins.operands[0]]
                set_ = ht.element_type(src)
                if set_ not in ('f32', 'f64') or ex.get(ins.operands[0], False) is True:
                    continue   # rounding an exactly known value: both sides agree
                c, b, x = fresh(ins.name, 'jc'), fresh(ins.name, 'jb'), fresh(ins.name, 'jx')
                new.append('  %s = %s[] constant(%r)' % (c, set_, factor))
                new.append('  %s = %s broadcast(%s), dimensions={}' % (b, src, c))
                new.append('  %s = %s multiply(%s, %s)' % (x, src, ins.operands[0], b))
                new.append('%s%s = %s convert(%s)%s' % (ins.prefix, ins.name, ins.shape, x, attrs))
            elif op in ('dot', 'convolution') or op in ARITH:
                f_shape = _retype(ins.shape, 'f32')
                ops = ins.operands
                if op in ARITH:
                    conv_ops = []
                    for o in ops:
                        so = shapes[o]
                        if ht.element_type(so) != et:
                            break
                        co = fresh(o, 'jf')
                        new.append('  %s = %s convert(%s)' % (co, _retype(so, 'f32'), o))
                        conv_ops.append(co)
                    else:
                        ops = conv_ops
                    if len(ops) != len(conv_ops):
                        continue
                y, c, b, x = fresh(ins.name, 'jy'), fresh(ins.name, 'jc'), fresh(ins.name, 'jb'), \
                    fresh(ins.name, 'jx')
                new.append('  %s = %s %s(%s)%s' % (y, f_shape, op, ', '.join(ops), attrs))
                new.append('  %s = f32[] constant(%r)' % (c, factor))
                new.append('  %s = %s broadcast(%s), dimensions={}' % (b, f_shape, c))
                new.append('  %s = %s multiply(%s, %s)' % (x, f_shape, y, b))
                new.append('%s%s = %s convert(%s)' % (ins.prefix, ins.name, ins.shape, x))
            else:
                continue
            lines[ins.line_no] = '\n'.join(new)
            changed += 1
    return '\n'.join(lines), changed
