"""PyTorch/XLA's device-plugin entry point (group torch_xla.plugins): torch_xla loads the same PJRT library
that jax does. torch_xla hands the plugin binary HloModuleProtos, which tpusim reads in C.

    PJRT_DEVICE=TPUSIM python train.py                 # through this entry point
    PJRT_DEVICE=LIBRARY PJRT_LIBRARY_PATH=$(python -c 'import tpusim.plugin as p; print(p.library_path())')

Not exercised by the test suite: torch with torch_xla is about 1 GB from PyPI (see docs/pjrt.md).
"""
from torch_xla.experimental import plugins

from . import library_path


class TpusimPlugin(plugins.DevicePlugin):
    def library_path(self) -> str:
        return library_path()

    def physical_chip_count(self) -> int:
        return 1
