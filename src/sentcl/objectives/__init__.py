"""Objectives: one file per method; ``REGISTRY`` maps a recipe's ``objective.name`` to
(objective class, its config dataclass)."""

from sentcl.objectives.base import ObjectiveOutput
from sentcl.objectives.info_nce import InfoNCE, InfoNCEConfig, info_nce_loss

REGISTRY: dict[str, tuple[type, type]] = {
    "simcse": (InfoNCE, InfoNCEConfig),
}

__all__ = ["REGISTRY", "InfoNCE", "InfoNCEConfig", "ObjectiveOutput", "info_nce_loss"]
