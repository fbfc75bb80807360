#!/usr/bin/env python3
"""tpusim scalesim vs pip's SCALE-Sim 3.0.0: same configs, same topologies, report-by-report agreement and
speed. Usually started by bench/scalesim/run.sh, which builds tpusim and prepares SCALE-Sim's venv.

    run.py --tpusim build/release/tpusim --python VENV/bin/python [--quick] [--out DIR]

Configs: SCALE-Sim's example config (corpus scale.cfg: 64 kB SRAMs, Bandwidth 10) with the array set to
32x32 and 128x128 and each of the three dataflows, in CALC mode; plus USER mode (SCALE-Sim's memory stalls)
for ws on 32x32 and os on 128x128. Topologies: layers taken from the corpus (ResNet-50, AlexNet, GPT-2
GEMMs), chosen so that pip's SCALE-Sim needs seconds per run rather than hours (it walks every cycle in
Python; a whole ResNet-50 takes it hours).

For every run it prints whether the three reports are byte-identical and the CPU time of the simulation
in each tool (SCALE-Sim: its run_scale() call, imports excluded; tpusim: its whole run, parsing and report
writing included, as printed by the CLI). CPU time rather than wall time because the machine may be shared;
both run with one BLAS thread.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(ROOT, "..", "shared", "corpus", "scalesim")
REPORTS = ("COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "DETAILED_ACCESS_REPORT.csv")

# (name, corpus file, mode, layer names)
TOPOLOGIES = [
    ("resnet50", "Resnet50.csv", "conv", ["CB2a_1", "IB4b_1"]),
    ("alexnet", "alexnet.csv", "conv", ["Conv1"]),
    ("gpt2", "gpt2.csv", "gemm", ["QKT", "QKTV"]),
]
QUICK_TOPOLOGIES = [
    ("resnet50", "Resnet50.csv", "conv", ["CB2a_1"]),
    ("gpt2", "gpt2.csv", "gemm", ["QKTV"]),
]
# (array side, dataflow, USER mode)
CONFIGS = [(32, df, False) for df in ("os", "ws", "is")] + [(128, df, False) for df in ("os", "ws", "is")] + \
          [(32, "ws", True), (128, "os", True)]
QUICK_CONFIGS = [(32, "ws", False), (128, "os", False), (32, "ws", True)]


def corpus_rows(fname, names):
    """The named rows of a corpus topology, as clean SCALE-Sim rows (the corpus Resnet50.csv carries extra
    columns and a row of commas that SCALE-Sim 3.0.0 itself cannot read)."""
    want = {}
    with open(os.path.join(CORPUS, "topologies", fname)) as f:
        for line in list(f)[1:]:
            cols = [c.strip() for c in line.strip().split(",")]
            if cols and cols[0] in names:
                want[cols[0]] = cols
    rows = []
    for n in names:
        cols = want[n]
        k = 4 if fname == "gpt2.csv" else 8
        rows.append(", ".join(cols[:k]) + ",")
    return rows


def make_config(path, side, df, user):
    text = open(os.path.join(CORPUS, "configs", "scale.cfg")).read()
    name = "bench_%dx%d_%s_%s" % (side, side, df, "user" if user else "calc")
    text = re.sub(r"run_name = .*", "run_name = " + name, text)
    text = re.sub(r"ArrayHeight:\s*\d+", "ArrayHeight:    %d" % side, text)
    text = re.sub(r"ArrayWidth:\s*\d+", "ArrayWidth:     %d" % side, text)
    text = re.sub(r"Dataflow : \w+", "Dataflow : " + df, text)
    text = re.sub(r"InterfaceBandwidth: \w+", "InterfaceBandwidth: " + ("USER" if user else "CALC"), text)
    with open(path, "w") as f:
        f.write(text)
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "build", "release", "tpusim"))
    ap.add_argument("--python", default=sys.executable, help="a Python with scalesim==3.0.0 and numpy<2")
    ap.add_argument("--quick", action="store_true", help="a few small runs (a minute or two)")
    ap.add_argument("--out", default=None, help="keep inputs and reports here")
    args = ap.parse_args()

    work = args.out or tempfile.mkdtemp(prefix="tpusim-ss-bench-")
    os.makedirs(work, exist_ok=True)
    topos = QUICK_TOPOLOGIES if args.quick else TOPOLOGIES
    configs = QUICK_CONFIGS if args.quick else CONFIGS
    driver = os.path.join(HERE, "pip_scalesim.py")
    # Both tools are single-threaded; idle BLAS thread pools (numpy's, and the one tpusim links) would only
    # add spinning to the CPU times.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

    print("%-26s %-9s %6s %-9s %10s %10s %9s" % ("config", "topology", "layers", "identical", "pip CPU s",
                                                  "tpusim ms", "ratio"))
    tot_pip = tot_ours = 0.0
    all_same = True
    runs = 0
    t_start = time.time()
    for side, df, user in configs:
        for tname, tfile, mode, layers in topos:
            d = os.path.join(work, "%d_%s_%s_%s" % (side, df, "user" if user else "calc", tname))
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            cfg = os.path.join(d, "config.cfg")
            run = make_config(cfg, side, df, user)
            topo = os.path.join(d, "topology.csv")
            hdr = "Layer, M, N, K," if mode == "gemm" else \
                "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,"
            with open(topo, "w") as f:
                f.write(hdr + "\n" + "\n".join(corpus_rows(tfile, layers)) + "\n")

            p = subprocess.run([args.python, driver, cfg, topo, mode, os.path.join(d, "pip")],
                               capture_output=True, text=True, env=env)
            m = re.search(r"SIM_CPU ([\d.]+) SIM_WALL ([\d.]+)", p.stdout)
            if p.returncode or not m:
                print("pip scalesim failed on %s / %s:\n%s" % (run, tname, p.stderr[-2000:]))
                all_same = False
                continue
            pip_cpu = float(m.group(1))

            q = subprocess.run([args.tpusim, "scalesim", "-c", cfg, "-t", topo, "-i", mode, "-p",
                                os.path.join(d, "tpusim")], capture_output=True, text=True, env=env)
            m = re.search(r"CPU ([\d.]+) s", q.stdout)
            if q.returncode or not m:
                print("tpusim failed on %s / %s:\n%s%s" % (run, tname, q.stdout, q.stderr))
                all_same = False
                continue
            ours = max(float(m.group(1)), 1e-6)

            same = 0
            for r in REPORTS:
                a = open(os.path.join(d, "pip", run, r)).read()
                b = open(os.path.join(d, "tpusim", run, r)).read()
                same += a == b
            all_same &= same == len(REPORTS)
            tot_pip += pip_cpu
            tot_ours += ours
            runs += 1
            print("%-26s %-9s %6d %-9s %10.2f %10.3f %8.0fx" % (run, tname, len(layers), "%d/3" % same, pip_cpu,
                                                                   ours * 1000, pip_cpu / ours), flush=True)
    print()
    print("runs: %d, reports identical in all: %s" % (runs, "yes" if all_same else "NO"))
    if tot_ours > 0:
        print("total CPU: SCALE-Sim %.1f s, tpusim %.3f s: tpusim is %.0fx faster" % (tot_pip, tot_ours,
                                                                                        tot_pip / tot_ours))
    print("wall time of the benchmark: %.0f s; inputs and reports in %s" % (time.time() - t_start, work))
    return 0 if all_same and runs else 1


if __name__ == "__main__":
    sys.exit(main())
