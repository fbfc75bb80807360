#!/usr/bin/env python3
"""tpusim vs XLA:CPU on the same HLO text, same machine, one run.

    python3 bench/run_bench.py [--build build/release] [--reps 3] [--only NAME,...] [--no-mobilenet]
                               [--json FILE] [--markdown] [--gemm | --gemm-only] [--gemm-args "--quick"]

Programs: the train steps of bench/programs.py (MLP, CNN, LSTM, transformer; exported with jax into
BUILD/bench/ on first use), a 4096^3 f32 matmul, and ../shared/corpus/hlo/mobilenet_v2.hlo (PyTorch/XLA
MobileNetV2 train step, batch 96, inputs from the documented splitmix64 generator: tpusim's
--random-inputs, tests/conformance/mobilenet_ref.py for XLA).

Each program is compiled once by XLA:CPU (jax/jaxlib from pip, through tests/conformance/xla_runner.py), then
for each repetition it runs once on XLA:CPU (execute + wait; the inputs are already on the device), once on
tpusim --numerics exact and once on tpusim --numerics tpu (bench_run: tpu_run only, after one untimed
warm-up run in the same process), interleaved so that load from other jobs on the machine hits all three
alike. The table gives the best wall time of each (and the median), the ratio XLA time / tpusim time (> 1:
tpusim is faster) and tpu / exact, the geometric means, and the load average before and after.

--gemm also runs the GEMM microbenchmark (bench/gemm_bench.c: this CPU's measured f32/bf16 peak and
exe_gemm's GFLOP/s per kernel as a percentage of it) and prints its table; --gemm-only runs just that (no
jax needed).

Needs: pip jax jaxlib ml_dtypes numpy; a C compiler; the library built (`make BUILD=...`).
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, 'tests', 'conformance'))
sys.path.insert(0, HERE)

MOBILENET = os.path.join(os.path.dirname(REPO), 'shared', 'corpus', 'hlo', 'mobilenet_v2.hlo')
ORDER = ['mlp_train', 'cnn_train', 'lstm_train', 'transformer_train', 'mobilenet_v2', 'matmul_4096']


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, cwd=REPO, **kw)


def build_tools(build):
    sh('make --no-print-directory -s BUILD=%s %s/libtpusim.a' % (build, build))
    libs = subprocess.run('pkg-config --libs openblas zlib libcjson', shell=True, capture_output=True,
                          text=True).stdout.strip()
    for tool in ('bench_run', 'gemm_bench'):
        src = os.path.join('bench', tool + '.c')
        out = os.path.join(build, tool)
        if not os.path.exists(os.path.join(REPO, src)):
            continue
        if not os.path.exists(os.path.join(REPO, out)) or \
                os.path.getmtime(os.path.join(REPO, out)) < max(os.path.getmtime(os.path.join(REPO, src)),
                                                               os.path.getmtime(os.path.join(REPO, build,
                                                                                             'libtpusim.a'))):
            sh('cc -std=c11 -O2 -fopenmp -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc %s %s/libtpusim.a %s -fopenmp '
               '-lm -lpthread -o %s' % (src, build, libs, out))


def load():
    return os.getloadavg()


def program_files(build, name):
    if name == 'mobilenet_v2':
        return MOBILENET, None
    d = os.path.join(REPO, build, 'bench', name)
    if not os.path.exists(os.path.join(d, 'inputs.npz')):
        import programs
        programs.export(name, d)
    return os.path.join(d, 'program.hlo'), os.path.join(d, 'inputs.npz')


def xla_inputs(hlo, npz):
    import numpy as np
    import hlo_text as ht
    text = open(hlo).read()
    if npz is None:
        import mobilenet_ref
        params = ht.Module(text).entry_parameters()
        ins = []
        for k, (_, shape) in enumerate(params):
            et, dims, _ = ht.parse_shape(shape)
            ins.append(mobilenet_ref.generate(k, dims, et, 1))
        return text, ins
    z = np.load(npz)
    return text, [z['arg%d' % i] for i in range(len(z.files))]


class Xla:
    def __init__(self, text, inputs):
        import jax
        import numpy as np
        import hlo_text as ht
        import xla_runner as xr
        self.jax = jax
        self.c = xr.Compiled(text)
        old = jax.config.jax_enable_x64
        jax.config.update('jax_enable_x64', True)
        try:
            self.args = []
            for (name, shape), a in zip(self.c.params, inputs):
                et, dims, _ = ht.parse_shape(shape)
                self.args.append(jax.device_put(np.asarray(a).astype(xr.NP_DTYPES[et]), self.c.device))
        finally:
            jax.config.update('jax_enable_x64', old)

    def run(self):
        w0, c0 = time.perf_counter(), time.process_time()
        res = self.c.exe.execute_sharded(self.args)
        arrs = [x[0] for x in res.disassemble_into_single_device_arrays()]
        for a in arrs:
            a.block_until_ready()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        del arrs, res
        return w, c


def tpusim_run(build, hlo, npz, numerics, warmup, threads):
    cmd = [os.path.join(REPO, build, 'bench_run'), hlo, '--numerics', numerics, '--reps', '1', '--warmup', str(warmup)]
    cmd += ['--inputs', npz] if npz else ['--random-inputs']
    if threads:
        cmd += ['--threads', str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError('%s failed: %s' % (' '.join(cmd), out.stderr.strip()))
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return d['wall'][0], d['cpu'][0]


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float('nan')


def bench_program(args, name):
    hlo, npz = program_files(args.build, name)
    big = name == 'mobilenet_v2'
    reps = args.mobilenet_reps if big else args.reps
    text, inputs = xla_inputs(hlo, npz)
    t0 = time.perf_counter()
    x = Xla(text, inputs)
    compile_s = time.perf_counter() - t0
    del inputs
    if not big:
        x.run()   # warm-up, like tpusim's
    res = {'xla': [], 'exact': [], 'tpu': [], 'xla_compile_s': compile_s, 'load_before': load()}
    for r in range(reps):
        res['xla'].append(x.run())
        for mode in ('exact', 'tpu'):
            res[mode].append(tpusim_run(args.build, hlo, npz, mode, 0 if big else 1, args.threads))
        print('  %s rep %d: xla %.3f  exact %.3f  tpu %.3f  (load %.1f)' % (
            name, r, res['xla'][-1][0], res['exact'][-1][0], res['tpu'][-1][0], load()[0]), flush=True)
    res['load_after'] = load()
    del x
    return res


def summarize(name, r):
    best = {k: min(w for w, _ in r[k]) for k in ('xla', 'exact', 'tpu')}
    med = {k: statistics.median(w for w, _ in r[k]) for k in ('xla', 'exact', 'tpu')}
    cpu = {k: min(c for _, c in r[k]) for k in ('xla', 'exact', 'tpu')}
    return {'name': name, 'best': best, 'median': med, 'cpu': cpu,
            'ratio_exact': best['xla'] / best['exact'], 'ratio_tpu': best['xla'] / best['tpu'],
            'tpu_over_exact': best['tpu'] / best['exact'],
            'cpu_ratio_exact': cpu['xla'] / cpu['exact'], 'cpu_ratio_tpu': cpu['xla'] / cpu['tpu'],
            'reps': len(r['xla']), 'load': [round(r['load_before'][0], 1), round(r['load_after'][0], 1)]}


def table(rows, markdown):
    hdr = ['program', 'XLA:CPU s', 'tpusim exact s', 'XLA/exact', 'tpusim tpu s', 'XLA/tpu', 'tpu/exact',
           'CPU-time XLA/exact', 'load']
    lines = []
    fmt_row = (lambda c: '| ' + ' | '.join(c) + ' |') if markdown else (lambda c: '  '.join(
        s.ljust(w) for s, w in zip(c, [18, 10, 14, 10, 12, 8, 9, 18, 10])))
    lines.append(fmt_row(hdr))
    if markdown:
        lines.append('|' + '---|' * len(hdr))
    for s in rows:
        lines.append(fmt_row([s['name'], '%.3f' % s['best']['xla'], '%.3f' % s['best']['exact'],
                              '%.2fx' % s['ratio_exact'], '%.3f' % s['best']['tpu'], '%.2fx' % s['ratio_tpu'],
                              '%.2f' % s['tpu_over_exact'], '%.2fx' % s['cpu_ratio_exact'],
                              '%.1f-%.1f' % tuple(s['load'])]))
    lines.append(fmt_row(['geometric mean', '', '', '%.2fx' % geomean([s['ratio_exact'] for s in rows]), '',
                          '%.2fx' % geomean([s['ratio_tpu'] for s in rows]),
                          '%.2f' % geomean([s['tpu_over_exact'] for s in rows]),
                          '%.2fx' % geomean([s['cpu_ratio_exact'] for s in rows]), '']))
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build/release')
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--mobilenet-reps', type=int, default=1)
    ap.add_argument('--only', default=None, help='comma-separated program names')
    ap.add_argument('--no-mobilenet', action='store_true')
    ap.add_argument('--threads', type=int, default=0)
    ap.add_argument('--json', default=None)
    ap.add_argument('--markdown', action='store_true')
    ap.add_argument('--gemm', action='store_true', help='also run bench/gemm_bench (GEMM vs measured peak)')
    ap.add_argument('--gemm-only', action='store_true', help='run only bench/gemm_bench')
    ap.add_argument('--gemm-args', default='', help='arguments for gemm_bench, e.g. "--quick --reps 2"')
    args = ap.parse_args()
    build_tools(args.build)
    if args.gemm_only:
        gemm_bench(args)
        return
    names = args.only.split(',') if args.only else [n for n in ORDER if not (args.no_mobilenet and
                                                                              n == 'mobilenet_v2')]
    import jax
    print('machine: %s, %d cores; jax %s; load %.1f %.1f %.1f' % (
        cpu_model(), os.cpu_count(), jax.__version__, *load()), flush=True)
    rows, raw = [], {}
    for n in names:
        raw[n] = bench_program(args, n)
        rows.append(summarize(n, raw[n]))
    print()
    print(table(rows, args.markdown))
    if args.gemm:
        print()
        gemm_bench(args)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': cpu_model(), 'cores': os.cpu_count(), 'platform': platform.platform(),
                       'rows': rows, 'raw': raw}, f, indent=1)


def gemm_bench(args):
    """Runs BUILD/gemm_bench; its output (peaks, then the table) is printed as it comes."""
    exe = os.path.join(REPO, args.build, 'gemm_bench')
    cmd = [exe] + args.gemm_args.split()
    if args.threads:
        cmd += ['--threads', str(args.threads)]
    print('GEMM microbenchmark: %s (load %.1f)' % (' '.join(cmd), load()[0]), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)


def cpu_model():
    try:
        for line in open('/proc/cpuinfo'):
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == '__main__':
    main()
