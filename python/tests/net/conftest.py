"""The network TPU's end-to-end suite (make test-net): `tpusim serve` processes on free loopback ports under a
fresh TPUSIM_HOME per test, jax scripts reaching them through the plugin's remote mode (TPU_NAME or
TPU_GRPC_URL), the registry, jobs, and faults. Every server a test starts is stopped when the test ends
(and stops by itself after 10 minutes should the test runner die)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

BIN = os.path.abspath(os.environ.get("TPUSIM_BIN", "build/release/tpusim"))
PY = sys.executable
# jobs run their command in another directory: the paths the plugin is found by must be absolute
for _k in ("PYTHONPATH", "TPUSIM_PJRT_LIBRARY"):
    if os.environ.get(_k):
        os.environ[_k] = os.pathsep.join(os.path.abspath(p) for p in os.environ[_k].split(os.pathsep))


class Server:
    def __init__(self, proc, url, log):
        self.proc, self.url, self.log = proc, url, log
        self.port = int(url.rsplit(":", 1)[1])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "tpusim-home"
    h.mkdir()
    monkeypatch.setenv("TPUSIM_HOME", str(h))
    for k in ("TPU_NAME", "TPU_GRPC_URL", "TPUSIM_TOKEN", "TPUSIM_TLS_CA"):
        monkeypatch.delenv(k, raising=False)
    return h


@pytest.fixture
def serve(home, tmp_path):
    """serve(*args) starts `tpusim serve --port 0 ARGS` and returns a Server once it prints its URL;
    serve(*args, fails=True) returns (exit code, stderr) of one that must refuse to start."""
    started = []

    def start(*args, fails=False, env=None):
        log = tmp_path / f"serve-{len(started)}.log"
        with open(log, "w") as lf:
            p = subprocess.Popen([BIN, "serve", "--port", "0", "--max-seconds", "600", *args], stdout=subprocess.PIPE,
                                 stderr=lf, text=True, env=env or os.environ.copy())
        if fails:
            p.stdout.close()
            rc = p.wait(timeout=120)
            return rc, log.read_text()
        url = p.stdout.readline().strip()   # the first line, or "" if it exited
        s = Server(p, url, log)
        started.append(s)
        assert url.startswith("grpc"), f"tpusim serve did not start: {log.read_text()}"
        return s

    yield start
    for s in started:
        s.stop()


def tpusim(*args, check=True, timeout=300):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"tpusim {' '.join(args)} -> {r.returncode}: {r.stderr}"
    return r


def listed(name):
    """The `tpusim list --json` entry of TPU name."""
    for t in json.loads(tpusim("list", "--json").stdout):
        if t["name"] == name:
            return t
    return None


def wait_until(pred, tries=150, every=0.2):
    """Polls pred (bounded in count): the server's heartbeat (2 s) and session ends are asynchronous."""
    for _ in range(tries):
        v = pred()
        if v:
            return v
        time.sleep(every)
    return pred()


def jax_env(**extra):
    env = os.environ.copy()
    env.setdefault("JAX_PLATFORMS", "tpusim")
    env.pop("TPUSIM_QUIET", None)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_jax(script, timeout=300, **env):
    """Runs a jax script in a fresh process (the hang guard is only that: tests assert no durations)."""
    return subprocess.run([PY, "-c", textwrap.dedent(script)], env=jax_env(**env), capture_output=True, text=True,
                          timeout=timeout)


def start_jax(script, **env):
    return subprocess.Popen([PY, "-u", "-c", textwrap.dedent(script)], env=jax_env(**env), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
