#!/usr/bin/env python3
"""Prints the rows of docs/timing-validation.md: tpusim's predictions for the programs in this directory
(and, with --opt DIR, for the XLA:TPU-optimized programs xla_tpu_aot.py wrote there) beside published
measurements, with the error of each prediction. Nothing here is fitted: the measurements are only read
after the model has predicted.

    python3 examples/timing/validate.py --tpusim build/release/tpusim [--opt /tmp/aot]
"""
import argparse
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA = os.path.join(HERE, "..", "..", "..", "shared", "corpus", "hlo", "hlo_llama31_8b_bf16_1x8.hlo")

# (what, program, chip, samples per step per device, measured value, unit, how the measurement converts)
#   unit "ms/call": measured time of one call; "img/s": images per second of the whole slice;
#   "tok/s/dev": tokens per second per device.
ROWS = [
    ("bf16 matmul 1024^3, XLA (jnp.matmul)", "matmul_bf16_1024.hlo", "v5e", 1, 0.11943, "ms/call", "JAX-PALLAS"),
    ("bf16 matmul 4096^3, XLA (jnp.matmul)", "matmul_bf16_4096.hlo", "v5e", 1, 0.82729, "ms/call", "JAX-PALLAS"),
    ("bf16 matmul 8192^3, XLA (jnp.matmul)", "matmul_bf16_8192.hlo", "v5e", 1, 6.04715, "ms/call", "JAX-PALLAS"),
    ("ResNet-50 train, bf16, 128/core", "resnet50_train_b128_dp8.hlo", "v2-8", 128, 3186, "img/s", "RISEML"),
    ("ResNet-50 train, bf16, 128/core", "resnet50_train_b128_dp8.hlo", "v3-8", 128, 125100 * 1024 / (4.4 * 3600), "img/s", "FLAX"),
    ("ResNet-50 train, bf16, 32/core", "resnet50_train_b32_dp32.hlo", "v2-32", 32, 125100 * 1024 / (2.5 * 3600), "img/s", "FLAX"),
    ("ResNet-50 train, bf16, 32/core", "resnet50_train_b32_dp32.hlo", "v3-32", 32, 125100 * 1024 / (2.1 * 3600), "img/s", "FLAX"),
    ("Llama 3.1 8B train, seq 8192", LLAMA, "v6e-8", 2 * 8192, 7207, "tok/s/dev", "MAXTEXT"),
]
# XLA:TPU-optimized versions (examples/timing/xla_tpu_aot.py) of the rows above, by (program, chip)
OPT = {("resnet50_train_b128_dp8.hlo", "v2-8"): "resnet50_v2_b128_dp1.opt.hlo",
       ("resnet50_train_b128_dp8.hlo", "v3-8"): "resnet50_v3_b128_dp1.opt.hlo",
       ("resnet50_train_b32_dp32.hlo", "v2-32"): "resnet50_v2_b32_dp32.opt.hlo",
       ("resnet50_train_b32_dp32.hlo", "v3-32"): "resnet50_v3_b32_dp32.opt.hlo"}


def profile(tpusim, prog, chip):
    out = subprocess.run([tpusim, "profile", prog, "--chip", chip, "--analytic", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def as_unit(d, samples, unit):
    s, devices = d["step_time_s"], d["devices"]
    if unit == "ms/call":
        return s * 1e3
    if unit == "img/s":
        return samples * devices / s
    return samples / s   # tok/s/dev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpusim", default="build/release/tpusim")
    ap.add_argument("--opt", help="directory with the XLA:TPU-optimized programs")
    a = ap.parse_args()
    print("| measurement | chip | measured | tpusim | error | tpusim on XLA-optimized | error | bound | source |")
    print("|---|---|---|---|---|---|---|---|---|")
    for what, prog, chip, samples, meas, unit, src in ROWS:
        path = prog if os.path.isabs(prog) else os.path.join(HERE, prog)
        if not os.path.exists(path):
            continue
        d = profile(a.tpusim, path, chip)
        pred = as_unit(d, samples, unit)
        # error of the predicted time: for rates, time = 1/rate
        err = (pred / meas - 1) if unit == "ms/call" else (meas / pred - 1)
        opt, opt_err = "", ""
        o = OPT.get((prog, chip))
        if a.opt and o and os.path.exists(os.path.join(a.opt, o)):
            do = profile(a.tpusim, os.path.join(a.opt, o), chip)
            po = as_unit(do, samples, unit)
            opt = f"{po:,.0f} {unit}" if unit != "ms/call" else f"{po:.4g} {unit}"
            opt_err = f"{100 * ((po / meas - 1) if unit == 'ms/call' else (meas / po - 1)):+.0f}%"
        fmt = (lambda v: f"{v:.4g}") if unit == "ms/call" else (lambda v: f"{v:,.0f}")
        print(f"| {what} | {chip} | {fmt(meas)} {unit} | {fmt(pred)} {unit} | {100 * err:+.0f}% | {opt} | {opt_err} "
              f"| {d['bound']} | {src} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
