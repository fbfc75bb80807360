"""jax's plugin discovery imports this module and calls initialize(): see tpusim.plugin."""

from tpusim.plugin import initialize  # noqa: F401
