"""SentenceEncoder: backbone → pooler → (MLP head), with encode / save / load.

Two paths, one module:
* the *training* path, the public API objectives build on (docs/extending.md): ``embed(batch)`` (a
  batch's [B, V, L] views → [B, V, D], one backbone pass over the B·V sequences, pooled, through the
  MLP head when the pooler has one), ``embed_tokens`` (the same on [N, L] ids, optionally with the token
  states of that pass), ``token_states``, ``output_dim``, ``frozen_copy``, ``momentum_copy`` / ``follow``,
  ``freeze_input_embeddings`` and ``masked_lm_head``;
* the *embedding* path, ``encode(texts)`` / ``encode_tokens(ids, mask)``: no dropout, no gradient, the
  head only when it is not train-only (SimCSE's ``mlp_only_train``). It satisfies the ``Embedder``
  protocol that evaluation and analysis use.

A saved folder loads with ``AutoModel.from_pretrained`` (backbone + tokenizer, safetensors), with
``SentenceTransformer(path)`` when the pooler is expressible there, and with
``SentenceEncoder.load`` (sentcl.json + the head's weights).
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel

from sentcl import precision
from sentcl.atomic_write import atomic_folder
from sentcl.config import ConfigError
from sentcl.data.collate import sorted_batches
from sentcl.embedder import PromptError, PromptRoles, check_prompts, require_finite
from sentcl.encode_contract import SIMILARITY_FUNCTIONS, LoadOptions, SentenceTransformersContract
from sentcl.hardware import resolve_device
from sentcl.model.backbone import (
    ModelLoadError,
    keep_layers,
    load_backbone,
    position_limit,
    read_json_object,
    resolve_model_path,
)
from sentcl.model.dropout import use_fast_dropout
from sentcl.model.heads import MLPHead, PromptHead, build_causal_decoder, build_mlm_head
from sentcl.model.modules import (
    Chain,
    Dense,
    Normalize,
    OutputModule,
    check_chain,
    describe,
    output_dimension,
    read_chain,
    read_recorded,
    write_modules,
)
from sentcl.model.packing import backbone_states, unpad_by_default
from sentcl.model.pooling import (
    DEFAULT_TEMPLATE,
    LOADING_DEFAULT,
    NEEDS_HIDDEN_STATES,
    POOLERS,
    PROMPT,
    TRAINING_DEFAULT,
    WITH_MLP_HEAD,
    TemplateFrame,
    check_pooler,
    ditto,
    ditto_head,
    exclude_prompt,
    from_sentence_transformers,
    special_frame,
    template_frame,
    wrap_in_template,
)
from sentcl.model.sentence_transformers_export import unsupported_reason, write_sentence_transformers_files

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

SENTCL_META = "sentcl.json"
HEAD_WEIGHTS = "sentcl_head.safetensors"
PROMPT_HEAD_WEIGHTS = "sentcl_prompt_head.safetensors"
FORMAT_VERSION = 1
#: Encoding truncates at this many tokens unless the model says less (SimCSE's evaluation truncates
#: nothing; 512 is BERT's limit).
DEFAULT_ENCODE_MAX_LENGTH = 512


@dataclass
class ModelConfig:
    """``model:`` section of a recipe."""

    name_or_path: str = ""
    pooler: str = TRAINING_DEFAULT
    #: SimCSE's mlp_only_train: the MLP head (pooler ``cls``) is used in training only.
    mlp_only_train: bool = False
    #: Training passes run the backbone on the real tokens only (model/packing.py) when the backbone
    #: reproduces its padded states that way. None: on the CPU only (measured faster there; unmeasured on
    #: GPUs, where small batches are latency-bound and the padded pass stays).
    unpad: bool | None = None
    #: Dropout masks from 16-bit slices of 64-bit random integers on the CPU (model/dropout.py); false:
    #: torch's Bernoulli masks.
    fast_dropout: bool = True
    #: load a model whose weights are only a pickle (pytorch_model.bin; reading one can run code)
    allow_pickle: bool = False
    #: texts put before sentences by role, saved with the model (e.g. {query: "query: ", document:
    #: "passage: "}); retrieval encodes queries and documents with them. Empty: the started model's own.
    prompts: dict[str, str] = field(default_factory=dict)
    #: keep the started model's Dense layers and Normalize (a sentence-transformers folder's modules after
    #: its Pooling): Dense layers train with the encoder, Normalize applies when encoding. false: drop them.
    keep_modules: bool = True
    #: unit-length vectors from ``encode``: null as the started model (its Normalize, if any), true adds
    #: a Normalize, false removes it
    normalize: bool | None = None
    #: a layer-reduced student: keep only these transformer layers of the started model (0-based, in
    #: order, e.g. [0, 2, 4] of a 6-layer teacher); empty: every layer
    keep_layers: list[int] = field(default_factory=list)
    #: pooler prompt: the template a sentence is read in (one [X], one [MASK]); "" = PromptBERT's default
    prompt_template: str = ""
    #: pooler prompt: subtract the template's own [MASK] state when encoding (PromptBERT's template
    #: denoising, as its supervised models are evaluated)
    prompt_denoise: bool = False
    #: pooler prompt: supervised PromptBERT's head over the [MASK] state (dense, activation, LayerNorm),
    #: trained and kept when encoding, applied before the denoising subtraction
    prompt_head: bool = False
    #: transformer, or static: a table of token vectors averaged (model/static.py), started from
    #: ``name_or_path`` (a static folder; or a transformer whose vocabulary is distilled, or whose tokenizer
    #: alone is used with random vectors)
    architecture: str = "transformer"
    #: static: the vectors' dimension, the start (distill | random), and the SIF coefficient of the
    #: distilled start (model2vec's 1e-4; null: no frequency weights)
    static_dim: int = 256
    static_init: str = "distill"
    static_sif: float | None = 1e-4

    def validate(self) -> None:
        if not self.name_or_path:
            raise ConfigError("name_or_path: a model (hub id or folder) is required")
        if self.architecture not in ("transformer", "static"):
            raise ConfigError(f"architecture: {self.architecture!r} is not one of transformer, static")
        if self.architecture == "static":
            if self.static_init not in ("distill", "random"):
                raise ConfigError(f"static_init: {self.static_init!r} is not one of distill, random")
            if self.static_dim < 1:
                raise ConfigError(f"static_dim: must be positive, got {self.static_dim}")
            if self.static_sif is not None and not 0 < self.static_sif < 1:
                raise ConfigError(f"static_sif: must be in (0, 1) or null, got {self.static_sif}")
            if self.keep_layers:
                raise ConfigError("keep_layers: a static model has no layers to keep")
        check_pooler(self.pooler)
        for key in ("prompt_denoise", "prompt_head"):
            if getattr(self, key) and self.pooler != PROMPT:
                raise ConfigError(f"{key}: PromptBERT's, for the prompt pooler, not {self.pooler!r}")
        try:
            check_prompts(self.prompts, "prompts")
        except PromptError as exc:
            raise ConfigError(str(exc)) from None


class SentenceEncoder(nn.Module, PromptRoles, SentenceTransformersContract):
    backbone: PreTrainedModel

    def __init__(
        self,
        backbone: PreTrainedModel,
        tokenizer,
        pooler: str = TRAINING_DEFAULT,
        head: MLPHead | None = None,
        max_length: int | None = None,
        unpad: bool | None = None,
        modules: list[OutputModule] | None = None,
        prompt_template: str = "",
        prompt_denoise: bool = False,
        prompt_head: PromptHead | None = None,
    ):
        super().__init__()
        check_pooler(pooler)
        #: pooler ``prompt``: the template the sentence is read in, and its ids (model/pooling.py)
        self.prompt_template = (prompt_template or DEFAULT_TEMPLATE) if pooler == PROMPT else ""
        #: pooler ``prompt``: the template's own [MASK] state subtracted when encoding (template denoising)
        self.prompt_denoise = bool(prompt_denoise) and pooler == PROMPT
        #: pooler ``prompt``: supervised PromptBERT's head over the [MASK] state, or None
        self.prompt_head = prompt_head if pooler == PROMPT else None
        self.frame = template_frame(tokenizer, self.prompt_template) if pooler == PROMPT else None
        self._frames: dict[str, TemplateFrame] = {self.prompt_template: self.frame} if self.frame else {}
        self._specials: tuple[list[int], list[int]] | None = None
        if (pooler in WITH_MLP_HEAD) != (head is not None):
            raise ValueError(
                f"pooler {pooler!r} {'needs' if pooler in WITH_MLP_HEAD else 'takes no'} MLP head"
            )
        self.ditto = ditto_head(pooler)
        if self.ditto is not None:  # Ditto reads an attention head: eager attention returns the weights
            layers = int(backbone.config.num_hidden_layers)
            heads = int(backbone.config.num_attention_heads)
            if self.ditto[0] >= layers or self.ditto[1] >= heads:
                raise ConfigError(f"pooler {pooler}: the model has {layers} layers of {heads} heads")
            backbone.set_attn_implementation("eager")
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooler = pooler
        self.head = head
        #: sentence-transformers' modules after the pooling (model/modules.py): Dense layers, Normalize
        self.output_modules = nn.ModuleList(modules or [])
        self.max_length = max_length or _default_max_length(backbone, tokenizer)
        self.unpad = unpad
        self.source: str | None = None  # where the model was loaded from (recorded by indexes built on it)
        self.inference_autocast: torch.dtype | None = None  # with_dtype("bf16"): bf16 autocast in encode
        self.frozen = False  # frozen_copy(): eval mode whatever train() asks
        #: name → the text put before each sentence (sentence-transformers' ``prompts``), saved with the model
        self.prompts = {}
        #: sentence-transformers' Pooling ``include_prompt``: false leaves a prompt's tokens (and [CLS]) out
        #: of the pooling when encoding with a prompt (the backbone still reads them)
        self.include_prompt = True

    # ----------------------------------------------------------------------------------- building
    @classmethod
    def from_config(cls, config: ModelConfig) -> SentenceEncoder:
        """A backbone with a fresh head (if the pooler has one): the start of training."""
        resolved = resolve_model_path(config.name_or_path)
        backbone, tokenizer = load_backbone(resolved, config.allow_pickle)
        if config.keep_layers:
            keep_layers(backbone, config.keep_layers)
        head = None
        if config.pooler in WITH_MLP_HEAD:
            head = MLPHead(
                backbone.config.hidden_size,
                train_only=config.mlp_only_train,
                init_std=getattr(backbone.config, "initializer_range", 0.02),
            )
        if config.fast_dropout:
            use_fast_dropout(backbone)
        hidden = int(backbone.config.hidden_size)
        modules = saved_modules(Path(resolved), hidden, config.allow_pickle) if config.keep_modules else []
        if config.normalize is False:
            modules = [m for m in modules if not isinstance(m, Normalize)]
        elif config.normalize and not any(isinstance(m, Normalize) for m in modules):
            modules.append(Normalize())
        encoder = cls(
            backbone,
            tokenizer,
            config.pooler,
            head,
            max_length=_saved_max_length(resolved),
            unpad=config.unpad,
            modules=modules,
            prompt_template=config.prompt_template,
            prompt_denoise=config.prompt_denoise,
            prompt_head=PromptHead(backbone.config, _init_std(backbone)) if config.prompt_head else None,
        )
        encoder.source = config.name_or_path
        encoder.prompts = check_prompts(config.prompts, "model.prompts") or saved_prompts(Path(resolved))
        encoder.similarity_fn_name = saved_similarity(Path(resolved))
        return encoder

    @classmethod
    def load(
        cls,
        name_or_path: str,
        pooler: str | None = None,
        allow_pickle: bool = False,
        **options: Unpack[LoadOptions],
    ) -> SentenceEncoder:
        """Load for encoding: a sentcl folder keeps its pooler and head, a sentence-transformers
        folder its pooling mode; any other model gets ``pooler`` (default ``avg``). Remote code is
        never run, and pickled weights (pytorch_model.bin) are refused unless ``allow_pickle``. The keyword
        arguments are sentence-transformers' constructor's (``configure``)."""
        resolved = resolve_model_path(name_or_path)
        folder = Path(resolved)
        try:
            meta = read_json_object(folder / SENTCL_META) if folder.is_dir() else None
            chain = None if meta else read_chain(folder, allow_pickle)
            saved_pooler, include_prompt = (
                (meta["pooler"], meta.get("include_prompt", True))
                if meta
                else _sentence_transformers_pooler(chain)
            )
            if not isinstance(include_prompt, bool):
                raise ValueError(
                    f"{folder / SENTCL_META}: include_prompt {include_prompt!r} is not true or false"
                )
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"{name_or_path}: {_one_line(exc)}") from None
        chosen = pooler or saved_pooler or LOADING_DEFAULT
        if pooler is None and saved_pooler is None:
            logger.info("%s: no pooler recorded with the model, using %r", name_or_path, chosen)
        check_pooler(chosen, f"{name_or_path}: pooler")
        backbone, tokenizer = load_backbone(resolved, allow_pickle)
        head = None
        if chosen in WITH_MLP_HEAD:
            head_file = folder / HEAD_WEIGHTS
            if not head_file.is_file():
                raise ModelLoadError(
                    f"{name_or_path}: pooler 'cls' needs the MLP head, but the model was saved without one; "
                    f"use 'cls_before_pooler' for the raw [CLS] vector"
                )
            train_only = bool(meta and meta.get("mlp_only_train"))
            head = _load_head(
                MLPHead(backbone.config.hidden_size, train_only=train_only), head_file, "the MLP head"
            )
        try:
            max_length = (meta or {}).get("max_seq_length") or _saved_max_length(resolved)
        except (ValueError, TypeError) as exc:
            raise ModelLoadError(f"{name_or_path}: {_one_line(exc)}") from None
        if max_length is not None and (not isinstance(max_length, int) or max_length < 2):
            raise ModelLoadError(f"{name_or_path}: max_seq_length {max_length!r} is not a length")
        limit = position_limit(backbone.config)
        if max_length is not None and limit is not None and max_length > limit:
            raise ModelLoadError(
                f"{name_or_path}: max_seq_length {max_length} is beyond the model's {limit} positions"
            )
        modules = saved_modules(folder, int(backbone.config.hidden_size), allow_pickle, meta, chain)
        template = str((meta or {}).get("prompt_template") or "")
        encoder = cls(
            backbone,
            tokenizer,
            chosen,
            head,
            max_length=max_length,
            modules=modules,
            prompt_template=template,
            prompt_denoise=bool((meta or {}).get("prompt_denoise")),
            prompt_head=_load_head(
                PromptHead(backbone.config), folder / PROMPT_HEAD_WEIGHTS, "the prompt head"
            )
            if (meta or {}).get("prompt_head")
            else None,
        )
        encoder.source = str(Path(name_or_path).resolve()) if Path(name_or_path).exists() else name_or_path
        encoder.prompts = saved_prompts(folder, meta)
        encoder.default_prompt_name = saved_default_prompt(folder, meta, encoder.prompts)
        encoder.include_prompt = include_prompt
        encoder.similarity_fn_name = saved_similarity(folder, meta)
        return encoder.eval().configure(**options)

    # ----------------------------------------------------------------------------------- forward
    def _pool(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, unpad: bool = False
    ) -> torch.Tensor:
        """[N, L] ids → [N, H] pooled vectors (no head)."""
        return self._pool_with_states(input_ids, attention_mask, unpad)[0]

    def _pool_with_states(
        self, input_ids, attention_mask, unpad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``attention_mask`` may mark a prompt's tokens NOT_POOLED (model/pooling.py): the backbone attends
        to them, the pooler leaves them out."""
        pool_mask = attention_mask
        if not self.include_prompt:
            attention_mask = attention_mask.clamp(max=1)
        if self.frame is not None:  # PromptBERT: the state at [MASK] of the sentence in its template
            states, lengths, last = self._prompt_pass(input_ids, attention_mask, self.prompt_template)
            return self._prompt_vectors(states, lengths, self.prompt_template, self.prompt_denoise), last
        if self.ditto is not None:  # a padded pass: the attention weights are needed
            out = self.backbone(
                input_ids=input_ids,
                attention_mask=attention_mask,
                output_hidden_states=True,
                output_attentions=True,
            )
            layer, head = self.ditto
            diagonal = out.attentions[layer][:, head].diagonal(dim1=-2, dim2=-1)  # [N, L]
            return ditto(out.hidden_states, diagonal, pool_mask), out.last_hidden_state
        needs_all = self.pooler in NEEDS_HIDDEN_STATES
        last, hidden_states = backbone_states(
            self.backbone, input_ids, attention_mask, output_hidden_states=needs_all, unpad=unpad
        )
        return POOLERS[self.pooler](last, hidden_states, pool_mask), last

    def unpads_training(self) -> bool:
        """Whether training passes run the backbone on real tokens only (``ModelConfig.unpad``)."""
        return unpad_by_default(self.device) if self.unpad is None else bool(self.unpad)

    # ------------------------------------------------------ the public API objectives build on
    def embed(self, batch) -> torch.Tensor:
        """Training path on a ``Batch``: its [B, V, L] views → embeddings [B, V, D], one backbone pass
        over the B·V sequences, pooled, through the MLP head when the pooler has one."""
        ids, mask = batch.input_ids, batch.attention_mask
        size, views, length = ids.shape
        flat = self.embed_tokens(ids.reshape(size * views, length), mask.reshape(size * views, length))
        return flat.reshape(size, views, -1)

    def forward(self, batch) -> torch.Tensor:
        return self.embed(batch)

    def embed_tokens(self, input_ids, attention_mask, with_states: bool = False):
        """Training path on [N, L] ids → embeddings [N, D] (with the head where the pooler has one); with
        ``with_states`` also the last layer's token states [N, L, H] of the same pass."""
        pooled, states = self._pool_with_states(input_ids, attention_mask, self.unpads_training())
        embeddings = self.head(pooled) if self.head is not None else pooled
        for module in self.output_modules:  # Dense layers train; Normalize is for encoding only
            if isinstance(module, Dense):
                embeddings = module(embeddings)
        return (embeddings, states) if with_states else embeddings

    def template(self, template: str) -> TemplateFrame:
        """``template``'s ids around a sentence, tokenised once per template (a training step reads two)."""
        if template not in self._frames:
            self._frames[template] = template_frame(self.tokenizer, template)
        return self._frames[template]

    def prompt_states(self, input_ids, attention_mask, template: str) -> tuple[torch.Tensor, torch.Tensor]:
        """PromptBERT's training path: ([N, H] the last layer's state at [MASK] of each sentence spliced into
        ``template``, [N] each sentence's length in tokens without its special tokens)."""
        return self._prompt_pass(input_ids, attention_mask, template)[:2]

    def prompt_vectors(self, input_ids, attention_mask, template: str, denoise: bool) -> torch.Tensor:
        """PromptBERT's representation on the training path: [N, H] the [MASK] states of [N, L] sentences in
        ``template``, through the prompt head where the model has one, the template's own state (through
        the same head) subtracted where ``denoise``."""
        states, lengths, _ = self._prompt_pass(input_ids, attention_mask, template)
        return self._prompt_vectors(states, lengths, template, denoise)

    def _prompt_vectors(self, states, lengths, template: str, denoise: bool) -> torch.Tensor:
        head = self.prompt_head if self.prompt_head is not None else nn.Identity()
        states = head(states)
        if denoise:
            states = states - head(self.template_bias(template, lengths))
        return states

    def _prompt_pass(self, input_ids, attention_mask, template: str):
        """(the [MASK] states [N, H], the sentences' lengths [N], the last layer's states [N, L', H])."""
        frame = self.template(template)
        wrapped, mask, at = wrap_in_template(
            input_ids,
            attention_mask,
            frame,
            self.tokenizer.pad_token_id or 0,
            position_limit(self.backbone.config),
        )
        states = self.backbone(input_ids=wrapped, attention_mask=mask).last_hidden_state
        lengths = mask.sum(1) - frame.head - frame.tail - len(frame.prefix) - len(frame.suffix)
        return states[torch.arange(len(at), device=at.device), at], lengths, states

    def template_bias(self, template: str, lengths: torch.Tensor) -> torch.Tensor:
        """PromptBERT's template denoising: [N, H] the state at [MASK] of ``template`` with no sentence in it,
        its positions after the sentence's place shifted by each length, so that [MASK] sits where it sits
        with a sentence of that length (one pass over the distinct lengths)."""
        frame = self.template(template)
        if self._specials is None:  # the tokenizer's special ids around a sentence, read once
            self._specials = special_frame(self.tokenizer)
        before, after = self._specials
        ids = before + list(frame.prefix) + list(frame.suffix) + after
        distinct, index = torch.unique(lengths, return_inverse=True)
        device = self.device
        rows = torch.tensor(ids, device=device).repeat(len(distinct), 1)
        positions = torch.arange(len(ids), device=device).repeat(len(distinct), 1)
        start = frame.head + len(frame.prefix)  # the first token after the sentence's place
        positions[:, start:] += distinct.to(device)[:, None]
        states = self.backbone(input_ids=rows, position_ids=positions).last_hidden_state
        return states[:, start + frame.mask][index]

    def token_states(self, input_ids, attention_mask, all_layers: bool = False):
        """Last-layer token states [N, L, H] of [N, L] ids (training settings: the packed pass where it
        applies); ``all_layers``: the tuple of every layer's states, the embedding layer first."""
        last, hidden_states = backbone_states(
            self.backbone, input_ids, attention_mask, output_hidden_states=all_layers,
            unpad=self.unpads_training(),
        )  # fmt: skip
        return hidden_states if all_layers else last

    @property
    def output_dim(self) -> int:
        """Dimension of the training path's embeddings (the MLP head's output where there is one)."""
        return output_dimension(self.output_modules, self.hidden_size)

    def frozen_copy(self) -> SentenceEncoder:
        """A copy without gradients that stays in eval mode (no dropout) whatever ``train()`` says: a
        teacher, a fixed reference, a complementary model."""
        copied = self.momentum_copy()
        copied.frozen = True
        return copied.eval()

    def momentum_copy(self) -> SentenceEncoder:
        """A copy without gradients that follows ``train()``/``eval()`` like any module, moved towards this
        encoder by :meth:`follow`: MoCo's key encoder."""
        copied = copy.deepcopy(self)
        for parameter in copied.parameters():
            parameter.requires_grad_(False)
        return copied

    @torch.no_grad()
    def follow(self, source: SentenceEncoder, momentum: float) -> None:
        """θ ← m·θ + (1 − m)·θ_source, parameter by parameter (the two share one architecture)."""
        mine: list[torch.Tensor] = list(self.parameters())
        theirs = [p.detach() for p in source.parameters()]
        torch._foreach_mul_(mine, momentum)
        torch._foreach_add_(mine, theirs, alpha=1 - momentum)

    def freeze_input_embeddings(self) -> None:
        """Keep the embedding layer (token, position, type embeddings and its norm) out of training."""
        self.backbone.get_input_embeddings().weight.requires_grad_(False)
        for parameter in getattr(self.backbone, "embeddings", nn.Module()).parameters():
            parameter.requires_grad_(False)

    def masked_lm_head(self) -> nn.Module:
        """The checkpoint's masked-LM head (a fresh one where it has none), its decoder tied to this
        encoder's input embeddings."""
        return build_mlm_head(self.backbone, self.source)

    def causal_decoder(self) -> nn.Module:
        """TSDAE's decoder for this encoder: a causal LM of its architecture with cross-attention, the
        parameters it shares with the backbone tied to them (model/heads.py)."""
        return build_causal_decoder(self.backbone, self.source)

    def train(self, mode: bool = True):
        return super().train(mode and not self.frozen)

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Embedding path on [N, L] ids: no head where it is train-only (what ``encode`` returns)."""
        pooled = self._pool(input_ids, attention_mask)
        if self.head is not None and self.head.used_when_encoding():
            pooled = self.head(pooled)
        for module in self.output_modules:
            pooled = module(pooled)
        return pooled

    def with_dtype(self, dtype: str):
        """This encoder for inference in ``dtype`` (sentcl/precision.py): ``fp32``; ``bf16`` (bf16 autocast
        of the forward pass, fp32 weights and outputs); ``auto`` (bf16 where the device multiplies bf16
        natively, fp32 elsewhere). ``int8`` is ONNX Runtime's: ``sentcl.model.for_inference(encoder,
        "int8")`` exports the embedding path."""
        chosen = precision.decide(dtype, self.device)
        if chosen == "int8":
            raise ValueError("int8 runs in ONNX Runtime: use sentcl.model.for_inference(encoder, 'int8')")
        self.inference_autocast = torch.bfloat16 if chosen == "bf16" else None
        return self

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def hidden_size(self) -> int:
        """The backbone's hidden size: its token states' and the pooled vectors' dimension."""
        return int(self.backbone.config.hidden_size)

    @property
    def dimension(self) -> int:
        """The dimension of ``encode``'s vectors (the last Dense layer's, else the hidden size)."""
        return output_dimension(self.output_modules, self.hidden_size)

    @property
    def initializer_range(self) -> float:
        """The backbone's N(0, σ) initialisation σ, for heads that objectives add (BERT: 0.02)."""
        return float(getattr(self.backbone.config, "initializer_range", 0.02))

    def _place(self, device: str) -> None:
        """``encode(device=...)``: this model moved to ``device`` (sentence-transformers moves it too)."""
        self.to(resolve_device(str(device), "device"))

    def _embed(
        self, sentences: list[str], batch_size: int, show_progress: bool | None, prompt_length: int = 0
    ) -> np.ndarray:
        """The embedding path on texts → float32 [N, D], in batches formed by token length (little padding);
        the contract's ``encode`` (sentcl/encode_contract.py) shapes what it returns. ``prompt_length``: the
        first tokens of every text that the pooling leaves out (``include_prompt`` false)."""
        out = np.empty((len(sentences), self.dimension), dtype=np.float32)
        was_training = self.training
        self.eval()
        autocast = self.inference_autocast
        precision = torch.autocast(self.device.type, dtype=autocast, enabled=autocast is not None)
        batches = sorted_batches(
            self.tokenizer, sentences, self.max_length, batch_size, show_progress, self.max_batch_tokens
        )
        try:
            with torch.inference_mode(), precision:
                for idx, batch in batches:
                    batch = batch.to(self.device)
                    mask = exclude_prompt(batch.attention_mask[:, 0], prompt_length)
                    vectors = self.encode_tokens(batch.input_ids[:, 0], mask).float()
                    out[idx] = vectors.cpu().numpy()
        finally:
            self.train(was_training)
        return require_finite(out, sentences, self.source)

    # ----------------------------------------------------------------------------------- saving
    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the model folder atomically (a crash leaves the previous folder intact); a folder sentcl did
        not write is replaced only with ``overwrite`` (sentcl/atomic_write.py)."""
        path = Path(path)
        reason = unsupported_reason(self.pooler)
        with atomic_folder(path, "model", overwrite) as tmp:
            self.backbone.save_pretrained(str(tmp))
            self.tokenizer.save_pretrained(str(tmp))
            for head, name in ((self.head, HEAD_WEIGHTS), (self.prompt_head, PROMPT_HEAD_WEIGHTS)):
                if head is not None:
                    state = {k: v.detach().to("cpu").contiguous() for k, v in head.state_dict().items()}
                    save_file(state, str(tmp / name))
            first = 3 if self.head is not None and self.head.used_when_encoding() else 2
            rows = write_modules(tmp, self.output_modules, first)
            if reason is None:
                write_sentence_transformers_files(
                    tmp,
                    self.pooler,
                    self.hidden_size,
                    self.max_length,
                    self.head,
                    self.prompts,
                    rows,
                    self.similarity_fn_name,
                    self.include_prompt,
                    self.default_prompt_name,
                )
            else:
                logger.warning("%s: not loadable by sentence-transformers: %s", path, reason)
            meta = {
                "format_version": FORMAT_VERSION,
                "pooler": self.pooler,
                **({"include_prompt": False} if not self.include_prompt else {}),
                **({"prompt_template": self.prompt_template} if self.prompt_template else {}),
                **({"prompt_denoise": True} if self.prompt_denoise else {}),
                **({"prompt_head": True} if self.prompt_head is not None else {}),
                "mlp_only_train": bool(self.head is not None and self.head.train_only),
                "max_seq_length": self.max_length,
                "prompts": self.prompts,
                "default_prompt_name": self.default_prompt_name,
                "modules": describe(rows, self.output_modules),
                "similarity_fn_name": self.similarity_fn_name,
                "sentence_transformers": {"exported": reason is None, "reason": reason},
            }
            (tmp / SENTCL_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return path


def _init_std(backbone) -> float:
    return float(getattr(backbone.config, "initializer_range", 0.02))


def _load_head(head: nn.Module, path: Path, what: str):
    """``head`` with the weights saved at ``path``; one ModelLoadError naming the file if they cannot be read
    or are not finite."""
    try:
        head.load_state_dict(load_file(str(path)))
    except (SafetensorError, RuntimeError, OSError) as exc:
        raise ModelLoadError(f"{path}: {what} cannot be read ({_one_line(exc)})") from None
    if not all(torch.isfinite(value).all() for value in head.state_dict().values()):
        raise ModelLoadError(f"{path}: {what} holds NaN or infinite values")
    return head


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, KeyError):
        return f"missing key {text}"
    return text.splitlines()[0] if text else type(exc).__name__


def _sentence_transformers_pooler(chain) -> tuple[str | None, bool]:
    """(the sentcl pooler that computes a sentence-transformers folder's Pooling module, its
    include_prompt); (None, True) for a folder without one. A Pooling sentcl cannot compute is a ValueError
    naming the file and the field."""
    if chain is None or chain.pooling is None:
        return None, True
    where = chain.pooling / "config.json"
    config = read_json_object(where)
    if config is None:
        raise ValueError(f"{where}: missing; sentence-transformers' Pooling module needs it")
    return from_sentence_transformers(config, str(where))


def _sentcl_meta(folder: Path) -> dict | None:
    """A folder's sentcl.json (None where it has none), or a ModelLoadError naming the file."""
    try:
        return read_json_object(folder / SENTCL_META)
    except ValueError as exc:
        raise ModelLoadError(_one_line(exc)) from None


def saved_modules(
    folder: Path,
    hidden_size: int,
    allow_pickle: bool = False,
    meta: dict | None = None,
    chain: Chain | None = None,
) -> list[OutputModule]:
    """The output modules a model folder carries (sentcl.json's list, else a sentence-transformers
    folder's modules.json), checked to fit the backbone's ``hidden_size``; none for a hub id or a plain
    Hugging Face folder. ``meta`` / ``chain``: the folder's sentcl.json / module chain where the caller has
    read them already."""
    if not folder.is_dir():
        return []
    meta = meta if meta is not None else _sentcl_meta(folder)
    if meta is not None:
        modules = read_recorded(folder, meta.get("modules"), folder / SENTCL_META, allow_pickle)
    else:
        chain = chain if chain is not None else read_chain(folder, allow_pickle)
        modules = chain.modules if chain is not None else []
    check_chain(modules, hidden_size, str(folder))
    return modules


def saved_prompts(folder: Path, meta: dict | None = None) -> dict[str, str]:
    """The prompts saved with a model: sentcl.json's, else a sentence-transformers folder's
    (config_sentence_transformers.json); malformed ones are a ModelLoadError naming the file."""
    if meta is None and folder.is_dir():
        meta = _sentcl_meta(folder)
    if meta is not None and "prompts" in meta:
        source, value = folder / SENTCL_META, meta["prompts"]
    else:
        source = folder / "config_sentence_transformers.json"
        try:
            value = (read_json_object(source) or {}).get("prompts") if folder.is_dir() else None
        except ValueError as exc:
            raise ModelLoadError(_one_line(exc)) from None
    try:
        return check_prompts(value, str(source))
    except PromptError as exc:
        raise ModelLoadError(str(exc)) from None


def saved_default_prompt(folder: Path, meta: dict | None, prompts: dict[str, str]) -> str | None:
    """The default prompt name a model folder records (sentcl.json's, else sentence-transformers'), or None;
    one the model has no prompt of is a ModelLoadError naming the file."""
    if not folder.is_dir():
        return None
    source = folder / SENTCL_META if meta is not None and "default_prompt_name" in meta else None
    try:
        if source is None:
            source = folder / "config_sentence_transformers.json"
            value = (read_json_object(source) or {}).get("default_prompt_name")
        else:
            value = meta["default_prompt_name"]  # type: ignore[index]
    except ValueError as exc:
        raise ModelLoadError(_one_line(exc)) from None
    if value is not None and (not isinstance(value, str) or value not in prompts):
        raise ModelLoadError(f"{source}: default_prompt_name {value!r} is not one of its prompts")
    return value


def saved_similarity(folder: Path, meta: dict | None = None) -> str | None:
    """The similarity function a model folder names (sentcl.json's, else sentence-transformers'
    config_sentence_transformers.json), or None; one that is not known is a ModelLoadError naming the file."""
    if not folder.is_dir():
        return None
    meta = meta if meta is not None else _sentcl_meta(folder)
    source = folder / (SENTCL_META if meta is not None else "config_sentence_transformers.json")
    try:
        value = (meta if meta is not None else read_json_object(source) or {}).get("similarity_fn_name")
    except ValueError as exc:
        raise ModelLoadError(_one_line(exc)) from None
    if value is not None and value not in SIMILARITY_FUNCTIONS:
        raise ModelLoadError(
            f"{source}: similarity_fn_name {value!r} is not one of {', '.join(SIMILARITY_FUNCTIONS)}"
        )
    return value


def _saved_max_length(name_or_path: str) -> int | None:
    folder = Path(name_or_path)
    config = read_json_object(folder / "sentence_bert_config.json") if folder.is_dir() else None
    return int(config["max_seq_length"]) if config and config.get("max_seq_length") else None


def _default_max_length(backbone: nn.Module, tokenizer) -> int:
    limits = [DEFAULT_ENCODE_MAX_LENGTH]
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and 0 < model_max < 100_000:
        limits.append(model_max)
    positions = position_limit(backbone.config)
    if positions is not None:
        limits.append(positions)
    return min(limits)
