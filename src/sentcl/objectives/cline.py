"""CLINE (Wang et al., ACL 2021): contrastive learning with semantic negative examples.

For each training sentence x two views are made by WordNet replacement (``sentcl.data.wordnet_views``):
x_syn, ~40 % of its replaceable words by synonyms (same meaning), and x_ant, ~20 % by antonyms or
random words (changed meaning). Three terms:

* **contrast**: the sentence vector of x is pulled to x_syn's and pushed from x_ant's — one negative,
  no in-batch negatives:  L_cts = −log e^{s(x, x_syn)} / (e^{s(x, x_syn)} + e^{s(x, x_ant)}),
  s = the dot product of the sentence vectors in the paper (``similarity: dot``; ``cosine`` divides by
  τ);
* **replaced-token detection**: a sigmoid per token of x_syn and x_ant says whether its word was
  replaced (binary cross-entropy over the real tokens);
* **MLM** on x (BERT masking), with the checkpoint's head or a fresh tied one.

    L = L_cts + rtd_weight · L_RTD + mlm_weight · L_MLM      (1 : 1 : 1 in the paper)

That is the ``paper`` variant. The ``reference`` variant (the default) is the authors' code (kandorm/CLINE,
src/lecbert/modeling.py): the contrast is a binary cross-entropy on σ(mean(x ⊙ x_syn)) (label 1) and
σ(mean(x ⊙ x_ant)) (label 0); the token head (dense, GELU, LayerNorm, linear) classifies every token of
x_syn and x_ant as kept / replaced in the synonym view / replaced in the antonym view (3 classes, cross-
entropy); and the three terms are weighted by learned uncertainties, Σ_k e^{−s_k} L_k + max(s_k, 0), s = 0 at
the start.

The views are data: ``data.augment: wordnet`` (``sentcl.data.wordnet_views``) makes them, seeded by the
row, and the batch holds (x, x_syn, x_ant) as three views with the replaced-token flags in
``token_labels``. One pass of the encoder gives the three sentence vectors and the token states the
detector reads; the MLM term is on x alone (CLINE is a ``MaskedLMObjective``: its ``mlm_weight`` is the
same λ, default 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from sentcl.config import ConfigError
from sentcl.data.wordnet_views import WordNetViewsDataset
from sentcl.model import SentenceEncoder
from sentcl.objectives.base import ContrastiveConfig, ObjectiveOutput
from sentcl.objectives.masked_lm import MaskedLMObjective, mlm_term
from sentcl.objectives.similarity import full

if TYPE_CHECKING:
    from sentcl.data.collate import Batch


@dataclass
class CLINEConfig(ContrastiveConfig):
    #: reference: the authors' losses and weighting; paper: the paper's equations (module docstring)
    variant: Literal["reference", "paper"] = "reference"
    mlm_weight: float = 1.0
    rtd_weight: float = 1.0
    similarity: Literal["dot", "cosine"] = "dot"

    def validate(self) -> None:
        super().validate()
        if self.rtd_weight < 0:
            raise ConfigError(f"rtd_weight: must be ≥ 0, got {self.rtd_weight}")


def cline_contrast(
    anchor: torch.Tensor, synonym: torch.Tensor, antonym: torch.Tensor, similarity: str, temperature: float
) -> torch.Tensor:
    """−log e^{s(x, syn)} / (e^{s(x, syn)} + e^{s(x, ant)}) averaged over the batch; [B, D] each, in fp32."""
    anchor, synonym, antonym = full(anchor), full(synonym), full(antonym)
    if similarity == "dot":
        scores = torch.stack([(anchor * synonym).sum(-1), (anchor * antonym).sum(-1)], dim=1)
    else:
        scores = torch.stack([F.cosine_similarity(anchor, synonym), F.cosine_similarity(anchor, antonym)], 1)
        scores = scores / temperature
    return F.cross_entropy(scores, torch.zeros(len(anchor), dtype=torch.long, device=anchor.device))


def reference_contrast(anchor: torch.Tensor, synonym: torch.Tensor, antonym: torch.Tensor) -> torch.Tensor:
    """The authors' sentence term: BCE of σ(mean(x ⊙ x_syn)) against 1 and σ(mean(x ⊙ x_ant)) against 0."""
    anchor, synonym, antonym = full(anchor), full(synonym), full(antonym)
    scores = torch.cat([(anchor * synonym).mean(-1), (anchor * antonym).mean(-1)])
    targets = torch.cat([torch.ones(len(anchor)), torch.zeros(len(anchor))]).to(scores.device)
    return F.binary_cross_entropy_with_logits(scores, targets)


class CLINE(MaskedLMObjective):
    config: CLINEConfig
    paper = (
        "Wang et al., CLINE: Contrastive Learning with Semantic Negative Examples for Natural "
        "Language Understanding, ACL 2021"
    )

    def __init__(
        self, config: CLINEConfig | None = None, encoder: SentenceEncoder | None = None, data: Any = None
    ):
        super().__init__(config or CLINEConfig(), encoder)
        if data is not None and not isinstance(data, WordNetViewsDataset):
            raise ConfigError("data.augment: CLINE trains on WordNet views; set it to wordnet")
        dimension = self.require_encoder().hidden_size
        self.detector: nn.Module
        if self.config.variant == "reference":  # LecbertTECHead: 3 classes; learned loss weights s_k
            self.detector = nn.Sequential(
                nn.Linear(dimension, dimension), nn.GELU(), nn.LayerNorm(dimension), nn.Linear(dimension, 3)
            )
            self.log_vars = nn.Parameter(torch.zeros(3))
        else:
            self.detector = nn.Linear(dimension, 1)
        self.head = self.require_encoder().masked_lm_head() if self.config.mlm_weight > 0 else None

    def forward(self, batch: Batch) -> ObjectiveOutput:
        if batch.token_labels is None or batch.input_ids.shape[1] != 3:
            raise ValueError("CLINE needs (x, x_syn, x_ant) views with token labels (data.augment: wordnet)")
        c = self.config
        size, views, length = batch.input_ids.shape
        flat_ids, flat_mask = batch.input_ids.reshape(-1, length), batch.attention_mask.reshape(-1, length)
        embeddings, states = self.require_encoder().embed_tokens(flat_ids, flat_mask, with_states=True)
        anchor, synonym, antonym = embeddings.reshape(size, views, -1).unbind(1)
        labels = batch.token_labels.reshape(-1, length)
        real = labels != -100  # the made views' word tokens
        if c.variant == "reference":
            contrast = reference_contrast(anchor, synonym, antonym)
            view = torch.arange(views, device=labels.device).repeat(size)[:, None].expand_as(labels)
            classes = torch.where(labels > 0, view, 0)  # 0 kept; 1 replaced in x_syn; 2 replaced in x_ant
            detection = F.cross_entropy(self.detector(states)[real].float(), classes[real])
        else:
            contrast = cline_contrast(anchor, synonym, antonym, c.similarity, c.temperature)
            detection = F.binary_cross_entropy_with_logits(
                self.detector(states).squeeze(-1)[real].float(), labels[real].float()
            )
        parts = {"contrast": contrast, "rtd": detection}
        weights = {"contrast": 1.0, "rtd": c.rtd_weight}
        if self.head is not None:
            x, x_mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]  # on x alone
            parts["mlm"] = mlm_term(self.require_encoder(), self.head, x, x_mask, c.mlm_probability)
            weights["mlm"] = c.mlm_weight
        terms = {name: part.detach() for name, part in parts.items()}
        if c.variant == "reference":  # the order of LecbertForPreTraining's log_vars: mlm, token, sentence
            order = {"mlm": 0, "rtd": 1, "contrast": 2}
            loss = sum(
                weights[name]
                * (torch.exp(-self.log_vars[order[name]]) * part + self.log_vars[order[name]].clamp(min=0))
                for name, part in parts.items()
            )
        else:
            loss = sum(weights[name] * part for name, part in parts.items())
        return ObjectiveOutput(loss=cast(torch.Tensor, loss), terms=terms)
