"""The PJRT plugin's front end for jax's programs (called from C: src/pjrt/pjrt_python.c).

jax hands the plugin a StableHLO portable artifact. jaxlib's own converter turns it into HLO text, which
tpusim reads. A program jit'ed over a mesh arrives unpartitioned (global shapes, sharding annotations,
num_partitions > 1): XLA's own SPMD partitioner, as jaxlib ships it inside its CPU compiler, makes the
per-device program. The partitioner runs as part of an XLA:CPU compile of the program over as many CPU
devices as the TPU program has partitions; the module after the "spmd-partitioning" pass is taken from the
compiler's dump, and the shardings it chose for parameters and outputs come from the compiled executable.
This is a private jaxlib API, pinned with jax 0.10.2: failures say so.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import threading

_lock = threading.Lock()
_cpu_clients: dict[int, object] = {}


def _converter():
    """jaxlib's StableHLO -> HLO converter (a private API: tpusim pins jax 0.10.2)."""
    from jax._src.lib import _jax
    fn = getattr(getattr(_jax, "mlir", None), "mlir_module_to_xla_computation", None)
    if fn is None:
        raise ImportError("jaxlib has no _jax.mlir.mlir_module_to_xla_computation")
    return fn


def _hlo_text(code: bytes) -> tuple[object, str]:
    comp = _converter()(code, use_tuple_args=False, return_tuple=False)
    return comp, comp.as_hlo_text(print_large_constants=True)


def _cpu_client(n: int):
    from jax._src.lib import xla_client as xc
    with _lock:
        c = _cpu_clients.get(n)
        if c is None:
            c = _cpu_clients[n] = xc.make_cpu_client(num_devices=n)
        return c


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def _module_proto(dump: bytes) -> bytes:
    """The HloModuleProto inside an HloProto as XLA dumps it (its field 1)."""
    i = 0
    while i < len(dump):
        key, i = _varint(dump, i)
        wire = key & 7
        if wire == 2:
            n, i = _varint(dump, i)
            if key >> 3 == 1:
                return dump[i:i + n]
            i += n
        elif wire == 0:
            _, i = _varint(dump, i)
        else:
            i += 8 if wire == 1 else 4
    raise RuntimeError("XLA's dump holds no HloModuleProto (jaxlib changed? tpusim pins jax 0.10.2)")


def _shardings(module, n_outputs: int) -> tuple[list[bytes], list[bytes]]:
    """The parameter and output shardings the partitioner recorded on the module (serialized OpShardings)."""
    from jax._src.lib import xla_client as xc
    ins = [s.SerializeToString() for s in module.spmd_parameters_shardings or []]
    out = module.spmd_output_sharding
    if out is None:
        return ins, []
    leaves = list(out.tuple_shardings) if out.type == xc.OpSharding.Type.TUPLE else [out]
    if len(leaves) == 1 and n_outputs > 1:
        leaves = leaves * n_outputs   # one sharding written for every element of the result
    return ins, [s.SerializeToString() for s in leaves]


def _partition(code: bytes, options: bytes) -> tuple[str, list[bytes], list[bytes]]:
    """The per-device program of an SPMD program, and the parameter and output shardings chosen for it.

    The XLA:CPU compile stands in for the TPU's up to its SPMD partitioner; what comes after (the CPU's own
    code generation) may refuse TPU-only ops (linear-algebra custom calls, host transfers), which does not
    matter once the partitioned module has been dumped."""
    import numpy as np
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    from jaxlib import _hlo

    co = xc.CompileOptions.ParseFromString(options)
    eb = co.executable_build_options
    n = max(1, eb.num_replicas) * max(1, eb.num_partitions)
    client = _cpu_client(n)
    # the CPU devices stand in for the TPU's: the partitioned program does not depend on which are used
    eb.device_assignment = xc.DeviceAssignment.create(
        np.arange(n, dtype=np.int32).reshape(max(1, eb.num_replicas), max(1, eb.num_partitions)))
    co.env_option_overrides = []  # TPU compiler flags mean nothing to the CPU compiler
    dump = tempfile.mkdtemp(prefix="tpusim-spmd-")
    try:
        dbg = eb.debug_options
        dbg.xla_dump_to = dump
        dbg.xla_dump_hlo_as_proto = True   # read back below; the text dump elides large constants as {...}
        dbg.xla_dump_hlo_pass_re = "spmd-partitioning"
        dbg.xla_dump_hlo_module_re = ".*"
        backend_error = None
        with mlir.make_ir_context():
            module = _jax.mlir.deserialize_portable_artifact(code)
            if not isinstance(module, ir.Module):
                module = ir.Module.parse(module)
            try:
                client.compile_and_load(module, xc.DeviceList(tuple(client.devices()[:n])), co)
            except Exception as e:  # noqa: BLE001 - judged below: only a failure before partitioning counts
                backend_error = e
        files = sorted(glob.glob(os.path.join(dump, "*after_spmd-partitioning*")))
        if not files:
            if backend_error is not None:
                raise backend_error
            raise RuntimeError("XLA's SPMD partitioner left no module behind (jaxlib changed? tpusim pins jax 0.10.2)")
        with open(files[-1], "rb") as f:
            proto = _module_proto(f.read())
        comp = xc.XlaComputation(proto)
        shape = comp.program_shape()
        n_out = len(shape.result_shape().tuple_shapes()) if shape.result_shape().is_tuple() else 1
        ins, outs = _shardings(_hlo.HloModule.from_serialized_hlo_module_proto(proto), n_out)
        return comp.as_hlo_text(print_large_constants=True), ins, outs
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def compile_program(code: bytes, fmt: str, options: bytes) -> tuple:
    """("ok", hlo_text, param_shardings | None, output_shardings | None) or ("error", message)."""
    try:
        if fmt != "mlir":
            return ("error", f"tpusim: the front end reads StableHLO ('mlir'), not '{fmt}'")
        from jax._src.lib import xla_client as xc
        co = xc.CompileOptions.ParseFromString(options) if options else None
        eb = co.executable_build_options if co is not None else None
        if eb is not None and eb.num_partitions > 1 and eb.use_spmd_partitioning:
            text, ins, outs = _partition(code, options)
            return ("ok", text, ins, outs)
        _, text = _hlo_text(code)
        return ("ok", text, None, None)
    except ImportError as e:
        return ("error", f"tpusim: jaxlib's StableHLO converter is missing ({e}); pip install jax==0.10.2")
    except Exception as e:  # noqa: BLE001 - every failure becomes the compile error the user sees
        msg = str(e)
        return ("error", f"tpusim: jaxlib could not read the program: {type(e).__name__}: {msg}")


def optimized_program(hlo_text: str) -> tuple:
    """("ok", StableHLO bytecode) of the per-device HLO tpusim runs (jax's compiled.as_text()), or ("error", msg)."""
    try:
        from jax._src.lib import _jax
        from jaxlib import _hlo
        proto = _hlo.hlo_module_from_text(hlo_text).as_serialized_hlo_module_proto()
        return ("ok", _jax.mlir.hlo_to_stablehlo(proto))
    except Exception as e:  # noqa: BLE001 - the framework gets the reason
        return ("error", f"tpusim: the optimized program could not be converted: {type(e).__name__}: {e}")


def stablehlo_to_hlo(code: bytes | str) -> str:
    """HLO text of StableHLO (MLIR text or bytecode, a portable artifact): jaxlib's converter, as for jax's own
    programs above. Used by the Python API (tpusim.run/check/memory/profile on .mlir, .mlirbc, jax.export files).
    Raises ImportError without jaxlib."""
    _, text = _hlo_text(code.encode() if isinstance(code, str) else bytes(code))
    return text
