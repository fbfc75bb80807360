#!/usr/bin/env python3
"""tpusim vs XLA:CPU on the same HLO text, same machine, one run: the benchmark set of bench/programs.py.

    python3 bench/run_bench.py                       # the whole set, warm and cold (~15 minutes on 2 cores)
    python3 bench/run_bench.py --only mlp_train,moe_train --reps 5 --no-cold
    python3 bench/run_bench.py --markdown --json out.json
    python3 bench/run_bench.py --gemm-only [--gemm-args "--quick"]    # GEMM vs this CPU's measured peak
    python3 bench/run_bench.py --mobilenet           # add the corpus MobileNetV2 train step (about 2 minutes)

Programs: bench/programs/*.hlo (jax-lowered HLO text, committed; bench/programs.py regenerates them) with inputs made from each program's seed into BUILD/bench/NAME/inputs.npz on first use;
optionally ../shared/corpus/hlo/mobilenet_v2.hlo (PyTorch/XLA, inputs from the documented splitmix64
generator).

Warm: each program is compiled once by XLA:CPU (jax/jaxlib from pip; inputs on the device) and loaded once
by a `bench_run --serve` process (tpu_run on the parsed module, as the PJRT plugin runs it), both run once
untimed, then in each round XLA runs once, tpusim once in TPU numerics and once in exact numerics (in
alternating order: the one right after XLA competes with its pool threads), interleaved so that load from
other jobs hits all three alike; rounds continue until --reps rounds and about
--budget seconds are spent (at most 50). Best wall time of each.

Cold (what one command costs a user): tpusim is one `tpusim run PROGRAM --inputs FILE --quiet` process (start,
parse, read inputs, run, exit), timed from outside; XLA:CPU is HloModule-from-text, conversion and compile
plus the first execution, in this process (no interpreter start or jax import counted for it).

Ratios are XLA time / tpusim time (> 1: tpusim is faster); tpu/exact is TPU numerics' time over exact mode's (best wall times;
tpu/exact CPU: the same with best CPU times).
The load average is printed before and after each program.

Needs: pip jax jaxlib ml_dtypes numpy; a C compiler; the library built (`make`).
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
PROGRAM_DIR = os.path.join(HERE, 'programs')


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, cwd=REPO, **kw)


def build_tools(build):
    sh('make --no-print-directory -s BUILD=%s %s/libtpusim.a %s/tpusim %s/bench_run %s/gemm_bench'
       % (build, build, build, build, build))


def load():
    return os.getloadavg()


def all_programs():
    names = sorted(f[:-4] for f in os.listdir(PROGRAM_DIR) if f.endswith('.hlo'))
    try:
        import programs
        first = [n for n in programs.order() if n in names]
    except ImportError:
        first = []
    return first + [n for n in names if n not in first]


def program_files(build, name):
    """(hlo path, npz path or None for splitmix64 random inputs)."""
    if name == 'mobilenet_v2':
        return MOBILENET, None
    hlo = os.path.join(PROGRAM_DIR, name + '.hlo')
    d = os.path.join(REPO, build, 'bench', name)
    npz = os.path.join(d, 'inputs.npz')
    if not os.path.exists(npz) or os.path.getmtime(npz) < os.path.getmtime(hlo):
        os.makedirs(d, exist_ok=True)
        import programs
        programs.write_inputs(name, npz)
    return hlo, npz


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
    import ml_dtypes
    z = np.load(npz)
    ins = [z['arg%d' % i] for i in range(len(z.files))]
    # numpy stores ml_dtypes' bfloat16 as 2-byte void ('<V2'); tpusim reads it as bf16, jax needs the view
    return text, [a.view(ml_dtypes.bfloat16) if a.dtype.kind == 'V' and a.dtype.itemsize == 2 else a for a in ins]


class Xla:
    """The HLO text compiled by XLA:CPU; run() executes once with the inputs already on the device."""

    def __init__(self, text, inputs):
        import jax
        import numpy as np
        import hlo_text as ht
        import xla_runner as xr
        params = ht.Module(text).entry_parameters()
        run_text = xr.executable_text(text)
        t0 = time.perf_counter()
        module = xr.xc.hlo.hlo_module_from_text(run_text)
        mlir = xr._jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        dev = jax.devices('cpu')[0]
        self.exe = xr._client().compile_and_load(mlir, xr.xc.DeviceList((dev,)), xr.xc.CompileOptions())
        self.compile_s = time.perf_counter() - t0
        old = jax.config.jax_enable_x64
        jax.config.update('jax_enable_x64', True)
        try:
            self.args = []
            for (name, shape), a in zip(params, inputs):
                et, dims, _ = ht.parse_shape(shape)
                self.args.append(jax.device_put(np.asarray(a).astype(xr.NP_DTYPES[et]), dev))
        finally:
            jax.config.update('jax_enable_x64', old)
        self.first_s = self.run()[0]

    def run(self):
        w0, c0 = time.perf_counter(), time.process_time()
        res = self.exe.execute_sharded(self.args)
        arrs = [x[0] for x in res.disassemble_into_single_device_arrays()]
        for a in arrs:
            a.block_until_ready()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        del arrs, res
        return w, c


class Server:
    """A warm tpusim: bench_run --serve with the program and inputs loaded once."""

    def __init__(self, build, hlo, npz, threads):
        cmd = [os.path.join(REPO, build, 'bench_run'), hlo, '--serve']
        cmd += ['--inputs', npz] if npz else ['--random-inputs']
        if threads:
            cmd += ['--threads', str(threads)]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError('%s failed to start' % ' '.join(cmd))
        self.parse_s = json.loads(line)['parse']

    def run(self, mode, n=1):
        self.p.stdin.write('%s %d\n' % (mode, n))
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError('bench_run --serve: run failed')
        d = json.loads(line)
        return list(zip(d['wall'], d['cpu']))

    def close(self):
        try:
            self.p.stdin.write('quit\n')
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()


def cold_tpusim(build, hlo, npz, threads):
    cmd = [os.path.join(REPO, build, 'tpusim'), 'run', hlo, '--quiet']
    cmd += ['--inputs', npz] if npz else ['--random-inputs']
    if threads:
        cmd += ['--threads', str(threads)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    w = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError('%s failed: %s' % (' '.join(cmd), out.stderr.strip()))
    return w


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float('nan')


def bench_program(args, name):
    hlo, npz = program_files(args.build, name)
    big = name == 'mobilenet_v2'
    res = {'name': name, 'load_before': load()[0]}
    if not args.no_cold:   # before anything of this program is warm (the page cache aside)
        res['cold_tpu'] = min(cold_tpusim(args.build, hlo, npz, args.threads) for _ in range(args.cold_reps))
    text, inputs = xla_inputs(hlo, npz)
    x = Xla(text, inputs)
    del inputs
    res['cold_xla'] = x.compile_s + x.first_s
    res['xla_compile'] = x.compile_s
    srv = Server(args.build, hlo, npz, args.threads)
    res['parse'] = srv.parse_s
    times = {'xla': [], 'tpu': [], 'exact': []}
    if not big:
        srv.run('tpu')
        srv.run('exact')
    t_start = time.perf_counter()
    rounds = 0
    while True:
        times['xla'].append(x.run())
        # Whichever mode runs right after XLA:CPU shares the CPU with its still-spinning pool threads (tiny_mlp_step
        # measured 1.25x slower there, bert_fwd_bf16 up to 1.7x): alternate which one that is, so tpu/exact compares
        # like with like.
        for mode in ('tpu', 'exact') if rounds % 2 == 0 else ('exact', 'tpu'):
            times[mode] += srv.run(mode)
        rounds += 1
        spent = time.perf_counter() - t_start
        if big or rounds >= 50 or (rounds >= args.reps and spent >= args.budget):
            break
    srv.close()
    del x
    for k, v in times.items():
        res[k] = min(w for w, _ in v)
        # CPU time: the median, not the least. Linux adds a running worker thread's time to the process total only
        # at its next tick or switch, so a round of about a millisecond on XLA's pool can read ten times too
        # little, and the least of 50 rounds picks exactly such a round (scan_small_steps: 0.10 ms of CPU for 1.05 ms).
        res[k + '_cpu'] = statistics.median(c for _, c in v)
    res['rounds'] = rounds
    res['load_after'] = load()[0]
    res['ratio_tpu'] = res['xla'] / res['tpu']
    res['ratio_exact'] = res['xla'] / res['exact']
    res['tpu_over_exact'] = res['tpu'] / res['exact']
    # the same in CPU time: less swayed by other jobs on a loaded machine than the best wall times
    res['tpu_over_exact_cpu'] = res['tpu_cpu'] / res['exact_cpu'] if res['exact_cpu'] > 0 else float('nan')
    res['cpu_ratio_tpu'] = res['xla_cpu'] / res['tpu_cpu'] if res['tpu_cpu'] > 0 else float('nan')
    if 'cold_tpu' in res:
        res['ratio_cold'] = res['cold_xla'] / res['cold_tpu']
    print('  %-24s xla %8.2f ms  tpu %8.2f ms  exact %8.2f ms  %5.2fx  cold xla %6.3f s tpusim %6.3f s  '
          '(%d rounds, load %.1f)' % (name, res['xla'] * 1e3, res['tpu'] * 1e3, res['exact'] * 1e3, res['ratio_tpu'],
                                       res['cold_xla'], res.get('cold_tpu', float('nan')), rounds, load()[0]),
          flush=True)
    return res


def fmt_ms(s):
    return '%.3f' % (s * 1e3) if s < 0.01 else '%.2f' % (s * 1e3) if s < 1 else '%.0f' % (s * 1e3)


def table(rows, markdown):
    hdr = ['program', 'XLA:CPU ms', 'tpusim ms', 'XLA/tpusim', 'exact ms', 'XLA/exact', 'tpu/exact', 'tpu/exact CPU',
           'CPU-time ratio',
           'cold XLA s', 'cold tpusim s', 'cold ratio', 'load']
    widths = [24, 11, 10, 11, 10, 10, 10, 14, 15, 11, 14, 11, 9]
    if markdown:
        fmt_row = lambda c: '| ' + ' | '.join(c) + ' |'
    else:
        fmt_row = lambda c: '  '.join(s.ljust(w) for s, w in zip(c, widths))
    lines = [fmt_row(hdr)]
    if markdown:
        lines.append('|' + '---|' * len(hdr))
    for r in rows:
        cold = 'cold_tpu' in r
        lines.append(fmt_row([r['name'], fmt_ms(r['xla']), fmt_ms(r['tpu']), '%.2fx' % r['ratio_tpu'],
                              fmt_ms(r['exact']), '%.2fx' % r['ratio_exact'], '%.2f' % r['tpu_over_exact'],
                              '%.2f' % r['tpu_over_exact_cpu'], '%.2fx' % r['cpu_ratio_tpu'], '%.3f' % r['cold_xla'], '%.3f' % r['cold_tpu'] if cold else '-',
                              '%.2fx' % r['ratio_cold'] if cold else '-',
                              '%.1f-%.1f' % (r['load_before'], r['load_after'])]))
    g = lambda k: geomean([r[k] for r in rows if k in r])
    lines.append(fmt_row(['geometric mean (%d)' % len(rows), '', '', '%.2fx' % g('ratio_tpu'), '',
                          '%.2fx' % g('ratio_exact'), '%.2f' % g('tpu_over_exact'),
                          '%.2f' % g('tpu_over_exact_cpu'), '%.2fx' % g('cpu_ratio_tpu'), '', '',
                          '%.2fx' % g('ratio_cold') if any('ratio_cold' in r for r in rows) else '-', '']))
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build/release')
    ap.add_argument('--reps', type=int, default=5, help='at least this many warm rounds')
    ap.add_argument('--budget', type=float, default=2.0, help='seconds of warm rounds per program (then stop)')
    ap.add_argument('--cold-reps', type=int, default=1, help='cold tpusim runs per program (best taken)')
    ap.add_argument('--no-cold', action='store_true')
    ap.add_argument('--only', default=None, help='comma-separated program names')
    ap.add_argument('--skip', default='', help='comma-separated program names to leave out')
    ap.add_argument('--mobilenet', action='store_true', help='add the corpus MobileNetV2 step (run once)')
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
    names = args.only.split(',') if args.only else all_programs() + (['mobilenet_v2'] if args.mobilenet else [])
    names = [n for n in names if n not in args.skip.split(',')]
    import jax
    print('machine: %s, %d cores; jax %s; %s; load %.2f %.2f %.2f' % (
        cpu_model(), os.cpu_count(), jax.__version__, time.strftime('%Y-%m-%d %H:%M'), *load()), flush=True)
    rows = []
    for n in names:
        rows.append(bench_program(args, n))
    print()
    print(table(rows, args.markdown))
    print('\nload after: %.2f %.2f %.2f' % load())
    if args.gemm:
        print()
        gemm_bench(args)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': cpu_model(), 'cores': os.cpu_count(), 'platform': platform.platform(),
                       'date': time.strftime('%Y-%m-%d %H:%M'), 'rows': rows}, f, indent=1)


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
