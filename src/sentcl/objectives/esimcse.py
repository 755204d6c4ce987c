"""ESimCSE (Wu et al., COLING 2022): SimCSE with word-repetition positives and a momentum queue of negatives.

* **Positive by repetition.** SimCSE's two dropout views of a sentence have the same length, so the model can
  tell a positive by its length. ESimCSE makes the positive view longer: in each sentence's token ids (the
  reference's default ``dup_type bpe``), ``add`` tokens are duplicated in place, ``add`` drawn uniformly from
  0 … min(10, ⌊dup_rate · n⌋) − 1 (n tokens with [CLS] and [SEP]; none when ⌊dup_rate · n⌋ = 0), at
  positions drawn without replacement among the tokens between [CLS] and [SEP].
* **Momentum queue.** A momentum copy of the encoder (θ_m ← m·θ_m + (1 − m)·θ, every step, after the
  trained pass) encodes each batch's sentences without dropout; the last ``queue_size`` of those vectors are
  extra negatives for the next steps.

    ℓ_i = −log e^{cos(z_i, z⁺_i)/τ} / (Σ_j e^{cos(z_i, z⁺_j)/τ} + Σ_{q ∈ queue} e^{cos(z_i, q)/τ})

z_i is the sentence's dropout view, z⁺_i its repeated view (dropout too). Defaults: the paper's BERT-base
settings (dup_rate 0.32, queue 160 = 2.5 × batch 64, momentum 0.995, τ 0.05). The repetition is drawn anew
every step (the reference draws it once, when the data are prepared): docs/methods/esimcse.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.model import pad_rows
from sentcl.objectives.base import ContrastiveConfig, Objective, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class ESimCSEConfig(ContrastiveConfig):
    dup_rate: float = 0.32
    queue_size: int = 160
    momentum: float = 0.995

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.dup_rate <= 1:
            raise ConfigError(f"dup_rate: must be in [0, 1], got {self.dup_rate}")
        if self.queue_size < 0:
            raise ConfigError(f"queue_size: must be ≥ 0, got {self.queue_size}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum: must be in [0, 1), got {self.momentum}")


def repeat_tokens(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, dup_rate: float, pad_token_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, L] ids and mask → the repeated view [N, L'] (see the module's docstring), padded with
    ``pad_token_id``; torch's random generator draws the counts and positions."""
    rows = []
    for ids, mask in zip(input_ids, attention_mask, strict=True):
        real = ids[mask.bool()]
        n = len(real)
        cap = min(10, int(dup_rate * n))
        add = int(torch.randint(cap, ()).item()) if cap > 0 and n > 2 else 0
        positions = torch.randperm(n - 2)[:add] + 1 if add else torch.zeros(0, dtype=torch.long)
        counts = torch.ones(n, dtype=torch.long)
        counts[positions] = 2
        rows.append(torch.repeat_interleave(real, counts.to(real.device)))
    out, out_mask = pad_rows(rows, pad_token_id)
    return out, out_mask.to(attention_mask.dtype)


class ESimCSE(Objective):
    """ESimCSE on one-sentence rows (the dropout view and the repeated view of each; see the docstring)."""

    config: ESimCSEConfig
    queue: torch.Tensor  # [Q, D], the momentum encoder's vectors of past batches (a buffer)
    queue_filled: torch.Tensor
    matryoshka_refusal = "keeps a queue of full-dimension vectors"
    paper = (
        "Wu, Gao, Zhang, Lin & Hu, ESimCSE: Enhanced Sample Building Method for Contrastive Learning of "
        "Unsupervised Sentence Embedding, COLING 2022"
    )

    def __init__(
        self, config: ESimCSEConfig | None = None, encoder: TrainableEncoder | None = None, data: Any = None
    ):
        super().__init__(config or ESimCSEConfig(), encoder)
        encoder = self.require_encoder()
        self.momentum_encoder = encoder.momentum_copy()
        self.register_buffer("queue", torch.zeros(self.config.queue_size, encoder.output_dim))
        self.register_buffer("queue_filled", torch.zeros((), dtype=torch.long))
        pad = getattr(encoder.tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0

    @torch.no_grad()
    def enqueue(self, vectors: torch.Tensor) -> None:
        """FIFO: the newest ``queue_size`` vectors, oldest first."""
        size = self.queue.shape[0]
        if size == 0:
            return
        kept = torch.cat([self.queue[: int(self.queue_filled)], vectors.float()])[-size:]
        self.queue[: len(kept)] = kept
        self.queue_filled.fill_(len(kept))

    def forward(self, batch: Batch) -> ObjectiveOutput:
        encoder = self.require_encoder()
        ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
        repeated, repeated_mask = repeat_tokens(ids, mask, self.config.dup_rate, self.pad_token_id)
        anchors = encoder.embed_tokens(ids, mask).float()  # [B, D], dropout on
        positives = encoder.embed_tokens(repeated, repeated_mask).float()
        self.momentum_encoder.follow(encoder, self.config.momentum)  # θ_m ← m·θ_m + (1 − m)·θ
        logits = cosine_matrix(anchors, positives)  # [B, B]
        queued = self.queue[: int(self.queue_filled)].clone()
        if len(queued):
            logits = torch.cat([logits, cosine_matrix(anchors, queued)], dim=1)
        loss = F.cross_entropy(
            logits / self.config.temperature, torch.arange(len(anchors), device=ids.device)
        )
        with torch.no_grad():
            was_training = self.momentum_encoder.training
            self.momentum_encoder.eval()  # the reference's queue vectors: no dropout
            self.enqueue(self.momentum_encoder.embed_tokens(ids, mask))
            self.momentum_encoder.train(was_training)
        return ObjectiveOutput(
            loss=loss, terms={"esimcse": loss.detach(), "queue": self.queue_filled.float()}
        )
