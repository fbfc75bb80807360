#!/usr/bin/env python3
"""Regenerates tests/golden/scalesim/<case>/ with SCALE-Sim 3.0.0 from PyPI.

Each case directory holds the inputs (config.cfg, topology.csv, mode = "conv" or "gemm") and the three
reports SCALE-Sim wrote for them. tests/t_scalesim.c runs tpusim on the same inputs and compares the
reports byte for byte.

SCALE-Sim 3.0.0 needs numpy < 2 (with numpy 2 it fails in int(max(...)) of its memory model), so:

    python3 -m venv /tmp/ssvenv
    /tmp/ssvenv/bin/pip install scalesim==3.0.0 'numpy<2'
    /tmp/ssvenv/bin/python tests/golden/scalesim/make_golden.py [case ...]   # no names: every case

The cases are small (they run in seconds) but chosen to exercise every part of the memory model: CALC
epochs and USER-mode prefetch stalls (1 kB SRAMs), OFMAP drains and write stalls, conv windows that hang
off the IFMAP (-1 entries), a depth-wise ("DP") layer, partial folds, and the three dataflows.
"""
import contextlib
import io
import os
import shutil
import sys
import tempfile

from scalesim.scale_sim import scalesim

HERE = os.path.dirname(os.path.abspath(__file__))


def cfg(name, rows, cols, kb, df, user, bw=10, bank_bw=(10, 10), bank_num=(10, 10)):
    ikb, fkb, okb = kb
    return f"""[general]
run_name = {name}

[architecture_presets]
ArrayHeight:    {rows}
ArrayWidth:     {cols}
IfmapSramSzkB:    {ikb}
FilterSramSzkB:   {fkb}
OfmapSramSzkB:    {okb}
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Dataflow : {df}
Bandwidth : {bw}
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: {bank_bw[0]}
IfmapSRAMBankNum: {bank_num[0]}
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: {bank_bw[1]}
FilterSRAMBankNum: {bank_num[1]}
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: {'USER' if user else 'CALC'}
UseRamulatorTrace: False
"""


CONV_HDR = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
GEMM_HDR = "Layer, M, N, K,\n"

CONV_SMALL = CONV_HDR + """conv_a,19,19,3,3,8,24,2,
conv_b,12,12,5,5,6,40,1,
DP_c,10,10,3,3,3,1,1,
fc_d,1,1,1,1,300,70,1,
"""
GEMM_SMALL = GEMM_HDR + """g_a, 60, 45, 70,
g_b, 130, 9, 33,
g_c, 7, 100, 150,
"""

# (case, config text, topology text, mode)
CASES = [
    ("calc_os_conv", cfg("calc_os_conv", 8, 8, (1, 1, 1), "os", False), CONV_SMALL, "conv"),
    ("calc_ws_conv", cfg("calc_ws_conv", 12, 14, (1, 2, 1), "ws", False), CONV_SMALL, "conv"),
    ("calc_is_conv", cfg("calc_is_conv", 8, 16, (2, 1, 1), "is", False), CONV_SMALL, "conv"),
    ("calc_os_gemm", cfg("calc_os_gemm", 16, 8, (1, 1, 1), "os", False), GEMM_SMALL, "gemm"),
    ("calc_ws_gemm", cfg("calc_ws_gemm", 8, 8, (1, 1, 1), "ws", False), GEMM_SMALL, "gemm"),
    ("calc_is_gemm", cfg("calc_is_gemm", 5, 7, (1, 1, 1), "is", False), GEMM_SMALL, "gemm"),
    ("user_os_conv", cfg("user_os_conv", 8, 8, (1, 1, 1), "os", True, bw=4, bank_bw=(5, 3), bank_num=(1, 1)),
     CONV_SMALL, "conv"),
    ("user_ws_conv", cfg("user_ws_conv", 16, 8, (1, 1, 2), "ws", True, bw=2, bank_bw=(10, 10)), CONV_SMALL, "conv"),
    ("user_is_conv", cfg("user_is_conv", 8, 12, (1, 2, 1), "is", True, bw=16, bank_bw=(2, 16), bank_num=(1, 2)),
     CONV_SMALL, "conv"),
    ("user_os_gemm", cfg("user_os_gemm", 8, 8, (1, 1, 1), "os", True, bw=8, bank_bw=(4, 4), bank_num=(1, 1)),
     GEMM_SMALL, "gemm"),
    ("user_ws_gemm", cfg("user_ws_gemm", 32, 32, (2, 1, 1), "ws", True, bw=10), GEMM_SMALL, "gemm"),
    ("user_is_gemm", cfg("user_is_gemm", 4, 16, (1, 1, 4), "is", True, bw=1, bank_bw=(1, 1), bank_num=(1, 1)),
     GEMM_SMALL, "gemm"),
    # A drain ends while the OFMAP buffer is still below its active half, and the rest of the last fold has
    # no writes: those rows trigger nothing, so the SRAM OFMAP stop cycle is the last row that writes.
    ("user_ws_gemm_tail", cfg("user_ws_gemm_tail", 1, 16, (1, 2, 2), "ws", True, bw=5, bank_bw=(2, 10),
                              bank_num=(1, 1)), GEMM_HDR + "g1, 38, 38, 7,\n", "gemm"),
]


def run(case, cfg_text, topo_text, mode):
    d = os.path.join(HERE, case)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "config.cfg"), "w") as f:
        f.write(cfg_text)
    with open(os.path.join(d, "topology.csv"), "w") as f:
        f.write(topo_text)
    with open(os.path.join(d, "mode"), "w") as f:
        f.write(mode + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        layout = os.path.join(tmp, "layout.csv")   # SCALE-Sim 3 insists on a layout file; a header will do
        with open(layout, "w") as f:
            f.write("Layer name, IFMAP Height Intraline Factor,\n")
        with contextlib.redirect_stdout(io.StringIO()):
            s = scalesim(save_disk_space=True, verbose=False, config=os.path.join(d, "config.cfg"),
                         topology=os.path.join(d, "topology.csv"), layout=layout, input_type_gemm=(mode == "gemm"))
            s.run_scale(top_path=tmp)
        for rep in ("COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "DETAILED_ACCESS_REPORT.csv"):
            shutil.copy(os.path.join(tmp, case, rep), os.path.join(d, rep))
    print("wrote", d)


if __name__ == "__main__":
    import numpy
    import importlib.metadata as md
    print("scalesim", md.version("scalesim"), "numpy", numpy.__version__, file=sys.stderr)
    only = set(sys.argv[1:])   # case names to regenerate; none: all
    unknown = only - {c[0] for c in CASES}
    if unknown:
        sys.exit("unknown case(s): " + ", ".join(sorted(unknown)))
    for c in CASES:
        if not only or c[0] in only:
            run(*c)
