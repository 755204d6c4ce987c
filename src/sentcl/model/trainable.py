"""What an objective may call on the encoder it trains: the ``TrainableEncoder`` protocol.

Both encoders satisfy it — ``SentenceEncoder`` (a transformer, a pooler, heads) and ``StaticEncoder`` (a
table of token vectors, model/static.py) — and mypy checks that they do (the assignments at the end of this
module) and that the objectives call nothing else (objectives/base.py types its encoder by it). A method a
static encoder cannot honour (token states, a masked-LM head) refuses at run time with one ConfigError; an
objective that needs what only a transformer has (PromptBERT's template pass) narrows to ``SentenceEncoder``
itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn


class TrainableEncoder(Protocol):
    tokenizer: Any
    pooler: str
    max_length: int
    training: bool

    # the training path
    def embed(self, batch) -> torch.Tensor:
        """A ``Batch``'s [B, V, L] views → embeddings [B, V, D] (one pass over the B·V sequences)."""
        ...

    def embed_tokens(self, input_ids, attention_mask, with_states: bool = False): ...

    def encode_tokens(self, input_ids, attention_mask) -> torch.Tensor:
        """The embedding path on [N, L] ids (no train-only head): what a frozen copy gives."""
        ...

    def token_states(self, input_ids, attention_mask, all_layers: bool = False): ...

    def masked_lm_head(self) -> nn.Module: ...

    def causal_decoder(self) -> nn.Module: ...

    def freeze_input_embeddings(self) -> None: ...

    # copies an objective keeps beside the encoder (a frozen teacher, a momentum encoder)
    def frozen_copy(self) -> TrainableEncoder: ...

    def momentum_copy(self) -> TrainableEncoder: ...

    def follow(self, source: Any, momentum: float) -> None: ...

    # sizes
    @property
    def output_dim(self) -> int: ...

    @property
    def hidden_size(self) -> int: ...

    @property
    def initializer_range(self) -> float: ...

    # what every nn.Module has and objectives use
    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...

    def parameters(self, recurse: bool = True) -> Any: ...

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any: ...

    def encode(self, sentences: Any, *args: Any, **kwargs: Any) -> Any: ...


if TYPE_CHECKING:  # mypy: both encoders are TrainableEncoders
    from sentcl.model.encoder import SentenceEncoder
    from sentcl.model.static import StaticEncoder

    def _transformer(encoder: SentenceEncoder) -> TrainableEncoder:
        return encoder

    def _static(encoder: StaticEncoder) -> TrainableEncoder:
        return encoder
