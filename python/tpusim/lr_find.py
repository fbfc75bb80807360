"""Learning-rate finder (the fastai / Leslie Smith range test) run on tpusim, and its SVG plot.

From the initial state, train `steps` steps while the learning rate grows geometrically from lr_min to lr_max,
record the training loss of each step, stop once the loss diverges, and suggest a rate where the smoothed
loss falls fastest. Two ways to run it on tpusim (docs/step_dir.md, "Learning-rate finder"):
  * `tpusim train STEP_DIR --lr-find ...` when the installed tpusim has it (one call, any --slice);
  * otherwise one `tpusim run step.hlo` per step, on one device, driven from here.
The plot is a hand-written SVG (no matplotlib).
"""

import json
import math
import os
import tempfile

import numpy as np

from . import data as dsets
from . import tool
from .export import load_signature, load_init_state
from .verify import run_program


def lr_at(i, steps, lr_min, lr_max):
    """Learning rate of finder step i: lr_min * (lr_max / lr_min) ** (i / (steps - 1))."""
    return lr_min * (lr_max / lr_min) ** (i / max(steps - 1, 1))


def smooth(losses, beta=0.95):
    """Exponential moving average with bias correction (fastai's), so early points are not pulled to 0."""
    out, avg = [], 0.0
    for i, x in enumerate(losses):
        avg = beta * avg + (1 - beta) * x
        out.append(avg / (1 - beta ** (i + 1)))
    return out


def suggest(points, beta=0.95, skip_start=5, skip_end=3):
    """The learning rate at the steepest descent of the smoothed loss over log(lr), or None."""
    lrs = [p["lr"] for p in points]
    sm = smooth([p["loss"] for p in points], beta)
    lo, hi = skip_start, len(sm) - skip_end
    if hi - lo < 3:
        return None
    grads = np.gradient(np.array(sm[lo:hi]), np.log(np.array(lrs[lo:hi])))
    return float(lrs[lo + int(np.argmin(grads))])


def _finished(losses, best, stop_factor):
    x = losses[-1]
    return not math.isfinite(x) or (len(losses) > 10 and x > stop_factor * best)


def lr_find(step_dir, data=None, tpusim=None, lr_min=1e-6, lr_max=1.0, steps=100, slice_=None,
            stop_factor=4.0, seed=0, log=None):
    """Runs the range test on tpusim. Returns {"hyper", "replicas", "points": [{step, lr, loss}], "suggestion"}.

    data: the training dataset (default: the signature's data hint). slice_: run with that many replicas through
    `tpusim train --lr-find` (needs that mode); the fallback runs one device."""
    tpusim = tool.find_tpusim(tpusim)
    if not tpusim:
        raise RuntimeError("lr_find needs the tpusim program (make; or set $TPUSIM)")
    sig = load_signature(step_dir)
    data = data or os.path.join(step_dir, sig["data"]["train"])
    if tool.has_option(tpusim, "train", "--lr-find"):
        with tempfile.TemporaryDirectory(prefix="tpusim-lrfind-") as d:
            out = os.path.join(d, "lr_find.json")
            args = ["train", step_dir, "--data", data, "--lr-find", "--lr-min", repr(lr_min), "--lr-max", repr(lr_max),
                    "--steps", str(steps), "--lr-out", out, "--seed", str(seed)]
            if slice_:
                args += ["--slice", slice_]
            tool.run(tpusim, args)
            with open(out) as f:
                res = json.load(f)
    else:
        if slice_:
            raise RuntimeError("this tpusim has no `train --lr-find`; the fallback runs one device (no slice_)")
        res = _lr_find_by_run(tpusim, step_dir, sig, data, lr_min, lr_max, steps, stop_factor, seed, log)
    res["suggestion"] = suggest(res["points"])
    return res


def _lr_find_by_run(tpusim, step_dir, sig, data, lr_min, lr_max, steps, stop_factor, seed, log):
    state = load_init_state(step_dir, sig)
    arrays = dsets.read_dataset(data)
    n = len(next(iter(arrays.values())))
    hyper = sig["lr_scaling"]["hypers"][0] if sig["lr_scaling"]["hypers"] else "learning_rate"
    names = [h["name"] for h in sig["hypers"]]
    S = len(sig["state"])
    it = dsets.train_batches(n, sig["per_replica_batch"], 1, seed=seed, shuffle=sig["data"].get("shuffle", True))
    step_hlo = os.path.join(step_dir, sig["programs"]["step"])
    loss_index = S + [m["name"] for m in sig["metrics"]].index(sig["loss_metric"])
    points, best = [], float("inf")
    for i in range(steps):
        _, _, idx = next(it)
        batch = [np.asarray(arrays[e["source"]][idx[0]]) for e in sig["batch"]]
        lr = lr_at(i, steps, lr_min, lr_max)
        hypers = [np.float32(lr if k == hyper else h["default"]) for k, h in zip(names, sig["hypers"])]
        out = run_program(tpusim, step_hlo, state + batch + hypers)
        loss = float(out[loss_index])
        points.append({"step": i, "lr": lr, "loss": loss})
        if log:
            log("lr_find step %3d  lr %.3g  loss %.4f" % (i, lr, loss))
        state = out[:S]
        best = min(best, smooth([p["loss"] for p in points])[-1])
        if _finished([p["loss"] for p in points], best, stop_factor):
            break
    return {"hyper": hyper, "replicas": 1, "points": points}


def _nice_ticks(lo, hi, n=5):
    span = hi - lo
    if span <= 0:
        return [lo]
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + 1e-12 * span:
        out.append(round(t, 12))
        t += step
    return out


def plot_svg(points, path, suggestion=None, title="learning-rate finder", beta=0.95):
    """Writes the loss (raw, faint; smoothed, bold) against the learning rate on a log axis as an SVG file."""
    pts = [p for p in points if math.isfinite(p["loss"]) and p["lr"] > 0]
    if len(pts) < 2:
        raise ValueError("plot_svg needs at least two finite points")
    lrs = [p["lr"] for p in pts]
    raw = [p["loss"] for p in pts]
    sm = smooth(raw, beta)
    W, H, L, R, T, B = 640, 400, 70, 20, 40, 50
    x0, x1 = math.log10(min(lrs)), math.log10(max(lrs))
    # clip the y range at 4x the smoothed minimum's neighbourhood so a final blow-up does not flatten the curve
    y0 = min(min(raw), min(sm))
    y1 = min(max(max(sm), sm[0]) * 1.05, max(raw))
    if y1 <= y0:
        y1 = y0 + 1.0

    def X(lr):
        return L + (math.log10(lr) - x0) / max(x1 - x0, 1e-12) * (W - L - R)

    def Y(v):
        return T + (1.0 - (min(max(v, y0), y1) - y0) / (y1 - y0)) * (H - T - B)

    def poly(vals, style):
        d = " ".join("%.1f,%.1f" % (X(a), Y(b)) for a, b in zip(lrs, vals))
        return '<polyline fill="none" %s points="%s"/>' % (style, d)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="12">' % (W, H, W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="15">%s</text>' % (L, _esc(title))]
    for e in range(math.floor(x0), math.ceil(x1) + 1):   # decades
        if x0 - 1e-9 <= e <= x1 + 1e-9:
            x = X(10.0 ** e)
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, T, x, H - B))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">1e%d</text>' % (x, H - B + 16, e))
    for v in _nice_ticks(y0, y1):
        y = Y(v)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, y, W - R, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (L - 6, y + 4, v))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (L, T, W - L - R, H - T - B))
    out.append(poly(raw, 'stroke="#9ab" stroke-width="1"'))
    out.append(poly(sm, 'stroke="#c33" stroke-width="2"'))
    if suggestion:
        x = X(suggestion)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#26a" stroke-dasharray="4,3"/>' % (x, T, x, H - B))
        out.append('<text x="%.1f" y="%d" fill="#26a">suggested %.3g</text>' % (x + 4, T + 14, suggestion))
    out.append('<text x="%d" y="%d" text-anchor="middle">learning rate (log scale)</text>' % ((L + W - R) // 2, H - 12))
    out.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">training loss</text>'
               % ((T + H - B) // 2, (T + H - B) // 2))
    out.append('<text x="%d" y="%d" fill="#9ab">raw</text><text x="%d" y="%d" fill="#c33">smoothed</text>'
               % (L + 8, H - B - 8, L + 40, H - B - 8))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return path


def _esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
