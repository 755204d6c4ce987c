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

Views are made lazily for the rows a batch uses, seeded by the row, so a run and its resumption see the
same views. The data are plain sentences (one view per row: ``data.n_views: 1``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from sentcl.config import ConfigError
from sentcl.data import DataError
from sentcl.data.wordnet_views import Thesaurus, Views, make_views, pre_tokenizer
from sentcl.model import EncodedBatch, SentenceEncoder
from sentcl.objectives.base import (
    ContrastiveConfig,
    Objective,
    ObjectiveOutput,
    keep_reference,
)
from sentcl.objectives.mlm import build_mlm_head, mask_tokens, mlm_loss

FILLER_SAMPLE = 5000  # rows whose words supply the antonym view's random words


@dataclass
class CLINEConfig(ContrastiveConfig):
    mlm_weight: float = 1.0
    rtd_weight: float = 1.0
    similarity: Literal["dot", "cosine"] = "dot"
    synonym_share: float = 0.4
    antonym_share: float = 0.2
    max_length: int = 32
    seed: int = 0
    #: WordNet 3.0 dict folder; "" = $SENTCL_WORDNET or Debian's /usr/share/wordnet
    wordnet_dir: str = ""

    def validate(self) -> None:
        super().validate()
        for key in ("synonym_share", "antonym_share"):
            if not 0 < getattr(self, key) <= 1:
                raise ConfigError(f"{key}: must be in (0, 1], got {getattr(self, key)}")
        if self.rtd_weight < 0:
            raise ConfigError(f"rtd_weight: must be ≥ 0, got {self.rtd_weight}")


def cline_contrast(anchor, synonym, antonym, similarity: str, temperature: float) -> torch.Tensor:
    """−log e^{s(x, syn)} / (e^{s(x, syn)} + e^{s(x, ant)}) averaged over the batch; [B, D] each."""
    if similarity == "dot":
        scores = torch.stack([(anchor * synonym).sum(-1), (anchor * antonym).sum(-1)], dim=1)
    else:
        scores = torch.stack([F.cosine_similarity(anchor, synonym), F.cosine_similarity(anchor, antonym)], 1)
        scores = scores / temperature
    return F.cross_entropy(scores.float(), torch.zeros(len(anchor), dtype=torch.long, device=anchor.device))


class CLINE(Objective):
    supports_gradcache = False
    includes_mlm = True

    def __init__(self, config: CLINEConfig | None = None, encoder: SentenceEncoder | None = None):
        super().__init__()
        if encoder is None:
            raise ValueError("CLINE needs the encoder (tokenizer, MLM head)")
        self.config = c = config or CLINEConfig()
        self.thesaurus = Thesaurus(
            c.wordnet_dir or None
        )  # fails here, before training, if WordNet is missing
        self.detector = nn.Linear(encoder.backbone.config.hidden_size, 1)
        self.head = build_mlm_head(encoder) if c.mlm_weight > 0 else None
        keep_reference(self, "encoder", encoder)
        self.split = pre_tokenizer(encoder.tokenizer)
        self.texts: list[str] = []
        self.fillers: list[str] = []
        self.views: dict[int, Views] = {}

    def bind_records(self, records) -> None:
        if records.n_columns != 1:
            raise DataError(
                f"{records.path}: CLINE trains on sentences, one per row (got {records.n_columns} columns)"
            )
        self.texts = [row[0] for row in records.rows]
        sample = random.Random(self.config.seed).sample(
            range(len(self.texts)), min(FILLER_SAMPLE, len(self.texts))
        )
        words = {w for i in sample for w, _ in self.split(self.texts[i]) if self.thesaurus.candidate(w)}
        self.fillers = sorted(words)

    def views_of(self, row: int) -> Views:
        if row not in self.views:
            c = self.config
            rng = random.Random(c.seed * 1_000_003 + row)
            self.views[row] = make_views(
                self.texts[row],
                self.split,
                self.thesaurus,
                rng,
                self.fillers,
                c.synonym_share,
                c.antonym_share,
            )
        return self.views[row]

    def tokenize(self, texts: list[str], replaced: list[tuple[int, ...]], device):
        """ids, attention mask and replaced-token labels (1/0; −100 on special tokens and padding)."""
        tokens = self.encoder.tokenizer(
            texts, truncation=True, max_length=self.config.max_length, padding=True, return_tensors="pt"
        )
        labels = torch.full(tokens["input_ids"].shape, -100.0)
        for row, words in enumerate(replaced):
            for position, word in enumerate(tokens.word_ids(row)):
                if word is not None:
                    labels[row, position] = float(word in words)
        return tokens["input_ids"].to(device), tokens["attention_mask"].to(device), labels.to(device)

    def forward(self, encoded: EncodedBatch, batch=None) -> ObjectiveOutput:
        if batch is None or not self.texts:
            raise ValueError("CLINE needs bind_records() first and the batch's row indices")
        c, anchor = self.config, encoded.embeddings[:, 0]
        views = [self.views_of(int(i)) for i in batch.indices]
        ids, mask, labels = self.tokenize(
            [v.synonym for v in views] + [v.antonym for v in views],
            [v.synonym_words for v in views] + [v.antonym_words for v in views],
            anchor.device,
        )
        embeddings, states = self.encoder.forward_with_states(ids, mask)
        synonym, antonym = embeddings.split(len(views))
        contrast = cline_contrast(anchor, synonym, antonym, c.similarity, c.temperature)
        real = labels != -100
        detection = F.binary_cross_entropy_with_logits(
            self.detector(states).squeeze(-1)[real].float(), labels[real]
        )
        loss = contrast + c.rtd_weight * detection
        terms = {"contrast": contrast.detach(), "rtd": detection.detach()}
        if self.head is not None:
            original, original_mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
            masked, mlm_labels = mask_tokens(
                original, original_mask, self.encoder.tokenizer, c.mlm_probability
            )
            mlm = mlm_loss(self.encoder, self.head, masked, original_mask, mlm_labels)
            loss, terms = loss + c.mlm_weight * mlm, terms | {"mlm": mlm.detach()}
        return ObjectiveOutput(loss=loss, terms=terms)
