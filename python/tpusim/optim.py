"""Optimizers written in plain jax (optax is not needed): sgd, momentum (heavy-ball or Nesterov), adam.

An optimizer is an object with
    name, config          what signature.json records about it ("optimizer": {...})
    hypers                {name: nominal value} of the scalars the host feeds every step (learning_rate,
                          and weight_decay when asked for); everything else is a constant in the program
    init(params)          {name: array} of its state (same order every call)
    roles                 {state name: "opt" | "counter"}
    update(params, grads, state, hypers) -> (new_params, new_state)   all dicts keyed by name

Formulas (PyTorch's, so users see the behaviour they know):
    sgd:       p -= lr * (g + wd * p)
    momentum:  g' = g + wd * p;  m = beta * m + g';  p -= lr * m            (torch.optim.SGD, dampening 0)
               nesterov: p -= lr * (g' + beta * m)
    adam:      t = count + 1;  g' = g + wd * p  (or AdamW: p *= 1 - lr * wd first)
               m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
               p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)          (torch.optim.Adam)
"""

import jax.numpy as jnp


def _decays(name, mask):
    return mask is None or mask(name)


class _Optimizer:
    def __init__(self, name, learning_rate, config, weight_decay, decay_mask, feed_weight_decay):
        self.name = name
        self.config = dict(config, weight_decay=float(weight_decay))
        self.hypers = {"learning_rate": float(learning_rate)}
        if feed_weight_decay:
            self.hypers["weight_decay"] = float(weight_decay)
        self._wd = float(weight_decay)
        self._mask = decay_mask
        self.roles = {}

    def _wd_value(self, hypers):
        return hypers["weight_decay"] if "weight_decay" in self.hypers else self._wd

    def _grad_with_decay(self, name, p, g, hypers):
        wd = self._wd_value(hypers)
        if (isinstance(wd, float) and wd == 0.0) or not _decays(name, self._mask):
            return g
        return g + wd * p

    def signature(self):
        return dict({"kind": self.name}, **self.config)


class _SGD(_Optimizer):
    def __init__(self, learning_rate, weight_decay, decay_mask, feed_weight_decay):
        super().__init__("sgd", learning_rate, {}, weight_decay, decay_mask, feed_weight_decay)

    def init(self, params):
        return {}

    def update(self, params, grads, state, hypers):
        lr = hypers["learning_rate"]
        return {k: p - lr * self._grad_with_decay(k, p, grads[k], hypers) for k, p in params.items()}, {}


class _Momentum(_Optimizer):
    def __init__(self, learning_rate, beta, nesterov, weight_decay, decay_mask, feed_weight_decay):
        super().__init__("momentum", learning_rate, {"beta": float(beta), "nesterov": bool(nesterov)},
                         weight_decay, decay_mask, feed_weight_decay)
        self.beta, self.nesterov = float(beta), bool(nesterov)

    def init(self, params):
        st = {"m/" + k: jnp.zeros_like(p) for k, p in params.items()}
        self.roles = {k: "opt" for k in st}
        return st

    def update(self, params, grads, state, hypers):
        lr = hypers["learning_rate"]
        new_p, new_s = {}, {}
        for k, p in params.items():
            g = self._grad_with_decay(k, p, grads[k], hypers)
            m = self.beta * state["m/" + k] + g
            new_s["m/" + k] = m
            new_p[k] = p - lr * ((g + self.beta * m) if self.nesterov else m)
        return new_p, new_s


class _Adam(_Optimizer):
    def __init__(self, learning_rate, b1, b2, eps, weight_decay, decoupled, decay_mask, feed_weight_decay):
        super().__init__("adamw" if decoupled else "adam",
                         learning_rate, {"b1": float(b1), "b2": float(b2), "eps": float(eps)},
                         weight_decay, decay_mask, feed_weight_decay)
        self.b1, self.b2, self.eps, self.decoupled = float(b1), float(b2), float(eps), decoupled

    def init(self, params):
        st = {"count": jnp.zeros((), jnp.int32)}
        for k, p in params.items():
            st["m/" + k] = jnp.zeros_like(p)
        for k, p in params.items():
            st["v/" + k] = jnp.zeros_like(p)
        self.roles = {k: ("counter" if k == "count" else "opt") for k in st}
        return st

    def update(self, params, grads, state, hypers):
        lr = hypers["learning_rate"]
        t = state["count"] + 1
        tf = t.astype(jnp.float32)
        c1 = 1.0 - self.b1 ** tf
        c2 = 1.0 - self.b2 ** tf
        new_p, new_s = {}, {"count": t}
        for k, p in params.items():
            if self.decoupled:
                g = grads[k]
                if _decays(k, self._mask):
                    p = p * (1.0 - lr * self._wd_value(hypers))
            else:
                g = self._grad_with_decay(k, p, grads[k], hypers)
            m = self.b1 * state["m/" + k] + (1.0 - self.b1) * g
            v = self.b2 * state["v/" + k] + (1.0 - self.b2) * g * g
            new_s["m/" + k], new_s["v/" + k] = m, v
            new_p[k] = p - lr * (m / c1) / (jnp.sqrt(v / c2) + self.eps)
        return new_p, {k: new_s[k] for k in state}


def sgd(learning_rate=0.1, weight_decay=0.0, decay_mask=None, feed_weight_decay=False):
    return _SGD(learning_rate, weight_decay, decay_mask, feed_weight_decay)


def momentum(learning_rate=0.1, beta=0.9, nesterov=False, weight_decay=0.0, decay_mask=None,
             feed_weight_decay=False):
    return _Momentum(learning_rate, beta, nesterov, weight_decay, decay_mask, feed_weight_decay)


def adam(learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, decoupled=False, decay_mask=None,
         feed_weight_decay=False):
    """Adam with bias correction; decoupled=True is AdamW (decay applied to the weights, not the gradient)."""
    return _Adam(learning_rate, b1, b2, eps, weight_decay, decoupled, decay_mask, feed_weight_decay)
