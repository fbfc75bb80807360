#!/usr/bin/env python3
"""Reference statistics for the MobileNetV2 train step in the corpus (PyTorch/XLA, batch 96).

    python3 tests/conformance/mobilenet_ref.py [--seed 1] [--hlo /work/shared/corpus/hlo/mobilenet_v2.hlo]
            [--out tests/conformance/mobilenet/ref_seed1.json]
Needs pip jax/jaxlib (0.10.x), numpy, ml_dtypes; ~10 GB RAM; minutes of CPU.

Its inputs (319 entry parameters, 58 MB of images alone) are too big to commit, so tpusim and this script
generate them with the same deterministic generator (all arithmetic modulo 2^64):

    G = 0x9E3779B97F4A7C15
    state = S ^ (G * (k + 1))                  # parameter k (0-based), seed S
    for each element, in row-major order:
        state += G
        z = state
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        z = z ^ (z >> 31)
        float types (f16/bf16/f32/f64):  value = ((z >> 40) * 2^-24) * 2 - 1    uniform in [-1, 1), exact in f32,
                                          then converted to the type
        signed/unsigned integer types:   value = z % 8
        pred:                            value = z >> 63

The program is run on XLA:CPU twice, as is ("exact") and after tpu_reference.rewrite_for_tpu ("tpu"), and
for each output i (root tuple flattened) the json records shape, dtype, count, sum, sum_abs, min, max,
nan_count and 32 samples at flat row-major positions floor(j * count / 32), j = 0..31.  sum/sum_abs/min/max
are over the non-NaN elements, accumulated in float64; non-finite numbers are written as the strings
"nan", "inf", "-inf" (JSON has no literals for them).  Compile and run wall times and the machine are
recorded too.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np          # noqa: E402

import hlo_text as ht       # noqa: E402
import tpu_reference        # noqa: E402
import xla_runner as xr     # noqa: E402

G = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)


def generate(k, dims, hlo_type, seed=1, chunk=1 << 22):
    """Entry parameter k (0-based) of shape dims and HLO element type hlo_type."""
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    with np.errstate(over='ignore'):
        state0 = np.uint64(seed) ^ (G * np.uint64(k + 1))
        dtype = xr.NP_DTYPES[hlo_type]
        out = np.empty(n, dtype=dtype)
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            idx = np.arange(lo + 1, hi + 1, dtype=np.uint64)
            z = state0 + idx * G
            z = (z ^ (z >> np.uint64(30))) * M1
            z = (z ^ (z >> np.uint64(27))) * M2
            z = z ^ (z >> np.uint64(31))
            if hlo_type in ('f16', 'bf16', 'f32', 'f64', 'f8e4m3fn', 'f8e5m2'):
                v = (z >> np.uint64(40)).astype(np.float64) * (2.0 ** -24) * 2.0 - 1.0
                out[lo:hi] = v.astype(np.float32).astype(dtype)
            elif hlo_type == 'pred':
                out[lo:hi] = (z >> np.uint64(63)).astype(bool)
            else:
                out[lo:hi] = (z % np.uint64(8)).astype(dtype)
    return out.reshape(dims)


def _num(x):
    x = float(x)
    if np.isnan(x):
        return 'nan'
    if np.isinf(x):
        return 'inf' if x > 0 else '-inf'
    return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x


def stats(a, hlo_type):
    a = np.asarray(a)
    flat = a.reshape(-1)
    count = int(flat.size)
    if a.dtype.kind in 'biu':
        w = flat.astype(np.int64) if a.dtype != np.uint64 else flat
        s = {'sum': int(np.sum(w, dtype=np.int64)) if count else 0,
             'sum_abs': int(np.sum(np.abs(w), dtype=np.int64)) if count else 0,
             'min': int(w.min()) if count else None, 'max': int(w.max()) if count else None, 'nan_count': 0}
        samples = [int(w[(j * count) // 32]) for j in range(32)] if count else []
    else:
        f = flat.astype(np.float64)
        nan = np.isnan(f)
        g = f[~nan]
        s = {'sum': _num(np.sum(g)), 'sum_abs': _num(np.sum(np.abs(g))),
             'min': _num(g.min()) if g.size else None, 'max': _num(g.max()) if g.size else None,
             'nan_count': int(nan.sum())}
        samples = [_num(f[(j * count) // 32]) for j in range(32)] if count else []
    d = {'shape': list(a.shape), 'dtype': hlo_type, 'count': count}
    d.update(s)
    d['samples'] = samples
    return d


def machine():
    model = None
    try:
        out = subprocess.run(['lscpu'], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith('Model name:'):
                model = line.split(':', 1)[1].strip()
    except OSError:
        pass
    return {'cpu_model': model or platform.processor(), 'nproc': os.cpu_count(), 'platform': platform.platform()}


def run_one(text, inputs, label):
    t0 = time.perf_counter()
    exe = xr.Compiled(text)
    t1 = time.perf_counter()
    outs = exe.run(inputs)
    t2 = time.perf_counter()
    print('%s: compile %.1f s, run %.1f s' % (label, t1 - t0, t2 - t1), flush=True)
    return outs, {'compile_s': round(t1 - t0, 3), 'run_s': round(t2 - t1, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--hlo', default='/work/shared/corpus/hlo/mobilenet_v2.hlo')
    ap.add_argument('--out', default=None)
    ap.add_argument('--only', choices=['exact', 'tpu'], default=None)
    args = ap.parse_args()
    out_path = args.out or os.path.join(HERE, 'mobilenet', 'ref_seed%d.json' % args.seed)
    text = open(args.hlo).read()
    mod = ht.Module(text)
    params = mod.entry_parameters()
    t0 = time.perf_counter()
    inputs = []
    for k, (_, shape) in enumerate(params):
        et, dims, _ = ht.parse_shape(shape)
        inputs.append(generate(k, dims, et, args.seed))
    gen_s = time.perf_counter() - t0
    print('generated %d inputs in %.1f s' % (len(inputs), gen_s), flush=True)
    out_types = [et for et, _ in ht.flatten_shape(mod.entry().root().shape)]

    result = {
        'hlo': os.path.basename(args.hlo),
        'seed': args.seed,
        'generator': 'splitmix64 per parameter, see tests/conformance/mobilenet_ref.py',
        'parameters': len(params),
        'input_checks': [{'param': k, 'first': _num(np.asarray(inputs[k]).reshape(-1)[0]),
                          'sum': _num(np.sum(np.asarray(inputs[k], np.float64)))} for k in (0, 5, 6, 12, 318)
                         if k < len(inputs)],
        'machine': machine(),
        'xla': 'jax/jaxlib %s, XLA:CPU' % __import__('jax').__version__,
        'input_generation_s': round(gen_s, 3),
        'outputs': len(out_types),
    }
    stats_stats = {}
    tpu_stats = {}
    for label in ('exact', 'tpu'):
        if args.only and label != args.only:
            continue
        t = text if label == 'exact' else tpu_reference.rewrite_for_tpu(text, tpu_stats)
        outs, times = run_one(t, inputs, label)
        result['time_' + label] = times
        result[label] = [stats(o, et) for o, et in zip(outs, out_types)]
        nan_outputs = sum(1 for s in result[label] if s['nan_count'])
        stats_stats[label] = nan_outputs
        print('%s: %d of %d outputs contain NaN' % (label, nan_outputs, len(outs)), flush=True)
        del outs
    result['tpu_rewrite'] = tpu_stats
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, 'w') as f:
        json.dump(result, f, indent=1)
        f.write('\n')
    print('wrote', out_path)


if __name__ == '__main__':
    main()
