#!/usr/bin/env python3
"""scale.py — how tpusim's passes grow with program size (issue 18: every pass linear or n log n).

Generates programs of 10k, 100k and 1M instructions (bench/scale_gen.py: a chain of adds, a wide fan-in of
adds, a chain of calls, unknown attributes) and times each command in its own process, with its peak memory
(the command's maximum resident set, from GNU time, or wait4 without it):

  parse    tpusim print          (parse, infer omitted shapes, print)
  verify   tpusim check          (parse, verify, the TPU's rules, the report)
  memory   tpusim memory --chip v5e
  profile  tpusim profile --chip v5e
  run      tpusim run --random-inputs --threads 1

The last columns give the growth from 100k to 1M (x10 in size): about 10 is linear; 100 would be quadratic.

  python3 bench/scale.py [--bin build/release/tpusim] [--sizes 10000,100000,1000000] [--kinds chain,wide,calls,attrs]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scale_gen  # noqa: E402

COMMANDS = [
    ("parse", ["print"]),
    ("verify", ["check"]),
    ("memory", ["memory", "--chip", "v5e"]),
    ("profile", ["profile", "--chip", "v5e", "--no-advice"]),
    ("run", ["run", "--random-inputs", "--threads", "1", "--quiet"]),
]


def measure(argv):
    """(seconds, peak RSS in MiB, exit code) of one child process. The peak comes from GNU time when it is
    installed: a child forked from this (large) Python process would inherit its high-water mark in wait4's
    ru_maxrss, a grandchild of the small time program does not."""
    timer = "/usr/bin/time"
    use_time = os.access(timer, os.X_OK)
    with tempfile.NamedTemporaryFile("r") as rf:
        cmd = [timer, "-f", "%M", "-o", rf.name] + argv if use_time else argv
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.monotonic() - t0
        rss = ru.ru_maxrss / 1024.0
        if use_time:
            lines = [l for l in rf.read().split("\n") if l.strip().isdigit()]
            rss = int(lines[-1]) / 1024.0 if lines else float("nan")
    return dt, rss, os.waitstatus_to_exitcode(status)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "release", "tpusim"))
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--kinds", default="chain,wide,calls,attrs")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    kinds = a.kinds.split(",")
    cols = [c for c, _ in COMMANDS]
    print("| program | n | file MB | " + " | ".join("%s s / MiB" % c for c in cols) + " | growth x10 (time) |")
    print("|---|---|---|" + "---|" * len(cols) + "---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            prev = None
            for n in sizes:
                path = os.path.join(tmp, "%s_%d.hlo" % (kind, n))
                with open(path, "w") as f:
                    scale_gen.gen(kind, n, f.write)
                mb = os.path.getsize(path) / 1e6
                row, times = [], []
                for _, args in COMMANDS:
                    dt, rss, rc = measure([a.bin] + args[:1] + [path] + args[1:])
                    row.append("%.2f / %.0f%s" % (dt, rss, "" if rc in (0, 1) else " (exit %d)" % rc))
                    times.append(dt)
                growth = ""
                if prev and n == 10 * prev[0]:
                    growth = " ".join("%.1f" % (t / max(p, 1e-3)) for t, p in zip(times, prev[1]))
                print("| %s | %d | %.1f | %s | %s |" % (kind, n, mb, " | ".join(row), growth))
                sys.stdout.flush()
                prev = (n, times)
                os.unlink(path)


if __name__ == "__main__":
    main()
