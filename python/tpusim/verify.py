"""Checking an exported STEP_DIR with the tpusim program: every HLO file verifies (`tpusim check`) and runs
(`tpusim run --random-inputs`), and step.hlo run by tpusim on real inputs agrees with jax's own step under
simulated TPU numerics."""

import os
import tempfile

import numpy as np

from . import tool
from .export import load_signature


def run_program(tpusim, hlo, inputs, numerics="tpu"):
    """Runs one HLO program with tpusim on a list of numpy inputs; returns its outputs (numpy arrays)."""
    with tempfile.TemporaryDirectory(prefix="tpusim-run-") as d:
        npz = os.path.join(d, "in.npz")
        np.savez(npz, **{"arg%d" % i: np.asarray(a) for i, a in enumerate(inputs)})
        out = os.path.join(d, "out")
        tool.run(tpusim, ["run", hlo, "--inputs", npz, "--out", out, "--numerics", numerics, "--quiet"])
        n = len([f for f in os.listdir(out) if f.startswith("out") and f.endswith(".npy")])
        return [np.load(os.path.join(out, "out%d.npy" % i)) for i in range(n)]


def verify_step_dir(step_dir, tpusim=None, log=print, run=True):
    """`tpusim check` and (run=True) `tpusim run --random-inputs` on every program of the STEP_DIR. Returns True
    when all pass (False, with the reasons logged, otherwise; None when no tpusim binary is found). Leave run
    off for programs too large to execute here (ResNet-50 at batch 128)."""
    tpusim = tool.find_tpusim(tpusim)
    if not tpusim:
        log("verify: no tpusim binary (build it with make, or set $TPUSIM); skipped")
        return None
    sig = load_signature(step_dir)
    ok = True
    for kind, fname in sig["programs"].items():
        path = os.path.join(step_dir, fname)
        good = True
        for args in [["check", path]] + ([["run", path, "--random-inputs", "--quiet"]] if run else []):
            p = tool.run(tpusim, args, check=False)
            if p.returncode != 0:
                good = False
                log("verify: tpusim %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout[-2000:],
                                                          p.stderr[-2000:]))
        log("verify: %s: check%s %s" % (fname, " and run" if run else "", "ok" if good else "FAILED"))
        ok = ok and good
    return ok


def max_rel_diff(a, b):
    """max |a-b| / max(|b|, tiny) over the elements, per array (float arrays; integer arrays must be equal)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
    return float(np.max(np.abs(a - b))) / scale if a.size else 0.0


def compare_step(train_step, step_dir, batch, tpusim=None, kind="step"):
    """Runs `kind` (step or grad) of step_dir with tpusim on the initial state and `batch` (list of numpy
    arrays in signature order) and compares with the jax function traced with TPU numerics. Returns
    [(output name, max relative difference)]."""
    tpusim = tool.find_tpusim(tpusim)
    ts = train_step
    state = ts.init_state()
    args = state + list(batch) + (ts.hyper_defaults() if kind == "step" else [])
    got = run_program(tpusim, os.path.join(step_dir, kind + ".hlo"), args)
    want = [np.asarray(x) for x in ts.jitted(kind, tpu=True)(*args)]
    if kind == "step":
        names = [e["name"] for e in ts.state_entries] + ts.metric_names
    else:
        names = (["grad:" + e["name"] for e in ts.state_entries if e["role"] == "param"]
                 + ["new:" + e["name"] for e in ts.state_entries if e["role"] == "stat"] + ts.metric_names)
    if len(got) != len(want):
        raise RuntimeError("%s: tpusim gave %d outputs, jax %d" % (kind, len(got), len(want)))
    return [(n, max_rel_diff(g, w)) for n, g, w in zip(names, got, want)]
