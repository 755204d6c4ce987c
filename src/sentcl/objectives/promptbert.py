"""PromptBERT (Jiang et al., EMNLP 2022), unsupervised: two templates are the two views of a sentence.

Each sentence is spliced into two templates (the encoder's own, ``model.prompt_template``, which is also how
it is read when encoding, and ``second_template``); each view's vector is the last layer's state at [MASK]
minus the same template's state at [MASK] with no sentence in it, its positions shifted by the sentence's
length (*template denoising*: what the template alone contributes); an MLP of the objective's own (trained,
then dropped, as SimCSE's ``mlp_only_train``) maps both; SimCSE's InfoNCE at τ ties them:

    h_k = state_[MASK](template_k(s)) − state_[MASK](template_k(∅), positions + |s|),   z_k = MLP(h_k)
    L = InfoNCE(z_1, z_2)

Encoding reads the sentence with the encoder's template and no denoising, as the reference evaluates its
unsupervised models. Needs ``model.pooler: prompt``. Defaults: the reference's unsupervised BERT pair of
templates (kongds/Prompt-BERT ``run.sh``, ``unsup-bert``); docs/methods/promptbert.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, Objective, ObjectiveOutput
from sentcl.objectives.simcse import info_nce_loss


@dataclass
class PromptBERTConfig(ContrastiveConfig):
    #: the second view's template (the first is the encoder's model.prompt_template)
    second_template: str = 'This sentence : "[X]" means [MASK] .'
    #: template denoising (the reference's --mask_embedding_sentence_delta)
    denoise: bool = True


class PromptBERT(Objective):
    """Unsupervised PromptBERT on one-sentence rows (see the module's docstring)."""

    config: PromptBERTConfig
    matryoshka_refusal = "maps its views through an MLP of its own"
    paper = "Jiang et al., PromptBERT: Improving BERT Sentence Embeddings with Prompts, EMNLP 2022"

    def __init__(self, config: PromptBERTConfig | None = None, encoder=None, data=None):
        super().__init__(config or PromptBERTConfig(), encoder)
        encoder = self.require_encoder()
        if encoder.pooler != "prompt":
            raise ConfigError(
                "model.pooler: PromptBERT trains the prompt representation; set model.pooler: prompt (and "
                "model.prompt_template, the first view's template)"
            )
        self.first_template = encoder.prompt_template
        hidden = encoder.hidden_size
        dense = nn.Linear(hidden, hidden)
        nn.init.normal_(dense.weight, std=encoder.initializer_range)  # as BERT initialises its layers
        nn.init.zeros_(dense.bias)
        self.mlp = nn.Sequential(dense, nn.Tanh())  # SimCSE's MLP, used in training only

    def view(self, input_ids, attention_mask, template: str) -> torch.Tensor:
        encoder = self.require_encoder()
        states, lengths = encoder.prompt_states(input_ids, attention_mask, template)
        if self.config.denoise:
            states = states - encoder.template_bias(template, lengths)
        return self.mlp(states.float())

    def forward(self, batch) -> ObjectiveOutput:
        ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
        first = self.view(ids, mask, self.first_template)
        second = self.view(ids, mask, self.config.second_template)
        loss = info_nce_loss(first, second, temperature=self.config.temperature)  # on cosines
        return ObjectiveOutput(loss=loss, terms={"promptbert": loss.detach()})
