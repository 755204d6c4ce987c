"""Independent cropping (Contriever: Izacard, Caron, Hosseini, Riedel, Bojanowski, Joulin & Grave, TMLR 2022):
two random spans of one document are a positive pair.

From each document's tokens (a row of ``data.corpus_unit: document``, cut at ``data.max_length``), two spans
are cropped independently, each of ⌊r·n⌋ tokens with r ~ U(``ratio_min``, ``ratio_max``) (n: the document's
tokens without its special tokens) at a uniform start, then each token of a span is deleted with
probability ``deletion``; the special tokens are put back around each span. The spans' vectors are
contrasted in the batch (the other documents' spans are the negatives):

    ℓ_i = −log e^{cos(q_i, k_i)/τ} / Σ_j e^{cos(q_i, k_j)/τ}

Defaults: the official code's (facebookresearch/contriever, ``example_scripts/contriever.sh``: ratio 0.1–0.5,
token deletion 0.1, τ 0.05). Deviations (docs/methods/cropping.md): cosine instead of the dot product of
unnormalised vectors; in-batch negatives (the code's ``inbatch.py``) rather than the paper's MoCo queue of
131,072; the crops are drawn with torch's generator every step (exact resume).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sentcl.config import ConfigError
from sentcl.model import pad_rows
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.simcse import info_nce_loss
from sentcl.objectives.similarity import gather_with_grad


@dataclass
class CroppingConfig(ContrastiveConfig):
    #: each span's share of the document's tokens, drawn uniformly in [ratio_min, ratio_max]
    ratio_min: float = 0.1
    ratio_max: float = 0.5
    #: each token of a span deleted with this probability (Contriever's "delete" augmentation, 0.1)
    deletion: float = 0.1

    def validate(self) -> None:
        super().validate()
        if not 0 < self.ratio_min <= self.ratio_max <= 1:
            raise ConfigError(
                f"ratio_min, ratio_max: need 0 < ratio_min ≤ ratio_max ≤ 1, got {self.ratio_min}, "
                f"{self.ratio_max}"
            )
        if not 0 <= self.deletion < 1:
            raise ConfigError(f"deletion: must be in [0, 1), got {self.deletion}")


def random_crop(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special: torch.Tensor,
    config: CroppingConfig,
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, L] documents → [N, L'] spans (see the module's docstring), drawn with torch's generator."""
    rows = []
    for ids, mask in zip(input_ids, attention_mask, strict=True):
        real = ids[mask.bool()]
        head = real[:1] if len(real) and bool(torch.isin(real[:1], special)) else real[:0]
        tail = real[-1:] if len(real) > len(head) and bool(torch.isin(real[-1:], special)) else real[:0]
        inner = real[len(head) : len(real) - len(tail)]
        ratio = config.ratio_min + (config.ratio_max - config.ratio_min) * float(torch.rand(()))
        length = max(1, int(len(inner) * ratio)) if len(inner) else 0
        start = int(torch.randint(len(inner) - length + 1, ())) if len(inner) else 0
        span = inner[start : start + length]
        if config.deletion and len(span):
            kept = torch.rand(len(span), device=span.device) > config.deletion
            span = span[kept] if kept.any() else span[:1]
        rows.append(torch.cat([head, span, tail]))
    return pad_rows(rows, pad_token_id)


class Cropping(ContrastiveObjective):
    paper = "Izacard et al., Unsupervised Dense Information Retrieval with Contrastive Learning, TMLR 2022"
    config: CroppingConfig
    special: torch.Tensor

    def __init__(self, config: CroppingConfig | None = None, encoder: Any = None, data: Any = None):
        super().__init__(config or CroppingConfig(), encoder)
        tokenizer = self.require_encoder().tokenizer
        self.pad_token_id = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else 0
        self.register_buffer("special", torch.tensor(sorted(tokenizer.all_special_ids)), persistent=False)

    def forward(self, batch: Any) -> ObjectiveOutput:
        encoder = self.require_encoder()
        ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
        views = [random_crop(ids, mask, self.special, self.config, self.pad_token_id) for _ in range(2)]
        embeddings = torch.stack([encoder.embed_tokens(v, m) for v, m in views], dim=1)  # [B, 2, D]
        return self.embedding_loss(embeddings, batch)

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Any = None) -> ObjectiveOutput:
        candidates, offset = gather_with_grad(embeddings[:, 1:])
        loss = info_nce_loss(
            embeddings[:, 0], candidates[:, 0], temperature=self.config.temperature, offset=offset
        )
        return ObjectiveOutput(loss=loss, terms={"cropping": loss.detach()})
