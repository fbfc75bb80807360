#!/usr/bin/env python3
"""Makes the golden values for tests/t_fp.c from numpy, ml_dtypes and jax (XLA:CPU).

    pip install ml_dtypes jax        # numpy 2.x
    python3 tests/golden/make_fp_golden.py      # writes tests/golden/fp/*.bin

Every file is raw little-endian data with no header, gzip-compressed (NAME.bin.gz; t_fp.c reads them with
zlib's gzread); t_fp.c knows the layouts:

  bf16_to_f32.bin   65536 u32: f32 bits of every bf16 bit pattern (ml_dtypes)
  f16_to_f32.bin    65536 u32: f32 bits of every f16 bit pattern (numpy)
  small_to_f32.bin  9 x 256 u32: f32 bits of every bit pattern of each small type in SMALL order (ml_dtypes;
                    f4e2m1fn: pattern b is b & 15, since tpusim keeps one f4 per byte in the low nibble)
  f32_in.bin        N f32 inputs: specials, every value and midpoint (tie) of the 8/4-bit formats and
                    their f32 neighbours, a sample of bf16/f16 ties, subnormals, overflow edges, random bits
  f32_bf16.bin      N u16   ml_dtypes  astype(bfloat16)
  f32_f16.bin       N u16   numpy      astype(float16)
  f32_small.bin     9 x N u8  ml_dtypes astype(each small type), SMALL order
  f32_rp.bin        len(RP32) x N u32: jax.lax.reduce_precision(x, e, m) on XLA:CPU for each (e, m) in RP32
  f64_in.bin        M f64 inputs: specials, ties of every format, and values a hair (far below f32
                    precision) off those ties, which a conversion that rounds through f32 gets wrong
  f64_bf16.bin      M u16   exact single rounding (reference below; ml_dtypes rounds f64 -> f32 -> bf16)
  f64_f16.bin       M u16   numpy astype(float16) (numpy rounds f64 -> f16 directly)
  f64_small.bin     9 x M u8  exact single rounding (reference below; ml_dtypes 0.5+ rounds f64 -> f8 through
                    a narrower type, so it differs on the "hair off a tie" inputs; the script counts them)
  f64_rp.bin        len(RP64) x M u64: jax.lax.reduce_precision with jax_enable_x64

NaN results to f16 are compared by sign and NaN-ness only (numpy keeps signaling NaNs signaling; tpusim
quiets them). The script checks its exact reference encoder against ml_dtypes/numpy on every input where
those round once, so the reference itself is tested.
"""
import gzip
import math
import os
import random
import sys
from fractions import Fraction

import numpy as np
import ml_dtypes as md

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fp")

# name, ml_dtypes type, ebits, mbits, bias, kind  (kind as in src/util/fp.c)
SMALL = [
    ("f8e5m2", md.float8_e5m2, 5, 2, 15, "ieee"),
    ("f8e4m3fn", md.float8_e4m3fn, 4, 3, 7, "fn"),
    ("f8e4m3b11fnuz", md.float8_e4m3b11fnuz, 4, 3, 11, "fnuz"),
    ("f8e5m2fnuz", md.float8_e5m2fnuz, 5, 2, 16, "fnuz"),
    ("f8e4m3fnuz", md.float8_e4m3fnuz, 4, 3, 8, "fnuz"),
    ("f8e4m3", md.float8_e4m3, 4, 3, 7, "ieee"),
    ("f8e3m4", md.float8_e3m4, 3, 4, 3, "ieee"),
    ("f4e2m1fn", md.float4_e2m1fn, 2, 1, 1, "f4"),
    ("f8e8m0fnu", md.float8_e8m0fnu, 8, 0, 127, "e8m0"),
]
BF16 = ("bf16", md.bfloat16, 8, 7, 127, "ieee")
F16 = ("f16", np.float16, 5, 10, 15, "ieee")
RP32 = [(8, 7), (5, 10), (4, 3), (5, 2), (2, 1), (1, 0), (6, 4), (8, 23)]
RP64 = [(11, 52), (8, 23), (8, 7), (5, 10), (11, 20), (3, 2)]


def max_finite(f):
    _, _, e, m, _, kind = f
    allb = (1 << (e + m)) - 1
    return {"ieee": allb - (1 << m), "fn": allb - 1, "e8m0": 0xFE}.get(kind, allb)


def enc_inf(f, sign):
    _, _, e, m, _, kind = f
    s = sign << (e + m)
    if kind == "ieee":
        return s | (((1 << e) - 1) << m)
    if kind == "fn":
        return s | ((1 << (e + m)) - 1)
    if kind == "fnuz":
        return 0x80
    if kind == "f4":
        return s | max_finite(f)
    return 0xFF


def enc_nan(f, sign):
    _, _, e, m, _, kind = f
    s = sign << (e + m)
    if kind == "ieee":
        return s | (((1 << e) - 1) << m) | (1 << (m - 1))
    if kind == "fn":
        return s | ((1 << (e + m)) - 1)
    if kind == "fnuz":
        return 0x80
    if kind == "f4":
        return 0x0 if sign else 0x8
    return 0xFF


def ref_encode(f, x):
    """Exact round-to-nearest-even of the double x into format f (one rounding), with ml_dtypes' specials."""
    _, _, eb, mb, bias, kind = f
    sign = 1 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return enc_nan(f, sign)
    if math.isinf(x):
        return enc_inf(f, sign)
    if x == 0:
        return 0xFF if kind == "e8m0" else 0 if kind == "fnuz" else sign << (eb + mb)
    if kind == "e8m0" and sign:
        return 0xFF
    a = Fraction(abs(x))
    e = math.frexp(abs(x))[1] - 1
    emin = 1 - bias
    qe = max(e, emin) - mb
    n = round(a / Fraction(2) ** qe)  # Fraction rounding is half-to-even
    bits = n + ((e - emin) << mb if e >= emin else 0)
    if bits > max_finite(f):
        return enc_inf(f, sign)
    if kind == "e8m0":
        return bits
    if bits == 0 and kind == "fnuz":
        return 0
    return (sign << (eb + mb)) | bits


def decode_all(f):
    """Finite non-negative values of format f, sorted, as exact Fractions (via ml_dtypes)."""
    nbits = 16 if f[1] in (md.bfloat16, np.float16) else 8
    if f[5] == "f4":
        pats = np.arange(16, dtype=np.uint8)
    elif nbits == 16:
        pats = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    else:
        pats = np.arange(256, dtype=np.uint8)
    vals = pats.view(f[1]).astype(np.float64)
    vals = sorted({Fraction(float(v)) for v in vals if np.isfinite(v) and v >= 0})
    return vals


def f32(x):
    return float(np.float32(x))


def f32_neighbours(v):
    """v rounded to f32 and its two f32 neighbours."""
    x = np.float32(v)
    return [float(x), float(np.nextafter(x, np.float32(np.inf))), float(np.nextafter(x, np.float32(-np.inf)))]


def make_f32_inputs(rng):
    xs = []
    specials = [0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 2.0 ** -149, 2.0 ** -126, 2.0 ** -126 - 2.0 ** -149,
                float(np.finfo(np.float32).max), -float(np.finfo(np.float32).max), 65504.0, 65520.0, 65519.99,
                448.0, 464.0, 480.0, 57344.0, 61440.0, 240.0, 248.0, 30.0, 15.5, 15.75, 6.0, 7.0, 1e30, -1e-30]
    xs += specials
    nan_bits = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0x7FC00001]
    xs_bits = list(nan_bits)
    for f in SMALL:
        vals = decode_all(f)
        for i, v in enumerate(vals):
            xs += f32_neighbours(v)
            if i + 1 < len(vals):
                xs += f32_neighbours((v + vals[i + 1]) / 2)
        top = vals[-1]
        if len(vals) > 1:
            step = top - vals[-2]
            xs += f32_neighbours(top + step / 2) + f32_neighbours(top + step)
    for f in (BF16, F16):
        vals = decode_all(f)
        picks = sorted(set(rng.sample(range(len(vals) - 1), 250)) | {0, 1, 2, len(vals) - 2})
        if f is F16:
            picks += list(range(1020, 1030))   # around the subnormal/normal boundary
        for i in picks:
            xs += f32_neighbours(vals[i]) + f32_neighbours((vals[i] + vals[i + 1]) / 2)
        step = vals[-1] - vals[-2]
        xs += f32_neighbours(vals[-1] + step / 2)
    neg = [-x for x in xs[: len(xs)]]
    xs += rng.sample(neg, len(neg) // 3)
    # f32 subnormal inputs (bf16 keeps them, the _ftz forms flush them)
    xs_bits += [1, 2, 0x7FFFFF, 0x400000, 0x400001, 0x3FFFFF, 0x8000FFFF, 0x00007FFF, 0x00008000, 0x00018000]
    xs_bits += [rng.getrandbits(32) for _ in range(600)]
    a = np.array(xs, dtype=np.float32)
    b = np.array(xs_bits, dtype=np.uint32).view(np.float32)
    allv = np.concatenate([a, b])
    # dedupe by bits, keep order
    _, idx = np.unique(allv.view(np.uint32), return_index=True)
    return allv[np.sort(idx)]


def make_f64_inputs(rng):
    xs = [0.0, -0.0, math.inf, -math.inf, 1.0, 2.0 ** -1074, 2.0 ** -1022, 1e300, -1e-300, 2.0 ** -127, 2.0 ** -150,
          float(np.finfo(np.float32).max), 3.4028235677973366e38, 65520.0, 65519.999999999, 448.0, 464.0,
          464.0000000001, 463.9999999999]
    bits = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF4000000000000]
    for f in SMALL + [BF16, F16]:
        vals = decode_all(f)
        if len(vals) > 600:
            picks = sorted(set(rng.sample(range(len(vals) - 1), 150)) | {0, 1, len(vals) - 2})
        else:
            picks = range(len(vals) - 1)
        for i in picks:
            mid = (vals[i] + vals[i + 1]) / 2
            for rel in (0, 2.0 ** -35, -(2.0 ** -35)):
                x = float(mid * (1 + Fraction(rel)))
                xs += [x, -x]
            xs.append(float(vals[i]))
        step = vals[-1] - vals[-2]
        xs += [float(vals[-1] + step / 2), float(vals[-1] + step / 2) * (1 + 2 ** -40),
               float(vals[-1] + step / 2) * (1 - 2 ** -40)]
    for _ in range(400):
        xs.append(float(np.uint64(rng.getrandbits(64)).view(np.float64)))
    a = np.concatenate([np.array(xs, dtype=np.float64), np.array(bits, dtype=np.uint64).view(np.float64)])
    _, idx = np.unique(a.view(np.uint64), return_index=True)
    return a[np.sort(idx)]


def bits_of(arr):
    return arr.view(np.uint16 if arr.dtype.itemsize == 2 else np.uint8)


def nan_eq16(got, want):
    """u16 arrays equal, or both f16 NaN with the same sign."""
    def isnan(u):
        return ((u & 0x7C00) == 0x7C00) & ((u & 0x3FF) != 0)
    same = got == want
    both = isnan(got) & isnan(want) & ((got & 0x8000) == (want & 0x8000))
    return same | both


def rp_jax(x, configs, x64):
    import jax
    if x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    cpu = jax.devices("cpu")[0]
    xs = jax.device_put(jnp.asarray(x), cpu)
    f = jax.jit(lambda v, e, m: jax.lax.reduce_precision(v, e, m), static_argnums=(1, 2))
    return [np.asarray(f(xs, e, m)) for e, m in configs]


def main():
    np.seterr(all="ignore")
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(20240611)

    def w(name, arr):
        arr = np.ascontiguousarray(arr)
        assert arr.dtype.byteorder in ("<", "=", "|") and sys.byteorder == "little"
        with open(os.path.join(OUT, name + ".gz"), "wb") as fh:   # mtime 0: the same bytes every run
            fh.write(gzip.compress(arr.tobytes(), compresslevel=9, mtime=0))

    # tables
    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    w("bf16_to_f32.bin", all16.view(md.bfloat16).astype(np.float32).view(np.uint32))
    w("f16_to_f32.bin", all16.view(np.float16).astype(np.float32).view(np.uint32))
    tab = []
    for f in SMALL:
        p = np.arange(256, dtype=np.uint8)
        if f[5] == "f4":
            p = p & 15
        tab.append(p.view(f[1]).astype(np.float32).view(np.uint32))
    w("small_to_f32.bin", np.concatenate(tab))

    # f32 inputs
    x32 = make_f32_inputs(rng)
    w("f32_in.bin", x32)
    bf = bits_of(x32.astype(md.bfloat16))
    ref = np.array([ref_encode(BF16, float(v)) for v in x32], dtype=np.uint16)
    assert (bf == ref).all(), "reference bf16 encoder disagrees with ml_dtypes on f32 inputs"
    w("f32_bf16.bin", bf)
    h = bits_of(x32.astype(np.float16))
    ref = np.array([ref_encode(F16, float(v)) for v in x32], dtype=np.uint16)
    assert nan_eq16(h, ref).all(), "reference f16 encoder disagrees with numpy on f32 inputs"
    w("f32_f16.bin", h)
    outs = []
    for f in SMALL:
        got = bits_of(x32.astype(f[1]))
        ref = np.array([ref_encode(f, float(v)) for v in x32], dtype=np.uint8)
        bad = np.nonzero(got != ref)[0]
        assert len(bad) == 0, (f[0], [(float(x32[i]), hex(got[i]), hex(ref[i])) for i in bad[:5]])
        outs.append(got)
    w("f32_small.bin", np.concatenate(outs))
    w("f32_rp.bin", np.concatenate([r.view(np.uint32) for r in rp_jax(x32, RP32, False)]))

    # f64 inputs
    x64 = make_f64_inputs(rng)
    w("f64_in.bin", x64)
    ref = np.array([ref_encode(BF16, float(v)) for v in x64], dtype=np.uint16)
    with np.errstate(all="ignore"):
        mlbf = bits_of(x64.astype(md.bfloat16))
    print(f"f64 -> bf16: ml_dtypes (via f32) differs from single rounding on {int((mlbf != ref).sum())} inputs")
    w("f64_bf16.bin", ref)
    h = bits_of(x64.astype(np.float16))
    ref = np.array([ref_encode(F16, float(v)) for v in x64], dtype=np.uint16)
    assert nan_eq16(h, ref).all(), "reference f16 encoder disagrees with numpy on f64 inputs"
    w("f64_f16.bin", h)
    outs = []
    for f in SMALL:
        got = bits_of(x64.astype(f[1]))
        ref = np.array([ref_encode(f, float(v)) for v in x64], dtype=np.uint8)
        bad = np.nonzero(got != ref)[0]
        # where they differ, ml_dtypes must have rounded the f32 (rounded) value instead of the f64 one
        via32 = np.array([ref_encode(f, float(np.float32(x64[i]))) for i in bad], dtype=np.uint8)
        assert (got[bad] == via32).all(), (f[0], [(float(x64[i]), hex(got[i]), hex(ref[i])) for i in bad[:5]])
        print(f"f64 -> {f[0]}: ml_dtypes (double rounding) differs from single rounding on {len(bad)} inputs")
        outs.append(ref)
    w("f64_small.bin", np.concatenate(outs))
    w("f64_rp.bin", np.concatenate([r.view(np.uint64) for r in rp_jax(x64, RP64, True)]))
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"{len(x32)} f32 inputs, {len(x64)} f64 inputs, {total} bytes in {OUT}")


if __name__ == "__main__":
    main()
