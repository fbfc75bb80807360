#!/usr/bin/env python3
"""scale_gen.py KIND N OUT.hlo — generated programs for the scaling benchmark (bench/scale.py).

  chain   N chained adds: a1 = add(p, p), a2 = add(a1, p), ... (one long dependency chain)
  wide    N independent adds of the parameter, summed by a tree of adds at the end
  calls   N call instructions in a chain, each calling the same small computation
  nested  N computations, each calling the next (a call chain N deep)
  attrs   N attributes the parser does not know, 10 on each of N/10 chained adds
  while   a loop of N iterations whose body is a chain of 10 adds (run time grows with N, program size does not)
"""
import sys


def gen(kind, n, w):
    w("HloModule scale_%s_%d\n\n" % (kind, n))
    if kind == "chain":
        w("ENTRY e {\n  p = f32[8] parameter(0)\n  a0 = f32[8] add(p, p)\n")
        for i in range(1, n):
            w("  a%d = f32[8] add(a%d, p)\n" % (i, i - 1))
        w("  ROOT r = f32[8] negate(a%d)\n}\n" % (n - 1))
    elif kind == "wide":
        w("ENTRY e {\n  p = f32[8] parameter(0)\n")
        for i in range(n):
            w("  a%d = f32[8] add(p, p)\n" % i)
        level, k = ["a%d" % i for i in range(n)], 0
        while len(level) > 1:
            nxt = []
            for j in range(0, len(level) - 1, 2):
                w("  s%d = f32[8] add(%s, %s)\n" % (k, level[j], level[j + 1]))
                nxt.append("s%d" % k)
                k += 1
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        w("  ROOT r = f32[8] negate(%s)\n}\n" % level[0])
    elif kind == "calls":
        w("f {\n  x = f32[8] parameter(0)\n  ROOT y = f32[8] negate(x)\n}\n\n")
        w("ENTRY e {\n  p = f32[8] parameter(0)\n  c0 = f32[8] call(p), to_apply=f\n")
        for i in range(1, n):
            w("  c%d = f32[8] call(c%d), to_apply=f\n" % (i, i - 1))
        w("  ROOT r = f32[8] negate(c%d)\n}\n" % (n - 1))
    elif kind == "nested":
        w("f0 {\n  x = f32[8] parameter(0)\n  ROOT y = f32[8] negate(x)\n}\n\n")
        for i in range(1, n):
            w("f%d {\n  x = f32[8] parameter(0)\n  ROOT y = f32[8] call(x), to_apply=f%d\n}\n\n" % (i, i - 1))
        w("ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT r = f32[8] call(p), to_apply=f%d\n}\n" % (n - 1))
    elif kind == "attrs":
        w("ENTRY e {\n  p = f32[8] parameter(0)\n  a0 = f32[8] add(p, p)\n")
        extra = ", ".join("tpusim_unknown_%d=%d" % (k, k) for k in range(10))
        m = max(2, n // 10)
        for i in range(1, m):
            w("  a%d = f32[8] add(a%d, p), %s\n" % (i, i - 1, extra))
        w("  ROOT r = f32[8] negate(a%d)\n}\n" % (m - 1))
    elif kind == "while":
        w("cond {\n  s = (s32[], f32[8]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
          "  n = s32[] constant(%d)\n  ROOT c = pred[] compare(i, n), direction=LT\n}\n\n" % n)
        w("body {\n  s = (s32[], f32[8]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
          "  x = f32[8] get-tuple-element(s), index=1\n  one = s32[] constant(1)\n  j = s32[] add(i, one)\n  a0 = f32[8] add(x, x)\n")
        for k in range(1, 10):
            w("  a%d = f32[8] add(a%d, x)\n" % (k, k - 1))
        w("  ROOT t = (s32[], f32[8]) tuple(j, a9)\n}\n\n")
        w("ENTRY e {\n  p = f32[8] parameter(0)\n  z = s32[] constant(0)\n  s = (s32[], f32[8]) tuple(z, p)\n"
          "  w = (s32[], f32[8]) while(s), condition=cond, body=body\n  ROOT r = f32[8] get-tuple-element(w), index=1\n}\n")
    else:
        raise SystemExit("unknown kind " + kind)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    with open(sys.argv[3], "w") as f:
        gen(sys.argv[1], int(sys.argv[2]), f.write)
