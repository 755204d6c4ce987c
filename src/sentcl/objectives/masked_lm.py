"""Masked language modelling as an auxiliary objective (SimCSE's ``do_mlm``; the base of CLINE and TaCL).

    L = L_objective + λ · L_MLM,   λ = 0.1 in SimCSE

Masking is BERT's (15 % of the non-special, non-padding tokens; of those 80 % → [MASK], 10 % → a
random token, 10 % kept) on the batch's own ids; whole-word masking is an option (``sentcl
pretrain``). The masked ids go through the *same* encoder a second time; the head is the encoder's
``masked_lm_head()``: the checkpoint's own MLM head where it has one (BERT's ``cls.predictions``,
RoBERTa's ``lm_head``), a fresh one of the same architecture otherwise (e.g. all-MiniLM-L6-v2, saved
without it); either way its decoder is tied to the input embeddings. Only the selected positions go
through the head, so the vocabulary projection costs 15 % of a full one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from sentcl.model import ModelLoadError
from sentcl.objectives.base import Objective, ObjectiveConfig, ObjectiveOutput

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    tokenizer: Any,
    probability: float = 0.15,
    word_ids: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking of ``input_ids`` [N, L] → (masked ids, labels with −100 where nothing is predicted).

    Each non-special, non-padding token is selected with ``probability``; with ``word_ids`` [N, L]
    (the word each token belongs to, −1 for special tokens) whole words are selected instead, all their
    pieces together (whole-word masking). Of the selected tokens 80 % become [MASK], 10 % a random
    token, 10 % stay. Drawn on the CPU from ``generator`` (the global RNG when None), so a run and its
    resumption draw the same masks whatever the device.
    """
    if tokenizer.mask_token_id is None:
        raise ModelLoadError("the tokenizer has no [MASK] token; MLM needs one")
    ids = input_ids.detach().to("cpu")
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    eligible = (attention_mask.to("cpu") != 0) & ~special
    if word_ids is None:
        selected = eligible & (torch.rand(ids.shape, generator=generator) < probability)
    else:
        words = word_ids.to("cpu").long()
        per_word = torch.rand((ids.shape[0], int(words.max()) + 2), generator=generator)
        selected = eligible & (words >= 0) & (per_word.gather(1, words.clamp(min=0)) < probability)
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    action = torch.rand(ids.shape, generator=generator)
    random_ids = torch.randint(len(tokenizer), ids.shape, generator=generator)
    masked = torch.where(selected & (action < 0.8), tokenizer.mask_token_id, ids)
    masked = torch.where(selected & (action >= 0.8) & (action < 0.9), random_ids, masked)
    return masked.to(input_ids.device), labels.to(input_ids.device)


def head_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``head`` on ``hidden`` [N, L, H] at the positions whose label is not −100."""
    selected = labels != -100
    if not selected.any():
        return hidden.sum() * 0.0  # keeps the graph; nothing was masked in this batch
    logits = head(hidden[selected])
    return F.cross_entropy(logits.float(), labels[selected])


def mlm_term(
    encoder: TrainableEncoder,
    head: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    probability: float,
    word_ids: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """L_MLM of the sequences ``input_ids`` [..., L] (every view of a batch, or one): BERT masking (whole
    words with ``word_ids``, masks from ``generator``), one pass of the encoder's backbone over the masked
    ids, cross-entropy at the masked positions."""
    length = input_ids.shape[-1]
    ids, mask = input_ids.reshape(-1, length), attention_mask.reshape(-1, length)
    words = None if word_ids is None else word_ids.reshape(-1, length)
    masked, labels = mask_tokens(ids, mask, encoder.tokenizer, probability, words, generator)
    return head_loss(head, encoder.token_states(masked, mask), labels)


class MaskedLMObjective(Objective):
    """An objective whose own loss includes the masked-LM term on its own masked pass (TaCL, CLINE,
    masked-LM pre-training): ``build_objective`` adds no second one. Its ``mlm_weight`` is the same λ."""


@dataclass
class MaskedLMConfig(ObjectiveConfig):
    #: λ of L_MLM, here the whole loss
    mlm_weight: float = 1.0
    #: select whole words (every piece of a word together) where the batch carries ``word_ids``
    whole_word: bool = False


class MaskedLM(MaskedLMObjective):
    """Masked-LM training as an objective (``sentcl pretrain`` runs it through ``train``'s loop):
    L = λ · L_MLM on every view of the batch. The head is the encoder's ``masked_lm_head()``, or ``head``
    (the head of a masked-LM model built for pre-training)."""

    config: MaskedLMConfig

    paper = (
        "Devlin, Chang, Lee & Toutanova, "
        "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding, NAACL 2019"
    )

    def __init__(
        self,
        config: MaskedLMConfig | None = None,
        encoder: TrainableEncoder | None = None,
        data: Any = None,
        head: nn.Module | None = None,
    ):
        super().__init__(config or MaskedLMConfig(), encoder)
        self.head = head if head is not None else self.require_encoder().masked_lm_head()

    def masked_loss(self, batch: Batch, generator: torch.Generator | None = None) -> torch.Tensor:
        """L_MLM of ``batch`` with masks drawn from ``generator`` (the global RNG when None)."""
        c = self.config
        if c.whole_word and batch.word_ids is None:
            raise ValueError("whole-word masking needs the batch's word ids (sentcl pretrain's data)")
        words = batch.word_ids if c.whole_word else None
        return mlm_term(
            self.require_encoder(),
            self.head,
            batch.input_ids,
            batch.attention_mask,
            c.mlm_probability,
            words,
            generator,
        )

    def forward(self, batch: Batch) -> ObjectiveOutput:
        loss = self.masked_loss(batch)
        return ObjectiveOutput(loss=self.config.mlm_weight * loss, terms={"mlm": loss.detach()})


class WithMLM(Objective):
    """``inner`` + λ · L_MLM on every view of the batch (SimCSE's ``do_mlm``, λ = 0.1 there)."""

    def __init__(self, inner: Objective, weight: float, probability: float):
        nn.Module.__init__(self)
        self.inner, self.weight, self.probability = inner, weight, probability
        self.head = inner.require_encoder().masked_lm_head()

    @property
    def encoder(self) -> TrainableEncoder | None:
        return self.inner.encoder  # one registration of the encoder: the inner objective's

    @encoder.setter
    def encoder(self, value: object) -> None:
        raise AttributeError("WithMLM's encoder is its inner objective's: set inner.encoder")

    @property
    def config(self) -> ObjectiveConfig:
        return self.inner.config

    @config.setter
    def config(self, value: object) -> None:
        raise AttributeError("WithMLM's config is its inner objective's: set inner.config")

    def forward(self, batch: Batch) -> ObjectiveOutput:
        output = self.inner(batch)
        mlm = mlm_term(
            self.inner.require_encoder(), self.head, batch.input_ids, batch.attention_mask, self.probability
        )
        return ObjectiveOutput(
            loss=output.loss + self.weight * mlm, terms=output.terms | {"mlm": mlm.detach()}
        )
