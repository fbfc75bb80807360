"""tpusim as a PJRT device: unchanged JAX code runs on a simulated TPU slice.

    JAX_PLATFORMS=tpusim TPUSIM_SLICE=v3-8 python train.py
    JAX_PLATFORMS=tpusim,cpu ...     # host callbacks (jax.debug.print, pure_callback) need jax's CPU backend

jax finds the plugin through the ``jax_plugins`` namespace package (``jax_plugins.tpusim``, also advertised as
an entry point) and calls :func:`initialize`, which registers ``libtpusim_pjrt.so`` under the name
``tpusim``. The plugin reports the platform ``tpu`` so that jax lowers programs with its TPU rules (the
HLO a TPU user gets); ``jax.devices()[0].client.platform_version`` and the device attribute ``simulator``
say it is tpusim.

Environment: TPUSIM_SLICE (default v3-8), TPUSIM_NUMERICS (tpu | exact), TPUSIM_PROFILE_DIR (profiles,
memory plans, a summary and a trace), TPUSIM_QUIET=1, TPUSIM_PJRT_LIBRARY (the plugin library to load).
"""

import os
import warnings

PINNED_JAX = "0.10.2"
_LIB = "libtpusim_pjrt.so"


def library_path() -> str:
    """The plugin library: TPUSIM_PJRT_LIBRARY, the copy installed with the package, or a source tree's build."""
    env = os.environ.get("TPUSIM_PJRT_LIBRARY")
    if env:
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, _LIB)
    if os.path.exists(installed):
        return installed
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # python/tpusim/plugin -> repository
    for mode in ("release", "debug", "asan"):
        built = os.path.join(root, "build", mode, _LIB)
        if os.path.exists(built):
            return built
    raise FileNotFoundError(
        f"tpusim: {_LIB} not found (set TPUSIM_PJRT_LIBRARY, pip install the package, or run `make plugin`)")


def _check_versions() -> None:
    try:
        import jaxlib.version
        have = jaxlib.version.__version__
    except Exception:  # noqa: BLE001 - jax without jaxlib cannot load any plugin
        return
    if have != PINNED_JAX:
        warnings.warn(
            f"tpusim's PJRT plugin is built for jax/jaxlib {PINNED_JAX} (PJRT C API 0.112); this is jaxlib {have}. "
            f"It may still work (PJRT is backward compatible for frameworks); if it fails, "
            f"pip install jax=={PINNED_JAX} jaxlib=={PINNED_JAX}", RuntimeWarning, stacklevel=3)


def initialize() -> None:
    """Registers the plugin with jax (called by jax's plugin discovery)."""
    from jax._src import xla_bridge as xb

    if "tpusim" in getattr(xb, "_backend_factories", {}):
        return
    _check_versions()
    try:
        from jax._src.lib.mlir.dialects import hlo
        # the StableHLO version jax should write: the one jaxlib's converter (the plugin's front end) reads
        os.environ.setdefault("TPUSIM_STABLEHLO_VERSION", hlo.get_current_version())
    except Exception:  # noqa: BLE001 - the plugin then takes jax's default (older) version
        pass
    # below jax's CPU backend (priority 0): installed, the plugin is a device jax can use; selected
    # (JAX_PLATFORMS=tpusim or tpusim,cpu), it is the default one
    xb.register_plugin("tpusim", priority=-10, library_path=library_path())
