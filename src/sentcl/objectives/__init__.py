"""Objectives: one file per method; ``REGISTRY`` maps a recipe's ``objective.name`` to
(objective class, its config dataclass); ``build_objective`` makes one for an encoder and its training
data, adding SimCSE's auxiliary MLM term when the recipe asks for it (``objective.mlm_weight > 0``) and the
objective is not a masked-LM objective with its own (see base.py for the contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sentcl.objectives.align_uniform import AlignUniform, AlignUniformConfig
from sentcl.objectives.angle import AnglE, AnglEConfig
from sentcl.objectives.base import ContrastiveObjective, Objective, ObjectiveConfig, ObjectiveOutput
from sentcl.objectives.cline import CLINE, CLINEConfig
from sentcl.objectives.contrastive_tension import ContrastiveTension, ContrastiveTensionConfig
from sentcl.objectives.cosent import CoSENT, CoSENTConfig
from sentcl.objectives.cropping import Cropping, CroppingConfig
from sentcl.objectives.dclr import DCLR, DCLRConfig
from sentcl.objectives.debiased_simcse import DebiasedSimCSE, DebiasedSimCSEConfig
from sentcl.objectives.distillation import Distillation, DistillationConfig
from sentcl.objectives.ease import EASE, EASEConfig
from sentcl.objectives.esimcse import ESimCSE, ESimCSEConfig
from sentcl.objectives.masked_lm import MaskedLM, MaskedLMConfig, MaskedLMObjective, WithMLM
from sentcl.objectives.moco import MoCo, MoCoConfig
from sentcl.objectives.nt_xent import NTXent, NTXentConfig
from sentcl.objectives.promptbert import PromptBERT, PromptBERTConfig
from sentcl.objectives.sg_opt import SGOPT, SGOPTConfig
from sentcl.objectives.simcse import SimCSE, SimCSEConfig, info_nce_loss
from sentcl.objectives.tacl import TaCL, TaCLConfig
from sentcl.objectives.tsdae import TSDAE, TSDAEConfig
from sentcl.objectives.vascl import VaSCL, VaSCLConfig

if TYPE_CHECKING:
    from sentcl.model import TrainableEncoder

REGISTRY: dict[str, tuple[type[Objective], type[ObjectiveConfig]]] = {
    "simcse": (SimCSE, SimCSEConfig),
    "nt_xent": (NTXent, NTXentConfig),
    "moco": (MoCo, MoCoConfig),
    "align_uniform": (AlignUniform, AlignUniformConfig),
    "dclr": (DCLR, DCLRConfig),
    "vascl": (VaSCL, VaSCLConfig),
    "tacl": (TaCL, TaCLConfig),
    "sg_opt": (SGOPT, SGOPTConfig),
    "ease": (EASE, EASEConfig),
    "cline": (CLINE, CLINEConfig),
    "debiased_simcse": (DebiasedSimCSE, DebiasedSimCSEConfig),
    "masked_lm": (MaskedLM, MaskedLMConfig),
    "distillation": (Distillation, DistillationConfig),
    "cosent": (CoSENT, CoSENTConfig),
    "angle": (AnglE, AnglEConfig),
    "esimcse": (ESimCSE, ESimCSEConfig),
    "promptbert": (PromptBERT, PromptBERTConfig),
    "tsdae": (TSDAE, TSDAEConfig),
    "contrastive_tension": (ContrastiveTension, ContrastiveTensionConfig),
    "cropping": (Cropping, CroppingConfig),
}

#: objectives of other installed packages: an entry point of this group names a ``(Objective class, its
#: config dataclass)`` pair, e.g. in their pyproject.toml ``[project.entry-points."sentcl.objectives"]
#: toy = "toy_objective:ENTRY"``; the entry point's name is the recipe's ``objective.name``
PLUGIN_GROUP = "sentcl.objectives"


def load_plugins() -> list[str]:
    """Add the installed packages' objectives to ``REGISTRY`` (sentcl's own names are never replaced);
    the names added. One that does not load, or is not such a pair, is a warning naming it, not a crash of
    every command."""
    import logging
    from importlib.metadata import entry_points

    added = []
    for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name):
        if point.name in REGISTRY:
            continue
        try:
            pair = point.load()
            objective_class, config_class = pair
            if not (issubclass(objective_class, Objective) and issubclass(config_class, ObjectiveConfig)):
                raise TypeError("not an (Objective subclass, ObjectiveConfig subclass) pair")
        except Exception as exc:  # another package's code: said, and the rest of sentcl goes on
            logging.getLogger(__name__).warning(
                "objective %s (%s) is not loaded: %s", point.name, point.value, exc
            )
            continue
        REGISTRY[point.name] = (objective_class, config_class)
        added.append(point.name)
    return added


load_plugins()

# One name per method: registry key = module = class (its letters) = docs/methods page. The classes' names
# from before that rule stay importable for code written against them.
InfoNCE, InfoNCEConfig = SimCSE, SimCSEConfig
SelfGuided, SGConfig = SGOPT, SGOPTConfig
DebiasedInfoNCE, DebiasedConfig = DebiasedSimCSE, DebiasedSimCSEConfig


def build_objective(
    name: str, config: ObjectiveConfig, encoder: TrainableEncoder | None, data: Any = None
) -> Objective:
    """``REGISTRY[name]`` built on ``encoder`` (and ``data``, the training dataset, for objectives whose
    tables come from it: EASE's entities)."""
    objective_class, _ = REGISTRY[name]
    objective = objective_class(config, encoder, data)
    if config.mlm_weight > 0 and not isinstance(objective, MaskedLMObjective):
        objective = WithMLM(objective, config.mlm_weight, config.mlm_probability)
    return objective


__all__ = [
    "CLINE",
    "DCLR",
    "EASE",
    "PLUGIN_GROUP",
    "REGISTRY",
    "SGOPT",
    "TSDAE",
    "AlignUniform",
    "AnglE",
    "AnglEConfig",
    "CLINEConfig",
    "CoSENT",
    "CoSENTConfig",
    "ContrastiveObjective",
    "ContrastiveTension",
    "ContrastiveTensionConfig",
    "Cropping",
    "CroppingConfig",
    "DebiasedConfig",
    "DebiasedInfoNCE",
    "DebiasedSimCSE",
    "DebiasedSimCSEConfig",
    "Distillation",
    "DistillationConfig",
    "EASEConfig",
    "ESimCSE",
    "ESimCSEConfig",
    "InfoNCE",
    "InfoNCEConfig",
    "MaskedLM",
    "MaskedLMConfig",
    "MaskedLMObjective",
    "MoCo",
    "NTXent",
    "Objective",
    "ObjectiveConfig",
    "ObjectiveOutput",
    "PromptBERT",
    "PromptBERTConfig",
    "SGConfig",
    "SGOPTConfig",
    "SelfGuided",
    "SimCSE",
    "SimCSEConfig",
    "TSDAEConfig",
    "TaCL",
    "TaCLConfig",
    "VaSCL",
    "WithMLM",
    "build_objective",
    "info_nce_loss",
    "load_plugins",
]
