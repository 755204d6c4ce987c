"""Masked language modelling as an auxiliary objective (SimCSE's ``do_mlm``; the base of CLINE and TaCL).

    L = L_objective + λ · L_MLM,   λ = 0.1 in SimCSE

Masking is BERT's (15 % of the non-special, non-padding tokens; of those 80 % → [MASK], 10 % → a
random token, 10 % kept) on the batch's own ids; whole-word masking is an option (``sentcl
pretrain``). The masked ids go through the *same* backbone a second time; the head is the backbone's
own MLM head where the checkpoint has one (BERT's ``cls.predictions``, RoBERTa's ``lm_head``), a fresh
one of the same architecture otherwise (e.g. all-MiniLM-L6-v2, saved without it); either way its
decoder is tied to the backbone's input embeddings. Only the selected positions go through the head,
so the vocabulary projection costs 15 % of a full one.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM

from sentcl.model import ModelLoadError, SentenceEncoder, backbone_states
from sentcl.model.backbone import resolve_model_path
from sentcl.objectives.base import Objective, ObjectiveOutput, keep_reference

logger = logging.getLogger(__name__)


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    tokenizer,
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


def split_mlm_model(full: nn.Module, source: str) -> tuple[nn.Module, nn.Module]:
    """(backbone, MLM head) of an ``AutoModelForMaskedLM`` model, e.g. (``bert``, ``cls``)."""
    prefix = full.base_model_prefix
    heads = [module for name, module in full.named_children() if name != prefix]
    if len(heads) != 1:
        raise ModelLoadError(f"{source}: cannot tell the MLM head apart from the backbone")
    return full.base_model, heads[0]


def build_mlm_head(encoder: SentenceEncoder) -> nn.Module:
    """The checkpoint's MLM head (fresh where it has none), decoder tied to the encoder's embeddings."""
    source = resolve_model_path(getattr(encoder, "source", None) or encoder.backbone.name_or_path)
    try:
        full, info = AutoModelForMaskedLM.from_pretrained(source, output_loading_info=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{source}: no masked-LM head for this architecture ({exc})") from None
    _, head = split_mlm_model(full, source)
    fresh = any(not key.startswith(full.base_model_prefix) for key in info["missing_keys"])
    logger.info("MLM head: %s", "fresh (the checkpoint has none)" if fresh else "the checkpoint's own")
    decoder = full.get_output_embeddings()
    decoder.weight = encoder.backbone.get_input_embeddings().weight  # tied, as in BERT
    return head.to(encoder.device)


def mlm_loss(encoder: SentenceEncoder, head: nn.Module, masked: torch.Tensor, attention_mask, labels):
    """Cross-entropy of the head's predictions at the masked positions only."""
    return masked_lm_loss(encoder.backbone, head, masked, attention_mask, labels, encoder.unpads_training())


def masked_lm_loss(
    backbone: nn.Module, head: nn.Module, masked: torch.Tensor, attention_mask, labels, unpad: bool = False
):
    """Cross-entropy of ``head`` on ``backbone``'s states at the masked positions only (``unpad``: the
    backbone sees the real tokens only, model/packing.py)."""
    hidden, _ = backbone_states(backbone, masked, attention_mask, unpad=unpad)
    return head_loss(head, hidden, labels)


def head_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``head`` on ``hidden`` [N, L, H] at the positions whose label is not −100."""
    selected = labels != -100
    if not selected.any():
        return hidden.sum() * 0.0  # keeps the graph; nothing was masked in this batch
    logits = head(hidden[selected])
    return F.cross_entropy(logits.float(), labels[selected])


class WithMLM(Objective):
    """``inner`` + λ · MLM on every view of the batch (SimCSE masks all of them)."""

    supports_gradcache = False

    def __init__(self, inner: Objective, encoder: SentenceEncoder, weight: float, probability: float):
        super().__init__()
        self.inner, self.weight, self.probability = inner, weight, probability
        self.head = build_mlm_head(encoder)
        keep_reference(self, "encoder", encoder)

    def bind_records(self, records) -> None:
        self.inner.bind_records(records)

    def forward(self, encoded, batch=None) -> ObjectiveOutput:
        if batch is None:
            raise ValueError("the MLM objective needs the batch's token ids")
        output = self.inner(encoded, batch)
        length = batch.input_ids.shape[-1]
        ids, mask = batch.input_ids.reshape(-1, length), batch.attention_mask.reshape(-1, length)
        masked, labels = mask_tokens(ids, mask, self.encoder.tokenizer, self.probability)
        mlm = mlm_loss(self.encoder, self.head, masked, mask, labels)
        return ObjectiveOutput(
            loss=output.loss + self.weight * mlm, terms=output.terms | {"mlm": mlm.detach()}
        )
