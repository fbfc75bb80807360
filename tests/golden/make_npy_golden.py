#!/usr/bin/env python3
"""Makes the .npy/.npz files that tests/t_npy.c loads: written by numpy (2.x) and ml_dtypes, every dtype
tpusim reads, C and Fortran order, both byte orders, header versions 1.0/2.0/3.0, 0-d and empty arrays,
and .npz archives stored (np.savez) and deflated (np.savez_compressed).

    pip install ml_dtypes
    python3 tests/golden/make_npy_golden.py     # writes tests/golden/npy/

MANIFEST.txt lists what each file must load as, one array per line:

    FILE[#MEMBER] DTYPE RANK DIM... : V0 V1 ...      values row-major as %.17g; complex: re im pairs
    order FILE NAME...                              the member names of an .npz, in order
    error FILE TEXT...                              loading must fail with a message containing TEXT

DTYPE is tpusim's name (f32, bf16, f8e4m3fn, ...).
"""
import io
import os
import zipfile

import numpy as np
import ml_dtypes as md

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npy")

# numpy dtype (little-endian), tpusim name
PLAIN = [
    ("|b1", "pred"), ("|i1", "s8"), ("<i2", "s16"), ("<i4", "s32"), ("<i8", "s64"),
    ("|u1", "u8"), ("<u2", "u16"), ("<u4", "u32"), ("<u8", "u64"),
    ("<f2", "f16"), ("<f4", "f32"), ("<f8", "f64"), ("<c8", "c64"), ("<c16", "c128"),
]
# ml_dtypes types, tpusim name, six exact values
ML = [
    (md.float8_e4m3fn, "f8e4m3fn", [-1.25, -0.75, -0.25, 0.25, 0.75, 448.0]),
    (md.float8_e5m2, "f8e5m2", [-1.25, -0.75, -0.25, 0.25, 0.75, 57344.0]),
    (md.float8_e4m3b11fnuz, "f8e4m3b11fnuz", [-1.25, -0.75, -0.25, 0.25, 0.75, 30.0]),
    (md.float8_e5m2fnuz, "f8e5m2fnuz", [-1.25, -0.75, -0.25, 0.25, 0.75, 57344.0]),
    (md.float8_e4m3fnuz, "f8e4m3fnuz", [-1.25, -0.75, -0.25, 0.25, 0.75, 240.0]),
    (md.float8_e4m3, "f8e4m3", [-1.25, -0.75, -0.25, 0.25, 0.75, 240.0]),
    (md.float8_e3m4, "f8e3m4", [-1.25, -0.75, -0.25, 0.25, 0.75, 15.5]),
    (md.float4_e2m1fn, "f4e2m1fn", [0.0, 0.5, 1.0, -1.5, 2.0, -6.0]),
    (md.float8_e8m0fnu, "f8e8m0fnu", [0.25, 0.5, 1.0, 2.0, 4.0, 2.0 ** 127]),
    (md.int4, "s4", [-8, -1, 0, 1, 5, 7]),
    (md.uint4, "u4", [0, 1, 2, 9, 14, 15]),
    (md.int2, "s2", [-2, -1, 0, 1, 1, -2]),
    (md.uint2, "u2", [0, 1, 2, 3, 2, 1]),
]

lines = []


def values(a):
    a = np.asarray(a)
    flat = a.reshape(-1)   # row-major whatever the memory order
    out = []
    for v in flat:
        if np.iscomplexobj(flat):
            out += [repr(float(v.real)), repr(float(v.imag))]
        else:
            out.append("%.17g" % float(v))
    return out


def record(fname, tname, a):
    a = np.asarray(a)
    lines.append(" ".join([fname, tname, str(a.ndim)] + [str(d) for d in a.shape] + [":"] + values(a)))


def sample(dt):
    dt = np.dtype(dt)
    i = np.arange(6)
    if dt.kind == "b":
        return (i % 2 == 1).reshape(2, 3)
    if dt.kind == "i":
        return (i * 37 - 100).astype(dt).reshape(2, 3)
    if dt.kind == "u":
        return (i * 41).astype(dt).reshape(2, 3)
    if dt.kind == "f":
        return ((i - 2.5) * 0.75).astype(dt).reshape(2, 3)
    return ((i - 2.5) + 1j * (i * 0.5)).astype(dt).reshape(2, 3)


def save(fname, a, version=None):
    path = os.path.join(OUT, fname)
    if version is None:
        np.save(path, a)
    else:
        with open(path, "wb") as fh:
            np.lib.format.write_array(fh, a, version=version)


def named(a, name):
    """A 1-byte ml_dtypes array as the one-field structured array tpusim writes."""
    return a.view(np.dtype([(name, "V1")]))


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))

    for dt, tn in PLAIN:
        a = sample(dt)
        save(f"{tn}.npy", a)
        record(f"{tn}.npy", tn, a)
    # big-endian
    for dt, tn in [(">i2", "s16"), (">i4", "s32"), (">u8", "u64"), (">f2", "f16"), (">f4", "f32"), (">f8", "f64"),
                   (">c8", "c64"), (">c16", "c128")]:
        a = sample(dt)
        assert a.dtype.byteorder == ">"
        save(f"be_{tn}.npy", a)
        record(f"be_{tn}.npy", tn, a)
    # Fortran order, rank 3 and rank 2, one big-endian
    a = np.asfortranarray(np.arange(24, dtype="<f4").reshape(2, 3, 4) * 0.5)
    save("fortran_f32.npy", a)
    record("fortran_f32.npy", "f32", a)
    a = np.asfortranarray(np.arange(15, dtype=">i8").reshape(5, 3) - 7)
    save("fortran_be_s64.npy", a)
    record("fortran_be_s64.npy", "s64", a)
    a = np.asfortranarray(((np.arange(12) - 5) * 1.5).astype(md.bfloat16).reshape(3, 4))
    save("fortran_bf16.npy", a)
    record("fortran_bf16.npy", "bf16", a)
    # 0-d, empty, rank 1
    save("scalar_f64.npy", np.array(3.25))
    record("scalar_f64.npy", "f64", np.array(3.25))
    save("empty_f32.npy", np.zeros((0, 3), "<f4"))
    record("empty_f32.npy", "f32", np.zeros((0, 3), "<f4"))
    save("empty2_s32.npy", np.zeros((2, 0, 5), "<i4"))
    record("empty2_s32.npy", "s32", np.zeros((2, 0, 5), "<i4"))
    save("vec_u8.npy", np.arange(7, dtype=np.uint8))
    record("vec_u8.npy", "u8", np.arange(7, dtype=np.uint8))
    # header versions
    a = np.arange(6, dtype="<i4").reshape(3, 2)
    save("v2_s32.npy", a, version=(2, 0))
    record("v2_s32.npy", "s32", a)
    save("v3_s32.npy", a, version=(3, 0))
    record("v3_s32.npy", "s32", a)
    # bfloat16 as numpy + ml_dtypes write it: '<V2'
    b = ((np.arange(6) - 2.5) * 0.75).astype(md.bfloat16).reshape(2, 3)
    save("bf16.npy", b)
    record("bf16.npy", "bf16", b)
    b = np.array([1.0, -2.0, np.inf, -0.0, 3.0e38, 1e-40], dtype=md.bfloat16)
    save("bf16_special.npy", b)
    record("bf16_special.npy", "bf16", b)
    # the 1-byte ml_dtypes types, in tpusim's named form; float8_e5m2 also as ml_dtypes writes it ('<f1')
    for t, tn, vals in ML:
        a = np.array(vals, dtype=t).reshape(2, 3)
        save(f"{tn}.npy", named(a, t.__name__))
        record(f"{tn}.npy", tn, a)
    a = np.array(ML[1][2], dtype=md.float8_e5m2).reshape(3, 2)
    save("f8e5m2_f1.npy", a)
    record("f8e5m2_f1.npy", "f8e5m2", a)
    # what tpusim refuses
    save("bare_v1.npy", np.array([1, 2], dtype=md.float8_e4m3fn))
    lines.append("error bare_v1.npy dtype '<V1' is a 1-byte ml_dtypes type")
    save("unicode.npy", np.array(["abc", "de"]))
    lines.append("error unicode.npy unsupported dtype '<U3'")
    save("two_fields.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    lines.append("error two_fields.npy structured dtype with 2 fields is not supported")
    save("f128.npy", np.zeros(2, dtype=np.longdouble))
    lines.append("error f128.npy unsupported dtype '<f16'")

    # .npz: stored and deflated, keyword order kept, positional names
    a = np.arange(12, dtype="<f4").reshape(3, 4)
    z = np.asfortranarray(np.arange(6, dtype=">i2").reshape(2, 3))
    c = ((np.arange(4) - 1.5) * 0.5).astype(md.bfloat16)
    e8 = np.array([-1.25, 0.25, 448.0], dtype=md.float8_e4m3fn)
    members = {"zeta": a, "alpha": z, "mid": c, "f8": named(e8, "float8_e4m3fn"), "s": np.array(7, "<i8")}
    expect = {"zeta": ("f32", a), "alpha": ("s16", z), "mid": ("bf16", c), "f8": ("f8e4m3fn", e8),
              "s": ("s64", np.array(7))}
    for fname, fn in [("stored.npz", np.savez), ("deflated.npz", np.savez_compressed)]:
        fn(os.path.join(OUT, fname), **members)
        lines.append("order " + fname + " " + " ".join(members))
        for k, (tn, v) in expect.items():
            record(f"{fname}#{k}", tn, v)
    np.savez(os.path.join(OUT, "positional.npz"), np.arange(3, dtype="<i4"), np.ones(2, "<f8"))
    lines.append("order positional.npz arr_0 arr_1")
    record("positional.npz#arr_1", "f64", np.ones(2, "<f8"))
    np.savez(os.path.join(OUT, "empty.npz"))
    lines.append("order empty.npz")
    # a larger deflated member that spans several zlib buffers
    big = (np.arange(70000, dtype="<i4") % 1000).reshape(700, 100)
    np.savez_compressed(os.path.join(OUT, "big.npz"), big=big)
    lines.append("order big.npz big")
    # a member that is not .npy-loadable, to check the message names the member
    np.savez(os.path.join(OUT, "bad_member.npz"), good=np.arange(2), text=np.array(["abc"]))
    lines.append("error bad_member.npz member 'text.npy': unsupported dtype '<U3'")
    # written to an unseekable stream: zipfile then uses data descriptors (flag bit 3) with zip64 sizes
    class Unseekable(io.RawIOBase):
        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, b):
            self.data += b
            return len(b)

        def seekable(self):
            return False

        def seek(self, *a):
            raise OSError("unseekable")

        def tell(self):
            raise OSError("unseekable")

    out = Unseekable()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("q.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, np.arange(5, dtype="<u2"))
    zi = zipfile.ZipFile(io.BytesIO(bytes(out.data))).infolist()[0]
    assert zi.flag_bits & 8, "expected a data descriptor"
    with open(os.path.join(OUT, "descriptor.npz"), "wb") as fh:
        fh.write(bytes(out.data))
    lines.append("order descriptor.npz q")
    record("descriptor.npz#q", "u16", np.arange(5, dtype="<u2"))

    with open(os.path.join(OUT, "MANIFEST.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"{len(os.listdir(OUT))} files, {total} bytes in {OUT}")


if __name__ == "__main__":
    main()
