#!/usr/bin/env python3
"""Builds the per-device programs of the LLM rows of docs/timing-validation.md: MaxText-style decoder training
steps (RMSNorm, rotary-free multi-head attention with grouped KV heads, SwiGLU MLP, layers scanned with
lax.scan, f32 weights cast to bf16 per layer, Adam), fully sharded over the slice (FSDP): each layer's weights
are all-gathered inside the scan (their gradients come back reduce-scattered), as MaxText does with
ici_fsdp_parallelism = -1. The model shapes and per-device batches are the published configurations:

  v5e 16B / 32B / 64B: MaxText/configs/v5e/{16b,32b,64b}.sh (global_parameter_scale 16/32/64 over base.yml:
      emb 2048, 16 heads of 128, mlp 7168, 16 layers, vocab 32000, SwiGLU; remat_policy=full; sequence 2048;
      per_device_batch_size 6 / 4 / 2), on one v5e-256;
  v6e Llama 3.1 8B: tpu-recipes training/trillium/Llama3.1-8B-MaxText/v6e-256 (llama3_1_8b_8192:
      per_device_batch_size 4, sequence 8192, q/k/v/out projections and the decoder input saved (offloaded to
      the host), the rest rematerialized), on one v6e-256.

Attention is written the way a flash-attention kernel tiles it (blocked_causal_attention): MaxText runs a
Pallas kernel that tpusim cannot see into, and plain softmax(q k^T) v would move the whole [S, S] score matrix
through HBM, which the kernel never does. The shard_map body (one
device's program, with its all-gathers and reduce-scatters) is cut out as the entry computation, as in
make_programs.py. Shapes only: nothing is allocated.

    python3 examples/timing/make_llm_programs.py       # writes examples/timing/llm_*.hlo (committed)
"""
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=256"

import jax                                  # noqa: E402
import jax.numpy as jnp                     # noqa: E402
from jax import lax                         # noqa: E402
from jax.ad_checkpoint import checkpoint_name   # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P   # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_programs import per_device, write    # noqa: E402

BF = jnp.bfloat16


def maxtext_scale(scale):
    """MaxText's get_individual_scales over base.yml (emb 2048, heads 16, mlp 7168, layers 16)."""
    import math
    base, rem = divmod(int(math.log2(scale)), 3)
    heads = base + int(rem > 0)
    emb = base + int(rem > 1)
    return dict(E=2048 * 2 ** emb, H=16 * 2 ** heads, KV=16 * 2 ** heads, D=128, M=7168 * 2 ** heads,
                L=16 * 2 ** base, V=32000)


CONFIGS = {
    # name: (model, devices, per-device batch, sequence, remat)
    "llm_v5e_16b": (dict(maxtext_scale(16), blocks=2), 256, 6, 2048, "full"),
    "llm_v5e_32b": (dict(maxtext_scale(32), blocks=2), 256, 4, 2048, "full"),
    "llm_v5e_64b": (dict(maxtext_scale(64), blocks=2), 256, 2, 2048, "full"),
    # the recipe's flash blocks: sa_block_q = sa_block_kv = 2048
    "llm_v6e_llama31_8b": (dict(E=4096, H=32, KV=8, D=128, M=14336, L=32, V=128256, blocks=4), 256, 4, 8192,
                           "projections"),
}


def rms(x):
    xf = x.astype(jnp.float32)
    return (xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)).astype(BF)


def blocked_causal_attention(q, k, v, nblk):
    """Causal attention computed per (batch, head) and per query block against the keys it may see, as a
    flash-attention kernel tiles it: the scores of one block ([S/nblk, <= S] per head) are small enough to stay
    in VMEM, and blocks above the diagonal are skipped (nblk (nblk+1)/2 of nblk^2 blocks)."""
    b, s, hh, d = q.shape
    bs = s // nblk

    def heads(x):
        return jnp.transpose(x, (0, 2, 1, 3)).reshape(b * hh, s, d)

    def one(args):
        qh, kh, vh = args
        outs = []
        for i in range(nblk):
            qi, kk, vv = qh[i * bs:(i + 1) * bs], kh[:(i + 1) * bs], vh[:(i + 1) * bs]
            a = (qi @ kk.T).astype(jnp.float32) * (d ** -0.5)
            mask = jnp.arange(bs)[:, None] + i * bs >= jnp.arange((i + 1) * bs)[None, :]
            a = jax.nn.softmax(jnp.where(mask, a, -1e30), axis=-1).astype(BF)
            outs.append(a @ vv)
        return jnp.concatenate(outs, axis=0)
    # the kernel recomputes scores in its backward pass rather than saving them: checkpoint each block
    o = lax.map(jax.checkpoint(one), (heads(q), heads(k), heads(v)))
    return jnp.transpose(o.reshape(b, hh, s, d), (0, 2, 1, 3))


def layer(c, h, p):
    """One decoder layer; p holds this layer's full (gathered) weights."""
    b, s, e = h.shape
    x = rms(h)
    q = checkpoint_name(jnp.einsum("bse,ehd->bshd", x, p["wq"]), "query_proj")
    k = checkpoint_name(jnp.einsum("bse,ehd->bshd", x, p["wk"]), "key_proj")
    v = checkpoint_name(jnp.einsum("bse,ehd->bshd", x, p["wv"]), "value_proj")
    rep = c["H"] // c["KV"]
    k = jnp.repeat(k, rep, axis=2)
    v = jnp.repeat(v, rep, axis=2)
    o = blocked_causal_attention(q, k, v, c["blocks"])
    h = h + checkpoint_name(jnp.einsum("bshd,hde->bse", o, p["wo"]), "out_proj")
    x = rms(h)
    g = jax.nn.silu(jnp.einsum("bse,em->bsm", x, p["w0"])) * jnp.einsum("bse,em->bsm", x, p["w1"])
    return h + jnp.einsum("bsm,me->bse", g, p["w2"])


def shapes(c, n):
    """Global parameter shapes; FSDP shards each over its embedding dimension (axis 1 of stacked weights)."""
    L, E, H, KV, D, M, V = c["L"], c["E"], c["H"], c["KV"], c["D"], c["M"], c["V"]
    f = jnp.float32
    layers = {"wq": (L, E, H, D), "wk": (L, E, KV, D), "wv": (L, E, KV, D), "wo": (L, H, D, E),
              "w0": (L, E, M), "w1": (L, E, M), "w2": (L, M, E)}
    ps = {k: jax.ShapeDtypeStruct(v, f) for k, v in layers.items()}
    ps["emb"] = jax.ShapeDtypeStruct((V, E), f)
    ps["unemb"] = jax.ShapeDtypeStruct((E, V), f)
    # each weight is sharded over its embedding dimension
    spec = {k: P(*([None] * (SHARD_AXIS[k] + 1)), "fsdp") for k in layers}
    spec["emb"] = P(None, "fsdp")
    spec["unemb"] = P("fsdp", None)
    return ps, spec


# the embedding-dimension axis of each layer weight, without the layer axis
SHARD_AXIS = {"wq": 0, "wk": 0, "wv": 0, "wo": 2, "w0": 0, "w1": 0, "w2": 1}


def train_step_fn(c, remat):
    def gather(x, axis):
        return lax.all_gather(x, "fsdp", axis=axis, tiled=True)

    def loss_fn(params, tokens):
        emb = gather(params["emb"], 1).astype(BF)
        h = checkpoint_name(emb[tokens], "decoder_layer_input")

        def body(h, lp):
            full = {k: gather(v, SHARD_AXIS[k]).astype(BF) for k, v in lp.items()}
            return layer(c, h, full), None
        if remat == "full":
            body = jax.checkpoint(body)
        else:   # MaxText's custom policy of the recipe: these saved (offloaded), the rest recomputed
            body = jax.checkpoint(body, policy=jax.checkpoint_policies.save_only_these_names(
                "decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj"))
        stacked = {k: params[k] for k in ("wq", "wk", "wv", "wo", "w0", "w1", "w2")}
        h, _ = lax.scan(body, h, stacked)
        logits = jnp.einsum("bse,ev->bsv", rms(h).astype(jnp.float32), gather(params["unemb"], 0))
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, tokens[..., None], axis=-1))

    def step(params, mu, nu, tokens):
        loss, g = jax.value_and_grad(loss_fn)(params, tokens)
        mu = jax.tree_util.tree_map(lambda m, x: 0.9 * m + 0.1 * x, mu, g)
        nu = jax.tree_util.tree_map(lambda m, x: 0.95 * m + 0.05 * x * x, nu, g)
        params = jax.tree_util.tree_map(lambda p, m, v: p - 1e-4 * m / (jnp.sqrt(v) + 1e-8), params, mu, nu)
        return lax.pmean(loss, "fsdp"), params, mu, nu
    return step


def build(name):
    c, n, batch, seq, remat = CONFIGS[name]
    ps, spec = shapes(c, n)
    mesh = Mesh(jax.devices()[:n], ("fsdp",))
    tokens = jax.ShapeDtypeStruct((batch * n, seq), jnp.int32)
    step = jax.shard_map(train_step_fn(c, remat), mesh=mesh, in_specs=(spec, spec, spec, P("fsdp")),
                         out_specs=(P(), spec, spec, spec), check_vma=False)
    text = jax.jit(step, donate_argnums=(0, 1, 2)).lower(ps, ps, ps, tokens).as_text(dialect="hlo")
    write(name, per_device(text, name))


def main():
    for name in (sys.argv[1:] or CONFIGS):
        build(name)


if __name__ == "__main__":
    main()
