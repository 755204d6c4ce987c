"""Heads over the backbone: the MLP head SimCSE puts over the [CLS] vector (Linear(H, H) + tanh), the head
supervised PromptBERT puts over the [MASK] state (Linear(H, H), the backbone's activation, LayerNorm), and
the masked-LM head that MLM terms and pre-training predict tokens with.

``train_only`` is SimCSE's ``mlp_only_train``: the head shapes the training objective but encoding
skips it. This flag lives here and nowhere else.
"""

from __future__ import annotations

import logging
from typing import cast

import torch
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel
from transformers.activations import ACT2FN

from sentcl.model.backbone import ModelLoadError, resolve_model_path

logger = logging.getLogger(__name__)


class MLPHead(nn.Module):
    def __init__(self, hidden_size: int, train_only: bool = False, init_std: float = 0.02):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()
        self.train_only = train_only
        # SimCSE initialises its MLP through BERT's _init_weights: N(0, initializer_range), bias 0.
        nn.init.normal_(self.dense.weight, mean=0.0, std=init_std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(pooled))

    def used_when_encoding(self) -> bool:
        return not self.train_only


class PromptHead(nn.Module):
    """Supervised PromptBERT's head (the reference's ``--mask_embedding_sentence_org_mlp``: BERT's
    prediction-head transform, freshly initialised): dense, the backbone's activation, LayerNorm. Applied to
    the [MASK] state and to the template's own state before one is subtracted from the other; kept when
    encoding."""

    def __init__(self, config, init_std: float = 0.02):
        super().__init__()
        hidden = int(config.hidden_size)
        self.dense = nn.Linear(hidden, hidden)
        self.activation = ACT2FN[getattr(config, "hidden_act", "gelu")]
        self.norm = nn.LayerNorm(hidden, eps=float(getattr(config, "layer_norm_eps", 1e-12)))
        nn.init.normal_(self.dense.weight, mean=0.0, std=init_std)  # BERT's _init_weights
        nn.init.zeros_(self.dense.bias)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.dense(states)))


def split_mlm_model(full: PreTrainedModel, source: str) -> tuple[PreTrainedModel, nn.Module]:
    """(backbone, MLM head) of an ``AutoModelForMaskedLM`` model, e.g. (``bert``, ``cls``)."""
    prefix = full.base_model_prefix
    heads = [module for name, module in full.named_children() if name != prefix]
    if len(heads) != 1:
        raise ModelLoadError(f"{source}: cannot tell the MLM head apart from the backbone")
    return cast(PreTrainedModel, full.base_model), heads[0]


def build_mlm_head(backbone: PreTrainedModel, source: str | None = None) -> nn.Module:
    """The checkpoint's MLM head (the backbone's own, e.g. BERT's ``cls.predictions`` or RoBERTa's
    ``lm_head``; fresh of the same architecture where the checkpoint has none, e.g. all-MiniLM-L6-v2),
    its decoder tied to ``backbone``'s input embeddings, as in BERT."""
    source = resolve_model_path(source or backbone.name_or_path or "")
    try:
        full, info = AutoModelForMaskedLM.from_pretrained(source, output_loading_info=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{source}: no masked-LM head for this architecture ({exc})") from None
    _, head = split_mlm_model(full, source)
    fresh = any(not key.startswith(full.base_model_prefix) for key in info["missing_keys"])
    logger.info("MLM head: %s", "fresh (the checkpoint has none)" if fresh else "the checkpoint's own")
    decoder = full.get_output_embeddings()
    assert decoder is not None  # a masked-LM model has an output embedding
    decoder.weight = backbone.get_input_embeddings().weight
    return head.to(next(backbone.parameters()).device)


def build_causal_decoder(backbone: PreTrainedModel, source: str | None = None) -> nn.Module:
    """TSDAE's decoder: ``source``'s architecture as a causal LM with cross-attention (transformers'
    ``AutoModelForCausalLM``, e.g. ``BertLMHeadModel``), its weights loaded from ``source`` as
    sentence-transformers' ``DenoisingAutoEncoderLoss`` loads them (the cross-attention, and a head the
    checkpoint lacks, fresh), then every parameter the decoder shares by name with ``backbone`` *is*
    ``backbone``'s (tied: one tensor, trained by both) and its output embedding is the input embedding."""
    from transformers import AutoConfig, AutoModelForCausalLM

    source = resolve_model_path(source or backbone.name_or_path or "")
    try:
        config = AutoConfig.from_pretrained(source)
        config.is_decoder, config.add_cross_attention = True, True
        decoder = AutoModelForCausalLM.from_pretrained(source, config=config)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{source}: this architecture has no causal-LM decoder ({exc})") from None
    base = getattr(decoder, decoder.base_model_prefix)
    encoder_modules = dict(backbone.named_modules())
    tied = 0
    for name, _ in list(base.named_parameters()):
        module_name, _, attribute = name.rpartition(".")
        mine = encoder_modules.get(module_name)
        theirs = base.get_submodule(module_name) if module_name else base
        if mine is not None and isinstance(getattr(mine, attribute, None), nn.Parameter):
            setattr(theirs, attribute, getattr(mine, attribute))
            tied += 1
    if not tied:
        raise ModelLoadError(f"{source}: no parameter of the decoder matches the encoder's")
    output = decoder.get_output_embeddings()
    if output is not None:
        output.weight = backbone.get_input_embeddings().weight
    return cast(nn.Module, decoder).to(next(backbone.parameters()).device)
