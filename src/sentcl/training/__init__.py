"""Training: recipes, optimiser and schedule, the loop."""

from sentcl.training.checkpoint import CheckpointError
from sentcl.training.contrastive import TrainResult, summarize, train
from sentcl.training.guards import TrainingError
from sentcl.training.recipe import LoopConfig, TrainConfig, load_recipe, recipe_from_dict

__all__ = [
    "CheckpointError",
    "LoopConfig",
    "TrainConfig",
    "TrainResult",
    "TrainingError",
    "load_recipe",
    "recipe_from_dict",
    "summarize",
    "train",
]
