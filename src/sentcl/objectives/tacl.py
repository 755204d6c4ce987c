"""TaCL (Su et al., NAACL Findings 2022): token-aware contrastive learning, a continued pre-training.

A *student* (the encoder being trained) and a frozen *teacher* start from the same checkpoint. The
student reads the masked sequence x̃ (BERT masking), the teacher the original x. For every masked
position i the student's state h̃_i is pulled to the teacher's state h_i at the same position and
pushed from the teacher's states at the other positions of the same sequence:

    L_TaCL = −1/|M| Σ_{i∈M} log exp(cos(h̃_i, h_i)/τ) / Σ_{j ∈ x} exp(cos(h̃_i, h_j)/τ)
    L = L_TaCL + λ · L_MLM        (λ = 1: TaCL trains with its MLM term)

The MLM term is computed on the same masked pass of the student (so TaCL adds one teacher pass, not a
second student pass); its head is the checkpoint's own (e.g. a ``sentcl pretrain`` model) or a fresh
tied one. TaCL needs no sentence embeddings: it runs its own passes only (no ``loss_from_embeddings``,
so no GradCache). Its paper's τ is 0.01 (our reading); cosine similarity of last-layer
states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F

from sentcl.model import SentenceEncoder
from sentcl.objectives.base import ContrastiveConfig, ObjectiveOutput
from sentcl.objectives.masked_lm import MaskedLMObjective, head_loss, mask_tokens
from sentcl.objectives.similarity import fp32_products, full

if TYPE_CHECKING:
    from sentcl.data.collate import Batch


@dataclass
class TaCLConfig(ContrastiveConfig):
    temperature: float = 0.01
    #: λ of TaCL's own MLM term (on the student's masked pass)
    mlm_weight: float = 1.0

    def validate(self) -> None:
        super().validate()


def token_contrastive_loss(
    student: torch.Tensor,  # [N, L, H] states of the masked sequences
    teacher: torch.Tensor,  # [N, L, H] states of the original sequences
    attention_mask: torch.Tensor,  # [N, L]
    selected: torch.Tensor,  # [N, L] bool: the masked positions (the anchors)
    temperature: float,
) -> torch.Tensor:
    """Mean over the selected positions of −log softmax over the same sequence's teacher positions."""
    if not selected.any():
        return student.sum() * 0.0
    with fp32_products(student.device):  # the similarities in fp32 under training.autocast too
        logits = F.normalize(full(student), dim=-1) @ F.normalize(full(teacher), dim=-1).transpose(1, 2)
    logits = (logits / temperature).masked_fill(attention_mask[:, None, :] == 0, float("-inf"))
    own = logits.log_softmax(-1).diagonal(dim1=1, dim2=2)  # [N, L]: position i against teacher i
    return -own[selected].mean()


class TaCL(MaskedLMObjective):
    config: TaCLConfig
    paper = (
        "Su et al., TaCL: Improving BERT Pre-training with Token-aware Contrastive Learning, "
        "Findings of NAACL 2022"
    )
    untrained_poolers: ClassVar[dict[str, str]] = {
        name: "is never trained by TaCL: its token-level loss is on masked positions only, and special "
        "tokens are never masked; use avg (the tokens it trains)"
        for name in ("cls", "cls_before_pooler")
    }

    def __init__(
        self, config: TaCLConfig | None = None, encoder: SentenceEncoder | None = None, data: Any = None
    ):
        super().__init__(config or TaCLConfig(), encoder)
        self.teacher = self.require_encoder().frozen_copy()
        self.head = self.require_encoder().masked_lm_head()

    def forward(self, batch: Batch) -> ObjectiveOutput:
        c = self.config
        length = batch.input_ids.shape[-1]
        ids, mask = batch.input_ids.reshape(-1, length), batch.attention_mask.reshape(-1, length)
        encoder = self.require_encoder()
        masked, labels = mask_tokens(ids, mask, encoder.tokenizer, c.mlm_probability)
        student = encoder.token_states(masked, mask)
        with torch.no_grad():
            teacher = self.teacher.token_states(ids, mask)
        contrast = token_contrastive_loss(student, teacher, mask, labels != -100, c.temperature)
        mlm = head_loss(self.head, student, labels)
        return ObjectiveOutput(
            loss=contrast + c.mlm_weight * mlm, terms={"tacl": contrast.detach(), "mlm": mlm.detach()}
        )
