"""Hyper-parameter schedules: the JSON specs written into signature.json and their reference values.

A schedule is a plain dict (it goes into signature.json as is); `value(spec, step, total_steps)` is the
reference implementation the C trainer follows (docs/step_dir.md, "Schedules"). `step` is the 0-based index
of the optimizer step the value is fed to.

    constant(0.1)                                   {"kind": "constant", "value": 0.1}
    one_cycle(0.05, total_steps=300)                PyTorch's OneCycleLR (three_phase=False)
    step_decay(0.1, step_size=100, gamma=0.5)       PyTorch's StepLR
"""

import math


def constant(value):
    return {"kind": "constant", "value": float(value)}


def one_cycle(max_lr, total_steps=None, pct_start=0.3, div_factor=25.0, final_div_factor=1e4, anneal="cos"):
    """PyTorch's torch.optim.lr_scheduler.OneCycleLR, two phases (three_phase=False).

    Warm up from max_lr/div_factor to max_lr over the first pct_start*total_steps steps, then anneal down to
    max_lr/div_factor/final_div_factor at step total_steps-1. total_steps=None means "the trainer's --steps".
    """
    if anneal not in ("cos", "linear"):
        raise ValueError("one_cycle: anneal must be 'cos' or 'linear', not %r" % (anneal,))
    if not 0.0 < pct_start < 1.0:
        raise ValueError("one_cycle: pct_start must be in (0, 1), not %r" % (pct_start,))
    return {"kind": "one_cycle", "max_lr": float(max_lr),
            "total_steps": None if total_steps is None else int(total_steps),
            "pct_start": float(pct_start), "div_factor": float(div_factor),
            "final_div_factor": float(final_div_factor), "anneal": anneal}


def step_decay(initial, step_size, gamma=0.1):
    """PyTorch's StepLR: initial * gamma ** floor(step / step_size)."""
    if step_size < 1:
        raise ValueError("step_decay: step_size must be >= 1")
    return {"kind": "step", "initial": float(initial), "step_size": int(step_size), "gamma": float(gamma)}


def as_spec(x):
    """A number becomes a constant schedule; a spec dict is checked and returned."""
    if isinstance(x, dict):
        if x.get("kind") not in ("constant", "one_cycle", "step"):
            raise ValueError("unknown schedule kind %r" % (x.get("kind"),))
        return x
    return constant(x)


def nominal(spec):
    """The hyper's nominal value ("default" in signature.json): constant's value, one_cycle's max_lr, step's
    initial value."""
    kind = spec["kind"]
    return {"constant": lambda: spec["value"], "one_cycle": lambda: spec["max_lr"],
            "step": lambda: spec["initial"]}[kind]()


def _anneal(kind, start, end, pct):
    if kind == "cos":
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1.0)
    return (end - start) * pct + start


def value(spec, step, total_steps=None):
    """The schedule's value at optimizer step `step` (0-based), computed in double precision.

    one_cycle: total_steps in the spec, else the argument (the trainer's --steps); steps past the end keep
    the final value (PyTorch raises an error there instead)."""
    kind = spec["kind"]
    if kind == "constant":
        return spec["value"]
    if kind == "step":
        return spec["initial"] * spec["gamma"] ** (step // spec["step_size"])
    total = spec.get("total_steps") or total_steps
    if not total or total < 2:
        raise ValueError("one_cycle needs total_steps >= 2 (in the spec or from --steps)")
    initial = spec["max_lr"] / spec["div_factor"]
    final = initial / spec["final_div_factor"]
    step = min(max(step, 0), total - 1)
    # PyTorch: phase ends at float(pct_start * total_steps) - 1 and total_steps - 1
    warm_end = float(spec["pct_start"] * total) - 1.0
    if step <= warm_end and warm_end > 0:   # warm_end <= 0: no warm-up phase (PyTorch divides by zero)
        return _anneal(spec["anneal"], initial, spec["max_lr"], step / warm_end)
    return _anneal(spec["anneal"], spec["max_lr"], final, (step - warm_end) / ((total - 1) - warm_end))
