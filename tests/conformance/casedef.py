"""Case registry shared by the case modules and gen_cases.py."""

import zlib

import numpy as np

CASES = []


class Case:
    def __init__(self, name, description, build, kind, **opts):
        self.name = name
        self.description = description
        self.build = build
        self.kind = kind                        # 'jax' or 'hand'
        self.platform = opts.pop('platform', 'cpu')   # lowering platform for jax cases
        self.optimized = opts.pop('optimized', False)  # XLA:CPU optimized text instead of lowered
        self.x64 = opts.pop('x64', False)
        self.debug_info = opts.pop('debug_info', False)
        self.perturb = opts.pop('perturb', True)      # use 1-ulp input perturbation for tolerances
        self.bit_exact = opts.pop('bit_exact', False)  # outputs are exact functions of inputs: tol 0
        self.verify_jit = opts.pop('verify_jit', False)
        self.notes = opts.pop('notes', '')
        self.check = opts.pop('check', None)          # optional callable(text, inputs, outs) -> note
        # outputs whose TPU-numerics reference is not authoritative: {index: reason} (case.json
        # "tpu_reference_skip"; the C test does not compare them in TPU mode)
        self.tpu_skip = opts.pop('tpu_skip', {})
        if opts:
            raise TypeError('unknown case options %s' % sorted(opts))

    def rng(self):
        return np.random.default_rng(zlib.crc32(self.name.encode()))


def jax_case(name, description, **opts):
    """Decorator: build(rng) -> (fn, args); args is a tuple of (pytrees of) numpy arrays."""
    def deco(build):
        CASES.append(Case(name, description, build, 'jax', **opts))
        return build
    return deco


def hand_case(name, description, **opts):
    """Decorator: build(rng) -> (hlo_text, [inputs])."""
    def deco(build):
        CASES.append(Case(name, description, build, 'hand', **opts))
        return build
    return deco
