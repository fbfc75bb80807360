#!/usr/bin/env python3
"""Generate the HLO conformance cases (golden values from XLA:CPU) under tests/conformance/cases/.

Run from anywhere:   python3 tests/conformance/gen_cases.py            (all cases, ~a few minutes on 2 cores)
                     python3 tests/conformance/gen_cases.py NAME ...   (only these cases)
                     python3 tests/conformance/gen_cases.py --list
Needs:               pip install jax ml_dtypes numpy   (made with jax/jaxlib 0.10.2, numpy 2.4, ml_dtypes 0.6;
                     CPU only, no network).  `make test` does not need any of this: it reads the committed files.

Deterministic: every case draws its inputs from numpy's default_rng seeded with crc32(case name).
(Cases with debug_info and the optimized ones carry metadata with line numbers of cases_jax.py, so editing
that file changes those program.hlo files cosmetically.)

Per case directory cases/<name>/:
  program.hlo   HLO text exactly as exported (jax `as_text(dialect="hlo")`, XLA:CPU optimized `as_text()`,
                or handwritten).  This same text is what XLA:CPU is run on (xla_runner.py).
  inputs.npz    arg0, arg1, ... one per entry parameter in parameter order
  exact.npz     out0, out1, ... XLA:CPU outputs of program.hlo (root tuple flattened in order)
  tpu.npz       same members, XLA:CPU outputs of tpu_reference.rewrite_for_tpu(program.hlo)
  case.json     description, source, tolerances, ops, dtype notes (see write_case)
Members whose real type is bf16 are stored as float32 holding exactly the bf16 value and are listed in
case.json "bf16_as_f32"; f8 members likewise with "f8_as_f32": {member: dtype}.  Everything else is stored
in its own numpy dtype (bool for pred).

Tolerances are measured, not guessed (see tolerances() and noise.py).  For each output, rtol is a fixed floor
(f32: 1e-5 exact, 1e-4 tpu; bf16/f16/f8 outputs: one ulp of the type; f64: 1e-12) and
atol = 4 x max over elements of (|ref - alt| - rtol*|ref|), over these alternative runs `alt`:
  * the same text with every f32 made f64 (the f32 rounding noise of the program; for the TPU rewrite this
    also shows the bf16 rounding flips that this noise causes),
  * exact mode of all-f32/f64 programs: the inputs moved by one ulp (3 random draws),
  * programs that round computed values to bf16/f16 (TPU-mode dot operands included): each such rounding
    done after scaling the value by 1 +- 2^-20 (4 random draws), which makes the value flip as f32 noise in
    another implementation would.  Values both sides know exactly (inputs, constants, correctly rounded
    arithmetic of them) are not disturbed: they round identically everywhere.
Integer and pred outputs, and all outputs of cases marked bit_exact (data movement, conversions, bit ops,
rng), must match exactly (atol = rtol = 0).  case.json "tol_exact"/"tol_tpu" are the loosest over the
outputs; "tol_per_output" has the per-output values (prefer those).  "exact_fails_tpu_tol" says, per output,
what share of elements of the exact result would fail the tpu tolerance: how well a tpu-mode test can tell
TPU numerics from plain f32 for that output (0 = not at all).

  python3 tests/conformance/gen_cases.py --coverage     prints the op -> number of cases table
"""

import json
import math
import os
import shutil
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np                      # noqa: E402
import ml_dtypes                        # noqa: E402
import jax                              # noqa: E402

import hlo_text as ht                   # noqa: E402
import noise                            # noqa: E402
import tpu_reference                    # noqa: E402
import xla_runner as xr                 # noqa: E402
from casedef import CASES               # noqa: E402
import cases_jax                        # noqa: E402,F401  (registers cases)
import cases_hand                       # noqa: E402,F401

CASES_DIR = os.path.join(HERE, 'cases')
SAFETY = 4.0
PERTURB_SAMPLES = 3
JITTER = 2.0 ** -20
JITTER_SAMPLES = 4
F8 = {'f8e4m3fn': 'float8_e4m3fn', 'f8e5m2': 'float8_e5m2'}
ULP_REL = {'bf16': 2.0 ** -7, 'f16': 2.0 ** -10, 'f8e4m3fn': 2.0 ** -3, 'f8e5m2': 2.0 ** -2}
FLOAT_TYPES = ('f16', 'bf16', 'f32', 'f64', 'f8e4m3fn', 'f8e5m2')


# ----------------------------------------------------------------------------------------- export

class _Config:
    """Temporarily set jax config flags."""

    def __init__(self, **kv):
        self.kv = kv

    def __enter__(self):
        self.old = {k: getattr(jax.config, k) for k in self.kv}
        for k, v in self.kv.items():
            jax.config.update(k, v)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            jax.config.update(k, v)


def _relpaths(text):
    return text.replace(REPO + '/', '')


def export(case):
    """-> (text, inputs, jit_outputs or None)"""
    rng = case.rng()
    if case.kind == 'hand':
        text, inputs = case.build(rng)
        return text, [np.asarray(a) for a in inputs], None
    # metadata keeps the 3 innermost frames (the model code), not this driver's frames
    with _Config(jax_enable_x64=case.x64, jax_traceback_in_locations_limit=3):
        fn, args = case.build(rng)
        jitted = jax.jit(fn, keep_unused=True)
        if case.optimized:
            text = jitted.lower(*args).compile().as_text()
        else:
            traced = jitted.trace(*args)
            lowered = traced.lower(lowering_platforms=(case.platform,)) if case.platform != 'cpu' \
                else traced.lower()
            text = lowered.as_text(dialect='hlo', debug_info=case.debug_info)
        inputs = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
        jit_out = None
        if case.verify_jit:
            jit_out = [np.asarray(o) for o in jax.tree_util.tree_leaves(jitted(*args))]
    return _relpaths(text), inputs, jit_out


# ------------------------------------------------------------------------------- helper transforms

def _nudge(a, rng):
    """Move every finite, normal, nonzero f32/f64 element one ulp up or down (random direction).

    bf16/f16 inputs are left alone: one ulp of those is far more than any f32 noise; flips of rounded
    low-precision values are modelled inside the program instead (noise.jitter_rounding)."""
    a = np.asarray(a)
    if a.dtype in (np.float32, np.float64):
        fi = np.finfo(a.dtype)
        ok = np.isfinite(a) & (np.abs(a) >= fi.tiny)
        direction = np.where(rng.random(a.shape) < 0.5, -np.inf, np.inf).astype(a.dtype)
        return np.where(ok, np.nextafter(a, direction), a).astype(a.dtype)
    return a


def ht_types(text):
    import re
    return set(re.findall(r'(?<![\w.%])([a-z][a-z0-9]*)\[', text))


def _as_f64_inputs(inputs, params):
    out = []
    for a, (_, shape) in zip(inputs, params):
        out.append(a.astype(np.float64) if ht.element_type(shape) == 'f32' else a)
    return out


# ------------------------------------------------------------------------------------ tolerances

def _noise(ref, alt):
    """Elementwise |ref - alt| over positions where both are finite (others: 0)."""
    r = np.asarray(ref, dtype=np.float64)
    a = np.asarray(alt, dtype=np.float64)
    ok = np.isfinite(r) & np.isfinite(a)
    return np.where(ok, np.abs(r - a), 0.0)


def _round_up(x):
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x))
    m = math.ceil(x / 10 ** (e - 1)) / 10.0
    return float('%.1fe%d' % (m, e)) if m < 10 else float('1e%d' % (e + 1))


def tolerances(refs, alts, out_types, mode, bit_exact=False):
    """Per-output {atol, rtol} from the reference `refs` and the alternative runs `alts` (lists)."""
    per = []
    for i, (ref, et) in enumerate(zip(refs, out_types)):
        if et not in FLOAT_TYPES or bit_exact:
            per.append({'atol': 0.0, 'rtol': 0.0})
            continue
        if et == 'f32':
            rtol = 1e-5 if mode == 'exact' else 1e-4
        elif et == 'f64':
            rtol = 1e-12
        else:
            rtol = ULP_REL[et]
        r = np.asarray(ref, dtype=np.float64)
        excess = np.zeros(r.shape)
        for alt in alts:
            if alt is None:
                continue
            excess = np.maximum(excess, _noise(r, alt[i]) - rtol * np.abs(np.where(np.isfinite(r), r, 0)))
        atol = SAFETY * float(excess.max()) if excess.size else 0.0
        per.append({'atol': _round_up(atol), 'rtol': rtol})
    return per


def _case_tol(per):
    return {'atol': max([p['atol'] for p in per] + [0.0]), 'rtol': max([p['rtol'] for p in per] + [0.0])}


def check_within(a, b, tol):
    """|a-b| <= atol + rtol*|b| elementwise, NaN==NaN, inf==inf; integers exact."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in 'biu':
        return bool(np.array_equal(a, b))
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    nan_ok = np.isnan(a) == np.isnan(b)
    inf_ok = np.where(np.isinf(b), a == b, ~np.isinf(a))
    fin = np.isfinite(a) & np.isfinite(b)
    close = np.where(fin, np.abs(a - b) <= tol['atol'] + tol['rtol'] * np.abs(b), True)
    return bool(np.all(nan_ok & inf_ok & close))


def _fail_fraction(a, b, tol):
    a = np.asarray(a, np.float64) if np.asarray(a).dtype.kind not in 'biu' else np.asarray(a)
    b = np.asarray(b, np.float64) if np.asarray(b).dtype.kind not in 'biu' else np.asarray(b)
    if a.size == 0:
        return 0.0
    if a.dtype.kind in 'biu':
        return float(np.mean(a != b))
    fin = np.isfinite(a) & np.isfinite(b)
    bad = np.where(fin, np.abs(a - b) > tol['atol'] + tol['rtol'] * np.abs(b), np.isnan(a) != np.isnan(b))
    return float(np.mean(bad))


# ---------------------------------------------------------------------------------------- storage

def _store(arr, et, member, notes):
    """numpy array as it goes into the npz; bf16/f8 as float32 (exact) with a note."""
    a = np.asarray(arr)
    if et == 'bf16':
        notes['bf16_as_f32'].append(member)
        return a.astype(np.float32)
    if et in F8:
        notes['f8_as_f32'][member] = F8[et]
        return a.astype(np.float32)
    want = xr.NP_DTYPES[et]
    return a.astype(want) if a.dtype != want else a


def _savez(path, members):
    with open(path, 'wb') as f:
        np.savez(f, **members)


# ------------------------------------------------------------------------------------- one case

def run_case(case, log):
    text, inputs, jit_out = export(case)
    mod = ht.Module(text)
    ops = mod.opcodes()
    if 'custom-call' in ops:
        raise RuntimeError('program contains custom-call (CPU specific?): skipped')
    params = mod.entry_parameters()
    in_types = [ht.element_type(s) for _, s in params]
    out_leaves = ht.flatten_shape(mod.entry().root().shape)
    out_types = [et for et, _ in out_leaves]

    exe = xr.Compiled(text)
    exact = exe.run(inputs)
    if len(exact) != len(out_leaves):
        raise RuntimeError('XLA returned %d outputs, root has %d leaves' % (len(exact), len(out_leaves)))
    stats = {}
    tpu_text = tpu_reference.rewrite_for_tpu(text, stats)
    tpu_exe = xr.Compiled(tpu_text) if tpu_text != text else exe
    tpu = tpu_exe.run(inputs) if tpu_exe is not exe else exact

    # alternative runs for the noise estimate
    alts_exact, alts_tpu, how = [], [], []
    has_f32 = any(et == 'f32' for et in in_types + out_types) or 'f32[' in text
    if has_f32:
        try:
            f64_in = _as_f64_inputs(inputs, params)
            alts_exact.append(xr.run_hlo_text(noise.promote_f64(text), f64_in))
            alts_tpu.append(xr.run_hlo_text(noise.promote_f64(tpu_text), f64_in) if tpu_text != text
                            else alts_exact[-1])
            how.append('f64-promoted text')
        except Exception as e:  # bitcast-convert, rng etc. have no f64 version
            log('    (no f64 variant: %s)' % str(e).split('\n')[0][:120])
    # 1-ulp input moves model smooth f32 noise; they are not used where a value is rounded to bf16/f16 (a moved
    # input could flip where the two implementations never can), i.e. not for tpu mode nor low-precision code
    low_precision = any(et in ('bf16', 'f16', 'f8e4m3fn', 'f8e5m2') for et in ht_types(text))
    if case.perturb and not case.bit_exact and not low_precision:
        for seed in range(PERTURB_SAMPLES):
            prng = np.random.default_rng(12345 + seed)
            pin = [_nudge(a, prng) for a in inputs]
            if all(np.array_equal(p, a) for p, a in zip(pin, inputs)):
                break
            alts_exact.append(exe.run(pin))
        else:
            how.append('exact: inputs moved by 1 ulp (%d random draws)' % PERTURB_SAMPLES)
    if not case.bit_exact:
        # flips of values rounded to bf16/f16 (TPU-mode dot operands included), 2 draws each
        for label, t, alts in (('exact', text, alts_exact), ('tpu', tpu_text, alts_tpu)):
            for seed in range(JITTER_SAMPLES):
                jt, n = noise.jitter_rounding(t, JITTER, np.random.default_rng(777 + seed))
                if n == 0:
                    break
                alts.append(xr.run_hlo_text(jt, inputs))
            else:
                how.append('%s: computed values scaled by 1+-2^%d before each bf16/f16 rounding (%d draws)'
                           % (label, int(math.log2(JITTER)), JITTER_SAMPLES))
    per_exact = tolerances(exact, alts_exact, out_types, 'exact', case.bit_exact)
    per_tpu = tolerances(tpu, alts_tpu, out_types, 'tpu', case.bit_exact)

    jit_check = None
    if jit_out is not None:
        same = len(jit_out) == len(exact) and all(
            np.asarray(j).dtype == np.asarray(e).dtype and np.asarray(j).tobytes() == np.asarray(e).tobytes()
            for j, e in zip(jit_out, exact))
        if same:
            jit_check = 'bitwise equal to the jitted jax function'
        else:
            md = max(float(np.nanmax(np.abs(np.asarray(j, np.float64) - np.asarray(e, np.float64))))
                     for j, e in zip(jit_out, exact))
            jit_check = 'differs from the jitted jax function: max |diff| %g' % md
        log('    jit check: ' + jit_check)

    d = os.path.join(CASES_DIR, case.name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, 'program.hlo'), 'w') as f:
        f.write(text)
    notes = {'bf16_as_f32': [], 'f8_as_f32': {}}
    _savez(os.path.join(d, 'inputs.npz'),
           {'arg%d' % k: _store(a, in_types[k], 'arg%d' % k, notes) for k, a in enumerate(inputs)})
    out_notes = {'bf16_as_f32': [], 'f8_as_f32': {}}
    _savez(os.path.join(d, 'exact.npz'),
           {'out%d' % k: _store(a, out_types[k], 'out%d' % k, out_notes) for k, a in enumerate(exact)})
    _savez(os.path.join(d, 'tpu.npz'),
           {'out%d' % k: _store(a, out_types[k], 'out%d' % k, {'bf16_as_f32': [], 'f8_as_f32': {}})
            for k, a in enumerate(tpu)})
    notes['bf16_as_f32'] += out_notes['bf16_as_f32']
    notes['f8_as_f32'].update(out_notes['f8_as_f32'])

    extra_note = case.check(text, inputs, exact) if case.check else None
    info = {
        'description': case.description,
        'source': 'handwritten' if case.kind == 'hand' else
                  ('xla-cpu-optimized' if case.optimized else 'jax-lowered'),
        'tol_exact': _case_tol(per_exact),
        'tol_tpu': _case_tol(per_tpu),
        'outputs': len(exact),
        'ops': ops,
        'bf16_as_f32': notes['bf16_as_f32'],
        'f8_as_f32': notes['f8_as_f32'],
        'inputs': [{'member': 'arg%d' % k, 'hlo_type': et, 'shape': list(a.shape)}
                   for k, (et, a) in enumerate(zip(in_types, inputs))],
        'output_types': [{'member': 'out%d' % k, 'hlo_type': et, 'shape': list(dims)}
                         for k, (et, dims) in enumerate(out_leaves)],
        'tol_per_output': {'exact': per_exact, 'tpu': per_tpu},
        'tolerance_basis': 'noise from: ' + (', '.join(how) if how else 'none (bit-exact program)')
                           + '; atol = %g x noise beyond rtol' % SAFETY,
        'tpu_rewrite': {k: v for k, v in sorted(stats.items())},
        'tpu_differs_from_exact': any(np.asarray(a).tobytes() != np.asarray(b).tobytes() for a, b in zip(exact, tpu)),
    }
    if info['tpu_differs_from_exact']:
        # how well tol_tpu separates TPU numerics from plain f32: share of elements of the exact outputs that
        # fail the tpu tolerance against tpu.npz (0 = a tpu-mode test could not tell them apart)
        info['exact_fails_tpu_tol'] = [round(_fail_fraction(a, b, t), 4) for a, b, t in zip(exact, tpu, per_tpu)]
    if case.kind == 'jax':
        info['lowering_platform'] = case.platform
        if case.x64:
            info['jax_enable_x64'] = True
    if jit_check:
        info['jit_check'] = jit_check
    note = ' '.join(x for x in (case.notes, extra_note or '') if x)
    if note:
        info['notes'] = note
    if case.tpu_skip:
        info['tpu_reference_skip'] = {'out%d' % k: why for k, why in sorted(case.tpu_skip.items())}
    with open(os.path.join(d, 'case.json'), 'w') as f:
        json.dump(info, f, indent=1)
        f.write('\n')

    # self-check: the stored files satisfy their own tolerance against the alternative runs' spread
    for k, (a, b) in enumerate(zip(exact, tpu)):
        if out_types[k] in FLOAT_TYPES:
            big = np.nanmax(np.abs(np.where(np.isfinite(a.astype(np.float64)), a.astype(np.float64), 0))) \
                if a.size else 0
            if per_exact[k]['atol'] > 1e-3 * max(big, 1e-30):
                log('    WARNING out%d exact atol %g vs max|ref| %g' % (k, per_exact[k]['atol'], big))
            if per_tpu[k]['atol'] > 1e-2 * max(big, 1e-30):
                log('    WARNING out%d tpu atol %g vs max|ref| %g' % (k, per_tpu[k]['atol'], big))
    log('    ok: %d inputs, %d outputs, ops=%d, tol_exact=%s tol_tpu=%s, tpu rewrite %s' % (
        len(inputs), len(exact), len(ops), info['tol_exact'], info['tol_tpu'], stats or '-'))
    return info


def main(argv):
    if argv[:1] == ['--one']:
        return main_one(argv[1])
    if '--coverage' in argv:
        return coverage()
    if '--list' in argv:
        for c in CASES:
            print('%-32s %s' % (c.name, c.description))
        return 0
    names = [a for a in argv if not a.startswith('-')]
    known = {c.name for c in CASES}
    for n in names:
        if n not in known:
            print('unknown case %s' % n, file=sys.stderr)
            return 2
    if len(known) != len(CASES):
        raise RuntimeError('duplicate case names')
    todo = [c for c in CASES if not names or c.name in names]
    os.makedirs(CASES_DIR, exist_ok=True)
    if not names:  # full run: drop directories of cases that no longer exist
        for d in os.listdir(CASES_DIR):
            if d not in known and os.path.isdir(os.path.join(CASES_DIR, d)):
                shutil.rmtree(os.path.join(CASES_DIR, d))
    failed = []
    for c in todo:
        # one process per case: an XLA CHECK failure aborts the process, and must only lose that case
        r = subprocess.run([sys.executable, os.path.abspath(__file__), '--one', c.name])
        if r.returncode != 0:
            failed.append(c.name)
            d = os.path.join(CASES_DIR, c.name)
            if os.path.isdir(d):
                shutil.rmtree(d)
    print('%d cases, %d failed %s' % (len(todo), len(failed), failed))
    return 1 if failed else 0


def coverage():
    counts, total = {}, 0
    for d in sorted(os.listdir(CASES_DIR)):
        p = os.path.join(CASES_DIR, d, 'case.json')
        if not os.path.exists(p):
            continue
        total += 1
        for op in json.load(open(p))['ops']:
            counts.setdefault(op, []).append(d)
    print('%d cases, %d distinct opcodes' % (total, len(counts)))
    for op in sorted(counts, key=lambda o: (-len(counts[o]), o)):
        print('%-24s %3d  %s' % (op, len(counts[op]), ' '.join(counts[op][:6]) + (' ...' if len(counts[op]) > 6 else '')))
    return 0


def main_one(name):
    c = [c for c in CASES if c.name == name][0]
    print('[%s]' % c.name, flush=True)
    try:
        run_case(c, lambda s: print(s, flush=True))
    except Exception as e:
        print('    FAILED: %s' % str(e)[:2000], flush=True)
        traceback.print_exc()
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
