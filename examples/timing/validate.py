#!/usr/bin/env python3
"""The rows of docs/timing-validation.md: tpusim's predictions for the programs in this directory beside
published TPU measurements, the error of each, and the summary (median and largest |error|). Nothing in the
table is fitted: the model's constants come from docs/timing.md; the one constant this script derives, the
host cost of a Python-timed jax call, comes from calibration rows that are listed apart and not scored.

    python3 examples/timing/validate.py --tpusim build/release/tpusim [--write]

--write also writes examples/timing/validation.json (what tests/t_timing_validation.c checks) and prints the
markdown table for the doc. Error = predicted time / measured time - 1 (negative: tpusim too fast).
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def gemm(m, n, k):
    return f"gemm_bf16_{m}_{n}_{k}.hlo"


# ---- published measurements -------------------------------------------------------------------------------
# timing: "device" = time on the device (profiler traces), "python" = a jax call timed from Python (dispatch and
# block_until_ready included), "step" = one training step.
ROWS = []


def row(what, program, chip, measured_s, timing, source, group, **extra):
    ROWS.append(dict(what=what, program=program, chip=chip, measured_s=measured_s, timing=timing, source=source,
                     group=group, **extra))


# Ironwood (TPU7x), one device (a chiplet), bf16 m = n = k, TFLOP/s per device [AHC-IRONWOOD]. The sweep runs
# libtpu with --xla_tpu_scoped_vmem_limit_kib=65536 (its benchmark flags): the chip file says so. Its two
# smallest kernels (128^3, 256^3: 1.6-1.8 us, of which the data and the MXU take under 0.4 us) measure the fixed
# cost of one kernel on Ironwood, the chip table's op_overhead_s for v7: calibration rows, listed, not scored.
AHC_V7 = "v7_scoped_vmem_64m.json"
CHIP_LABEL = {AHC_V7: "v7 (scoped VMEM 64 MiB)"}
V7_CALIBRATION = []
for n, tf in ((128, 2.589961271), (256, 18.28645367), (512, 105.0783466), (1024, 349.7270639),
              (2048, 679.284728), (4096, 892.9445127), (16384, 950.1286983), (32768, 956.3824592)):
    if n <= 256:
        V7_CALIBRATION.append((n, 2 * n ** 3 / (tf * 1e12)))
        continue
    row(f"bf16 GEMM {n}^3", gemm(n, n, n), AHC_V7, 2 * n ** 3 / (tf * 1e12), "device", "AHC-IRONWOOD", "GEMM")
# Ironwood, one chiplet, device trace times in us [YW-V7]
for (m, n, k), us in (((8192, 8192, 8192), 1016.8463385), ((12288, 8192, 8192), 1498.740096),
                      ((16384, 8192, 8192), 1974.62545), ((8192, 12288, 12288), 2246.3967585),
                      ((12288, 12288, 12288), 3381.9429775), ((16384, 12288, 12288), 4481.295318),
                      ((8192, 16384, 16384), 4075.4015605), ((12288, 16384, 16384), 6028.5108045),
                      ((16384, 16384, 16384), 7971.2911165), ((8192, 16384, 18432), 4524.2611045),
                      ((12288, 16384, 18432), 6746.5438175), ((16384, 16384, 18432), 8966.2617045)):
    row(f"bf16 GEMM {m}x{n}x{k}", gemm(m, n, k), "v7", us * 1e-6, "device", "YW-V7", "GEMM")
# v6e, device trace [YW-V6E-TRACE]
row("bf16 GEMM 8192^3", gemm(8192, 8192, 8192), "v6e", 1510.94375e-6, "device", "YW-V6E-TRACE", "GEMM")
# v6e, timed from Python [YW-V6E]: m x n x k (A is m x k), time_us
V6E_WALL = [((128, 4096, 4096), 150.23725107312202), ((256, 4096, 4096), 157.28293918073177),
            ((512, 4096, 4096), 144.48794536292553), ((1024, 4096, 4096), 166.4799451828003),
            ((2048, 4096, 4096), 204.27241921424866), ((4096, 4096, 4096), 288.54068368673325),
            ((8192, 4096, 4096), 449.1174407303333), ((128, 8192, 8192), 211.6613183170557),
            ((256, 8192, 8192), 211.78902126848698), ((512, 8192, 8192), 228.35581563413143),
            ((1024, 8192, 8192), 297.94969595968723), ((2048, 8192, 8192), 460.8795326203108),
            ((4096, 8192, 8192), 798.0078179389238), ((8192, 8192, 8192), 1645.7434184849262),
            ((128, 4096, 7168), 139.63084667921066), ((256, 4096, 7168), 147.62363396584988),
            ((512, 4096, 7168), 164.77073542773724), ((1024, 4096, 7168), 209.1579232364893),
            ((2048, 4096, 7168), 288.8732962310314), ((4096, 4096, 7168), 429.830951616168),
            ((8192, 4096, 7168), 754.5637246221304), ((128, 7168, 4096), 135.58574952185154),
            ((256, 7168, 4096), 142.4721535295248), ((512, 7168, 4096), 160.75113788247108),
            ((1024, 7168, 4096), 215.60842171311378), ((2048, 7168, 4096), 284.59349647164345),
            ((4096, 7168, 4096), 437.1596407145262), ((8192, 7168, 4096), 706.1401382088661)]
# calibration (not scored): the 128- and 256-row products, whose device time is small beside the Python call
CALIBRATION = [((m, n, k), us) for (m, n, k), us in V6E_WALL if m <= 256]
for (m, n, k), us in V6E_WALL:
    if m > 256:
        row(f"bf16 GEMM {m}x{n}x{k}", gemm(m, n, k), "v6e", us * 1e-6, "python", "YW-V6E", "GEMM")
# v5e, jnp.matmul timed from Python [JAX-PALLAS]
for n, s in ((1024, 0.000119430), (4096, 0.000827290), (8192, 0.006047148)):
    row(f"bf16 GEMM {n}^3", f"matmul_bf16_{n}.hlo", "v5e", s, "python", "JAX-PALLAS", "GEMM")

# ResNet-50 v1.5 train steps (samples per device per step, images/s of the slice, devices)
for what, prog, chip, per_dev, rate, devs, src in (
        ("ResNet-50 train, bf16, batch 128/core, TF", "resnet50_train_b128_dp8.hlo", "v2-8", 128, 3186, 8, "RISEML"),
        ("ResNet-50 train, bf16, batch 128/core, Flax", "resnet50_train_b128_dp8.hlo", "v3-8", 128,
         125100 * 1024 / (4.4 * 3600), 8, "FLAX"),
        ("ResNet-50 train, bf16, batch 32/core, Flax", "resnet50_train_b32_dp32.hlo", "v2-32", 32,
         125100 * 1024 / (2.5 * 3600), 32, "FLAX"),
        ("ResNet-50 train, bf16, batch 32/core, Flax", "resnet50_train_b32_dp32.hlo", "v3-32", 32,
         125100 * 1024 / (2.1 * 3600), 32, "FLAX")):
    row(what, prog, chip, per_dev * devs / rate, "step", src, "CNN", per_device_batch=per_dev)

# Pairs of rows from one source on one chip generation at two per-core batches. A step's time is a part that
# grows with the per-core batch plus a part that does not (the weights' share: weight gradients reduced across
# devices, the optimizer, weight casts, fixed per-op costs); two batches separate them. Printed, not scored: it
# tells a device-side difference from time the device does not see (docs/timing-validation.md, "ResNet-50").
PAIRS = (("FLAX", "v3-8", "v3-32"),)


def maxtext_step_s(E, H, KV, D, M, L, V, batch, seq, tflops):
    """Step time implied by MaxText's TFLOP/s/chip: its model FLOPs per device (PaLM appendix B, as
    maxtext_utils computed them: 6 N per token plus causal attention) over the reported rate."""
    n = L * (E * H * D + 2 * E * KV * D + H * D * E + 3 * E * M) + 2 * V * E
    tokens = batch * seq
    flops = 6 * n * tokens + 6 * L * H * D * seq * seq * batch
    return flops / (tflops * 1e12)


# MaxText on one v5e-256, MaxText/configs/v5e/README.md (TFLOP/s/chip), configs {16,32,64}b.sh [MAXTEXT-V5E]
for name, scale_dims, batch, tf in (("16B", (4096, 64, 64, 128, 28672, 32, 32000), 6, 120),
                                    ("32B", (8192, 64, 64, 128, 28672, 32, 32000), 4, 132),
                                    ("64B", (8192, 64, 64, 128, 28672, 64, 32000), 2, 118)):
    E, H, KV, D, M, L, V = scale_dims
    row(f"MaxText {name} train step, v5e-256 (FSDP), seq 2048", f"llm_v5e_{name.lower()}.hlo", "v5e-256",
        maxtext_step_s(E, H, KV, D, M, L, V, batch, 2048, tf), "step", "MAXTEXT-V5E", "LLM")
# Llama 3.1 8B on v6e-256: "completed step: 14, seconds: 4.546" [RECIPE-V6E-8B]
row("Llama 3.1 8B train step, v6e-256 (FSDP), seq 8192", "llm_v6e_llama31_8b.hlo", "v6e-256", 4.546, "step",
    "RECIPE-V6E-8B", "LLM")


def profile(tpusim, prog, chip):
    if chip.endswith(".json"):
        chip = os.path.join(HERE, chip)
    out = subprocess.run([tpusim, "profile", os.path.join(HERE, prog), "--chip", chip, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def predict(tpusim, r, python_call_s):
    d = profile(tpusim, r["program"], r["chip"])
    if r["timing"] == "device":
        return d["device_time_s"]
    if r["timing"] == "python":
        return d["device_time_s"] + python_call_s
    return d["step_time_s"]


def calibrate(tpusim):
    """Host cost of one Python-timed jax call: the median of measured - predicted device time over the
    calibration rows (their device time is a small part of the measurement)."""
    diffs = []
    for (m, n, k), us in CALIBRATION:
        d = profile(tpusim, gemm(m, n, k), "v6e")
        diffs.append(us * 1e-6 - d["device_time_s"])
    return statistics.median(diffs), len(diffs)


def split_step(b1, t1, b2, t2):
    """(fixed, per image) of two step times t1, t2 at per-core batches b1 != b2: t = fixed + per_image x b."""
    per_image = (t1 - t2) / (b1 - b2)
    return t1 - per_image * b1, per_image


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpusim", default="build/release/tpusim")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    py_s, ncal = calibrate(a.tpusim)
    rows = []
    for r in ROWS:
        p = predict(a.tpusim, r, py_s)
        rows.append(dict(r, predicted_s=p, error=p / r["measured_s"] - 1))
    errs = [abs(r["error"]) for r in rows]
    print(f"Python call host cost: {py_s * 1e6:.1f} us (median of {ncal} calibration rows)")
    for n, s in V7_CALIBRATION:
        d = profile(a.tpusim, gemm(n, n, n), AHC_V7)
        print(f"calibration (not scored): bf16 GEMM {n}^3 on Ironwood, measured {s * 1e6:.3f} us, tpusim "
              f"{d['device_time_s'] * 1e6:.3f} us ({100 * (d['device_time_s'] / s - 1):+.1f}%)")
    print("| measurement | chip | timing | measured | tpusim | error | source |")
    print("|---|---|---|---|---|---|---|")

    def fmt(s):
        return f"{s * 1e3:.4g} ms" if s < 1 else f"{s:.4g} s"
    for r in rows:
        print(f"| {r['what']} | {CHIP_LABEL.get(r['chip'], r['chip'])} | {r['timing']} | {fmt(r['measured_s'])} | {fmt(r['predicted_s'])} "
              f"| {100 * r['error']:+.1f}% | {r['source']} |")
    print(f"\n{len(rows)} rows: median |error| {100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}%")
    for g in ("GEMM", "CNN", "LLM"):
        e = [abs(r["error"]) for r in rows if r["group"] == g]
        print(f"  {g}: {len(e)} rows, median {100 * statistics.median(e):.1f}%, max {100 * max(e):.1f}%")
    for src, chip_a, chip_b in PAIRS:
        ra, rb = ([r for r in rows if r["source"] == src and r["chip"] == c][0] for c in (chip_a, chip_b))
        print(f"{src} {chip_a} (batch {ra['per_device_batch']}/core) and {chip_b} "
              f"(batch {rb['per_device_batch']}/core): step = fixed + per-image x batch")
        for label, key in (("measured", "measured_s"), ("tpusim", "predicted_s")):
            fixed, per_image = split_step(ra["per_device_batch"], ra[key], rb["per_device_batch"], rb[key])
            print(f"  {label:8s}: fixed {fixed * 1e3:.1f} ms per step, {per_image * 1e3:.3f} ms per image")
    if a.write:
        with open(os.path.join(HERE, "validation.json"), "w") as fh:
            json.dump({"python_call_s": py_s, "rows": rows}, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
