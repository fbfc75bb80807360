"""A TPU on the network: tpusim serve, names, the plugin's remote mode, sharing and limits, security, faults."""
import os
import random
import signal
import subprocess

import pytest

from conftest import BIN, PY, listed, run_jax, start_jax, tpusim, wait_until
from tpusim import network

SMALL = """
    import jax, jax.numpy as jnp
    f = jax.jit(lambda a: (a * 2 + 1).sum(axis=0))
    print("result", f(jnp.arange(12.0).reshape(3, 4)).tolist())
"""

# holds an array on device 0 until told to go (a line on stdin), printing "held" once it does
HOLDER = """
    import sys, numpy as np, jax
    x = jax.device_put(np.ones(160 * 1024, np.float32), jax.devices()[0])
    x.block_until_ready()
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_serve_by_name_resolve_list_and_a_jax_script(serve):
    s = serve("--name", "t-one")
    assert tpusim("resolve", "t-one").stdout.strip() == s.url
    assert network.resolve("t-one") == s.url
    t = listed("t-one")
    assert t["state"] == "READY" and t["slice"] == "v3-8" and t["clients"] == 0
    r = run_jax(SMALL, TPU_NAME="t-one")
    assert r.returncode == 0, r.stderr
    assert "result [27.0, 33.0, 39.0, 45.0]" in r.stdout
    assert f"Found TPU system: v3-8 (simulated) at {s.url} (TPU t-one), 8 TPU v3 devices" in r.stderr
    # a client holding an array shows in the list (from the heartbeat), and leaves nothing behind
    h = start_jax(HOLDER, TPU_GRPC_URL=s.url, TPUSIM_CLIENT_NAME="holder.py")
    try:
        assert h.stdout.readline().strip() == "held", h.stderr.read()
        # the heartbeat may have seen the session before the array arrived: wait for one that sees both
        t = wait_until(lambda: (lambda e: e if e["clients"] == 1 and e["hbm_in_use"] == 640 * 1024 else None)(listed("t-one")))
        assert t, listed("t-one")
        mem = tpusim("list", "t-one", "--memory").stdout   # the server's own report
        assert "1 session" in mem and "holder.py" in mem and "640.00K" in mem, mem
    finally:
        h.communicate("go\n", timeout=120)
    assert h.returncode == 0
    assert wait_until(lambda: listed("t-one")["clients"] == 0 and listed("t-one")["hbm_in_use"] == 0)


def test_a_dead_server_is_unhealthy_and_its_name_can_be_taken(serve):
    s = serve("--name", "t-dead")
    s.kill()
    assert listed("t-dead")["state"] == "UNHEALTHY"
    r = tpusim("resolve", "t-dead", check=False)
    assert r.returncode == 1 and "does not answer" in r.stderr and "UNHEALTHY" in r.stderr
    with pytest.raises(network.TpuUnavailable):
        network.resolve("t-dead")
    with pytest.raises(network.TpuNotFound):
        network.resolve("no-such-tpu")
    r = run_jax(SMALL, TPU_NAME="t-dead")
    assert r.returncode != 0 and "TPU_NAME" in r.stderr and "does not answer" in r.stderr, r.stderr
    assert "Traceback" in r.stderr and "Segmentation" not in r.stderr
    s2 = serve("--name", "t-dead")
    assert "replacing a stale entry" in s2.log.read_text()
    assert tpusim("resolve", "t-dead").stdout.strip() == s2.url


def test_one_name_one_server_the_port_in_use_and_loopback_by_default(serve):
    s = serve("--name", "t-mine")
    rc, err = serve("--name", "t-mine", fails=True)
    assert rc == 1 and "held by the TPU at " + s.url in err
    rc, err = serve("--port", str(s.port), fails=True)
    assert rc == 1 and "in use" in err
    rc, err = serve("--bind", "0.0.0.0", fails=True)
    assert rc == 1 and "needs a token" in err
    rc, err = serve("--name", "bad name!", fails=True)
    assert rc == 2 and "--name" in err
    assert tpusim("resolve", "t-mine").stdout.strip() == s.url


def test_token_and_tls(serve, tmp_path):
    s = serve("--token", "tok-123456789")
    r = run_jax(SMALL, TPU_GRPC_URL=s.url)
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr and "TPUSIM_TOKEN" in r.stderr, r.stderr
    r = run_jax(SMALL, TPU_GRPC_URL=s.url, TPUSIM_TOKEN="wrong-token-0")
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr
    r = run_jax(SMALL, TPU_GRPC_URL=s.url, TPUSIM_TOKEN="tok-123456789")
    assert r.returncode == 0, r.stderr
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=120)
    t = serve("--tls-cert", str(cert), "--tls-key", str(key))
    assert t.url.startswith("grpcs://")
    r = run_jax(SMALL, TPU_GRPC_URL=t.url, TPUSIM_TLS_CA=cert)
    assert r.returncode == 0, r.stderr
    r = run_jax(SMALL, TPU_GRPC_URL=t.url)   # the system's roots do not trust a self-signed certificate
    assert r.returncode != 0 and "UNAVAILABLE" in r.stderr
    rc, err = serve("--tls-cert", str(cert), fails=True)
    assert rc == 1 and "go together" in err


def test_hbm_is_shared_across_sessions_and_freed_when_a_client_is_killed(serve, tmp_path):
    chip = tmp_path / "tiny.json"   # a v5e with 1 MiB of HBM
    chip.write_text('{"name": "tiny", "base": "v5e", "hbm_gib": 0.0009765625, "hbm_reserved_mib": 0}\n')
    s = serve("--slice", str(chip))
    alice = start_jax(HOLDER, TPU_GRPC_URL=s.url, TPUSIM_CLIENT_NAME="alice's train.py")
    try:
        assert alice.stdout.readline().strip() == "held", alice.stderr.read()
        r = run_jax(HOLDER, TPU_GRPC_URL=s.url, TPUSIM_CLIENT_NAME="bob")
        assert r.returncode != 0 and "RESOURCE_EXHAUSTED" in r.stderr and "alice's train.py" in r.stderr, r.stderr
    finally:
        alice.kill()   # killed, not closed: the server sees its connection break
        alice.wait()
    # bob now fits (the session of the killed client ends asynchronously: retried, bounded)
    def bob_fits():
        b = start_jax(HOLDER, TPU_GRPC_URL=s.url, TPUSIM_CLIENT_NAME="bob")
        ok = b.stdout.readline().strip() == "held"
        b.communicate("go\n", timeout=120)
        return ok
    assert wait_until(bob_fits, tries=20, every=0.5)


# uploads and downloads arrays of several chunks in a loop until killed
TRANSFERS = """
    import numpy as np, jax
    d = jax.devices()[0]
    x = np.random.default_rng(0).standard_normal(6 * 1024 * 1024).astype(np.float32)   # 24 MiB: 6 chunks
    print("started", flush=True)
    for i in range(1000):
        y = jax.device_put(x, d)
        assert float(np.asarray(y)[123]) == float(x[123])
        y.delete()
"""

LONG_RUN = """
    import jax, jax.numpy as jnp
    def body(i, a):
        return jnp.tanh(a @ a) * 0.5
    f = jax.jit(lambda a: jax.lax.fori_loop(0, 400000, body, a))   # minutes: the server dies first
    a = jnp.ones((256, 256)) * 0.01
    a.block_until_ready()
    print("running", flush=True)
    f(a).block_until_ready()
    print("finished", flush=True)
"""


def test_client_killed_mid_transfer_and_server_killed_mid_execution(serve):
    s = serve("--name", "t-faults")
    c = start_jax(TRANSFERS, TPU_NAME="t-faults")
    assert c.stdout.readline().strip() == "started", c.stderr.read()
    wait_until(lambda: listed("t-faults")["hbm_in_use"] > 0, tries=50, every=0.05)   # a transfer under way
    c.kill()
    c.wait()
    assert wait_until(lambda: listed("t-faults")["clients"] == 0 and listed("t-faults")["hbm_in_use"] == 0)
    assert run_jax(SMALL, TPU_NAME="t-faults").returncode == 0   # still serving
    # the server dies during a long execution: the client gets UNAVAILABLE as a Python error, no hang
    c = start_jax(LONG_RUN, TPU_NAME="t-faults")
    assert c.stdout.readline().strip() == "running", c.stderr.read()
    assert wait_until(lambda: listed("t-faults")["state"] == "BUSY", tries=100, every=0.1)
    s.kill()
    out, err = c.communicate(timeout=300)
    assert c.returncode != 0 and "finished" not in out
    assert "UNAVAILABLE" in err and s.url in err and "JaxRuntimeError" in err, err


def test_clients_killed_at_random_moments_leave_nothing_behind(serve):
    rng = random.Random(14)
    s = serve("--name", "t-random", "--threads", "3")
    for round_ in range(2):
        clients = [start_jax(TRANSFERS, TPU_NAME="t-random") for _ in range(3)]
        for c in clients:
            assert c.stdout.readline().strip() == "started", c.stderr.read()
        for c in clients:
            wait_until(lambda: False, tries=rng.randint(0, 8), every=0.1)   # a random moment
            c.send_signal(rng.choice([signal.SIGKILL, signal.SIGTERM]))
            c.wait()
        assert wait_until(lambda: listed("t-random")["clients"] == 0 and listed("t-random")["hbm_in_use"] == 0), round_
    assert run_jax(SMALL, TPU_NAME="t-random").returncode == 0
    assert s.proc.poll() is None


JOB = """
import os, numpy as np, jax, jax.numpy as jnp
x = np.load(os.path.join(os.environ["TPUSIM_DATA_DIR"], "x.npy"))
w = jnp.zeros(x.shape[1])
step = jax.jit(lambda w: w - 0.1 * (x.T @ (x @ w - 1.0)) / len(x))
for i in range(20):
    w = step(w)
loss = float(jnp.mean((x @ w - 1.0) ** 2))
print("loss", round(loss, 4))
np.save(os.path.join(os.environ["MODEL_DIR"], "weights.npy"), np.asarray(w))
os.makedirs(os.path.join(os.environ["MODEL_DIR"], "ckpt"), exist_ok=True)
open(os.path.join(os.environ["MODEL_DIR"], "ckpt", "step.txt"), "w").write("20\\n")
"""


def test_a_job_end_to_end(serve, tmp_path):
    serve("--name", "t-jobs")
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir(), data.mkdir()
    (work / "main.py").write_text(JOB)
    import numpy as np
    np.save(data / "x.npy", np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32))
    r = tpusim("jobs", "create", "--tpu", "t-jobs", "--command", f"{PY} main.py", "--workdir", str(work), "--data",
               str(data), "--wait")
    job = r.stdout.split()[0]
    assert "loss" in r.stdout
    lst = tpusim("jobs", "list").stdout
    assert any(line.split()[:4] == [job, "t-jobs", "SUCCEEDED", "0"] for line in lst.splitlines()), lst
    logs = tpusim("jobs", "logs", job).stdout
    assert "Found TPU system: v3-8 (simulated) at grpc://127.0.0.1:" in logs and "(TPU t-jobs)" in logs and "loss" in logs
    arts = tpusim("jobs", "artifacts", job).stdout.splitlines()
    assert arts[0].endswith(f"jobs/{job}/artifacts")
    assert any(line.endswith(" weights.npy") for line in arts) and any(line.endswith(" ckpt/step.txt") for line in arts)
    assert np.load(os.path.join(arts[0], "weights.npy")).shape == (8,)
    # a failing job, a stopped one, an unknown TPU
    r = tpusim("jobs", "create", "--tpu", "t-jobs", "--command", "echo oops >&2; exit 3", "--wait", check=False)
    assert r.returncode == 3 and "oops" in r.stdout
    r = tpusim("jobs", "create", "--tpu", "t-jobs", "--command", "echo sleeping; sleep 300")
    sleeper = r.stdout.split()[0]
    assert wait_until(lambda: "sleeping" in tpusim("jobs", "logs", sleeper).stdout)
    assert "stopped" in tpusim("jobs", "stop", sleeper).stdout
    states = {line.split()[0]: line.split()[2] for line in tpusim("jobs", "list").stdout.splitlines()[1:]}
    assert states[sleeper] == "STOPPED" and list(states.values()).count("FAILED") == 1
    r = tpusim("jobs", "create", "--tpu", "nope", "--command", "true", check=False)
    assert r.returncode == 1 and "no TPU named 'nope'" in r.stderr
    r = tpusim("jobs", "logs", "999", check=False)
    assert r.returncode == 1 and "no job 999" in r.stderr
