#!/usr/bin/env python3
"""Runs pip's SCALE-Sim 3.0.0 like its command line does, without traces (-s N), and prints the CPU and
wall seconds of the simulation itself (imports excluded) as: SIM_CPU <s> SIM_WALL <s>.
    pip_scalesim.py CONFIG TOPOLOGY conv|gemm OUTDIR
SCALE-Sim 3 insists on a layout file even when custom layouts are off; a header-only one is written."""
import contextlib
import io
import os
import sys
import tempfile
import time

from scalesim.scale_sim import scalesim

cfg, topo, mode, out = sys.argv[1:5]
with tempfile.TemporaryDirectory() as tmp:
    layout = os.path.join(tmp, "layout.csv")
    with open(layout, "w") as f:
        f.write("Layer name, IFMAP Height Intraline Factor,\n")
    c0, w0 = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout,
                     input_type_gemm=(mode == "gemm"))
        s.run_scale(top_path=out)
    print("SIM_CPU %.3f SIM_WALL %.3f" % (time.process_time() - c0, time.perf_counter() - w0))
