"""Layers whose matrix products can be simulated with TPU numerics in jax itself.

Exported programs use plain f32 `dot`/`convolution` at DEFAULT precision; tpusim (and a TPU) rounds both
operands of each to bfloat16 and accumulates in f32 (design.md section 4). XLA:CPU does not, so to predict in
Python what training on tpusim gives, build the model from `dense`, `matmul` and `conv` here and trace it
inside `with tpu_numerics():` — every product then rounds its operands to bf16, in the backward pass too (the
gradient products are separate dots on the TPU, with their own rounded operands). Outside the context the
layers are plain jnp/lax calls, so what gets exported is the user's program unchanged.
"""

import contextlib

import jax
import jax.numpy as jnp

_state = {"tpu": False}


@contextlib.contextmanager
def tpu_numerics(on=True):
    """Functions traced inside this context compute matmuls/convs as the MXU does (see module doc)."""
    old = _state["tpu"]
    _state["tpu"] = bool(on)
    try:
        yield
    finally:
        _state["tpu"] = old


def tpu_numerics_on():
    return _state["tpu"]


def round_bf16(x):
    """f32 -> nearest bf16 (ties to even) -> f32; other dtypes unchanged."""
    if x.dtype != jnp.float32:
        return x
    return x.astype(jnp.bfloat16).astype(jnp.float32)


def mxu(fn):
    """Wraps a bilinear fn(a, b) (a dot or a convolution) so that under tpu_numerics both operands are rounded
    to bf16 in the forward product and the cotangent and operands in both backward products."""
    @jax.custom_vjp
    def rounded(a, b):
        return fn(round_bf16(a), round_bf16(b))

    def fwd(a, b):
        return rounded(a, b), (a, b)

    def bwd(res, g):
        a, b = res
        _, vjp = jax.vjp(fn, round_bf16(a), round_bf16(b))
        return vjp(round_bf16(g))

    rounded.defvjp(fwd, bwd)

    def call(a, b):
        return rounded(a, b) if _state["tpu"] else fn(a, b)
    return call


matmul = mxu(jnp.matmul)


def dense(x, w, b=None):
    """x @ w (+ b)."""
    y = matmul(x, w)
    return y if b is None else y + b


def _conv_fn(stride, padding):
    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), padding,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return f


_convs = {}


def conv(x, w, stride=1, padding="SAME"):
    """2-D convolution, NHWC activations and HWIO weights."""
    key = (stride, padding if isinstance(padding, str) else tuple(map(tuple, padding)))
    if key not in _convs:
        _convs[key] = mxu(_conv_fn(stride, padding))
    return _convs[key](x, w)
