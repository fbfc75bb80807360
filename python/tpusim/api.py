"""tpusim from Python, in-process: run, check, memory and profile XLA programs through libtpusim.so (ctypes).

    import tpusim
    outs = tpusim.run("prog.hlo", x, w)                      # numpy arrays in, numpy arrays out (TPU numerics)
    rep = tpusim.check(lowered, chip="v5e")                  # dict: {"compatible": ..., "problems": [...], ...}
    mem = tpusim.memory("prog.hlo", chip="v3-8")             # dict: {"fits": ..., "peak_bytes": ..., ...}
    prof = tpusim.profile(f, x, w, chip="v5e-8")             # lowers the JAX function itself; dict
    prof["step_time_s"], prof["bound"], prof["ops"][0]["name"]

A *program* is any of: HLO text; StableHLO text (``lowered.as_text()``); a path (``str`` or ``os.PathLike``) to
a file in any format tpusim reads (HLO text, HloModuleProto text or binary ``.pb``, ``.mlir``, ``.mlirbc``, a
``jax.export`` serialization); ``bytes`` of any of those; a ``jax.stages.Lowered``; a ``jax.export.Exported``;
or a function (then the arguments given are what it is lowered with: arrays or ``jax.ShapeDtypeStruct``).
StableHLO goes through jaxlib's converter, as in the PJRT plugin. Failures raise :class:`TpusimError` with
tpusim's message.
"""

from __future__ import annotations

import ctypes
import json
import os
from ctypes import POINTER, byref, c_int, c_int64, c_void_p
from typing import Any, Callable, Sequence, Union

import numpy as np

from ._lib import Context, MemoryOpts, ProfileOpts, TpusimError

Program = Union[str, bytes, "os.PathLike[str]", Any]

__all__ = ["Program", "TpusimError", "run", "check", "memory", "profile", "load_text"]

# numpy dtype name -> HLO element type name (the bit-exact ones; ml_dtypes supplies bfloat16, float8, int4)
_NP_TO_HLO = {
    "bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64", "uint8": "u8", "uint16": "u16",
    "uint32": "u32", "uint64": "u64", "float16": "f16", "float32": "f32", "float64": "f64", "complex64": "c64",
    "complex128": "c128", "bfloat16": "bf16", "int4": "s4", "uint4": "u4", "int2": "s2", "uint2": "u2",
    "float8_e5m2": "f8e5m2", "float8_e4m3fn": "f8e4m3fn", "float8_e4m3b11fnuz": "f8e4m3b11fnuz",
    "float8_e5m2fnuz": "f8e5m2fnuz", "float8_e4m3fnuz": "f8e4m3fnuz", "float8_e4m3": "f8e4m3",
    "float8_e3m4": "f8e3m4", "float4_e2m1fn": "f4e2m1fn", "float8_e8m0fnu": "f8e8m0fnu",
}
_HLO_TO_NP = {v: k for k, v in _NP_TO_HLO.items()}


def _np_dtype(hlo_name: str) -> np.dtype:
    name = _HLO_TO_NP.get(hlo_name)
    if name is None:
        raise TpusimError(f"tpusim: no numpy type for {hlo_name}", "UNSUPPORTED")
    try:
        return np.dtype(name)
    except TypeError:
        try:
            import ml_dtypes
            return np.dtype(getattr(ml_dtypes, name))
        except (ImportError, AttributeError) as e:
            raise TpusimError(f"tpusim: {hlo_name} arrays need ml_dtypes (pip install ml_dtypes)", "UNSUPPORTED") from e


def _is_jax_function(obj: Any) -> bool:
    return callable(obj) and not isinstance(obj, (str, bytes, bytearray, os.PathLike))


def _lowered_text(lowered: Any) -> str:
    """HLO text of a jax Lowered, large constants included (as_text elides them)."""
    try:
        return lowered.compiler_ir("hlo").as_hlo_text(print_large_constants=True)
    except Exception:  # noqa: BLE001 - older or newer jax: its own printer
        return lowered.as_text(dialect="hlo")


def _program_bytes(program: Program, args: Sequence[Any]) -> tuple[bytes, str, bool]:
    """(bytes, name for messages, whether `args` were consumed by lowering a function)."""
    if isinstance(program, os.PathLike) or (isinstance(program, str) and "\n" not in program
                                            and os.path.exists(program)):
        path = os.fspath(program)
        with open(path, "rb") as f:
            return f.read(), path, False
    if isinstance(program, str):
        return program.encode(), "<text>", False
    if isinstance(program, (bytes, bytearray, memoryview)):
        return bytes(program), "<bytes>", False
    if hasattr(program, "mlir_module_serialized"):            # jax.export.Exported
        return bytes(program.mlir_module_serialized), f"<jax.export {getattr(program, 'fun_name', '')}>", False
    if hasattr(program, "compiler_ir") and hasattr(program, "as_text"):   # jax.stages.Lowered
        return _lowered_text(program).encode(), "<jax lowered>", False
    if _is_jax_function(program):
        import jax
        fn = program if hasattr(program, "lower") else jax.jit(program)
        return _lowered_text(fn.lower(*args)).encode(), f"<{getattr(program, '__name__', 'function')}>", True
    raise TypeError(f"tpusim: not a program: {type(program).__name__} (HLO or StableHLO text, a path, bytes, a "
                    "jax Lowered or Exported, or a function)")


class _Module:
    """A parsed tpu_module on a context."""

    def __init__(self, ctx: Context, program: Program, args: Sequence[Any] = ()):
        data, name, self.lowered_args = _program_bytes(program, args)
        self.ctx = ctx
        self.ptr = c_void_p()
        ctx.check(ctx.lib.tpu_module_parse(ctx.ptr, data, len(data), name.encode(), byref(self.ptr)))

    def free(self) -> None:
        self.ctx.lib.tpu_module_free(self.ptr)


def _with_module(program: Program, args: Sequence[Any], fn: Callable[[Context, _Module], Any],
                 args_for_function_only: bool = True) -> Any:
    if args and args_for_function_only and not _is_jax_function(program):
        raise TypeError("tpusim: arguments are for lowering a function; this program is already lowered")
    with Context() as ctx:
        m = _Module(ctx, program, args)
        try:
            return fn(ctx, m)
        finally:
            m.free()


def load_text(program: Program, *args: Any) -> str:
    """The program as canonical HLO text (what ``tpusim print`` prints): to see what tpusim reads."""
    def go(ctx: Context, m: _Module) -> str:
        s = c_void_p()
        ctx.check(ctx.lib.tpu_module_to_string(ctx.ptr, m.ptr, byref(s)))
        try:
            return ctypes.string_at(s).decode()
        finally:
            ctx.lib.tpu_free(s)
    return _with_module(program, args, go)


def _to_tensor(ctx: Context, a: Any, i: int) -> c_void_p:
    arr = np.ascontiguousarray(np.asarray(a))
    hlo = _NP_TO_HLO.get(arr.dtype.name)
    if hlo is None:
        raise TpusimError(f"tpusim: input {i}: numpy dtype {arr.dtype} has no HLO element type", "INVALID")
    dt = ctx.lib.tpu_dtype_from_name(hlo.encode(), len(hlo))
    dims = (c_int64 * max(1, arr.ndim))(*arr.shape)
    t = c_void_p()
    ctx.check(ctx.lib.tpu_tensor_new(ctx.ptr, dt, arr.ndim, dims, byref(t)))
    n = ctx.lib.tpu_tensor_nbytes(t)
    if n != arr.nbytes:
        ctx.lib.tpu_tensor_free(t)
        raise TpusimError(f"tpusim: input {i}: {arr.dtype} is stored in {n} bytes, numpy has {arr.nbytes}", "INVALID")
    if n:
        ctypes.memmove(ctx.lib.tpu_tensor_data(t), arr.ctypes.data, n)
    return t


def _from_tensor(ctx: Context, t: c_void_p) -> np.ndarray:
    lib = ctx.lib
    name = lib.tpu_dtype_name(lib.tpu_tensor_dtype(t)).decode()
    rank = lib.tpu_tensor_rank(t)
    dims = lib.tpu_tensor_dims(t)
    shape = tuple(dims[k] for k in range(rank))
    out = np.empty(shape, _np_dtype(name))
    n = lib.tpu_tensor_nbytes(t)
    if n != out.nbytes:
        raise TpusimError(f"tpusim: {name}{list(shape)} is stored in {n} bytes, numpy has {out.nbytes}", "INTERNAL")
    if n:
        ctypes.memmove(out.ctypes.data, lib.tpu_tensor_data(t), n)
    return out


def _flat_args(args: Sequence[Any]) -> list[Any]:
    """Arrays in the order the program's parameters take them (pytrees flattened as jax flattens them)."""
    try:
        import jax
        return jax.tree_util.tree_leaves(list(args))
    except ImportError:
        return list(args)


def run(program: Program, *inputs: Any, numerics: str = "tpu", seed: int | None = None, max_steps: int = 0,
        timeout: float = 0.0, threads: int = 0) -> list[np.ndarray]:
    """Runs the program on `inputs` (numpy or jax arrays, one per parameter; pytrees are flattened) with TPU
    numerics (``numerics="exact"``: every dot and convolution at full f32) and returns its outputs as numpy
    arrays (a tuple result flattened). A function is lowered with `inputs` and run on them. ``seed``: run on
    tpusim's deterministic random inputs instead (no `inputs`). ``max_steps``/``timeout``: limits, as
    ``tpusim run --max-steps/--timeout`` (0: none)."""
    if numerics not in ("tpu", "exact"):
        raise ValueError(f"numerics must be 'tpu' or 'exact', not {numerics!r}")

    def go(ctx: Context, m: _Module) -> list[np.ndarray]:
        lib = ctx.lib
        tensors: list[c_void_p] = []
        arr = None
        nin = 0
        try:
            if seed is not None:
                if inputs:
                    raise ValueError("tpusim.run: give inputs or seed, not both")
                rin, rn = POINTER(c_void_p)(), c_int()
                ctx.check(lib.tpu_random_inputs(ctx.ptr, m.ptr, seed, byref(rin), byref(rn)))
                tensors = [c_void_p(rin[k]) for k in range(rn.value)]
                lib.tpu_free(ctypes.cast(rin, c_void_p))
            else:
                tensors = [_to_tensor(ctx, a, i) for i, a in enumerate(_flat_args(inputs))]
            nin = len(tensors)
            arr = (c_void_p * max(1, nin))(*[t.value for t in tensors])
            opts = lib.tpu_run_opts_default()
            opts.numerics = 0 if numerics == "tpu" else 1
            opts.max_steps, opts.max_seconds, opts.threads = max_steps, timeout, threads
            outs, nout = POINTER(c_void_p)(), c_int()
            ctx.check(lib.tpu_run(ctx.ptr, m.ptr, byref(opts), arr, nin, byref(outs), byref(nout)))
            try:
                return [_from_tensor(ctx, c_void_p(outs[k])) for k in range(nout.value)]
            finally:
                lib.tpu_tensors_free(ctypes.cast(outs, c_void_p), nout.value)
        finally:
            for t in tensors:
                lib.tpu_tensor_free(t)
    return _with_module(program, inputs if seed is None else (), go, args_for_function_only=False)


def check(program: Program, *args: Any, chip: str | None = None) -> dict:
    """What would stop the program from compiling for a TPU (``tpusim check``): a dict with ``compatible``,
    ``errors``, ``warnings``, ``problems`` (each with ``where``, ``opcode``, ``message``, ``hint``, ...),
    ``verdict`` and ``text`` (the report as the CLI prints it). `chip`: a generation's rules ("v5e")."""
    def go(ctx: Context, m: _Module) -> dict:
        r = c_void_p()
        ctx.check(ctx.lib.tpu_check(ctx.ptr, m.ptr, chip.encode() if chip else None, byref(r)))
        try:
            out = json.loads(ctx.lib.tpu_report_json(r))
            out["text"] = ctx.lib.tpu_report_text(r).decode()
            return out
        finally:
            ctx.lib.tpu_report_free(r)
    return _with_module(program, args, go)


def memory(program: Program, *args: Any, chip: str = "v5e", policy: str | None = None, top: int = 10,
           html: str | os.PathLike[str] | None = None) -> dict:
    """Will it fit? The memory plan on one device of `chip` (``tpusim memory``): a dict with ``fits``,
    ``peak_bytes``, ``hbm_capacity_bytes``, ``largest`` (allocations with shape, padded and unpadded bytes,
    op_name), ... and ``report`` (the text: the TPU's "Ran out of memory in memory space hbm" when it does not
    fit). `policy`: "mixed_bfloat16" to see what Keras' mixed policy saves. `html`: also write the viewer."""
    def go(ctx: Context, m: _Module) -> dict:
        o = MemoryOpts(chip.encode(), policy.encode() if policy else None, top)
        mem = c_void_p()
        ctx.check(ctx.lib.tpu_memory_plan(ctx.ptr, m.ptr, byref(o), byref(mem)))
        try:
            j = ctx.lib.tpu_memory_json(mem)
            out = json.loads(j) if j else {"fits": False}
            out["report"] = ctx.lib.tpu_memory_report(mem).decode()
            if html is not None:
                ctx.check(ctx.lib.tpu_memory_write_html(ctx.ptr, mem, os.fspath(html).encode()))
            return out
        finally:
            ctx.lib.tpu_memory_free(mem)
    return _with_module(program, args, go)


def profile(program: Program, *args: Any, chip: str = "v5e-8", steps: int = 1, steps_per_exec: int = 1,
            policy: str | None = None, batch: int = 0, input_rate: float = 0.0, price_per_chip_hour: float = 0.0,
            top: int = 15, trace: str | os.PathLike[str] | None = None, html: str | os.PathLike[str] | None = None,
            tensorboard: str | os.PathLike[str] | None = None, run_name: str | None = None) -> dict:
    """How fast would it run? The timing model on one device of `chip` (``tpusim profile``): a dict with
    ``step_time_s``, ``bound``, ``mxu_utilization``, ``flops``, ``hbm_bytes``, ``ops`` (each op's ``name``,
    ``time_s``, ``bound``, ...), ``summary`` (the text table) and ``advice``. A function is lowered with
    `args` (arrays or ``jax.ShapeDtypeStruct``: shapes are all it needs). Files: `trace` (Chrome trace JSON),
    `html` (the report), `tensorboard` (a LOGDIR for TensorBoard's profile plugin; ``run_name`` names the
    run); the paths written are in ``files``."""
    def go(ctx: Context, m: _Module) -> dict:
        lib = ctx.lib
        o = ProfileOpts(chip.encode(), policy.encode() if policy else None, steps, steps_per_exec, input_rate,
                        batch, price_per_chip_hour)
        p = c_void_p()
        ctx.check(lib.tpu_profile_program(ctx.ptr, m.ptr, byref(o), byref(p)))
        try:
            out = json.loads(lib.tpu_profile_json(p))
            out["summary"] = lib.tpu_profile_summary(p, top).decode()
            adv = lib.tpu_profile_advice(p)
            out["advice"] = adv.decode() if adv else ""
            files = []
            if trace is not None:
                ctx.check(lib.tpu_profile_write_trace(ctx.ptr, p, os.fspath(trace).encode()))
                files.append(os.fspath(trace))
            if html is not None:
                ctx.check(lib.tpu_profile_write_html(ctx.ptr, p, os.fspath(html).encode()))
                files.append(os.fspath(html))
            if tensorboard is not None:
                w = c_void_p()
                ctx.check(lib.tpu_profile_write_tensorboard(ctx.ptr, p, os.fspath(tensorboard).encode(),
                                                            run_name.encode() if run_name else None, byref(w)))
                files.append(ctypes.string_at(w).decode())
                lib.tpu_free(w)
            out["files"] = files
            return out
        finally:
            lib.tpu_profile_free(p)
    return _with_module(program, args, go)
