"""Builds the PJRT plugin with make and ships it inside the package (tpusim/plugin/libtpusim_pjrt.so).
Everything else is in pyproject.toml."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithPlugin(build_py):
    def run(self):
        subprocess.check_call(["make", "-C", ROOT, "deps", "plugin"])
        super().run()
        dest = os.path.join(self.build_lib, "tpusim", "plugin")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "build", "release", "libtpusim_pjrt.so"), dest)


setup(cmdclass={"build_py": BuildWithPlugin})
