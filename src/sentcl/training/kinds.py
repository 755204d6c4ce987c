"""The run kinds, one table: a recipe of each kind is loaded, changed and run the same way.

    kind       recipe sections                         run          what it keeps
    train      model, data, objective, training        loop.train   the best evaluated model
    pretrain   model, data, masking, training          pretrain     the final masked-LM model

``load_run_recipe(kind, path, overrides)`` reads and checks a YAML recipe (``key=value`` overrides applied
first), ``replace_training(config, **changes)`` changes its ``training:`` section (both kinds have one, with
the lifecycle keys of ``RunConfig``: output_dir, overwrite_output_dir, resume, eval_data_dir …),
``run(kind, config)`` runs it and ``summary(kind, result)`` is the two lines a person reads after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentcl.training.contrastive import summarize, train
from sentcl.training.pretrain import load_pretrain_recipe, pretrain, summarize_pretraining
from sentcl.training.recipe import load_recipe, replace_training


@dataclass(frozen=True)
class RunKind:
    load: Callable[[str | Path, list[str] | None], Any]
    run: Callable[[Any], Any]
    summarize: Callable[[Any], str]


RUN_KINDS = {
    "train": RunKind(load_recipe, train, summarize),
    "pretrain": RunKind(load_pretrain_recipe, pretrain, summarize_pretraining),
}


def load_run_recipe(kind: str, path: str | Path, overrides: list[str] | None = None) -> Any:
    return RUN_KINDS[kind].load(path, overrides)


def run(kind: str, config: Any) -> Any:
    return RUN_KINDS[kind].run(config)


def summary(kind: str, result: Any) -> str:
    return RUN_KINDS[kind].summarize(result)


__all__ = ["RUN_KINDS", "RunKind", "load_run_recipe", "replace_training", "run", "summary"]
