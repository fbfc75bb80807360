"""A slice spread over processes, one per simulated host (docs/pods.md): unchanged jax code (python/tests/dist/
train_dp.py: data-parallel training and a psum, jax.distributed.initialize()) under mpirun gives every process
the slice's devices and its own local ones, and the same parameters and all-reduce results bit for bit as one
process simulating the whole slice. Processes that disagree, process counts that do not split the hosts and
processes started without mpirun are refused with clear errors. Every mpirun carries a tag in its environment;
no process with it may outlive this module.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "python", "tests", "dist", "train_dp.py")
TAG = os.environ.get("TPUSIM_MPI_TEST_TAG", "tpusim-mpi-test") + f":pytest{os.getpid()}"
# what the ranks need from this environment (mpirun forwards the variables named with -x)
FORWARD = ("JAX_PLATFORMS", "PYTHONPATH", "TPUSIM_PJRT_LIBRARY", "TPUSIM_QUIET", "TPUSIM_SLICE", "TPUSIM_MPI_TEST_TAG",
           "TPUSIM_DIST_TIMEOUT")

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is missing (scripts/deps.sh installs it)")


def _env(slice_name):
    env = dict(os.environ, JAX_PLATFORMS="tpusim", TPUSIM_SLICE=slice_name, TPUSIM_QUIET="1", TPUSIM_MPI_TEST_TAG=TAG,
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("XLA_FLAGS", None)
    env.pop("TPU_NAME", None), env.pop("TPU_GRPC_URL", None)   # the ranks simulate the slice themselves
    return env


def _mpirun(np_, args, env, extra=()):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_)]
    for k in FORWARD:
        if k in env:
            cmd += ["-x", k]
    cmd += list(extra) + [sys.executable] + args
    # a hang guard, not a timing check: a hung job fails the test
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _strays():
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"TPUSIM_MPI_TEST_TAG={TAG}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.fixture(scope="module", autouse=True)
def no_strays():
    yield
    left = _strays()
    for pid in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert not left, f"MPI processes outlived their test: {left}"


def _load(prefix, p):
    with np.load(f"{prefix}.p{p}.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("slice_name,np_", [("v4-16", 2), ("v3-32", 4)])
def test_processes_equal_one_process(tmp_path, slice_name, np_):
    env = _env(slice_name)
    one = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "one")], env=env, capture_output=True, text=True,
                         timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    r = _mpirun(np_, [SCRIPT, str(tmp_path / "many"), "--distributed"], env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    ref = _load(tmp_path / "one", 0)
    n = json.loads(str(ref["info"]))["devices"]
    per = n // np_
    for p in range(np_):
        got = _load(tmp_path / "many", p)
        info = json.loads(str(got["info"]))
        assert info["process_index"] == p and info["process_count"] == np_ and info["devices"] == n
        assert info["local_devices"] == list(range(p * per, (p + 1) * per))
        assert info["device_processes"] == [d // per for d in range(n)]
        for k in ("w1", "b1", "w2", "losses"):
            assert got[k].tobytes() == ref[k].tobytes(), f"process {p}: {k} differs from the one-process run"
        psums = [k for k in got if k.startswith("psum_dev")]
        assert len(psums) == per
        for k in psums:
            assert got[k].tobytes() == ref[k].tobytes(), f"process {p}: {k} differs from the one-process run"


def test_processes_disagree_about_the_slice(tmp_path):
    env = _env("v4-16")
    r = _mpirun(1, [SCRIPT, str(tmp_path / "x"), "--distributed"], env,
                extra=["-x", "TPUSIM_SLICE=v4-16", sys.executable, SCRIPT, str(tmp_path / "x"), "--distributed", ":",
                       "-np", "1", "-x", "TPUSIM_SLICE=v4-32"])
    assert r.returncode != 0
    assert "TPUSIM_SLICE must be the same in every process" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def test_process_count_must_split_the_hosts(tmp_path):
    r = _mpirun(3, [SCRIPT, str(tmp_path / "x"), "--distributed"], _env("v3-32"))
    assert r.returncode != 0
    assert "v3-32 has 4 hosts; run it on a number of processes that divides 4 (mpirun -np 4: one per host), not 3" in \
        r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def test_mpirun_without_jax_distributed_is_refused(tmp_path):
    r = _mpirun(2, [SCRIPT, str(tmp_path / "x")], _env("v4-16"))
    assert r.returncode != 0
    assert "but jax.distributed is not initialized: call jax.distributed.initialize() before using jax" in \
        r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def test_distributed_without_mpirun_is_refused(tmp_path):
    """jax.distributed with two processes that mpirun did not start: tpusim says how to start them."""
    code = ("import jax; jax.distributed.initialize(coordinator_address='127.0.0.1:%d', num_processes=2, process_id=%d)\n"
            "try:\n    jax.devices()\nexcept Exception as e:\n    print('ERROR', e)\n")
    port = 20000 + os.getpid() % 20000
    env = _env("v4-16")
    for k in [k for k in env if k.startswith(("OMPI_", "PMI", "PMIX"))]:
        env.pop(k)
    procs = [subprocess.Popen([sys.executable, "-c", code % (port, i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for o in outs:
        assert "start the processes with mpirun (mpirun -np 2 python script.py)" in o, o[-3000:]
