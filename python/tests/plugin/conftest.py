"""The PJRT plugin's pytest suite: unchanged jax code on the simulated TPU (tpusim) beside jax's CPU backend
as the reference. Run by `make test-plugin` (part of `make test`), which sets

    JAX_PLATFORMS=tpusim,cpu  PYTHONPATH=python  TPUSIM_PJRT_LIBRARY=build/<mode>/libtpusim_pjrt.so

tpusim is the default backend (plugin priority 500); jax.devices("cpu") is the reference. Each program is
compiled for both, on the same inputs.
"""
import os

import numpy as np
import pytest

os.environ.setdefault("JAX_PLATFORMS", "tpusim,cpu")
os.environ.setdefault("TPUSIM_QUIET", "1")

import jax  # noqa: E402

EXACT = {"tpusim_numerics": "exact"}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: longer programs (training loops)")


@pytest.fixture(scope="session")
def tpu():
    devs = jax.devices()
    assert devs[0].platform == "tpu", f"the default backend is {devs[0].platform}, not the tpusim plugin"
    assert "tpusim" in devs[0].client.platform_version
    return devs


@pytest.fixture(scope="session")
def cpu():
    return jax.devices("cpu")[0]


def to(dev, args):
    return jax.tree.map(lambda a: jax.device_put(a, dev), args)


def run_both(f, args, *, numerics="exact", static_argnums=(), tpu_device=None):
    """f on the simulated TPU (with the numerics asked for) and on jax's CPU backend: (tpusim, cpu) as numpy."""
    dev = tpu_device or jax.devices()[0]
    opts = EXACT if numerics == "exact" else {"tpusim_numerics": "tpu"}
    t = jax.jit(f, static_argnums=static_argnums, compiler_options=opts)(*to(dev, args))
    c = jax.jit(f, static_argnums=static_argnums)(*to(jax.devices("cpu")[0], args))
    return jax.tree.map(np.asarray, t), jax.tree.map(np.asarray, c)


def assert_close(got, want, rtol, what=""):
    """Floats within rtol of the reference's scale (per leaf); integers, bools and shapes exactly."""
    gl, gt = jax.tree.flatten(got)
    wl, wt = jax.tree.flatten(want)
    assert gt == wt, f"{what}: structure {gt} != {wt}"
    for i, (g, w) in enumerate(zip(gl, wl)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} leaf {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if np.issubdtype(w.dtype, np.inexact):
            g64, w64 = g.astype(np.complex128 if np.iscomplexobj(w) else np.float64), w.astype(
                np.complex128 if np.iscomplexobj(w) else np.float64)
            assert np.array_equal(np.isnan(g64), np.isnan(w64)), f"{what} leaf {i}: NaNs differ"
            fin = np.isfinite(w64)
            assert np.array_equal(g64[~fin], w64[~fin]), f"{what} leaf {i}: infinities differ"
            scale = max(1.0, float(np.max(np.abs(w64[fin])))) if fin.any() else 1.0
            err = float(np.max(np.abs(g64[fin] - w64[fin]))) / scale if fin.any() else 0.0
            assert err <= rtol, f"{what} leaf {i}: error {err:.3g} of scale {scale:.3g} > {rtol}"
        else:
            assert np.array_equal(g, w), f"{what} leaf {i}: {g} != {w}"
