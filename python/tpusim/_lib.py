"""ctypes bindings of libtpusim.so (include/tpusim.h): the handful of calls the Python API makes.

The library is found as :func:`library_path` says. Every call that can fail returns a status; :func:`check_status`
turns a failure into :class:`TpusimError` with the message tpusim put on the context (``tpu_errmsg``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint64,
                    c_void_p)

_NAME = "libtpusim.so"

# tpu_status, in header order
STATUS_NAMES = ("OK", "NOMEM", "IO", "PARSE", "INVALID", "SHAPE", "UNSUPPORTED", "UNRUNNABLE", "OOM", "INTERNAL",
                "LIMIT")


class TpusimError(RuntimeError):
    """A call into tpusim failed. ``str(e)`` is tpusim's message (file:line:col where it has one); ``status`` is the
    tpu_status name ("PARSE", "SHAPE", "UNSUPPORTED", "OOM", ...)."""

    def __init__(self, message: str, status: str = "INTERNAL"):
        super().__init__(message)
        self.status = status


def library_path() -> str:
    """libtpusim.so: $TPUSIM_LIBRARY, the copy installed with the package, or a source tree's build/release."""
    env = os.environ.get("TPUSIM_LIBRARY")
    if env:
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, _NAME)
    if os.path.exists(installed):
        return installed
    root = os.path.dirname(os.path.dirname(here))   # python/tpusim -> the repository
    for mode in ("release", "debug"):
        built = os.path.join(root, "build", mode, _NAME)
        if os.path.exists(built):
            return built
    raise FileNotFoundError(f"tpusim: {_NAME} not found (set TPUSIM_LIBRARY, pip install the package, or run `make lib`)")


class RunOpts(Structure):
    _fields_ = [("numerics", c_int), ("threads", c_int), ("replica_id", c_int), ("verbose", c_int),
                ("host", c_void_p), ("max_steps", c_int64), ("max_seconds", c_double)]


class ProfileOpts(Structure):
    _fields_ = [("chip", c_char_p), ("policy", c_char_p), ("steps", c_int), ("steps_per_exec", c_int),
                ("input_rate", c_double), ("batch", c_int64), ("price_per_chip_hour", c_double)]


class MemoryOpts(Structure):
    _fields_ = [("chip", c_char_p), ("policy", c_char_p), ("top", c_int)]


CONVERTER = CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t, c_char_p, POINTER(c_void_p), POINTER(c_size_t))

# (name, restype, argtypes)
_SIGNATURES = [
    ("tpu_ctx_new", c_void_p, []),
    ("tpu_ctx_free", None, [c_void_p]),
    ("tpu_errmsg", c_char_p, [c_void_p]),
    ("tpu_warnings", c_char_p, [c_void_p]),
    ("tpu_set_error", c_int, [c_void_p, c_int, c_char_p, c_char_p]),
    ("tpu_ctx_set_converter", None, [c_void_p, CONVERTER, c_void_p]),
    ("tpu_program_format", c_char_p, [c_char_p, c_size_t]),
    ("tpu_module_parse", c_int, [c_void_p, c_char_p, c_size_t, c_char_p, POINTER(c_void_p)]),
    ("tpu_module_load", c_int, [c_void_p, c_char_p, POINTER(c_void_p)]),
    ("tpu_module_free", None, [c_void_p]),
    ("tpu_module_to_string", c_int, [c_void_p, c_void_p, POINTER(c_void_p)]),
    ("tpu_module_name", c_char_p, [c_void_p]),
    ("tpu_module_num_inputs", c_int, [c_void_p]),
    ("tpu_module_input_info", c_int, [c_void_p, c_int, POINTER(c_int), POINTER(c_int), POINTER(c_int64)]),
    ("tpu_free", None, [c_void_p]),
    ("tpu_dtype_name", c_char_p, [c_int]),
    ("tpu_dtype_from_name", c_int, [c_char_p, c_size_t]),
    ("tpu_tensor_new", c_int, [c_void_p, c_int, c_int, POINTER(c_int64), POINTER(c_void_p)]),
    ("tpu_tensor_free", None, [c_void_p]),
    ("tpu_tensors_free", None, [c_void_p, c_int]),
    ("tpu_tensor_dtype", c_int, [c_void_p]),
    ("tpu_tensor_rank", c_int, [c_void_p]),
    ("tpu_tensor_dims", POINTER(c_int64), [c_void_p]),
    ("tpu_tensor_nbytes", c_size_t, [c_void_p]),
    ("tpu_tensor_data", c_void_p, [c_void_p]),
    ("tpu_run_opts_default", RunOpts, []),
    ("tpu_run", c_int, [c_void_p, c_void_p, POINTER(RunOpts), POINTER(c_void_p), c_int, POINTER(POINTER(c_void_p)),
                        POINTER(c_int)]),
    ("tpu_random_inputs", c_int, [c_void_p, c_void_p, c_uint64, POINTER(POINTER(c_void_p)), POINTER(c_int)]),
    ("tpu_check", c_int, [c_void_p, c_void_p, c_char_p, POINTER(c_void_p)]),
    ("tpu_report_json", c_char_p, [c_void_p]),
    ("tpu_report_text", c_char_p, [c_void_p]),
    ("tpu_report_free", None, [c_void_p]),
    ("tpu_memory_plan", c_int, [c_void_p, c_void_p, POINTER(MemoryOpts), POINTER(c_void_p)]),
    ("tpu_memory_json", c_char_p, [c_void_p]),
    ("tpu_memory_report", c_char_p, [c_void_p]),
    ("tpu_memory_write_html", c_int, [c_void_p, c_void_p, c_char_p]),
    ("tpu_memory_free", None, [c_void_p]),
    ("tpu_profile_program", c_int, [c_void_p, c_void_p, POINTER(ProfileOpts), POINTER(c_void_p)]),
    ("tpu_profile_json", c_char_p, [c_void_p]),
    ("tpu_profile_summary", c_char_p, [c_void_p, c_int]),
    ("tpu_profile_advice", c_char_p, [c_void_p]),
    ("tpu_profile_write_trace", c_int, [c_void_p, c_void_p, c_char_p]),
    ("tpu_profile_write_html", c_int, [c_void_p, c_void_p, c_char_p]),
    ("tpu_profile_write_tensorboard", c_int, [c_void_p, c_void_p, c_char_p, c_char_p, POINTER(c_void_p)]),
    ("tpu_profile_free", None, [c_void_p]),
]

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_libc = ctypes.CDLL(None)
_libc.malloc.restype = c_void_p
_libc.malloc.argtypes = [c_size_t]


def lib() -> ctypes.CDLL:
    """The loaded library, with its functions' types declared (loaded once per process)."""
    global _lib
    with _lock:
        if _lib is None:
            path = library_path()
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                raise TpusimError(f"tpusim: cannot load {path}: {e}", "IO") from e
            for name, res, args in _SIGNATURES:
                fn = getattr(handle, name)
                fn.restype, fn.argtypes = res, args
            _lib = handle
        return _lib


def check_status(ctx: int, status: int) -> None:
    """Raises TpusimError with the context's message unless status is TPU_OK."""
    if status != 0:
        msg = lib().tpu_errmsg(ctx).decode("utf-8", "replace")
        name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        raise TpusimError(msg or f"tpusim: {name}", name)


def _convert(user, ctx, data, n, what, out, out_len):  # noqa: ANN001 - a C callback
    """The context's StableHLO converter: jaxlib's, in this process (the PJRT plugin's front end)."""
    try:
        from .plugin import frontend
        text = frontend.stablehlo_to_hlo(ctypes.string_at(data, n)).encode()
    except Exception as e:  # noqa: BLE001 - every failure becomes tpusim's error for the caller
        status = 6 if isinstance(e, ImportError) else 3   # UNSUPPORTED (no jaxlib) or PARSE
        where = (what or b"<program>").decode("utf-8", "replace")
        msg = (f"{where}: StableHLO is read through jaxlib's converter, which this Python lacks ({e}): "
               "pip install jax==0.10.2 jaxlib==0.10.2" if status == 6 else f"{where}: jaxlib could not read the StableHLO: {e}")
        lib().tpu_set_error(ctx, status, b"%s", msg.encode())
        return status
    buf = _libc.malloc(len(text) + 1)
    if not buf:
        return 1
    ctypes.memmove(buf, text + b"\0", len(text) + 1)
    out[0] = buf
    out_len[0] = len(text)
    return 0


_CONVERTER = CONVERTER(_convert)


class Context:
    """A tpu_ctx for one call, with the in-process StableHLO converter; frees it on exit."""

    def __enter__(self) -> "Context":
        self.lib = lib()
        self.ptr = self.lib.tpu_ctx_new()
        if not self.ptr:
            raise MemoryError("tpusim: tpu_ctx_new failed")
        self.lib.tpu_ctx_set_converter(self.ptr, _CONVERTER, None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.lib.tpu_ctx_free(self.ptr)

    def check(self, status: int) -> None:
        check_status(self.ptr, status)

    def warnings(self) -> str:
        return self.lib.tpu_warnings(self.ptr).decode("utf-8", "replace")
