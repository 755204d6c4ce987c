"""Masked language modelling as an auxiliary objective (SimCSE's ``do_mlm``; the base of CLINE and TaCL).

    L = L_objective + λ · L_MLM,   λ = 0.1 in SimCSE

Masking is BERT's (15 % of the non-special, non-padding tokens; of those 80 % → [MASK], 10 % → a
random token, 10 % kept), done by transformers' ``DataCollatorForLanguageModeling`` on the batch's own
ids. The masked ids go through the *same* backbone a second time; the head is the backbone's own MLM
head where the checkpoint has one (BERT's ``cls.predictions``, RoBERTa's ``lm_head``), a fresh one of
the same architecture otherwise (e.g. all-MiniLM-L6-v2, saved without it); either way its decoder is
tied to the backbone's input embeddings. Only the selected positions go through the head, so the
vocabulary projection costs 15 % of a full one.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM, DataCollatorForLanguageModeling

from sentcl.model import ModelLoadError, SentenceEncoder
from sentcl.model.backbone import resolve_model_path
from sentcl.objectives.base import Objective, ObjectiveOutput, keep_reference

logger = logging.getLogger(__name__)


def mask_tokens(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer, probability: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking of ``input_ids`` [N, L] → (masked ids, labels with −100 where nothing is predicted)."""
    if tokenizer.mask_token_id is None:
        raise ModelLoadError("the tokenizer has no [MASK] token; MLM needs one")
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=probability)
    ids = input_ids.detach().to("cpu")
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids)) | (attention_mask.to("cpu") == 0)
    masked, labels = collator.torch_mask_tokens(ids.clone(), special_tokens_mask=special)
    return masked.to(input_ids.device), labels.to(input_ids.device)


def build_mlm_head(encoder: SentenceEncoder) -> nn.Module:
    """The checkpoint's MLM head (fresh where it has none), decoder tied to the encoder's embeddings."""
    source = resolve_model_path(getattr(encoder, "source", None) or encoder.backbone.name_or_path)
    try:
        full, info = AutoModelForMaskedLM.from_pretrained(source, output_loading_info=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{source}: no masked-LM head for this architecture ({exc})") from None
    prefix = full.base_model_prefix
    heads = [module for name, module in full.named_children() if name != prefix]
    if len(heads) != 1:
        raise ModelLoadError(f"{source}: cannot tell the MLM head apart from the backbone")
    head = heads[0]
    fresh = any(not key.startswith(prefix) for key in info["missing_keys"])
    logger.info("MLM head: %s", "fresh (the checkpoint has none)" if fresh else "the checkpoint's own")
    decoder = full.get_output_embeddings()
    decoder.weight = encoder.backbone.get_input_embeddings().weight  # tied, as in BERT
    return head.to(encoder.device)


def mlm_loss(encoder: SentenceEncoder, head: nn.Module, masked: torch.Tensor, attention_mask, labels):
    """Cross-entropy of the head's predictions at the masked positions only."""
    hidden = encoder.backbone(input_ids=masked, attention_mask=attention_mask).last_hidden_state
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
