"""Tests of the python/tpusim package (jax + numpy; not part of `make test`, which must not need jax).

    PYTHONPATH=python python3 -m unittest discover -s python/tests -v

Tests that need the tpusim binary (build/*/tpusim or $TPUSIM) are skipped without it.
"""
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np                       # noqa: E402
import jax                               # noqa: E402
import jax.numpy as jnp                  # noqa: E402

import tpusim                            # noqa: E402
from tpusim import data, lr_find, nn, optim, schedules, simulate, tool, verify   # noqa: E402


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


class Schedules(unittest.TestCase):
    def test_one_cycle_matches_pytorch_formula(self):
        s = schedules.one_cycle(1.0, total_steps=100)
        self.assertAlmostEqual(schedules.value(s, 0), 0.04)              # max_lr / div_factor
        self.assertAlmostEqual(schedules.value(s, 29), 1.0)              # end of warm-up: pct_start*T - 1
        self.assertAlmostEqual(schedules.value(s, 99), 0.04 / 1e4)       # final
        self.assertAlmostEqual(schedules.value(s, 64), 4e-6 + (1 - 4e-6) / 2)   # half-way down
        self.assertAlmostEqual(schedules.value(s, 500), 0.04 / 1e4)      # clamped past the end
        lin = schedules.one_cycle(1.0, total_steps=100, anneal="linear")
        self.assertAlmostEqual(schedules.value(lin, 14.5), 0.04 + 0.96 * 0.5)
        self.assertAlmostEqual(schedules.value(schedules.one_cycle(2.0), 0, total_steps=10), 0.08)
        with self.assertRaises(ValueError):
            schedules.value(schedules.one_cycle(1.0), 0)                  # no total_steps anywhere

    def test_step_and_constant(self):
        s = schedules.step_decay(0.1, 10, 0.5)
        self.assertEqual([schedules.value(s, t) for t in (0, 9, 10, 25)], [0.1, 0.1, 0.05, 0.025])
        self.assertEqual(schedules.value(schedules.as_spec(0.3), 7), 0.3)
        self.assertEqual(schedules.nominal(schedules.one_cycle(0.5)), 0.5)

    def test_linear_scaling(self):
        hy = [{"name": "learning_rate", "schedule": schedules.constant(0.8)},
              {"name": "weight_decay", "schedule": schedules.constant(1e-4)}]
        sc = {"rule": "linear", "hypers": ["learning_rate"], "reference_replicas": 8}
        lr, wd = simulate.hyper_values(hy, 0, 10, 1, sc)
        self.assertAlmostEqual(float(lr), 0.1, places=6)
        self.assertAlmostEqual(float(wd), 1e-4, places=9)


class Optimizers(unittest.TestCase):
    def setUp(self):
        self.p = {"w": jnp.array([1.0, -2.0, 3.0]), "b": jnp.array([0.5])}
        self.g = {"w": jnp.array([0.1, 0.2, -0.3]), "b": jnp.array([1.0])}

    def test_adam_bias_correction(self):
        o = optim.adam(0.01)
        st = o.init(self.p)
        p1, st1 = o.update(self.p, self.g, st, {"learning_rate": 0.01})
        # first step: m_hat = g, v_hat = g^2, so each weight moves by lr * sign(g) (up to eps)
        np.testing.assert_allclose(p1["w"], np.array([1.0, -2.0, 3.0]) - 0.01 * np.sign([0.1, 0.2, -0.3]), rtol=1e-6)
        self.assertEqual(int(st1["count"]), 1)
        p2, st2 = o.update(p1, self.g, st1, {"learning_rate": 0.01})
        m = 0.9 * 0.1 * 0.1 + 0.1 * 0.1
        v = 0.999 * 0.001 * 0.01 + 0.001 * 0.01
        want = float(p1["w"][0]) - 0.01 * (m / (1 - 0.81)) / (math.sqrt(v / (1 - 0.999 ** 2)) + 1e-8)
        self.assertAlmostEqual(float(p2["w"][0]), want, places=6)

    def test_momentum_and_nesterov(self):
        for nesterov in (False, True):
            o = optim.momentum(0.1, 0.9, nesterov=nesterov)
            st = o.init(self.p)
            p1, st1 = o.update(self.p, self.g, st, {"learning_rate": 0.1})
            p2, _ = o.update(p1, self.g, st1, {"learning_rate": 0.1})
            g = 0.1
            m1, m2 = g, 0.9 * g + g
            d1 = (g + 0.9 * m1) if nesterov else m1
            d2 = (g + 0.9 * m2) if nesterov else m2
            self.assertAlmostEqual(float(p2["w"][0]), 1.0 - 0.1 * d1 - 0.1 * d2, places=6)

    def test_sgd_weight_decay_mask(self):
        o = optim.sgd(0.1, weight_decay=0.5, decay_mask=lambda n: n == "w")
        p1, _ = o.update(self.p, self.g, o.init(self.p), {"learning_rate": 0.1})
        self.assertAlmostEqual(float(p1["w"][0]), 1.0 - 0.1 * (0.1 + 0.5 * 1.0), places=6)
        self.assertAlmostEqual(float(p1["b"][0]), 0.5 - 0.1 * 1.0, places=6)


class Datasets(unittest.TestCase):
    def test_cached_round_trip_and_layout(self):
        arrays = {"x": np.arange(5 * 3 * 2, dtype=np.float32).reshape(5, 3, 2),
                  "label": np.array([1, 2, 3, 4, 5], np.int32), "flag": np.array([1, 0, 1, 1, 0], np.uint8)}
        with tempfile.TemporaryDirectory() as d:
            path = data.write_cached(os.path.join(d, "a.tpuds"), arrays)
            raw = _read(path, "rb")
            self.assertEqual(raw[:8], b"TPUSIMDS")
            self.assertEqual(int.from_bytes(raw[16:24], "little"), 5)          # num_examples
            self.assertEqual(int.from_bytes(raw[32:40], "little"), len(raw))   # file_size
            off = int.from_bytes(raw[64 + 112:64 + 120], "little")
            self.assertEqual(off % 4096, 0)
            np.testing.assert_array_equal(np.frombuffer(raw[off:off + 4 * 6], "<f4"), arrays["x"][0].ravel())
            back = data.read_cached(path)
            for k, a in arrays.items():
                np.testing.assert_array_equal(back[k], a)
                self.assertEqual(back[k].dtype, a.dtype)
            with open(path, "r+b") as f:        # a truncated file is refused
                f.truncate(len(raw) - 1)
            with self.assertRaises(ValueError):
                data.read_cached(path)

    def test_npz_shards(self):
        arrays = {"x": np.arange(10, dtype=np.int32), "y": np.arange(10, dtype=np.float32) * 2}
        with tempfile.TemporaryDirectory() as d:
            paths = data.write_npz_shards(d, arrays, num_shards=3)
            self.assertEqual(len(paths), 3)
            back = data.read_dataset(d)
            np.testing.assert_array_equal(back["x"], arrays["x"])
            with self.assertRaises(ValueError):
                data.write_npz_shards(d, {"x": np.zeros(3), "y": np.zeros(4)})

    def test_order_and_batches(self):
        self.assertEqual(list(data.epoch_order(10, 0, 0)), [6, 3, 2, 9, 8, 1, 4, 7, 0, 5])
        self.assertEqual(sorted(data.epoch_order(100, 3, 2)), list(range(100)))
        self.assertNotEqual(list(data.epoch_order(100, 3, 2)), list(data.epoch_order(100, 3, 3)))
        self.assertEqual(list(data.epoch_order(5, 0, 0, shuffle=False)), [0, 1, 2, 3, 4])
        it = data.train_batches(10, 2, 2, shuffle=False)
        steps = [next(it) for _ in range(3)]
        self.assertEqual([s[1] for s in steps], [0, 0, 1])                     # 2 steps per epoch, 2 dropped
        self.assertEqual([list(i) for i in steps[1][2]], [[4, 5], [6, 7]])
        ev = list(data.eval_batches(7, 2, 2))
        self.assertEqual([[int(v) for _, v in b] for b in ev], [[2, 2], [2, 1]])


def _tiny(opt=None, stats=False):
    key = jax.random.PRNGKey(0)
    params = {"w": jax.random.normal(key, (4, 3)) * 0.5, "b": jnp.zeros((3,))}

    def loss(p, *args):
        batch = args[-1]
        logits = nn.dense(batch["x"].astype(jnp.float32), p["w"], p["b"])
        l = jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits), batch["y"][:, None], 1))
        if stats:
            s = args[0]
            return l, {}, {"mu": 0.9 * s["mu"] + 0.1 * jnp.mean(batch["x"].astype(jnp.float32), 0)}
        return l

    def ev(p, *args):
        batch = args[-1]
        logits = nn.dense(batch["x"].astype(jnp.float32), p["w"], p["b"])
        ok = (jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32) * batch["mask"]
        return {"correct": jnp.sum(ok), "count": jnp.sum(batch["mask"])}
    return tpusim.TrainStep(loss, params, {"x": tpusim.batch_input((4,), "f32"), "y": tpusim.batch_input((), "s32")},
                            opt or optim.adam(0.05), 4, eval_fn=ev, stats={"mu": jnp.zeros((4,))} if stats else None,
                            reference_replicas=2)


class Export(unittest.TestCase):
    def test_signature_layout_and_alias(self):
        with tempfile.TemporaryDirectory() as d:
            ts = _tiny(stats=True)
            tpusim.export_train_step(d, ts.loss_fn, ts._params_like, {"x": tpusim.batch_input((4,), "f32"),
                                     "y": tpusim.batch_input((), "s32")}, optim.adam(0.05), 4, eval_fn=ts.eval_fn,
                                     stats={"mu": jnp.zeros((4,))})
            sig = tpusim.load_signature(d)
            roles = [e["role"] for e in sig["state"]]
            self.assertEqual(roles[:3], ["param", "param", "stat"])
            self.assertIn("counter", roles)
            self.assertEqual([m["name"] for m in sig["metrics"]], ["loss"])
            self.assertEqual(sig["eval"]["batch"][-1]["source"], "@mask")
            self.assertEqual(sig["eval"]["report"], [{"name": "correct", "numerator": "correct", "denominator": "count"}])
            step = _read(os.path.join(d, "step.hlo"))
            self.assertIn("input_output_alias={ {0}: (0, {}, may-alias)", step)
            self.assertNotIn("input_output_alias", _read(os.path.join(d, "grad.hlo")).splitlines()[0])
            # every parameter is kept (keep_unused), even state that grad does not read
            n_grad = _read(os.path.join(d, "grad.hlo")).count(" parameter(")
            self.assertGreaterEqual(n_grad, len(sig["state"]) + 2)
            init = tpusim.load_init_state(d)
            self.assertEqual([list(a.shape) for a in init], [e["shape"] for e in sig["state"]])

    def test_step_equals_grad_then_apply(self):
        ts = _tiny(stats=True)
        rng = np.random.default_rng(0)
        batch = [rng.normal(size=(4, 4)).astype(np.float32), np.array([0, 1, 2, 1], np.int32)]
        state = ts.init_state()
        hy = ts.hyper_defaults()
        step = ts.jitted("step")(*state, *batch, *hy)
        g = ts.jitted("grad")(*state, *batch)
        st = list(state)
        st[ts.np_:ts.np_ + ts.ns_] = g[ts.np_:ts.np_ + ts.ns_]
        new = ts.jitted("apply")(*st, *g[:ts.np_], *hy)
        for a, b in zip(new, step[:ts.S]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)

    def test_tpu_numerics_rounds_products(self):
        x = jnp.array([[1.0 + 2 ** -12]])
        w = jnp.array([[1.0]])
        self.assertEqual(float(nn.dense(x, w)[0, 0]), 1.0 + 2 ** -12)
        with nn.tpu_numerics():
            self.assertEqual(float(jax.jit(nn.dense)(x, w)[0, 0]), 1.0)
            g = jax.grad(lambda w: jnp.sum(nn.dense(x, w)))(w)      # backward product rounds too
            self.assertEqual(float(g[0, 0]), 1.0)

    def test_simulated_replicas_average_gradients(self):
        """Two replicas on halves of a batch == one replica on the whole batch (mean loss, same lr)."""
        ts = _tiny(opt=optim.sgd(0.1))
        ts.lr_scaling = {"rule": "none", "hypers": [], "reference_replicas": 1}
        rng = np.random.default_rng(1)
        x = rng.normal(size=(8, 4)).astype(np.float32)
        y = rng.integers(0, 3, 8).astype(np.int32)
        state2, _ = simulate.Simulator(ts, 2, tpu=False).train({"x": x, "y": y}, 1, log=None)
        g = ts.jitted("grad", tpu=False)
        s0 = ts.init_state()
        order = data.epoch_order(8, 0, 0)
        ga = g(*s0, x[order[:4]], y[order[:4]])
        gb = g(*s0, x[order[4:]], y[order[4:]])
        want = np.asarray(s0[0]) - 0.1 * (np.asarray(ga[0]) + np.asarray(gb[0])) / 2
        np.testing.assert_allclose(np.asarray(state2[0]), want, rtol=1e-5, atol=1e-7)


class LrFind(unittest.TestCase):
    def test_suggest_and_svg(self):
        lrs = [lr_find.lr_at(i, 60, 1e-5, 1.0) for i in range(60)]
        self.assertAlmostEqual(lrs[0], 1e-5)
        self.assertAlmostEqual(lrs[-1], 1.0)
        # a loss that falls fastest around lr = 1e-2 and blows up after 0.3
        loss = [2.0 - 1.5 / (1 + math.exp(-3 * (math.log10(lr) + 2))) + (5 * (lr - 0.3) if lr > 0.3 else 0) for lr in lrs]
        pts = [{"step": i, "lr": a, "loss": b} for i, (a, b) in enumerate(zip(lrs, loss))]
        s = lr_find.suggest(pts, beta=0.0)
        self.assertTrue(3e-3 < s < 3e-2, s)
        with tempfile.TemporaryDirectory() as d:
            path = lr_find.plot_svg(pts, os.path.join(d, "p.svg"), s, title="a < b")
            text = _read(path)
            self.assertTrue(text.startswith("<svg") and "polyline" in text and "a &lt; b" in text)


@unittest.skipUnless(tool.find_tpusim(), "no tpusim binary")
class WithTpusim(unittest.TestCase):
    def test_export_verify_and_compare(self):
        ts = _tiny()
        with tempfile.TemporaryDirectory() as d:
            tpusim.export_train_step(d, ts.loss_fn, ts._params_like, {"x": tpusim.batch_input((4,), "f32"),
                                     "y": tpusim.batch_input((), "s32")}, optim.adam(0.05), 4, eval_fn=ts.eval_fn)
            self.assertTrue(verify.verify_step_dir(d, log=lambda *_: None))
            batch = [np.ones((4, 4), np.float32), np.array([0, 1, 2, 0], np.int32)]
            for kind in ("grad", "step"):
                worst = max(diff for _, diff in verify.compare_step(ts, d, batch, kind=kind))
                self.assertLess(worst, 1e-5)


if __name__ == "__main__":
    unittest.main()
