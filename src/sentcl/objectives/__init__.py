"""Objectives: one file per method; ``REGISTRY`` maps a recipe's ``objective.name`` to
(objective class, its config dataclass); ``build_objective`` makes one for an encoder and its training
data, adding SimCSE's auxiliary MLM term when the recipe asks for it (``objective.mlm_weight > 0``) and the
objective is not a masked-LM objective with its own (see base.py for the contract)."""

from sentcl.objectives.align_uniform import AlignUniform, AlignUniformConfig
from sentcl.objectives.base import ContrastiveObjective, Objective, ObjectiveConfig, ObjectiveOutput
from sentcl.objectives.cline import CLINE, CLINEConfig
from sentcl.objectives.dclr import DCLR, DCLRConfig
from sentcl.objectives.debiased import DebiasedConfig, DebiasedInfoNCE
from sentcl.objectives.ease import EASE, EASEConfig
from sentcl.objectives.info_nce import InfoNCE, InfoNCEConfig, info_nce_loss
from sentcl.objectives.mlm import MaskedLM, MaskedLMConfig, MaskedLMObjective, WithMLM
from sentcl.objectives.moco import MoCo, MoCoConfig
from sentcl.objectives.nt_xent import NTXent, NTXentConfig
from sentcl.objectives.sg_opt import SelfGuided, SGConfig
from sentcl.objectives.tacl import TaCL, TaCLConfig
from sentcl.objectives.vascl import VaSCL, VaSCLConfig

REGISTRY: dict[str, tuple[type[Objective], type[ObjectiveConfig]]] = {
    "simcse": (InfoNCE, InfoNCEConfig),
    "nt_xent": (NTXent, NTXentConfig),
    "moco": (MoCo, MoCoConfig),
    "align_uniform": (AlignUniform, AlignUniformConfig),
    "dclr": (DCLR, DCLRConfig),
    "vascl": (VaSCL, VaSCLConfig),
    "tacl": (TaCL, TaCLConfig),
    "sg_opt": (SelfGuided, SGConfig),
    "ease": (EASE, EASEConfig),
    "cline": (CLINE, CLINEConfig),
    "debiased_simcse": (DebiasedInfoNCE, DebiasedConfig),
    "masked_lm": (MaskedLM, MaskedLMConfig),
}


def build_objective(name: str, config: ObjectiveConfig, encoder, data=None) -> Objective:
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
    "REGISTRY",
    "AlignUniform",
    "CLINEConfig",
    "ContrastiveObjective",
    "DebiasedConfig",
    "DebiasedInfoNCE",
    "EASEConfig",
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
    "SGConfig",
    "SelfGuided",
    "TaCL",
    "TaCLConfig",
    "VaSCL",
    "WithMLM",
    "build_objective",
    "info_nce_loss",
]
