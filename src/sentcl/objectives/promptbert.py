"""PromptBERT (Jiang et al., EMNLP 2022): the [MASK] state of a sentence in a template, trained contrastively.

Unsupervised (``supervised: false``, one-sentence rows): two templates are the two views of a sentence.

Each sentence is spliced into two templates (the encoder's own, ``model.prompt_template``, which is also how
it is read when encoding, and ``second_template``); each view's vector is the last layer's state at [MASK]
minus the same template's state at [MASK] with no sentence in it, its positions shifted by the sentence's
length (*template denoising*: what the template alone contributes); an MLP of the objective's own (trained,
then dropped, as SimCSE's ``mlp_only_train``) maps both; SimCSE's InfoNCE at τ ties them:

    h_k = state_[MASK](template_k(s)) − state_[MASK](template_k(∅), positions + |s|),   z_k = MLP(h_k)
    L = InfoNCE(z_1, z_2)

Encoding reads the sentence with the encoder's template and no denoising, as the reference evaluates its
unsupervised models.

Supervised (``supervised: true``, NLI rows: anchor, entailment[, contradiction]): every sentence in the
encoder's template, each denoised, no MLP of the objective's own (the encoder's prompt head f where it has
one, ``model.prompt_head``, the reference's; else the identity); SimCSE's supervised InfoNCE (the
contradiction a hard negative of weight α) ties them:

    h(s) = f(state_[MASK](template(s))) − f(state_[MASK](template(∅), positions + |s|))
    L = InfoNCE(h(anchor), h(entailment); hard negative h(contradiction))

and the model is read with the same denoising (``model.prompt_denoise: true``), as the reference evaluates its
supervised models. Needs ``model.pooler: prompt``. Defaults: the reference's unsupervised BERT pair of
templates (kongds/Prompt-BERT ``run.sh``, ``unsup-bert``); docs/methods/promptbert.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from sentcl.config import ConfigError
from sentcl.model import SentenceEncoder
from sentcl.objectives.base import Objective, ObjectiveOutput
from sentcl.objectives.simcse import SimCSEConfig, info_nce_loss

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder

logger = logging.getLogger(__name__)


@dataclass
class PromptBERTConfig(SimCSEConfig):
    #: the unsupervised setting's second template (the first is the encoder's model.prompt_template)
    second_template: str = 'This sentence : "[X]" means [MASK] .'
    #: template denoising in training (the reference's --mask_embedding_sentence_delta)
    denoise: bool = True
    #: NLI rows (anchor, entailment[, contradiction]) in one template, no MLP; false: one-sentence rows in
    #: two templates through an MLP
    supervised: bool = False


class PromptBERT(Objective):
    """PromptBERT, unsupervised on one-sentence rows or supervised on NLI rows (the module docstring)."""

    config: PromptBERTConfig
    matryoshka_refusal = "maps its views through an MLP of its own"
    trains_prompt = True  # model.pooler: prompt is its representation
    paper = "Jiang et al., PromptBERT: Improving BERT Sentence Embeddings with Prompts, EMNLP 2022"

    def __init__(
        self,
        config: PromptBERTConfig | None = None,
        encoder: TrainableEncoder | None = None,
        data: Any = None,
    ):
        super().__init__(config or PromptBERTConfig(), encoder)
        encoder = self.require_encoder()
        if encoder.pooler != "prompt":
            raise ConfigError(
                "model.pooler: PromptBERT trains the prompt representation; set model.pooler: prompt (and "
                "model.prompt_template, the first view's template)"
            )
        self.first_template: str = getattr(
            encoder, "prompt_template", ""
        )  # a transformer encoder's (pooler: prompt)
        read_denoised: bool = getattr(encoder, "prompt_denoise", False)
        if self.config.supervised and self.config.denoise != read_denoised:
            logger.warning(
                "PromptBERT, supervised: trained %s template denoising but read %s it (model.prompt_denoise: "
                "%s); the reference reads its supervised models as it trains them",
                "with" if self.config.denoise else "without",
                "with" if read_denoised else "without",
                str(read_denoised).lower(),
            )
        self.mlp: nn.Module | None = None
        if not self.config.supervised:  # SimCSE's MLP, used in training only
            hidden = encoder.hidden_size
            dense = nn.Linear(hidden, hidden)
            nn.init.normal_(dense.weight, std=encoder.initializer_range)  # as BERT initialises its layers
            nn.init.zeros_(dense.bias)
            self.mlp = nn.Sequential(dense, nn.Tanh())

    def denoised(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, template: str) -> torch.Tensor:
        """[N, H] the [MASK] states of [N, L] sentences in ``template``, denoised where configured."""
        encoder = self.require_encoder()
        assert isinstance(
            encoder, SentenceEncoder
        )  # the prompt pooler is a transformer's (its recipe checks)
        return encoder.prompt_vectors(input_ids, attention_mask, template, self.config.denoise).float()

    def forward(self, batch: Batch) -> ObjectiveOutput:
        ids, mask = batch.input_ids, batch.attention_mask
        views = ids.shape[1]
        c = self.config
        if not c.supervised:
            if views != 1:
                raise ValueError(
                    f"unsupervised PromptBERT reads one sentence per row (data.n_views: 1), got {views} "
                    "views; for NLI rows set objective.supervised: true"
                )
            assert self.mlp is not None
            first = self.mlp(self.denoised(ids[:, 0], mask[:, 0], self.first_template))
            second = self.mlp(self.denoised(ids[:, 0], mask[:, 0], c.second_template))
            loss = info_nce_loss(first, second, temperature=c.temperature)  # on cosines
            return ObjectiveOutput(loss=loss, terms={"promptbert": loss.detach()})
        if views not in (2, 3):
            raise ValueError(
                f"supervised PromptBERT reads (anchor, entailment[, contradiction]) rows, got {views} view(s)"
            )
        size, length = ids.shape[0], ids.shape[2]
        flat = self.denoised(ids.reshape(-1, length), mask.reshape(-1, length), self.first_template)
        h = flat.reshape(size, views, -1)  # one backbone pass over every sentence of the batch
        loss = info_nce_loss(
            h[:, 0],
            h[:, 1],
            h[:, 2] if views == 3 else None,
            temperature=c.temperature,
            hard_negative_weight=c.hard_negative_weight,
        )
        return ObjectiveOutput(loss=loss, terms={"promptbert": loss.detach()})
