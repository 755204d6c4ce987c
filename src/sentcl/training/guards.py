"""What stops a run instead of letting it save a broken model: non-finite weights or metrics.

A step can leave finite loss and non-finite weights (a huge learning rate: the update overflows), and an
evaluation of such a model gives NaN. Nothing non-finite is ever saved as a model or checkpoint, and
nothing NaN becomes "the best": the run stops with one line, and what was saved before stays as it was.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import nn

from sentcl.embedder import EmbeddingError
from sentcl.errors import UserError


class TrainingError(UserError, RuntimeError):
    """A run that cannot go on; the message is one line for the user."""


UNTOUCHED = "the last saved model and checkpoint are untouched"


def require_finite_weights(module: nn.Module, step: int) -> None:
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise TrainingError(
                f"step {step}: {name} holds NaN or infinite values (the updates diverged: lower "
                f"training.learning_rate); nothing is saved, {UNTOUCHED}"
            )


def require_finite_metric(name: str, value: float, step: int) -> None:
    if not math.isfinite(value):
        raise TrainingError(
            f"step {step}: the evaluation gave {name} = {value} (a model that encodes to NaN or to one "
            f"constant vector); nothing is saved, {UNTOUCHED}"
        )


@contextlib.contextmanager
def finite_evaluation(step: int) -> Iterator[None]:
    """An evaluation whose model encodes to NaN or infinity (encode refuses such vectors) stops the run
    with the same one line as a NaN metric."""
    try:
        yield
    except EmbeddingError:
        raise TrainingError(
            f"step {step}: the model encodes to NaN or infinite values (the updates diverged: lower "
            f"training.learning_rate); nothing is saved, {UNTOUCHED}"
        ) from None
