"""Objectives: one file per method; ``REGISTRY`` maps a recipe's ``objective.name`` to
(objective class, its config dataclass); ``build_objective`` makes one for an encoder and adds the
auxiliary MLM loss when the recipe asks for it (``objective.mlm_weight > 0``)."""

from sentcl.objectives.align_uniform import AlignUniform, AlignUniformConfig
from sentcl.objectives.base import Objective, ObjectiveConfig, ObjectiveOutput
from sentcl.objectives.cline import CLINE, CLINEConfig
from sentcl.objectives.dclr import DCLR, DCLRConfig
from sentcl.objectives.ease import EASE, EASEConfig
from sentcl.objectives.info_nce import InfoNCE, InfoNCEConfig, info_nce_loss
from sentcl.objectives.moco import MoCo, MoCoConfig
from sentcl.objectives.nt_xent import NTXent, NTXentConfig
from sentcl.objectives.sg_opt import SelfGuided, SGConfig
from sentcl.objectives.tacl import TaCL, TaCLConfig
from sentcl.objectives.vascl import VaSCL, VaSCLConfig

REGISTRY: dict[str, tuple[type, type]] = {
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
}


def build_objective(name: str, config: ObjectiveConfig, encoder) -> Objective:
    objective_class, _ = REGISTRY[name]
    objective = objective_class(config, encoder)
    if config.mlm_weight > 0 and not objective.includes_mlm:
        from sentcl.objectives.mlm import WithMLM

        objective = WithMLM(objective, encoder, config.mlm_weight, config.mlm_probability)
    return objective


__all__ = [
    "CLINE",
    "DCLR",
    "EASE",
    "REGISTRY",
    "AlignUniform",
    "CLINEConfig",
    "EASEConfig",
    "InfoNCE",
    "InfoNCEConfig",
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
    "build_objective",
    "info_nce_loss",
]
