"""What a TPU user sees through jax: the devices of the slice, memory_stats() and HBM accounting (no leaks),
the framework's memory and cost analyses, donation, the TPU compiler's refusals as Python exceptions, the
"Found TPU system" line, and TPUSIM_PROFILE_DIR."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src.lib import xla_client as xc

from tpusim.plugin import frontend


def in_use(dev):
    return dev.memory_stats()["bytes_in_use"]


def test_devices_of_a_v3_8(tpu):
    assert len(tpu) == 8
    d = tpu[5]
    assert d.platform == "tpu" and d.device_kind == "TPU v3"
    assert d.core_on_chip == 1 and tuple(d.coords) == (0, 1, 0)    # chip 2 of the 2x2 board, second core
    assert d.num_cores == 1 and d.simulator == "tpusim"
    assert jax.devices("tpusim") == tpu
    stats = d.memory_stats()
    assert stats["bytes_limit"] == int(15.48 * 2**30) or abs(stats["bytes_limit"] - 15.48 * 2**30) < 2**24
    assert "simulated TPU v3-8" in d.client.platform_version


def test_memory_stats_count_padded_buffers_and_nothing_leaks(tpu):
    d = tpu[2]
    base = in_use(d)
    x = jax.device_put(np.ones((100, 100), np.float32), d)
    # f32[100,100] in HBM: tiles of (8,128) -> 104 x 128 x 4 bytes
    assert in_use(d) - base == 104 * 128 * 4
    assert d.memory_stats()["peak_bytes_in_use"] >= in_use(d)
    ys = [jax.jit(lambda a, i=i: a * i + 1)(x) for i in range(5)]
    assert in_use(d) > base + 104 * 128 * 4
    del ys, x
    assert in_use(d) == base


def test_donation_reuses_the_argument(tpu):
    d = tpu[0]
    f = jax.jit(lambda a: a * 2, donate_argnums=0)
    a = jax.device_put(np.ones((256, 256), np.float32), d)
    before = in_use(d)
    b = f(a)
    assert a.is_deleted()
    assert in_use(d) == before   # the result took the donated buffer's place
    with pytest.raises(Exception, match="deleted|donated"):
        np.asarray(a)
    np.testing.assert_array_equal(np.asarray(b), 2)


def test_memory_analysis_and_cost_analysis(tpu):
    a = jnp.ones((256, 512), jnp.float32)
    b = jnp.ones((512, 128), jnp.float32)
    c = jax.jit(lambda a, b: jnp.tanh(a @ b)).lower(a, b).compile()
    m = c.memory_analysis()
    assert m.argument_size_in_bytes == (256 * 512 + 512 * 128) * 4
    assert m.output_size_in_bytes == 256 * 128 * 4
    text = c.as_text()   # the program tpusim runs, as jax shows a compiled program
    assert "HloModule" in text and "dot(" in text and "tanh(" in text
    cost = c.cost_analysis()
    assert cost["flops"] >= 2 * 256 * 512 * 128
    assert cost["optimal_seconds"] > 0 and cost["bytes accessed"] >= m.argument_size_in_bytes


def test_out_of_memory_at_compile_time_in_the_tpu_compilers_words(tpu):
    with pytest.raises(Exception) as e:
        jax.jit(lambda: jnp.zeros((2**32,), jnp.float32)).lower().compile()
    msg = str(e.value)
    assert "RESOURCE_EXHAUSTED" in msg and "Ran out of memory in memory space hbm" in msg
    assert "Largest program allocations in hbm" in msg and "f32[4294967296]" in msg


def test_host_callbacks_run_on_the_host(tpu, capfd):
    """jax.debug.print and jax.pure_callback: the program's sends and receives reach the framework's host
    callbacks, also inside a loop and on every device of a partitioned program; a failing callback fails the
    execution with its Python error."""
    def f(x):
        jax.debug.print("tpusim says {}", x)
        return jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct((4,), jnp.float32), x) + 1
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(jnp.arange(4.0))), [1, 3, 5, 7])
    assert "tpusim says [0. 1. 2. 3.]" in capfd.readouterr().out
    loop = jax.jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c + jax.pure_callback(
        lambda v: np.ones_like(v), jax.ShapeDtypeStruct(c.shape, c.dtype), c), x))
    np.testing.assert_array_equal(np.asarray(loop(jnp.zeros(3))), [3, 3, 3])
    bad = jax.jit(lambda x: jax.pure_callback(lambda v: 1 / 0, jax.ShapeDtypeStruct((4,), jnp.float32), x))
    with pytest.raises(Exception, match="host callback"):
        bad(jnp.ones(4)).block_until_ready()


def test_program_for_more_devices_than_the_slice(tpu):
    """A program compiled for 16 replicas on an 8-device slice: the plugin says which slice would hold it."""
    module = jax.jit(lambda v: v * 2).lower(jnp.ones(2)).compiler_ir("stablehlo")
    opts = xc.CompileOptions()
    opts.num_replicas = 16
    opts.executable_build_options.num_replicas = 16
    with pytest.raises(Exception, match="16 devices; the simulated v3-8 has 8"):
        tpu[0].client.compile_and_load(module, xc.DeviceList(tuple(tpu)), opts)


def test_garbage_program_bytes_raise(tpu):
    client = tpu[0].client
    with pytest.raises(Exception):
        client.compile_and_load(b"ML\xefR not a real artifact", xc.DeviceList(tuple(tpu[:1])), xc.CompileOptions())


def test_frontend_reports_a_missing_converter(monkeypatch):
    monkeypatch.setattr(frontend, "_converter", lambda: (_ for _ in ()).throw(ImportError("no mlir converter")))
    tag, msg = frontend.compile_program(b"ML\xefR", "mlir", b"")
    assert tag == "error" and "converter" in msg and "pip install jax==0.10.2" in msg


def test_frontend_reports_unreadable_bytes():
    tag, msg = frontend.compile_program(b"definitely not stablehlo", "mlir", b"")
    assert tag == "error" and "could not read the program" in msg


def test_found_tpu_system_line_and_profile_dir(tmp_path):
    """A fresh process: the line at first use, and with TPUSIM_PROFILE_DIR the per-program files, the summary
    and the trace of every execution at exit."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp
        f = jax.jit(lambda x: jnp.tanh(x @ x.T))
        x = jnp.ones((128, 128))
        for _ in range(3):
            x = f(x)
        x.block_until_ready()
    """)
    env = dict(os.environ, JAX_PLATFORMS="tpusim", TPUSIM_PROFILE_DIR=str(tmp_path / "prof"), TPUSIM_QUIET="0",
               TPUSIM_SLICE="v5e-4")
    env.pop("TPU_NAME", None), env.pop("TPU_GRPC_URL", None)   # in-process: the slice this test names
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Found TPU system: v5litepod-4 (simulated), 4 TPU v5 lite devices" in r.stderr
    assert "tpusim TPU summary (v5litepod-4, simulated)" in r.stderr
    names = os.listdir(tmp_path / "prof")
    assert "summary.txt" in names and "trace.json" in names
    assert any(n.endswith(".profile.html") for n in names) and any(n.endswith(".memory.html") for n in names)
    summary = (tmp_path / "prof" / "summary.txt").read_text()
    assert "3 runs" in summary
    import json
    trace = json.loads((tmp_path / "prof" / "trace.json").read_text())
    assert any(e.get("args", {}).get("runs") == 3 for e in trace["traceEvents"])
    # the same executions for TensorBoard's profile plugin (tensorboard --logdir prof)
    import glob
    xplanes = glob.glob(str(tmp_path / "prof" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert len(xplanes) == 1, names
    data = open(xplanes[0], "rb").read()
    assert b"/device:TPU:0" in data and b"XLA Ops" in data and b"XLA Modules" in data and b"TPU v5 lite" in data
    assert "TensorBoard profile: " + xplanes[0] in summary


def test_tokens_in_and_out(tpu):
    """Tokens (jax.lax.create_token, ordered effects) travel as empty buffers, as PJRT frameworks pass them."""
    tok = jax.jit(lambda: jax.lax.create_token())()
    assert isinstance(tok, jax._src.core.Token)
    y, t2 = jax.jit(lambda x, t: (x + 1, jax.lax.create_token()))(jnp.ones(2), tok)
    np.testing.assert_array_equal(np.asarray(y), [2, 2])
    assert isinstance(t2, jax._src.core.Token)
