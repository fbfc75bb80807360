#!/usr/bin/env python3
"""libtpu_oom_fragmentation.py — which HBM figure the real TPU compiler's out-of-memory check adds up.

memory_analysis().temp_size_in_bytes is, on every program where libtpu's log shows heap fragmentation, the
heap plus its fragmentation again (libtpu's log: `HLO temp H (... N% fragmentation (F))`, temp = H + F),
while the buffer assignment's temp allocation and the memory-usage report hold the heap H once. This script
settles which sum the compiler checks against HBM: it scales the batch of a program with a fragmented heap
(libtpu_memory.py's transformer_remat_train: a scan of remat'ed transformer blocks) until libtpu refuses it
("Ran out of memory in memory space hbm. Used X of Y hbm"), bisects the batch at the threshold, and records
for each compile memory_analysis and libtpu's own log figures (heap, fragmentation, program requirement).

    VENV/bin/python tests/reference/libtpu_oom_fragmentation.py [--gens v3,v5e] [--out FILE]
    VENV/bin/python tests/reference/libtpu_oom_fragmentation.py --batches 1024,1536 --gens v5e --out /tmp/x.json
    python3 tests/reference/libtpu_oom_fragmentation.py --table-only     # the .md from the committed json

(VENV: jax[tpu]==0.10.2, as for libtpu_memory.py.)
Each compile runs in a child process (libtpu logs to the C stderr). Writes tests/reference/
libtpu_oom_fragmentation.json and .md by default; a run takes about 15 minutes on two cores. RANGES holds, per
generation, a batch that compiles and one that does not (found with --batches); the script checks both.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MiB = float(1 << 20)
# per generation, a batch that compiles and one that runs out of memory (found by hand; bisected between)
RANGES = {"v3": (1152, 1184), "v5e": (1088, 1216)}


def size(s):
    m = re.fullmatch(r"([0-9.]+)([BKMGT])", s)
    return int(float(m.group(1)) * UNITS[m.group(2)])


def child(gen, batch):
    os.environ["LIBTPU_DUMP_DIR"] = tempfile.mkdtemp(prefix="oomfrag_")
    import importlib.util
    spec = importlib.util.spec_from_file_location("lm", os.path.join(HERE, "libtpu_memory.py"))
    lm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lm)
    import jax.numpy as jnp

    def make():
        return (lm.sgd(lm.scan_loss("full")), [lm.stacked(4, 512, jnp.float32), lm.S((batch, 512, 512))],
                {"donate_argnums": (0,)})
    _, opt, ma = lm.compile_one("transformer_remat_train", make, gen)
    if opt is None:
        out = {"oom": ma}
    else:
        out = {k: getattr(ma, k) for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                           "alias_size_in_bytes", "temp_size_in_bytes",
                                           "generated_code_size_in_bytes")}
        # the memory-usage report's HBM space (what the out-of-memory message's "Used" totals)
        mod = re.search(r"^HloModule (\S+?),", opt, re.M).group(1)
        out["default_space"] = (lm.read_usage_report(mod) or {}).get("default")
    print("RESULT " + json.dumps(out), flush=True)


def compile_at(gen, batch):
    env = dict(os.environ, TPU_STDERR_LOG_LEVEL="0", TPU_MIN_LOG_LEVEL="0")
    p = subprocess.run([sys.executable, __file__, "--child", gen, str(batch)], env=env, capture_output=True,
                       text=True)
    log = p.stdout + p.stderr
    res = [ln for ln in log.splitlines() if ln.startswith("RESULT ")]
    if not res:
        raise RuntimeError(f"{gen} batch {batch}: no result\n{log[-3000:]}")
    rec = {"gen": gen, "batch": batch, **json.loads(res[-1][7:])}
    # libtpu's HBM requirement: its heap (HLO temp) with the heap's fragmentation, and the code (overlays)
    m = re.search(r"Program hbm requirement ([0-9.]+[BKMGT]):\n(?:[^\n]*\] )?\s*HLO temp\s+([0-9.]+[BKMGT]) "
                  r"\(.*?fragmentation \(([0-9.]+[BKMGT])\)\)\n(?:[^\n]*\] )?\s*overlays\s+([0-9.]+[BKMGT])", log)
    if m:
        rec["log_program"], rec["log_heap"] = size(m.group(1)), size(m.group(2))
        rec["log_fragmentation"], rec["log_overlays"] = size(m.group(3)), size(m.group(4))
    # the heap simulator's results in bytes (the last is the HBM heap on v3)
    rec["heap_simulator_sizes"] = [int(x) for x in re.findall(r"algorithm finished with size: (\d+)", log)]
    m = re.search(r"Ran out of memory in memory space hbm\. Used ([0-9.]+[BKMGT]) of ([0-9.]+[BKMGT]) hbm", log)
    if m:
        rec["used"], rec["capacity"] = size(m.group(1)), size(m.group(2))
        rec["oom_message"] = m.group(0)
        tail = log[m.end():]
        m = re.match(r"\. Exceeded hbm capacity by ([0-9.]+[BKMGT])", tail)
        if m:
            rec["exceeded"] = size(m.group(1))
        # the memory-usage report printed with the message: its HBM space's total, in bytes
        m = re.search(r"Memory Space: default \(color=0\)\nTotal bytes: (\d+)", tail)
        if m:
            rec["default_space"] = int(m.group(1))
    m = re.search(r"program HBM usage: ([0-9.]+[BKMGT]) / ([0-9.]+[BKMGT])", log)
    if m:
        rec["log_program_usage"], rec["capacity"] = size(m.group(1)), size(m.group(2))
    if "temp_size_in_bytes" in rec:
        base = rec["argument_size_in_bytes"] + rec["output_size_in_bytes"] - rec["alias_size_in_bytes"]
        rec["sum_with_temp"] = base + rec["temp_size_in_bytes"]           # the fragmentation twice
        if "log_fragmentation" in rec:
            rec["sum_heap_once"] = rec["sum_with_temp"] - rec["log_fragmentation"]
    print(summary(rec), file=sys.stderr, flush=True)
    return rec


def summary(r):
    f = lambda k: f"{r[k] / MiB:.1f}" if k in r else "-"  # noqa: E731
    if "oom" in r:
        return (f"{r['gen']} batch {r['batch']}: OUT OF MEMORY used {f('used')} of {f('capacity')} MiB, exceeded by "
                f"{f('exceeded')}; HBM space {f('default_space')}, heap {f('log_heap')} frag {f('log_fragmentation')}")
    return (f"{r['gen']} batch {r['batch']}: compiles; args+out-alias+temp {f('sum_with_temp')} MiB, "
            f"heap once {f('sum_heap_once')} MiB, HBM space {f('default_space')}, heap {f('log_heap')} frag {f('log_fragmentation')} "
            f"capacity {f('capacity')} MiB")


def bisect(gen, lo, hi, recs):
    """Narrows [lo, hi] to adjacent batches, lo compiling and hi not (both ends checked first)."""
    for b in (lo, hi):
        recs.append(compile_at(gen, b))
    if "oom" in recs[-2] or "oom" not in recs[-1]:
        raise SystemExit(f"{gen}: batch {lo} must compile and {hi} must not")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = compile_at(gen, mid)
        recs.append(r)
        if "oom" in r:
            hi = mid
        else:
            lo = mid
    return lo, hi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--gens", default="v3,v5e")
    ap.add_argument("--batches", default="", help="compile these batches only (comma list), no bisection")
    ap.add_argument("--out", default=os.path.join(HERE, "libtpu_oom_fragmentation.json"))
    ap.add_argument("--table-only", action="store_true", help="rewrite the .md from the json")
    a = ap.parse_args()
    if a.table_only:
        with open(a.out) as fh:
            write_table(json.load(fh), os.path.splitext(a.out)[0] + ".md")
        return
    if a.child:
        child(a.child[0], int(a.child[1]))
        return
    recs = []
    for gen in a.gens.split(","):
        if a.batches:
            for b in a.batches.split(","):
                recs.append(compile_at(gen, int(b)))
            continue
        lo, hi = bisect(gen, *RANGES[gen], recs)
    with open(a.out, "w") as fh:
        json.dump(recs, fh, indent=1)
        fh.write("\n")
    write_table(recs, os.path.splitext(a.out)[0] + ".md")


def write_table(recs, path):
    f = lambda v: "" if v is None else f"{v / MiB:.1f}"  # noqa: E731
    lines = ["# libtpu's out-of-memory check and the heap's fragmentation", "",
             "Written by `tests/reference/libtpu_oom_fragmentation.py` (see its docstring): libtpu_memory.py's remat "
             "transformer at the batches around the out-of-memory threshold, compiled for one device; MiB. "
             "*analysis sum* = memory_analysis' arguments + outputs + temp - aliased (temp = heap + fragmentation); "
             "*HBM space* = the memory-usage report's `default` space (arguments, outputs, the heap once; for a "
             "refused compile, the report printed with the message); *heap*, *fragmentation*, *code* = libtpu's "
             "log (`HLO temp`, its fragmentation, `overlays`; 3 digits); *exceeded* = the message's `Exceeded hbm "
             "capacity by`. Where the compiler refuses, HBM space - exceeded is the same capacity every time "
             "(16 GiB less the reserved 530.01 MiB on v3, 258 MiB on v5e): the check's `Used` is the HBM space.", "",
             "| gen | batch | verdict | analysis sum | HBM space | heap | fragmentation | code | exceeded "
             "| HBM space - exceeded |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(recs, key=lambda r: (r["gen"], r["batch"])):
        ds, ex = r.get("default_space"), r.get("exceeded")
        lines.append(f"| {r['gen']} | {r['batch']} | {'out of memory' if 'oom' in r else 'compiles'} "
                     f"| {f(r.get('sum_with_temp'))} | {f(ds)} | {f(r.get('log_heap'))} "
                     f"| {f(r.get('log_fragmentation'))} | {f(r.get('log_overlays'))} | {f(ex)} "
                     f"| {f(ds - ex) if ds is not None and ex is not None else ''} |")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
