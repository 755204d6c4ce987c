"""MoCo (He et al., CVPR 2020) for sentences: a momentum key encoder and a queue of past keys.

* query q_i = the trained encoder's embedding of view 0 (with its head, dropout on);
* key k_i = the key encoder's embedding of view 1 (view 0 again when the data has one view: the key
  encoder's own dropout makes it a second view, as in SimCSE), computed without gradient;
* the key encoder is an exponential moving average of the trained one, updated before each step's keys:
  θ_k ← m·θ_k + (1 − m)·θ_q;
* negatives: the queue (FIFO of the last ``queue_size`` keys, L2-normalised) and, when
  ``in_batch_negatives`` (SimCSE's in-batch negatives; ESimCSE's setting), the other keys of the batch;
* ℓ_i = −log e^{q_i·k_i/τ} / (Σ_j e^{q_i·k_j/τ} [in-batch] + Σ_{n∈queue} e^{q_i·n/τ}), on cosines;
* the batch's keys are enqueued after the loss; nothing flows into keys or the queue.

Only the filled part of the queue is used (MoCo starts from random vectors; with sentence-sized queues
that would add noise for the first steps). The key encoder and the queue are part of the objective's
state, so a checkpoint holds them and resume is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.similarity import fp32_products, full, gather_with_grad

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class MoCoConfig(ContrastiveConfig):
    queue_size: int = 256
    momentum: float = 0.995  # ESimCSE's for sentences; MoCo uses 0.999 with far longer runs
    in_batch_negatives: bool = True

    def validate(self) -> None:
        super().validate()
        if self.queue_size < 0:
            raise ConfigError(f"queue_size: must be ≥ 0, got {self.queue_size}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum: must be in [0, 1), got {self.momentum}")


class MoCo(ContrastiveObjective):
    config: MoCoConfig
    queue: torch.Tensor  # [Q, D] keys, a buffer
    queue_pointer: torch.Tensor
    queue_filled: torch.Tensor
    matryoshka_refusal = "keeps a queue of full-dimension keys"
    paper = (
        "He, Fan, Wu, Xie & Girshick, "
        "Momentum Contrast for Unsupervised Visual Representation Learning, CVPR 2020"
    )

    def __init__(
        self, config: MoCoConfig | None = None, encoder: TrainableEncoder | None = None, data: Any = None
    ):
        super().__init__(config or MoCoConfig(), encoder)
        trained = self.require_encoder()
        self.key_encoder = trained.momentum_copy()
        self.register_buffer("queue", torch.zeros(self.config.queue_size, trained.output_dim))
        self.register_buffer("queue_pointer", torch.zeros((), dtype=torch.long))
        self.register_buffer("queue_filled", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        size = self.queue.shape[0]
        if size == 0:
            return
        keys = keys[-size:]
        positions = (self.queue_pointer + torch.arange(len(keys), device=keys.device)) % size
        self.queue[positions] = keys
        self.queue_pointer.copy_((self.queue_pointer + len(keys)) % size)
        self.queue_filled.copy_(torch.clamp(self.queue_filled + len(keys), max=size))

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        """Queries are ``embeddings[:, 0]``; the keys come from the key encoder's pass on the batch's ids
        (no gradient, so GradCache can chunk the query passes)."""
        if batch is None:
            raise ValueError("MoCo needs the batch's token ids for its key encoder")
        c = self.config
        self.key_encoder.follow(self.require_encoder(), c.momentum)  # θ_k ← m·θ_k + (1 − m)·θ_q
        view = min(1, batch.input_ids.shape[1] - 1)
        with torch.no_grad():
            keys = self.key_encoder.embed_tokens(batch.input_ids[:, view], batch.attention_mask[:, view])
            keys = F.normalize(keys.float(), dim=-1)
        queries = F.normalize(full(embeddings[:, 0]), dim=-1)
        all_keys, offset = gather_with_grad(keys)  # no gradient exists to flow; this only gathers
        rows = torch.arange(len(queries), device=queries.device)
        queued = self.queue[: int(self.queue_filled)].clone()  # enqueue below changes the buffer in place
        with fp32_products(queries.device):
            if c.in_batch_negatives:
                logits, target = queries @ full(all_keys).T, offset + rows
            else:
                logits, target = (queries * keys).sum(-1, keepdim=True), torch.zeros_like(rows)
            if len(queued):
                logits = torch.cat([logits, queries @ full(queued).T], dim=1)
        loss = F.cross_entropy(logits / c.temperature, target)
        self.enqueue(all_keys)
        return ObjectiveOutput(
            loss=loss, terms={"moco": loss.detach(), "queue": self.queue_filled.detach().float()}
        )
