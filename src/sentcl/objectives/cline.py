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

The views are data: ``data.augment: wordnet`` (``sentcl.data.wordnet_views``) makes them, seeded by the
row, and the batch holds (x, x_syn, x_ant) as three views with the replaced-token flags in
``token_labels``. One pass of the encoder gives the three sentence vectors and the token states the
detector reads; the MLM term is on x alone (CLINE is a ``MaskedLMObjective``: its ``mlm_weight`` is the
same λ, default 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from sentcl.config import ConfigError
from sentcl.data.wordnet_views import WordNetViewsDataset
from sentcl.model import SentenceEncoder
from sentcl.objectives.base import ContrastiveConfig, ObjectiveOutput
from sentcl.objectives.mlm import MaskedLMObjective, mlm_term
from sentcl.objectives.similarity import full


@dataclass
class CLINEConfig(ContrastiveConfig):
    mlm_weight: float = 1.0
    rtd_weight: float = 1.0
    similarity: Literal["dot", "cosine"] = "dot"

    def validate(self) -> None:
        super().validate()
        if self.rtd_weight < 0:
            raise ConfigError(f"rtd_weight: must be ≥ 0, got {self.rtd_weight}")


def cline_contrast(anchor, synonym, antonym, similarity: str, temperature: float) -> torch.Tensor:
    """−log e^{s(x, syn)} / (e^{s(x, syn)} + e^{s(x, ant)}) averaged over the batch; [B, D] each, in fp32."""
    anchor, synonym, antonym = full(anchor), full(synonym), full(antonym)
    if similarity == "dot":
        scores = torch.stack([(anchor * synonym).sum(-1), (anchor * antonym).sum(-1)], dim=1)
    else:
        scores = torch.stack([F.cosine_similarity(anchor, synonym), F.cosine_similarity(anchor, antonym)], 1)
        scores = scores / temperature
    return F.cross_entropy(scores, torch.zeros(len(anchor), dtype=torch.long, device=anchor.device))


class CLINE(MaskedLMObjective):
    paper = (
        "Wang et al., CLINE: Contrastive Learning with Semantic Negative Examples for Natural "
        "Language Understanding, ACL 2021"
    )

    def __init__(self, config: CLINEConfig | None = None, encoder: SentenceEncoder | None = None, data=None):
        super().__init__(config or CLINEConfig(), encoder)
        if data is not None and not isinstance(data, WordNetViewsDataset):
            raise ConfigError("data.augment: CLINE trains on WordNet views; set it to wordnet")
        self.detector = nn.Linear(self.require_encoder().dimension, 1)
        self.head = encoder.masked_lm_head() if self.config.mlm_weight > 0 else None

    def forward(self, batch) -> ObjectiveOutput:
        if batch.token_labels is None or batch.input_ids.shape[1] != 3:
            raise ValueError("CLINE needs (x, x_syn, x_ant) views with token labels (data.augment: wordnet)")
        c = self.config
        size, views, length = batch.input_ids.shape
        flat_ids, flat_mask = batch.input_ids.reshape(-1, length), batch.attention_mask.reshape(-1, length)
        embeddings, states = self.encoder.embed_tokens(flat_ids, flat_mask, with_states=True)
        anchor, synonym, antonym = embeddings.reshape(size, views, -1).unbind(1)
        contrast = cline_contrast(anchor, synonym, antonym, c.similarity, c.temperature)
        labels = batch.token_labels.reshape(-1, length)
        real = labels != -100  # the made views' word tokens
        detection = F.binary_cross_entropy_with_logits(
            self.detector(states).squeeze(-1)[real].float(), labels[real].float()
        )
        loss = contrast + c.rtd_weight * detection
        terms = {"contrast": contrast.detach(), "rtd": detection.detach()}
        if self.head is not None:
            x, x_mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]  # on x alone
            mlm = mlm_term(self.encoder, self.head, x, x_mask, c.mlm_probability)
            loss, terms = loss + c.mlm_weight * mlm, terms | {"mlm": mlm.detach()}
        return ObjectiveOutput(loss=loss, terms=terms)
