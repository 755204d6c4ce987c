"""The one contract every objective follows (docs/extending.md walks through adding one).

An objective is an ``nn.Module`` built as ``Objective(config, encoder)``. It holds the encoder as a
registered submodule (``self.encoder``; frozen or momentum copies of it are submodules too, made with
the encoder's ``frozen_copy()`` / ``momentum_copy()``), and ``forward(batch) → ObjectiveOutput`` computes
the loss of a ``Batch`` (token ids [B, V, L], the rows' indices, and whatever the data adds: EASE's
entity ids, CLINE's WordNet views). It calls only the encoder's public API: ``embed(batch)``,
``embed_tokens``, ``token_states``, ``output_dim``, ``frozen_copy``, ``momentum_copy``, ``follow``,
``freeze_input_embeddings``, ``masked_lm_head``.

A *contrastive* objective (``ContrastiveObjective``) is a loss on the batch's embeddings: it implements
``loss_from_embeddings(embeddings [B, V, D], batch)``, and its ``forward`` is ``embed`` then that. Only
these can be trained with GradCache (training/gradcache.py calls ``loss_from_embeddings`` on embeddings
computed chunk by chunk); whatever else it needs from the batch (token ids for a frozen reference's
no-gradient pass, entity ids) it reads there.

``mlm_weight`` means one thing everywhere: λ of a masked-LM term on the batch's sentences added to the
loss, L = L_objective + λ · L_MLM. For most objectives it is SimCSE's optional auxiliary term (default 0,
added by ``build_objective``); a ``MaskedLMObjective`` (TaCL, pre-training) computes it on its own masked
pass and sets its own default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from sentcl.config import ConfigError
from sentcl.objectives.matryoshka import matryoshka_loss
from sentcl.objectives.output import (
    ObjectiveOutput as ObjectiveOutput,  # re-exported: objectives import it from here
)
from sentcl.objectives.similarity import full

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class ObjectiveConfig:
    """Keys every objective accepts: SimCSE's auxiliary masked-LM loss (``do_mlm``) can be added to any."""

    #: λ of the auxiliary MLM loss (SimCSE: 0.1 when do_mlm); 0 switches it off.
    mlm_weight: float = 0.0
    #: share of tokens selected for masking (80 % [MASK], 10 % random, 10 % kept).
    mlm_probability: float = 0.15

    def validate(self) -> None:
        if self.mlm_weight < 0:
            raise ConfigError(f"mlm_weight: must be ≥ 0, got {self.mlm_weight}")
        if not 0 < self.mlm_probability < 1:
            raise ConfigError(f"mlm_probability: must be in (0, 1), got {self.mlm_probability}")


@dataclass
class ContrastiveConfig(ObjectiveConfig):
    """Keys every contrastive objective shares: the temperature τ of its similarities (one place, one
    check); an objective whose paper uses another τ redeclares the field with its default."""

    temperature: float = 0.05
    #: Matryoshka (Kusupati et al., NeurIPS 2022): the loss is Σ_d w_d · L(embeddings[..., :d]) over these
    #: prefix sizes, so every prefix is an embedding of its own; [] = the full embedding only
    matryoshka_dims: list[int] = field(default_factory=list)
    #: w_d, one per size; [] = all 1 (sentence-transformers' MatryoshkaLoss default)
    matryoshka_weights: list[float] = field(default_factory=list)

    def validate(self) -> None:
        super().validate()
        if not self.temperature > 0:
            raise ConfigError(f"temperature: must be positive, got {self.temperature}")
        dims, weights = self.matryoshka_dims, self.matryoshka_weights
        if any(d < 1 for d in dims) or len(set(dims)) != len(dims):
            raise ConfigError(f"matryoshka_dims: distinct positive sizes, got {dims}")
        if weights and (len(weights) != len(dims) or any(w < 0 for w in weights)):
            raise ConfigError(
                f"matryoshka_weights: one weight ≥ 0 per size of matryoshka_dims, got {weights}"
            )


class Objective(nn.Module):
    #: the method's paper (authors, title, venue), for the model card
    paper: ClassVar[str] = ""
    #: poolers whose sentence vector the objective's loss never trains, each with the reason: a recipe
    #: asking for one of them is refused (the row would measure the untrained start model)
    untrained_poolers: ClassVar[dict[str, str]] = {}
    #: why the objective cannot train embedding prefixes (objectives/matryoshka.py); None: it can
    matryoshka_refusal: ClassVar[str | None] = "is not a loss on sentence embeddings"
    #: why its loss cannot be measured on held-out rows (training.select_by: loss); None: it can
    held_out_refusal: ClassVar[str | None] = None
    #: whether it trains PromptBERT's representation (``model.pooler: prompt``); no other objective does
    trains_prompt: ClassVar[bool] = False
    #: the views per example its loss takes (None: it says at its first step); a recipe's ``data.n_views``
    #: outside them is refused when the recipe is read, before any data or evaluation
    accepted_views: ClassVar[tuple[int, ...] | None] = None

    config: ObjectiveConfig
    encoder: TrainableEncoder | None  # what an objective may call on it: model/trainable.py

    def __init__(self, config: ObjectiveConfig, encoder: TrainableEncoder | None = None, data: Any = None):
        """``data``: the training dataset, for objectives whose tables come from it (EASE's entities);
        the others leave it."""
        super().__init__()
        self.encoder = encoder  # registered first: its parameters lead the optimiser's groups
        self.config = config
        refusal = self.refuses_matryoshka()
        if getattr(config, "matryoshka_dims", None) and refusal:
            raise ConfigError(f"objective.matryoshka_dims: {type(self).__name__} {refusal}")

    def refuses_matryoshka(self) -> str | None:
        """Why this objective (as configured) cannot train embedding prefixes, or None when it can."""
        return self.matryoshka_refusal

    def forward(self, batch: Batch) -> ObjectiveOutput:  # pragma: no cover - interface
        raise NotImplementedError

    def require_encoder(self) -> TrainableEncoder:
        if self.encoder is None:
            raise ValueError(f"{type(self).__name__} needs the encoder: build it with encoder=")
        return self.encoder

    @classmethod
    def check_views(cls, n_views: int | None) -> None:
        """A recipe's ``data.n_views`` against ``accepted_views``: one ConfigError naming the key."""
        if n_views is not None and cls.accepted_views is not None and n_views not in cls.accepted_views:
            name = cls.__module__.rsplit(".", 1)[-1]
            takes = " or ".join(str(v) for v in cls.accepted_views)
            raise ConfigError(f"data.n_views: {name} takes {takes} views per example, not {n_views}")

    @classmethod
    def check_pooler(cls, pooler: str) -> None:
        """The recipe's ``model.pooler`` against what this objective trains: one ConfigError naming the key
        (the objective's own rules live here, not in the recipe reader)."""
        name = cls.__module__.rsplit(".", 1)[-1]  # the registry's name (tests/objectives/test_names.py)
        if pooler in cls.untrained_poolers:
            raise ConfigError(f"model.pooler: {pooler!r} {cls.untrained_poolers[pooler]}")
        if pooler == "prompt" and not cls.trains_prompt:
            raise ConfigError(
                f"model.pooler: prompt is PromptBERT's representation; objective {name} does not train it "
                "(objective.name: promptbert does)"
            )
        if pooler.startswith("ditto"):
            raise ConfigError(
                f"model.pooler: {pooler} is Ditto's training-free pooler (it reads an attention head of a "
                "model as it is); train with another pooler and read the result with --pooler ditto-L-H"
            )


class ContrastiveObjective(Objective):
    """A loss on the batch's embeddings; GradCache trains these (see the module's docstring).

    ``embedding_loss`` is what the loop and GradCache call: ``loss_from_embeddings`` on the full
    embeddings, or, with ``matryoshka_dims``, the weighted sum of it over the prefixes. An objective whose
    loss cannot take a prefix (a queue or a projection sized to the full dimension) says why in
    ``matryoshka_refusal`` (or ``refuses_matryoshka``), and the constructor refuses the key."""

    matryoshka_refusal: ClassVar[str | None] = None  # a loss on embeddings takes prefixes unless it says
    config: ContrastiveConfig

    def forward(self, batch: Batch) -> ObjectiveOutput:
        return self.embedding_loss(self.require_encoder().embed(batch), batch)

    def embedding_loss(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        """``loss_from_embeddings`` on the full embeddings, or wrapped by Matryoshka over the prefixes of
        ``matryoshka_dims`` (objectives/matryoshka.py)."""
        embeddings = full(embeddings)  # the loss in fp32 at least (an MLP head under autocast gives bf16)
        dims = getattr(self.config, "matryoshka_dims", None)
        if not dims:
            return self.loss_from_embeddings(embeddings, batch)
        return matryoshka_loss(
            lambda prefix: self.loss_from_embeddings(prefix, batch), embeddings, dims,
            self.config.matryoshka_weights,
        )  # fmt: skip

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        raise NotImplementedError  # pragma: no cover - interface
