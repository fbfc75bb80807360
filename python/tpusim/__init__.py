"""tpusim, a software TPU, from Python.

In-process API over libtpusim.so (numpy in and out; no subprocess):

    import tpusim
    outs = tpusim.run("prog.hlo", x, w)              # TPU numerics; numpy arrays
    tpusim.check(lowered)["compatible"]               # a jax Lowered, HLO/StableHLO text, a path, bytes
    tpusim.memory("prog.hlo", chip="v3-8")["fits"]
    tpusim.profile(f, x, w, chip="v5e-8")["step_time_s"]   # lowers the JAX function itself

Errors raise tpusim.TpusimError with tpusim's message. Also here: the PJRT plugin (tpusim.plugin), and the
helpers that export JAX train steps as STEP_DIRs (docs/step_dir.md), write datasets, simulate data-parallel
training and find a learning rate (those need jax; they are imported when first used).
"""

import importlib

from ._lib import TpusimError, library_path
from .api import check, load_text, memory, profile, run

__all__ = ["run", "check", "memory", "profile", "load_text", "TpusimError", "library_path",
           "data", "nn", "optim", "schedules", "tool", "TrainStep", "batch_input", "export_train_step",
           "load_init_state", "load_signature"]

_LAZY_MODULES = {"data", "nn", "optim", "schedules", "tool", "export", "lr_find", "simulate", "verify"}
_LAZY_NAMES = {"TrainStep", "batch_input", "export_train_step", "load_init_state", "load_signature"}


def __getattr__(name: str):
    """The jax-based helpers, imported on first use so that the API above needs only numpy."""
    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(".export", __name__), name)
    raise AttributeError(f"module 'tpusim' has no attribute {name!r}")
