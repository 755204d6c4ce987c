"""A training process that dies right after it writes a checkpoint, for the resume tests: the loop's
``save_checkpoint`` writes, then the run raises, as a kill at that moment would leave it."""

from __future__ import annotations

import contextlib

import pytest


class SimulatedCrashError(Exception):
    pass


@contextlib.contextmanager
def crash_after_a_checkpoint(monkeypatch):
    """The run inside dies right after its first checkpoint (the test fails if it does not); afterwards
    checkpoints are written as usual."""
    import sentcl.training.steps as loop_module  # pre-training runs the same loop

    real_save = loop_module.save_checkpoint

    def save_then_crash(*args, **kwargs):
        real_save(*args, **kwargs)
        raise SimulatedCrashError

    monkeypatch.setattr(loop_module, "save_checkpoint", save_then_crash)
    try:
        with pytest.raises(SimulatedCrashError):
            yield
    finally:
        monkeypatch.setattr(loop_module, "save_checkpoint", real_save)
