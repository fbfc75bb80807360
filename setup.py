"""Builds the PJRT plugin and the library with make and ships them inside the package
(tpusim/plugin/libtpusim_pjrt.so for jax, tpusim/libtpusim.so for the Python API).
Everything else is in pyproject.toml."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithPlugin(build_py):
    def run(self):
        subprocess.check_call(["make", "-C", ROOT, "deps", "plugin", "lib"])
        super().run()
        dest = os.path.join(self.build_lib, "tpusim", "plugin")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "build", "release", "libtpusim_pjrt.so"), dest)
        shutil.copy2(os.path.join(ROOT, "build", "release", "libtpusim.so"), os.path.join(self.build_lib, "tpusim"))


setup(cmdclass={"build_py": BuildWithPlugin})
