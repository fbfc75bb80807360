"""The in-process Python API (tpusim.run/check/memory/profile over libtpusim.so): every kind of program it
takes, numpy in and out, TPU and exact numerics against numpy/jax, errors as TpusimError with tpusim's
message, and the files profile writes. Run by `make test-python` (part of `make test`)."""
import os

import ml_dtypes
import numpy as np
import pytest

import tpusim

jax = pytest.importorskip("jax")
jnp = jax.numpy

DOT_HLO = """HloModule dot
ENTRY main {
  x = f32[4,8]{1,0} parameter(0)
  w = f32[8,3]{1,0} parameter(1)
  ROOT d = f32[4,3]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

TUPLE_HLO = """HloModule tup
ENTRY main {
  a = s32[3]{0} parameter(0)
  b = bf16[2,2]{1,0} parameter(1)
  s = s32[3]{0} add(a, a)
  c = pred[3]{0} compare(a, s), direction=LT
  ROOT t = (s32[3]{0}, pred[3]{0}, bf16[2,2]{1,0}) tuple(s, c, b)
}
"""


def _f(x, w):
    return jnp.tanh(x @ w) + 1.0


@pytest.fixture(scope="module")
def xw():
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)


def test_run_hlo_text_exact_matches_numpy(xw):
    x, w = xw
    (out,) = tpusim.run(DOT_HLO, x, w, numerics="exact")
    assert out.dtype == np.float32 and out.shape == (4, 3)
    np.testing.assert_allclose(out, x @ w, rtol=1e-5, atol=1e-6)


def test_run_tpu_numerics_rounds_dot_operands_to_bf16(xw):
    x, w = xw
    (out,) = tpusim.run(DOT_HLO, x, w)
    bf = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float32)   # noqa: E731
    np.testing.assert_allclose(out, bf(x) @ bf(w), rtol=1e-5, atol=1e-5)
    assert np.abs(out - x @ w).max() > 1e-4   # not the f32 result: the TPU's one bf16 pass


def test_tuple_outputs_and_dtypes():
    a = np.array([1, -2, 3], np.int32)
    b = np.array([[1.5, 2], [3, 4]], ml_dtypes.bfloat16)
    s, c, bb = tpusim.run(TUPLE_HLO, a, b)
    np.testing.assert_array_equal(s, 2 * a)
    assert c.dtype == np.bool_ and c.tolist() == [True, False, True]
    assert bb.dtype == ml_dtypes.bfloat16 and np.array_equal(bb, b)


def test_program_kinds(tmp_path, xw):
    """A path (str and PathLike), bytes, a jax function, a Lowered, StableHLO text, bytecode, a jax export."""
    x, w = xw
    want = np.asarray(jax.jit(_f)(x, w))
    hlo = tmp_path / "dot.hlo"
    hlo.write_text(DOT_HLO)
    for prog in (str(hlo), hlo, DOT_HLO.encode()):
        np.testing.assert_allclose(tpusim.run(prog, x, w, numerics="exact")[0], x @ w, rtol=1e-5, atol=1e-6)
    lowered = jax.jit(_f).lower(x, w)
    exported = jax.export.export(jax.jit(_f))(x, w)
    (tmp_path / "f.mlir").write_text(lowered.as_text())
    (tmp_path / "f.mlirbc").write_bytes(exported.mlir_module_serialized)
    (tmp_path / "f.jax_exported").write_bytes(exported.serialize())
    progs = [_f, lowered, lowered.as_text(), exported, tmp_path / "f.mlir", tmp_path / "f.mlirbc",
             tmp_path / "f.jax_exported", (tmp_path / "f.jax_exported").read_bytes()]
    for prog in progs:
        (out,) = tpusim.run(prog, x, w, numerics="exact")
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=repr(prog)[:80])


def test_pytree_arguments_are_flattened():
    def g(params, x):
        return x @ params["w"] + params["b"]
    params = {"b": np.ones(3, np.float32), "w": np.eye(8, 3, dtype=np.float32)}
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    (out,) = tpusim.run(g, params, x, numerics="exact")
    np.testing.assert_allclose(out, x @ params["w"] + 1)


def test_random_inputs_are_deterministic():
    a = tpusim.run(DOT_HLO, seed=3)[0]
    b = tpusim.run(DOT_HLO, seed=3)[0]
    c = tpusim.run(DOT_HLO, seed=4)[0]
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_errors_carry_tpusims_message(tmp_path, xw):
    x, w = xw
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.run("HloModule bad\nENTRY main {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] nosuchop(x)\n}\n", x)
    assert e.value.status == "PARSE" and "<text>:4:" in str(e.value) and "nosuchop" in str(e.value)
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.run(DOT_HLO, x)                      # one input missing
    assert e.value.status == "INVALID" and "2" in str(e.value)
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.run(DOT_HLO, x, w.T)                 # wrong shape
    assert e.value.status == "INVALID" and "f32[3,8]" in str(e.value)
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.check(str(tmp_path / "missing.hlo") + "\n")   # not a path (has a newline): text that does not parse
    assert e.value.status == "PARSE"
    with pytest.raises(TypeError):
        tpusim.check(DOT_HLO, x)                    # arguments are for functions only
    with pytest.raises(TypeError):
        tpusim.run(12345)
    with pytest.raises(ValueError):
        tpusim.run(DOT_HLO, x, w, numerics="fast")
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.run(DOT_HLO, x.astype(np.float64), w)
    assert e.value.status == "INVALID"


def test_stablehlo_without_jaxlib_names_the_pip_command(monkeypatch, xw):
    from tpusim.plugin import frontend

    def missing(code):
        raise ImportError("No module named 'jaxlib'")
    monkeypatch.setattr(frontend, "stablehlo_to_hlo", missing)
    x, w = xw
    with pytest.raises(tpusim.TpusimError) as e:
        tpusim.check(jax.jit(_f).lower(x, w).as_text())
    assert e.value.status == "UNSUPPORTED" and "pip install jax==0.10.2" in str(e.value)


def test_check_reports_problems():
    ok = tpusim.check(DOT_HLO, chip="v5e")
    assert ok["compatible"] is True and ok["errors"] == 0 and "compatible" in ok["text"]
    cb = ('HloModule cb\nENTRY main {\n  x = f32[8]{0} parameter(0)\n'
          '  ROOT n = f32[8]{0} custom-call(x), custom_call_target="xla_python_cpu_callback"\n}\n')
    bad = tpusim.check(cb)
    assert bad["compatible"] is False and bad["errors"] == 1 and "NOT COMPATIBLE" in bad["verdict"]
    (prob,) = bad["problems"]
    assert prob["where"] == "<text>:4:8" and prob["opcode"] == "custom-call" and "host" in prob["message"]


def test_memory_fits_and_out_of_memory(tmp_path):
    m = tpusim.memory(DOT_HLO, chip="v3-8", html=tmp_path / "mem.html")
    assert m["fits"] is True and m["peak_bytes"] > 0 and (tmp_path / "mem.html").stat().st_size > 1000
    big = "HloModule big\nENTRY main {\n  x = f32[80000,80000]{1,0} parameter(0)\n  ROOT y = f32[80000,80000]{1,0} negate(x)\n}\n"
    oom = tpusim.memory(big, chip="v5e")
    assert oom["fits"] is False and "Ran out of memory in memory space hbm" in oom["report"]


def test_profile_lowers_a_function_and_writes_files(tmp_path):
    spec = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)
    p = tpusim.profile(lambda a, b: a @ b, spec, spec, chip="v5e-8", trace=tmp_path / "t.json",
                       html=tmp_path / "r.html", tensorboard=tmp_path / "tb", run_name="r1")
    assert p["step_time_s"] > 0 and p["bound"] in ("compute", "memory", "overhead", "host", "vector")
    assert p["ops"] and p["ops"][0]["name"] and "step time" in p["summary"]
    assert p["flops"] == pytest.approx(2 * 2048 ** 3, rel=0.01)
    files = p["files"]
    assert files[0] == str(tmp_path / "t.json") and files[1] == str(tmp_path / "r.html")
    assert files[2].startswith(str(tmp_path / "tb" / "plugins" / "profile" / "r1")) and files[2].endswith(".xplane.pb")
    for f in files:
        assert os.path.getsize(f) > 100
    # the same program on a faster chip is faster
    q = tpusim.profile(lambda a, b: a @ b, spec, spec, chip="v6e-8")
    assert q["step_time_s"] < p["step_time_s"]


def test_load_text_is_canonical_hlo(xw):
    x, w = xw
    text = tpusim.load_text(_f, x, w)
    assert text.startswith("HloModule") and "dot(" in text and "tanh(" in text
    assert tpusim.load_text(text) == text   # print -> parse -> print is stable
