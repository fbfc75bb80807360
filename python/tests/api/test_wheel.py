"""`pip install .` ships both libraries: the wheel holds tpusim/libtpusim.so (the Python API) and
tpusim/plugin/libtpusim_pjrt.so (jax's plugin), and the API, installed from it, runs a program with the copy it
was installed with."""
import glob
import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_wheel_ships_the_library_and_the_api_uses_it(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-w", str(tmp_path / "dist"), ROOT],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = glob.glob(str(tmp_path / "dist" / "tpusim-*.whl"))
    names = zipfile.ZipFile(whl).namelist()
    assert "tpusim/libtpusim.so" in names and "tpusim/plugin/libtpusim_pjrt.so" in names
    assert "tpusim/api.py" in names and "tpusim/py.typed" in names and "jax_plugins/tpusim/__init__.py" in names
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                        "--target", str(tmp_path / "site"), whl], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("TPUSIM_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tmp_path / "site")
    code = ("import numpy as np, tpusim\n"
            "print(tpusim.library_path())\n"
            "print(tpusim.run('HloModule m\\nENTRY e {\\n  a = f32[2] parameter(0)\\n  ROOT b = f32[2] add(a, a)\\n}\\n',"
            " np.array([1, 2], np.float32))[0].tolist())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    lib, out = r.stdout.split("\n")[:2]
    assert lib == str(tmp_path / "site" / "tpusim" / "libtpusim.so")
    assert out == "[2.0, 4.0]"
