"""Self-guided contrastive learning, SG and SG-OPT (Kim et al., ACL 2021).

The encoder is cloned at the start: BERT_F stays frozen (no dropout), BERT_T is trained (its embedding
layer frozen too, ``freeze_embeddings``). For each sentence s_i of the batch:

* c_i = BERT_T(s_i): the sentence vector being trained — the recipe's pooler; the paper's is the last
  layer's [CLS] (``model.pooler: cls_before_pooler``);
* h_{i,k} = pool(H_{i,k}) for every layer k = 0…L of BERT_F (max pooling over the tokens in the paper);
  SG samples one layer per sentence uniformly, h_i = h_{i,σ(i)}.

Both go through a projection head f (Linear d→4096, GELU, Linear 4096→4096, GELU; used in training only)
and cosine similarity with temperature τ:

* **SG**: NT-Xent over the 2b vectors {f(c_i)} ∪ {f(h_i)}, (c_i, h_i) the positive pairs;
* **SG-OPT** (``optimised: true``): only c_i is an anchor (the h–h edges are dropped), the c–c edges are
  dropped, and every layer of BERT_F guides c_i:
      L = −1/(b·(L+1)) Σ_i Σ_k log e^{φ(c_i,h_{i,k})} / (e^{φ(c_i,h_{i,k})} + Σ_{m≠i} Σ_n e^{φ(c_i,h_{m,n})})

plus the regulariser that keeps BERT_T near BERT_F: λ · Σ_θ ‖θ_T − θ_F‖². Defaults are the paper's
code: τ = 0.01, λ = 0.1, embeddings frozen, all layers (0…L). Negatives are this process's batch only
(no cross-rank gathering).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

import torch
from torch import nn

from sentcl.config import ConfigError
from sentcl.model import SentenceEncoder
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.nt_xent import nt_xent_loss
from sentcl.objectives.similarity import cosine_matrix

if TYPE_CHECKING:
    from sentcl.data.collate import Batch


@dataclass
class SGOPTConfig(ContrastiveConfig):
    temperature: float = 0.01
    #: λ of Σ ‖θ_T − θ_F‖²
    regularizer_weight: float = 0.1
    #: SG-OPT's redesigned loss (c anchors only, no c–c edges, all layers as positives); false = SG
    optimised: bool = True
    #: how a layer's token states become h_{i,k}
    layer_pooling: Literal["max", "mean"] = "max"
    projection_size: int = 4096
    #: keep BERT_T's embedding layer (layer 0) fixed, as the paper does
    freeze_embeddings: bool = True

    def validate(self) -> None:
        super().validate()
        if self.regularizer_weight < 0:
            raise ConfigError(f"regularizer_weight: must be ≥ 0, got {self.regularizer_weight}")
        if self.projection_size < 1:
            raise ConfigError(f"projection_size: must be positive, got {self.projection_size}")


def pool_layers(
    hidden_states: tuple[torch.Tensor, ...], attention_mask: torch.Tensor, how: str
) -> torch.Tensor:
    """Every layer's token states [N, L, H] → one vector per layer: [N, K, H] (padding ignored)."""
    stacked = torch.stack(hidden_states, dim=1)  # [N, K, L, H]
    mask = attention_mask[:, None, :, None].bool()
    if how == "max":
        return stacked.masked_fill(~mask, torch.finfo(stacked.dtype).min).amax(dim=2)
    return (stacked * mask).sum(2) / mask.sum(2).clamp(min=1)


def sg_opt_loss(c: torch.Tensor, h: torch.Tensor, temperature: float) -> torch.Tensor:
    """SG-OPT: c [B, D] anchors, h [B, K, D] every layer's guidance; negatives h_{m,n} for m ≠ i."""
    batch, layers, dim = h.shape
    logits = cosine_matrix(c, h.reshape(batch * layers, dim)).view(batch, batch, layers) / temperature
    rows = torch.arange(batch, device=c.device)
    positives = logits[rows, rows]  # [B, K]
    others = ~torch.eye(batch, dtype=torch.bool, device=c.device)
    negatives = logits[others].view(batch, (batch - 1) * layers).logsumexp(-1, keepdim=True)  # [B, 1]
    return (torch.logaddexp(positives, negatives) - positives).mean()


def projection_head(hidden: int, size: int, init_std: float) -> nn.Sequential:
    first, second = nn.Linear(hidden, size), nn.Linear(size, size)
    for layer in (first, second):
        nn.init.normal_(layer.weight, std=init_std)
        nn.init.zeros_(layer.bias)
    return nn.Sequential(first, nn.GELU(), second, nn.GELU())


class SGOPT(ContrastiveObjective):
    config: SGOPTConfig
    matryoshka_refusal = "projects the full embedding with its own head"
    paper = "Kim, Yoo & Lee, Self-Guided Contrastive Learning for BERT Sentence Representations, ACL 2021"
    untrained_poolers: ClassVar[dict[str, str]] = {
        "cls": "puts SimCSE's tanh MLP head in front of SG-OPT's own projection head, which the paper does "
        "not have; use cls_before_pooler (the paper's last-layer [CLS]) or avg"
    }

    def __init__(
        self, config: SGOPTConfig | None = None, encoder: SentenceEncoder | None = None, data: Any = None
    ):
        super().__init__(config or SGOPTConfig(), encoder)
        c, trained = self.config, self.require_encoder()
        self.fixed = trained.frozen_copy()  # BERT_F
        if c.freeze_embeddings:
            trained.freeze_input_embeddings()
        self.projection = projection_head(trained.hidden_size, c.projection_size, trained.initializer_range)

    def regularizer(self) -> torch.Tensor:
        """Σ_θ ‖θ_T − θ_F‖² over BERT_T's trained parameters (the two encoders share one architecture)."""
        fixed = dict(self.fixed.named_parameters())
        tuned = self.require_encoder().named_parameters()
        return cast(torch.Tensor, sum((p - fixed[name]).pow(2).sum() for name, p in tuned if p.requires_grad))

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        """c_i = ``embeddings[:, 0]`` (BERT_T); the guidance h comes from BERT_F's no-gradient pass on the
        batch's ids, and the regulariser reaches the parameters directly (GradCache keeps both)."""
        if batch is None:
            raise ValueError("SG-OPT needs the batch's token ids for BERT_F")
        c = self.config
        anchors = embeddings[:, 0]  # c_i from BERT_T, [B, D]
        ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
        with torch.no_grad():
            states = self.fixed.token_states(ids, mask, all_layers=True)
            guidance = pool_layers(states, mask, c.layer_pooling)  # [B, K, D]
        projected_c = self.projection(anchors)
        projected_h = self.projection(guidance)
        if c.optimised:
            contrast = sg_opt_loss(projected_c, projected_h, c.temperature)
        else:
            sampled = torch.randint(guidance.shape[1], (len(anchors),), device=anchors.device)
            pairs = torch.stack([projected_c, projected_h[torch.arange(len(anchors)), sampled]], dim=1)
            contrast = nt_xent_loss(pairs, pairs, c.temperature)
        regularizer = self.regularizer() if c.regularizer_weight > 0 else anchors.new_zeros(())
        return ObjectiveOutput(
            loss=contrast + c.regularizer_weight * regularizer,
            terms={"sg": contrast.detach(), "regularizer": regularizer.detach()},
        )
