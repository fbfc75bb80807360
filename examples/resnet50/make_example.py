#!/usr/bin/env python3
"""Builds examples/resnet50: a shapes-only STEP_DIR of ResNet-50 v1.5 training at batch 128 on one core.

    PYTHONPATH=python python3 examples/resnet50/make_example.py

The model is the one examples/timing/make_programs.py already writes for the timing validation (plain jax:
the Flax ImageNet example's ResNet-50 v1.5, bf16 convolutions and activations, f32 parameters, batch norm,
L2 0.5e-4 in the loss): its resnet_params/resnet_forward/is_weight are imported, not copied. Here the step is
exported in the STEP_DIR layout (docs/step_dir.md) — state = parameters, batch-norm statistics (`stat`
entries) and momentum; batch = images f32[128,224,224,3] and labels s32[128]; hyper = learning_rate —
with SGD + Nesterov momentum 0.9 (the Flax example's optimizer) and the state donated. Only step.hlo and
signature.json are written (no init_state.npz: 25.6M parameters are not worth committing), which is all
`tpusim profile --analytic` and `tpusim memory` need.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "timing"))

import jax                              # noqa: E402
import jax.numpy as jnp                 # noqa: E402

import tpusim                           # noqa: E402
from tpusim import optim, schedules, tool, verify     # noqa: E402
import make_programs as rn              # noqa: E402  (examples/timing/make_programs.py)

BATCH = 128


def split_state():
    shapes = rn.resnet_params()
    stats = {k: v for k, v in shapes.items() if k.endswith("/mean") or k.endswith("/var")}
    params = {k: v for k, v in shapes.items() if k not in stats}
    return params, stats


def loss_fn(p, s, batch):
    logits, new_stats = rn.resnet_forward(dict(p, **s), batch["images"], True)
    onehot = jax.nn.one_hot(batch["labels"], 1000)
    ce = -jnp.mean(jnp.sum(onehot * jax.nn.log_softmax(logits), axis=-1))
    l2 = sum(jnp.sum(jnp.square(v)) for k, v in p.items() if rn.is_weight(k))
    acc = jnp.mean((jnp.argmax(logits, -1) == batch["labels"]).astype(jnp.float32))
    return ce + 0.5e-4 * l2, {"accuracy": acc}, new_stats


def main():
    params, stats = split_state()
    ts = tpusim.export_train_step(
        HERE, loss_fn, params, stats=stats,
        batch_spec={"images": tpusim.batch_input((224, 224, 3), "f32"), "labels": tpusim.batch_input((), "s32")},
        optimizer=optim.momentum(0.1, 0.9, nesterov=True), per_replica_batch=BATCH,
        hypers={"learning_rate": schedules.constant(0.1)}, programs=("step",), name="resnet50",
        reference_replicas=8, data={"note": "ImageNet-shaped; no data committed (shapes only)"})
    n = sum(int(jnp.prod(jnp.array(e["shape"]))) for e in ts.state_entries if e["role"] == "param")
    print("exported %s/step.hlo: %d state arrays, %d parameters" % (HERE, ts.S, n))
    ok = verify.verify_step_dir(HERE, run=False)        # check only: running it needs tens of GB
    if ok:
        p = tool.run(tool.find_tpusim(), ["profile", os.path.join(HERE, "step.hlo"), "--chip", "v3-8", "--analytic"])
        print("\n".join(p.stdout.splitlines()[:12]))
    return 0 if ok is not False else 1


if __name__ == "__main__":
    sys.exit(main())
