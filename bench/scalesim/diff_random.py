#!/usr/bin/env python3
"""Random differential test of `tpusim scalesim` against pip's SCALE-Sim 3.0.0: random arrays, SRAM sizes,
bandwidths, dataflows, CALC/USER modes and conv/GEMM/depth-wise layers; the three reports must be identical.

    python bench/scalesim/diff_random.py FIRST_SEED END_SEED [WORKDIR] [--tpusim build/release/tpusim]

Run it with a Python that has scalesim==3.0.0 and numpy<2 (bench/scalesim/run.sh makes build/scalesim-venv).
One line per seed (ok / diff / fail / pipfail with the case), then the counts. About 100 seeds per 5 minutes.
A differing case is reproduced by its seed; its config and topology are left in WORKDIR.
"""
import sys, os, random, subprocess, shutil, io, contextlib, tempfile
from scalesim.scale_sim import scalesim
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, '..', '..', 'build', 'release', 'tpusim')
LAYOUT = None   # SCALE-Sim 3 wants a layout file even with custom layouts off: a header-only one
def cfg_text(name, R, C, ikb, fkb, okb, df, user, bw, ibw, fbw, layout=True):
    s = f"""[general]
run_name = {name}

[architecture_presets]
ArrayHeight:    {R}
ArrayWidth:     {C}
IfmapSramSzkB:    {ikb}
FilterSramSzkB:   {fkb}
OfmapSramSzkB:    {okb}
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Dataflow : {df}
Bandwidth : {bw}
ReadRequestBuffer: 32
WriteRequestBuffer: 32
"""
    if layout:
        s += f"""
[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: {ibw}
IfmapSRAMBankNum: 1
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: {fbw}
FilterSRAMBankNum: 1
FilterSRAMBankPort: 2
"""
    s += f"""
[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: {'USER' if user else 'CALC'}
UseRamulatorTrace: False
"""
    return s

def run_pip(cfg, topo, gemm, out):
    with contextlib.redirect_stdout(io.StringIO()):
        s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=LAYOUT, input_type_gemm=gemm)
        s.run_scale(top_path=out)

def one(seed, d):
    rnd = random.Random(seed)
    R = rnd.choice([1,2,3,4,5,7,8,12,16,32,64]); C = rnd.choice([1,2,3,4,5,7,8,12,14,16,32,64])
    df = rnd.choice(['os','ws','is']); user = rnd.random() < 0.5
    ikb, fkb, okb = rnd.choice([1,1,2,4,64]), rnd.choice([1,1,2,4,64]), rnd.choice([1,1,2,4,64])
    bw = rnd.choice([1,2,5,10,16,32,64]); ibw = rnd.choice([1,2,5,10,16,64]); fbw = rnd.choice([1,2,5,10,16,64])
    gemm = rnd.random() < 0.4
    rows = []
    for i in range(rnd.randint(1, 3)):
        if gemm:
            rows.append(f"g{i}, {rnd.randint(1,120)}, {rnd.randint(1,120)}, {rnd.randint(1,120)},")
        else:
            H = rnd.randint(1, 30); W = rnd.randint(1, 30)
            r = rnd.randint(1, min(H, 5)); s = rnd.randint(1, min(W, 5))
            nm = ('DP' if rnd.random() < 0.1 else 'c') + str(i)
            rows.append(f"{nm},{H},{W},{r},{s},{rnd.randint(1,4) if nm.startswith('DP') else rnd.randint(1,16)},{rnd.randint(1,40)},{rnd.randint(1,3)},")
    topo = os.path.join(d, 'topo.csv'); cfg = os.path.join(d, 'c.cfg')
    open(topo, 'w').write(("Layer, M, N, K,\n" if gemm else "Layer name, H, W, R, S, C, N, stride,\n") + "\n".join(rows) + "\n")
    open(cfg, 'w').write(cfg_text('run', R, C, ikb, fkb, okb, df, user, bw, ibw, fbw))
    for o in ('pip', 'ours'):
        shutil.rmtree(os.path.join(d, o), ignore_errors=True)
    desc = f"seed {seed}: R{R} C{C} {df} {'USER' if user else 'CALC'} kb {ikb},{fkb},{okb} bw {bw},{ibw},{fbw} gemm={gemm} rows={rows}"
    try:
        run_pip(cfg, topo, gemm, os.path.join(d, 'pip'))
    except Exception as e:
        return 'pipfail', desc + f" pip error {type(e).__name__}: {e}"
    r = subprocess.run([BIN, 'scalesim', '-q', '-c', cfg, '-t', topo, '-i', 'gemm' if gemm else 'conv', '-p', os.path.join(d, 'ours')], capture_output=True, text=True)
    if r.returncode != 0:
        return 'fail', desc + " ours: " + r.stderr
    bad = []
    for f in ('COMPUTE_REPORT.csv', 'BANDWIDTH_REPORT.csv', 'DETAILED_ACCESS_REPORT.csv'):
        a = open(os.path.join(d, 'pip', 'run', f)).read(); b = open(os.path.join(d, 'ours', 'run', f)).read()
        if a != b:
            hdr = a.splitlines()[0].split(', ')
            for la, lb in zip(a.splitlines()[1:], b.splitlines()[1:]):
                for h, x, y in zip(hdr, la.split(', '), lb.split(', ')):
                    if x != y: bad.append(f"{f}:{h}: pip {x} ours {y}")
    if bad:
        return 'diff', desc + "\n   " + "\n   ".join(bad[:12])
    return 'ok', desc

if __name__ == '__main__':
    args = sys.argv[1:]
    if '--tpusim' in args:
        i = args.index('--tpusim'); BIN = args[i + 1]; del args[i:i + 2]
    a, b = int(args[0]), int(args[1])
    d = args[2] if len(args) > 2 else tempfile.mkdtemp(prefix='tpusim-ssdiff-'); os.makedirs(d, exist_ok=True)
    LAYOUT = os.path.join(d, 'layout.csv')
    with open(LAYOUT, 'w') as f:
        f.write("Layer name, IFMAP Height Intraline Factor,\n")
    counts = {}
    for seed in range(a, b):
        st, msg = one(seed, d)
        counts[st] = counts.get(st, 0) + 1
        print(st, msg[:140] if st == 'ok' else msg, flush=True)
    print(counts)
