"""What `tpusim train` will do, simulated with jax itself: the data-parallel loop of docs/step_dir.md.

Per step every replica runs grad on its shard of the global batch (TPU numerics simulated: bf16 operands in
every matmul/conv, nn.tpu_numerics), the gradients and new statistics are averaged over the replicas (the
all-reduce), then apply runs once with the host-fed hypers (schedules with the linear scaling rule). Example
order, batches and evaluation follow the trainer's rules (data.train_batches / data.eval_batches).
"""

import time

import numpy as np
import jax
import jax.numpy as jnp

from . import data as dsets
from . import schedules


def hyper_values(sig_hypers, step, total_steps, replicas, lr_scaling):
    """The values fed at `step`: each hyper's schedule, times replicas / reference_replicas for the hypers
    the linear scaling rule names."""
    factor = 1.0
    if lr_scaling and lr_scaling.get("rule") == "linear":
        factor = replicas / float(lr_scaling.get("reference_replicas", 1))
    out = []
    for h in sig_hypers:
        v = schedules.value(h["schedule"], step, total_steps)
        if lr_scaling and h["name"] in lr_scaling.get("hypers", []):
            v *= factor
        out.append(np.float32(v))
    return out


class Simulator:
    def __init__(self, train_step, replicas, tpu=True):
        ts = self.ts = train_step
        self.replicas = replicas
        S, P, NS = ts.S, ts.np_, ts.ns_
        grad = ts.jitted("grad", tpu=tpu)
        apply = ts.jitted("apply", tpu=tpu)
        combine = [m["combine"] for m in ts.metric_entries]

        def dp_step(state, batches, hypers):
            # batches: each input stacked [replicas, B, ...]; vmap = the replicas running grad side by side
            outs = jax.vmap(lambda *b: grad(*state, *b))(*batches)
            red = [jnp.mean(o, axis=0) for o in outs[:P + NS]]          # the all-reduce (mean)
            metrics = [jnp.sum(o, axis=0) if c == "sum" else jnp.mean(o, axis=0)
                       for o, c in zip(outs[P + NS:], combine)]
            state = list(state)
            state[P:P + NS] = red[P:]
            return apply(*state, *red[:P], *hypers), metrics
        self._step = jax.jit(dp_step)
        self._eval = ts.jitted("eval", tpu=tpu) if ts.eval_fn is not None else None

    def train(self, train_data, steps, eval_data=None, eval_every=0, seed=0, log=print, total_steps=None,
              state=None):
        """Runs `steps` steps from the initial state (or `state`). Returns (state, history): history has one
        dict per step (step, epoch, lr, metrics) and evals [(step, report dict)]."""
        ts, R = self.ts, self.replicas
        state = [jnp.asarray(a) for a in (state or ts.init_state())]
        n = len(next(iter(train_data.values())))
        sources = [e["source"] for e in ts.batch_entries]
        hist, evals = [], []
        t0 = time.time()
        it = dsets.train_batches(n, ts.B, R, seed=seed, shuffle=ts.data.get("shuffle", True))
        for _ in range(steps):
            step, epoch, idx = next(it)
            batches = [np.stack([train_data[s][i] for i in idx]) for s in sources]
            hyp = hyper_values(ts.hyper_entries, step, total_steps or steps, R, ts.lr_scaling)
            state, metrics = self._step(state, batches, hyp)
            rec = {"step": step, "epoch": epoch, "hypers": [float(h) for h in hyp],
                   "metrics": {m: float(v) for m, v in zip(ts.metric_names, metrics)}}
            hist.append(rec)
            last = step + 1 == steps
            if eval_data is not None and self._eval is not None and ((eval_every and (step + 1) % eval_every == 0) or last):
                rep = self.evaluate(state, eval_data)
                evals.append((step + 1, rep))
                if log:
                    log("step %4d epoch %3d  train loss %.4f | eval %s  (%.1fs)" % (
                        step + 1, epoch, rec["metrics"]["loss"],
                        "  ".join("%s %.4f" % kv for kv in rep.items()), time.time() - t0))
        return state, {"steps": hist, "evals": evals}

    def evaluate(self, state, eval_data):
        """Sums the eval metrics over the whole eval set (padded last batch, mask) and reports the ratios."""
        ts, R = self.ts, self.replicas
        n = len(next(iter(eval_data.values())))
        sums = np.zeros(len(ts.eval_metric_entries), np.float64)
        data_entries = [e for e in ts.eval_entries if e["source"] != "@mask"]
        for per_rep in dsets.eval_batches(n, ts.E, R):
            for idx, valid in per_rep:
                rows = dsets.gather({e["source"]: eval_data[e["source"]] for e in data_entries}, idx, ts.E)
                args = []
                for e in ts.eval_entries:
                    if e["source"] == "@mask":
                        args.append((np.arange(ts.E) < valid).astype(np.float32))
                    else:
                        args.append(rows[e["source"]])
                sums += np.array([float(v) for v in self._eval(*state, *args)])
        total = dict(zip([e["name"] for e in ts.eval_metric_entries], sums))
        return {r["name"]: total[r["numerator"]] / max(total[r["denominator"]], 1e-30) for r in ts.eval_report} or total
