"""tpusim's Python side: export JAX train steps as STEP_DIRs (docs/step_dir.md), write datasets in the formats
`tpusim train` reads, simulate data-parallel training with TPU numerics in jax, and find a learning rate.

Needs only jax and numpy. Use it from the repository with `PYTHONPATH=python`.
"""

from . import data, nn, optim, schedules, tool
from .export import TrainStep, batch_input, export_train_step, load_init_state, load_signature

__all__ = ["data", "nn", "optim", "schedules", "tool", "TrainStep", "batch_input", "export_train_step",
           "load_init_state", "load_signature"]
