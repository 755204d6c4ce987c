"""EASE (Nishikawa et al., NAACL 2022): entity-aware contrastive learning of sentence embeddings.

Training data are (sentence, entity) pairs — a sentence and an entity it is about (EASE: a Wikipedia
sentence and the title of a page its hyperlink points to) — optionally with a hard-negative entity:

    sentence <TAB> entity [<TAB> hard_negative_entity]          (.tsv; header optional:
                                                                   sentence, entity, hard_negative_entity)

with ``data.text_columns: 1`` (only the sentence is encoded; the entity columns are labels). The
entities form a learnable embedding table e (initialised from ``entity_vectors``, a .tsv of
``name <TAB> v1 <TAB> … <TAB> vd`` such as exported Wikipedia2Vec vectors, where given, N(0, 0.02)
otherwise), mapped to the sentence space by a linear W. For sentence h_i with entity e_i:

    L_ent,i  = −log e^{cos(h_i, W e_i)/τ} / Σ_j (e^{cos(h_i, W e_j)/τ} + e^{cos(h_i, W e_j⁻)/τ})
    L        = L_ent + λ · L_self           (L_self: SimCSE's dropout-view InfoNCE)

over the batch's entities and the hard negatives e_j⁻ where the data has them. Two variants
(``variant``): ``reference`` (the default) as the authors' script runs it (studio-ousia/ease,
ease/ease_models.py, train_monolingual_ease.sh): the projection is Linear + tanh, the entity term has its
own temperature τ_e = 100 and weight 0.01 (L = L_self + 0.01 · L_ent), a hard negative's own logit gets
+1 (``hard_negative_weight``), duplicates of an entity in the batch stay negatives. ``paper``, sentcl's
earlier reading: a plain Linear, τ_e = τ = 0.05, L = L_ent + λ · L_self with λ = 1, and an in-batch entity
equal to e_i other than its own column masked. The entity vectors of the paper are Wikipedia2Vec's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from sentcl.config import ConfigError, expand_path
from sentcl.data import DataError
from sentcl.model import SentenceEncoder
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.simcse import info_nce_loss
from sentcl.objectives.similarity import cosine_matrix

if TYPE_CHECKING:
    from sentcl.data.collate import Batch

logger = logging.getLogger(__name__)


#: each variant's (entity-term weight, entity temperature, hard-negative logit bonus)
VARIANTS = {"reference": (0.01, 100.0, 1.0), "paper": (1.0, None, 0.0)}


@dataclass
class EASEConfig(ContrastiveConfig):
    #: reference: the authors' script; paper: sentcl's earlier reading (module docstring)
    variant: Literal["reference", "paper"] = "reference"
    #: λ of the self-supervised (dropout-view) InfoNCE term; 0 = entity term only
    self_weight: float = 1.0
    #: the entity term's weight and temperature; unset: the variant's (reference 0.01 and 100; paper 1 and τ)
    entity_weight: float | None = None
    entity_temperature: float | None = None
    #: .tsv of entity vectors (name, then the values); "" = random initialisation
    entity_vectors: str = ""
    #: dimension of a randomly initialised table (ignored with entity_vectors); 0 = the encoder's
    entity_dim: int = 0
    freeze_entities: bool = False

    def validate(self) -> None:
        super().validate()
        if self.self_weight < 0 or self.entity_dim < 0 or (self.entity_weight or 0) < 0:
            raise ConfigError("self_weight, entity_weight and entity_dim must be ≥ 0")
        if self.entity_temperature is not None and self.entity_temperature <= 0:
            raise ConfigError(f"entity_temperature: must be positive, got {self.entity_temperature}")


def read_entity_vectors(path: str | Path) -> dict[str, torch.Tensor]:
    """``name<TAB>v1<TAB>…`` per line; every error names file:line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: entity vectors file not found")
    vectors: dict[str, torch.Tensor] = {}
    dim = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        name, *values = line.rstrip("\n").split("\t")
        try:
            vector = torch.tensor([float(v) for v in values])
        except ValueError:
            raise DataError(f"{path}:{number}: the values after the name must be numbers") from None
        if dim is None:
            dim = len(vector)
        if len(vector) != dim or dim == 0:
            raise DataError(f"{path}:{number}: {len(vector)} values, expected {dim} like the lines above")
        if name in vectors:
            raise DataError(f"{path}:{number}: entity {name!r} appears twice")
        vectors[name] = vector
    if not vectors:
        raise DataError(f"{path}:1: no entity vectors in the file")
    return vectors


def ease_entity_loss(
    sentences: torch.Tensor,  # [B, D]
    entities: torch.Tensor,  # [B, D] W e_i
    entity_ids: torch.Tensor,  # [B]
    hard_negatives: torch.Tensor | None,  # [B, D] W e_i⁻, or None
    temperature: float,
    mask_duplicates: bool = True,
    hard_negative_bonus: float = 0.0,
) -> torch.Tensor:
    """``mask_duplicates``: an in-batch entity equal to e_i (not its own column) is no negative;
    ``hard_negative_bonus`` is added to each sentence's own hard-negative logit (the reference's
    ``hard_negative_weight``)."""
    logits = cosine_matrix(sentences, entities) / temperature  # [B, B]
    rows = torch.arange(len(sentences), device=sentences.device)
    if mask_duplicates:
        same = entity_ids[:, None] == entity_ids[None, :]
        duplicate = same & ~torch.eye(len(entity_ids), dtype=torch.bool, device=same.device)
        logits = logits.masked_fill(duplicate, float("-inf"))  # the same entity again is no negative
    if hard_negatives is not None:
        hard = cosine_matrix(sentences, hard_negatives) / temperature
        if hard_negative_bonus:
            hard = hard.index_put((rows, rows), hard[rows, rows] + hard_negative_bonus)
        logits = torch.cat([logits, hard], dim=1)
    return F.cross_entropy(logits, rows)


class EASE(ContrastiveObjective):
    """The entity table is built from the training data's label columns (``data``: the dataset, whose
    ``label_names`` are the entities and whose batches carry each row's entity ids in ``labels``)."""

    config: EASEConfig

    matryoshka_refusal = "maps entities to the full sentence dimension"
    paper = (
        "Nishikawa, Ri, Yamada, Tsuruoka & Echizen, "
        "EASE: Entity-Aware Contrastive Learning of Sentence Embedding, NAACL 2022"
    )

    def __init__(
        self, config: EASEConfig | None = None, encoder: SentenceEncoder | None = None, data: Any = None
    ):
        super().__init__(config or EASEConfig(), encoder)
        if data is None:
            raise ValueError("EASE builds its entity table from the training data: pass data=")
        if data.label_columns not in (1, 2):
            raise DataError(
                f"{data.records.path}: EASE reads sentence, entity[, hard_negative_entity] rows "
                f"(data.text_columns: 1); these rows have {data.records.n_columns} column(s)"
            )
        c, names = self.config, data.label_names
        vectors = (
            read_entity_vectors(expand_path(c.entity_vectors, "objective.entity_vectors"))
            if c.entity_vectors
            else {}
        )
        sentence_dim = self.require_encoder().output_dim
        dim = len(next(iter(vectors.values()))) if vectors else (c.entity_dim or sentence_dim)
        self.entities = nn.Embedding(len(names), dim)
        nn.init.normal_(self.entities.weight, std=0.02)
        found = [i for i, name in enumerate(names) if name in vectors]
        with torch.no_grad():
            for i in found:
                self.entities.weight[i] = vectors[names[i]]
        if vectors:
            logger.info(
                "EASE: %d of %d entities initialised from %s", len(found), len(names), c.entity_vectors
            )
        self.entities.weight.requires_grad_(not c.freeze_entities)
        self.projection: nn.Module
        if c.variant == "reference":  # EntityMLPLayer: dense (with bias) then tanh
            self.projection = nn.Sequential(nn.Linear(dim, sentence_dim), nn.Tanh())
        else:
            linear = nn.Linear(dim, sentence_dim, bias=False)
            nn.init.normal_(linear.weight, std=dim**-0.5)
            self.projection = linear
        weight, temperature, bonus = VARIANTS[c.variant]
        self.entity_weight = weight if c.entity_weight is None else c.entity_weight
        self.entity_temperature = c.entity_temperature or temperature or c.temperature
        self.hard_negative_bonus = bonus

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        if batch is None or batch.labels is None:
            raise ValueError("EASE needs the batch's entity ids (batch.labels, from its dataset)")
        c = self.config
        entity_ids = batch.labels[:, 0].to(embeddings.device)
        entities = self.projection(self.entities(entity_ids))
        hard = None
        if batch.labels.shape[1] == 2:
            hard = self.projection(self.entities(batch.labels[:, 1].to(embeddings.device)))
        entity_term = ease_entity_loss(
            embeddings[:, 0], entities, entity_ids, hard, self.entity_temperature,
            mask_duplicates=c.variant == "paper", hard_negative_bonus=self.hard_negative_bonus,
        )  # fmt: skip
        loss, terms = self.entity_weight * entity_term, {"entity": entity_term.detach()}
        if c.self_weight > 0:
            if embeddings.shape[1] < 2:
                raise ValueError("EASE's self-supervised term needs 2 dropout views (data.n_views: 2)")
            self_term = info_nce_loss(embeddings[:, 0], embeddings[:, 1], temperature=c.temperature)
            loss, terms = loss + c.self_weight * self_term, terms | {"self": self_term.detach()}
        return ObjectiveOutput(loss=loss, terms=terms)
