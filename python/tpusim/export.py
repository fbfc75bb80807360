"""Exporting a JAX train step as a STEP_DIR (docs/step_dir.md) for `tpusim train`, `profile` and `memory`.

    import tpusim
    step = tpusim.export_train_step(
        "examples/digits_mlp", loss_fn, params,
        batch_spec={"x": tpusim.batch_input((64,), "u8"), "y": tpusim.batch_input((), "s32")},
        optimizer=tpusim.optim.adam(1e-3), per_replica_batch=16,
        eval_fn=eval_fn, hypers={"learning_rate": tpusim.schedules.one_cycle(0.01)})

loss_fn(params, batch) returns the mean loss over the batch, or (loss, {metric: scalar}); with `stats=`
(non-trainable state the forward pass updates, e.g. batch-norm running averages) it is
loss_fn(params, stats, batch) -> (loss, {metric: scalar}, new_stats). eval_fn(params, batch) (or
eval_fn(params, stats, batch)) returns {metric: scalar} summed over the batch rows whose batch["mask"] is 1
(rows past the end of the data set are zero and masked out). params and stats are dicts name -> array
(nested dicts are flattened with "/").

Writes step.hlo, grad.hlo, apply.hlo, eval.hlo, signature.json and init_state.npz (see the format document).
"""

import json
import os
import re

import numpy as np
import jax
import jax.numpy as jnp

from . import nn, schedules
from .data import DTYPES, hlo_dtype

FORMAT = "tpusim.step_dir"
VERSION = 1


def batch_input(shape, dtype, source=None):
    """One per-example batch input: shape without the batch dimension, dtype as an HLO name ("f32", "u8",
    "s32") or numpy dtype, source = the dataset array that feeds it (default: the input's name)."""
    return {"shape": tuple(int(d) for d in shape), "dtype": _dtype_name(dtype), "source": source}


def _dtype_name(dt):
    if isinstance(dt, str) and dt in DTYPES:
        return dt
    return hlo_dtype(np.dtype(dt))


def _flatten(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        if "/" in str(k) and isinstance(v, dict):
            raise ValueError("name %r: '/' is the nesting separator" % k)
        name = prefix + str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, name + "/"))
        else:
            out[name] = v
    return out


def _unflatten(flat, like):
    """Rebuild the nesting of `like` (a possibly nested dict) from flat names."""
    def build(node, prefix):
        return {k: (build(v, prefix + str(k) + "/") if isinstance(v, dict) else flat[prefix + str(k)])
                for k, v in node.items()}
    return build(like, "")


def _sds(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), DTYPES[dtype] if isinstance(dtype, str) else dtype)


def _traced_dict(fn, *args):
    """jax.eval_shape of a function returning a dict, and the dict's keys in the order fn built them (jax
    sorts dict keys; the signature keeps the user's order)."""
    names = []

    def f(*a):
        out = fn(*a)
        names[:] = list(out)
        return out
    return jax.eval_shape(f, *args), names


def _value(v):
    return v if isinstance(v, jax.ShapeDtypeStruct) else jnp.asarray(v)


def _entry(name, arr, **kw):
    return dict({"name": name, "dtype": hlo_dtype(arr.dtype), "shape": [int(d) for d in arr.shape]}, **kw)


class TrainStep:
    """A train step split the data-parallel way, with its state, signature and flat jax functions.

    Flat functions (positional arguments and a flat tuple of results, in signature order):
        grad(*state, *batch)              -> (*grads, *new_stats, *metrics)
        apply(*state, *grads, *hypers)    -> (*new_state)
        step(*state, *batch, *hypers)     -> (*new_state, *metrics)
        eval(*state, *eval_batch)         -> (*eval_metrics)
    """

    def __init__(self, loss_fn, params, batch_spec, optimizer, per_replica_batch, eval_fn=None, hypers=None,
                 stats=None, eval_batch=None, name="train_step", metric_combine=None, eval_report=None,
                 lr_scaling="linear", reference_replicas=1, data=None):
        self.name = name
        self.loss_fn, self.eval_fn, self.opt = loss_fn, eval_fn, optimizer
        self._params_like = params
        self._stats_like = stats or {}
        self.has_stats = stats is not None
        # jax.ShapeDtypeStruct values make a shapes-only step (nothing is allocated; no init_state.npz)
        self.abstract = any(isinstance(v, jax.ShapeDtypeStruct)
                            for v in list(_flatten(params).values()) + list(_flatten(stats or {}).values()))
        self.params = {k: _value(v) for k, v in _flatten(params).items()}
        self.stats = {k: _value(v) for k, v in _flatten(stats or {}).items()}
        self.opt_state = (jax.eval_shape(optimizer.init, self.params) if self.abstract
                          else optimizer.init(self.params))
        self.B = int(per_replica_batch)
        self.E = int(eval_batch or per_replica_batch)

        # state: params, stats, optimizer state (names carry the group as a prefix)
        self.state_entries = ([_entry("params/" + k, v, role="param") for k, v in self.params.items()]
                              + [_entry("stats/" + k, v, role="stat") for k, v in self.stats.items()]
                              + [_entry("opt/" + k, v, role=optimizer.roles.get(k, "opt"))
                                 for k, v in self.opt_state.items()])
        for e in self.state_entries:
            if e["role"] == "param" and e["dtype"] not in ("f32", "bf16", "f16"):
                raise ValueError("param %s: trainable state must be floating point, not %s" % (e["name"], e["dtype"]))
        self.np_, self.ns_ = len(self.params), len(self.stats)
        self.S = len(self.state_entries)

        # batch inputs
        self.batch_entries = []
        for k, spec in batch_spec.items():
            spec = spec if isinstance(spec, dict) else batch_input(*spec)
            self.batch_entries.append({"name": k, "dtype": spec["dtype"], "shape": [self.B] + list(spec["shape"]),
                                       "source": spec.get("source") or k})
        self.eval_entries = [dict(e, shape=[self.E] + e["shape"][1:]) for e in self.batch_entries]
        if eval_fn is not None:
            self.eval_entries.append({"name": "mask", "dtype": "f32", "shape": [self.E], "source": "@mask"})

        # hypers: the optimizer's host-fed scalars with their schedules
        hypers = dict(hypers or {})
        unknown = set(hypers) - set(optimizer.hypers)
        if unknown:
            raise ValueError("hypers %s: the optimizer feeds only %s" % (sorted(unknown), list(optimizer.hypers)))
        self.hyper_entries = []
        for k, default in optimizer.hypers.items():
            sched = schedules.as_spec(hypers.get(k, default))
            self.hyper_entries.append({"name": k, "dtype": "f32", "default": schedules.nominal(sched),
                                       "schedule": sched})
        self.H = len(self.hyper_entries)

        # metrics: traced once for their names
        out, self.metric_names = _traced_dict(lambda p, s, b: self._loss_parts(p, s, b)[1], self.params, self.stats,
                                              self._batch_sds(self.batch_entries, as_dict=True))
        combine = dict(metric_combine or {})
        if set(combine.values()) - {"mean", "sum"}:
            raise ValueError("metric_combine: each metric combines by 'mean' or 'sum', not %s" % combine)
        self.metric_entries = []
        for k in self.metric_names:
            if out[k].shape != ():
                raise ValueError("metric %r must be a scalar, has shape %s" % (k, out[k].shape))
            self.metric_entries.append({"name": k, "dtype": hlo_dtype(out[k].dtype), "combine": combine.get(k, "mean")})
        self.eval_metric_entries, self.eval_report = [], []
        if eval_fn is not None:
            out, names = _traced_dict(self._eval_parts, self.params, self.stats,
                                      self._batch_sds(self.eval_entries, as_dict=True))
            for k in names:
                v = out[k]
                if v.shape != ():
                    raise ValueError("eval metric %r must be a scalar, has shape %s" % (k, v.shape))
                self.eval_metric_entries.append({"name": k, "dtype": hlo_dtype(v.dtype), "combine": "sum"})
            if eval_report is None and "count" in out:
                eval_report = {(k[:-4] if k.endswith("_sum") else k): (k, "count") for k in out if k != "count"}
            self.eval_report = [{"name": k, "numerator": a, "denominator": b} for k, (a, b) in (eval_report or {}).items()]
        self.lr_scaling = {"rule": lr_scaling, "hypers": ["learning_rate"] if lr_scaling != "none" else [],
                           "reference_replicas": int(reference_replicas)}
        self.data = dict({"shuffle": True, "seed": 0}, **(data or {}))

    # ---- the pieces -------------------------------------------------------------------------------------

    def _batch_sds(self, entries, as_dict=False):
        sds = [_sds(e["shape"], e["dtype"]) for e in entries]
        return {e["name"]: s for e, s in zip(entries, sds)} if as_dict else sds

    def _loss_parts(self, params, stats, batch):
        p = _unflatten(params, self._params_like)
        if self.has_stats:
            loss, metrics, new_stats = self.loss_fn(p, _unflatten(stats, self._stats_like), batch)
            new_stats = _flatten(new_stats)
        else:
            out = self.loss_fn(p, batch)
            loss, metrics = out if isinstance(out, tuple) else (out, {})
            new_stats = {}
        metrics = dict({"loss": loss}, **{k: v for k, v in metrics.items() if k != "loss"})
        return loss, metrics, {k: new_stats[k] for k in self.stats}

    def _eval_parts(self, params, stats, batch):
        p = _unflatten(params, self._params_like)
        if self.has_stats:
            return dict(self.eval_fn(p, _unflatten(stats, self._stats_like), batch))
        return dict(self.eval_fn(p, batch))

    def _split_state(self, state):
        p = dict(zip(self.params, state[:self.np_]))
        s = dict(zip(self.stats, state[self.np_:self.np_ + self.ns_]))
        o = dict(zip(self.opt_state, state[self.np_ + self.ns_:]))
        return p, s, o

    def _grad(self, state, batch):
        params, stats, _ = self._split_state(state)
        b = {e["name"]: x for e, x in zip(self.batch_entries, batch)}

        def f(p):
            loss, metrics, new_stats = self._loss_parts(p, stats, b)
            return loss, (metrics, new_stats)
        (_, (metrics, new_stats)), grads = jax.value_and_grad(f, has_aux=True)(params)
        return ([grads[k] for k in self.params], [new_stats[k] for k in self.stats],
                [metrics[k] for k in self.metric_names])

    def _apply(self, state, grads, hypers):
        params, stats, opt = self._split_state(state)
        h = {e["name"]: x for e, x in zip(self.hyper_entries, hypers)}
        new_p, new_o = self.opt.update(params, dict(zip(self.params, grads)), opt, h)
        return ([new_p[k].astype(params[k].dtype) for k in self.params] + [stats[k] for k in self.stats]
                + [new_o[k].astype(opt[k].dtype) for k in self.opt_state])

    # flat functions (see the class doc)
    def grad_flat(self, *args):
        g, st, m = self._grad(args[:self.S], args[self.S:])
        return tuple(g + st + m)

    def apply_flat(self, *args):
        S, P = self.S, self.np_
        return tuple(self._apply(args[:S], args[S:S + P], args[S + P:]))

    def step_flat(self, *args):
        S, nb = self.S, len(self.batch_entries)
        state, batch, hypers = args[:S], args[S:S + nb], args[S + nb:]
        g, st, m = self._grad(state, batch)
        state = list(state)
        state[self.np_:self.np_ + self.ns_] = st   # the forward pass's new statistics, as the trainer does
        return tuple(self._apply(state, g, hypers) + m)

    def eval_flat(self, *args):
        params, stats, _ = self._split_state(args[:self.S])
        b = {e["name"]: x for e, x in zip(self.eval_entries, args[self.S:])}
        out = self._eval_parts(params, stats, b)
        return tuple(out[e["name"]] for e in self.eval_metric_entries)

    def jitted(self, kind, tpu=True):
        """jax.jit of a flat function traced with (tpu=True) or without TPU numerics (nn.tpu_numerics)."""
        fn = getattr(self, kind + "_flat")

        def f(*args):
            with nn.tpu_numerics(tpu):
                return fn(*args)
        return jax.jit(f)

    # ---- shapes, values, export ------------------------------------------------------------------------

    def state_sds(self):
        return [_sds(e["shape"], e["dtype"]) for e in self.state_entries]

    def init_state(self):
        """The initial state as a list of numpy arrays, in signature order."""
        if self.abstract:
            raise ValueError("%s: a shapes-only step (ShapeDtypeStruct parameters) has no initial state" % self.name)
        return [np.asarray(v) for v in list(self.params.values()) + list(self.stats.values())
                + list(self.opt_state.values())]

    def hyper_defaults(self):
        return [np.float32(e["default"]) for e in self.hyper_entries]

    def program_args(self, kind):
        st = self.state_sds()
        hy = [jax.ShapeDtypeStruct((), jnp.float32)] * self.H
        grads = [_sds(e["shape"], e["dtype"]) for e in self.state_entries if e["role"] == "param"]
        return {"step": st + self._batch_sds(self.batch_entries) + hy,
                "grad": st + self._batch_sds(self.batch_entries),
                "apply": st + grads + hy,
                "eval": st + self._batch_sds(self.eval_entries)}[kind]

    def lower(self, kind):
        """HLO text of one program. step and apply donate the state (input_output_alias: state k -> output k)."""
        fn = getattr(self, kind + "_flat")

        def program(*args):
            return fn(*args)
        program.__name__ = "%s_%s" % (re.sub(r"\W", "_", self.name), kind)
        donate = tuple(range(self.S)) if kind in ("step", "apply") else ()
        text = jax.jit(program, donate_argnums=donate, keep_unused=True).lower(
            *self.program_args(kind)).as_text(dialect="hlo")
        return _clean_hlo(text)

    def signature(self, programs):
        return {
            "format": FORMAT, "version": VERSION, "name": self.name,
            "created_by": "python/tpusim/export.py, jax %s" % jax.__version__,
            "programs": {k: k + ".hlo" for k in programs},
            "init_state": "init_state.npz",
            "per_replica_batch": self.B,
            "state": self.state_entries,
            "batch": self.batch_entries,
            "hypers": self.hyper_entries,
            "metrics": self.metric_entries,
            "loss_metric": "loss",
            "grad_reduce": "mean",
            "eval": ({"per_replica_batch": self.E, "batch": self.eval_entries, "metrics": self.eval_metric_entries,
                      "report": self.eval_report} if self.eval_fn is not None else None),
            "lr_scaling": self.lr_scaling,
            "optimizer": self.opt.signature(),
            "data": self.data,
        }


def _clean_hlo(text):
    """Drops source_file/source_line from metadata (local paths in committed files), keeps op_type/op_name."""
    text = re.sub(r'\s*source_file="[^"]*"', "", text)
    text = re.sub(r"\s*source_line=\d+", "", text)
    text = re.sub(r"\s*source_end_line=\d+|\s*source_column=\d+|\s*source_end_column=\d+", "", text)
    return text


def _check_alias(text):
    """Every donated state parameter k must alias output k (the trainer keeps state on the device by index)."""
    m = re.search(r"input_output_alias=\{(.*?)\}\s*(,|$)", text.splitlines()[0])
    pairs = re.findall(r"\{(\d+)\}:\s*\((\d+),", m.group(1)) if m else []
    wrong = [(int(o), int(p)) for o, p in pairs if int(o) != int(p)]
    if wrong:
        raise RuntimeError("input_output_alias maps state parameters to other outputs: %s" % wrong)
    return len(pairs)


def export_train_step(out_dir, loss_fn, params, batch_spec, optimizer, per_replica_batch, eval_fn=None,
                      hypers=None, programs=("step", "grad", "apply", "eval"), write_init=True, **kw):
    """Builds a TrainStep (see its doc and the module doc) and writes it to out_dir as a STEP_DIR.

    programs: which of step/grad/apply/eval to write (grad+apply are what data-parallel training needs; step
    alone is enough for `tpusim profile` and `memory`). write_init=False, or params/stats given as
    jax.ShapeDtypeStruct, leaves out init_state.npz (a shapes-only STEP_DIR). Other keywords go to TrainStep: stats, eval_batch, name, metric_combine,
    eval_report, lr_scaling ("linear" or "none"), reference_replicas, data (dataset hints).
    Returns the TrainStep."""
    ts = TrainStep(loss_fn, params, batch_spec, optimizer, per_replica_batch, eval_fn=eval_fn, hypers=hypers, **kw)
    programs = [p for p in programs if p != "eval" or eval_fn is not None]
    os.makedirs(out_dir, exist_ok=True)
    for kind in programs:
        text = ts.lower(kind)
        if kind in ("step", "apply"):
            _check_alias(text)
        with open(os.path.join(out_dir, kind + ".hlo"), "w") as f:
            f.write(text)
    sig = ts.signature(programs)
    if write_init and not ts.abstract:
        np.savez(os.path.join(out_dir, "init_state.npz"),
                 **{e["name"]: a for e, a in zip(ts.state_entries, ts.init_state())})
    else:
        sig["init_state"] = None
    with open(os.path.join(out_dir, "signature.json"), "w") as f:
        f.write(format_json(sig))
    return ts


def format_json(obj, indent=0):
    """JSON with one key per line and one list element per line, each element (a state entry, a batch
    input...) on a single line: readable and diff-friendly."""
    pad = " " * (indent + 2)
    if isinstance(obj, dict) and indent == 0:
        items = ["%s%s: %s" % (pad, json.dumps(k), format_json(v, indent + 2)) for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n}\n"
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        return "[\n" + ",\n".join(pad + json.dumps(x) for x in obj) + "\n" + " " * indent + "]"
    if isinstance(obj, dict) and any(isinstance(v, list) and v and isinstance(v[0], dict) for v in obj.values()):
        items = ["%s%s: %s" % (pad, json.dumps(k), format_json(v, indent + 2)) for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return json.dumps(obj)


def load_signature(step_dir):
    with open(os.path.join(step_dir, "signature.json")) as f:
        sig = json.load(f)
    if sig.get("format") != FORMAT or sig.get("version") != VERSION:
        raise ValueError("%s: not a %s version %d signature" % (step_dir, FORMAT, VERSION))
    return sig


def load_init_state(step_dir, sig=None):
    sig = sig or load_signature(step_dir)
    with np.load(os.path.join(step_dir, sig["init_state"])) as z:
        return [z[e["name"]] for e in sig["state"]]
