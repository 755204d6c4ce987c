"""Unpadded ("packed") backbone pass: the transformer's dense layers see only real tokens.

A contrastive batch of short sentences padded to the longest is mostly matrix products over rows that are
padding (a random batch of 64 wiki sentences at max length 32 is ~29 % padding), and every product, GELU,
LayerNorm and dropout mask is paid for them. Here the N padded sequences [N, L] become one sequence of the
T real tokens [1, T] (position ids restart at each sentence), so the Linear layers and the element-wise
work run on T rows; only attention is done per sentence, by scattering queries, keys and values back to
[N, heads, L, d] inside a registered Hugging Face attention function (``AttentionInterface``) and
gathering its output. The states come back as [N, L, H] (zeros at padding), so poolers and objectives do
not change.

No dispatch on model names: whether a backbone can be packed, and with which first position id (0 for
BERT; ``pad_token_id + 1`` for RoBERTa-style models), is decided once per backbone by running a small
padded batch both ways in eval mode and comparing every layer's states; a backbone that does not give the
same states (other position schemes, attention that ignores the interface) keeps the padded pass.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface

from sentcl.model.dropout import fast_dropout

logger = logging.getLogger(__name__)

ATTENTION_NAME = "sentcl_packed"
_SUPPORT_ATTRIBUTE = "_sentcl_packing"
#: the probe compares packed and padded states with this tolerance (fp32 gives equal states here)
PROBE_TOLERANCE = 1e-4


@dataclass(frozen=True)
class PackedLayout:
    """Where the T real tokens sit in the padded [N, L] grid."""

    index: torch.Tensor  # [T] flat positions (row * L + column) of the real tokens
    rows: int  # N
    length: int  # L

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """[T, *rest] → [N, L, *rest], zeros at padding."""
        flat = packed.new_zeros(self.rows * self.length, *packed.shape[1:])
        return flat.index_copy(0, self.index, packed).view(self.rows, self.length, *packed.shape[1:])

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """[N, L, *rest] → [T, *rest]."""
        return padded.reshape(self.rows * self.length, *padded.shape[2:]).index_select(0, self.index)


def packed_attention(
    module: nn.Module,
    query: torch.Tensor,  # [1, heads, T, d]
    key: torch.Tensor,  # [1, kv_heads, T, d]
    value: torch.Tensor,  # [1, kv_heads, T, d]
    attention_mask: torch.Tensor | None,  # [N, 1, 1, L] bool, True = real key
    dropout: float = 0.0,
    scaling: float | None = None,
    sentcl_layout: PackedLayout | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention within each sentence of a packed sequence → [1, T, heads, d] (what HF layers expect)."""
    if sentcl_layout is None:
        raise RuntimeError(f"the {ATTENTION_NAME!r} attention runs only inside backbone_states(unpad=True)")
    layout = sentcl_layout

    def to_padded(x: torch.Tensor) -> torch.Tensor:  # [1, h, T, d] → [N, h, L, d]
        return layout.pad(x[0].transpose(0, 1)).transpose(1, 2)

    query, key, value = to_padded(query), to_padded(key), to_padded(value)
    if dropout > 0.0 and query.device.type == "cpu":
        # SDPA's CPU dropout draws with bernoulli_; the same attention with model/dropout.py's masks
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        scores = (query @ key.transpose(-1, -2)).mul_(scale)  # [N, heads, L, L]
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask, float("-inf"))
        out = fast_dropout(scores.softmax(-1), dropout) @ value
    else:
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
        )  # [N, heads, L, d]
    return layout.pack(out.transpose(1, 2)).unsqueeze(0), None


AttentionInterface.register(ATTENTION_NAME, packed_attention)


@functools.cache
def _takes_token_types(backbone_class: Any) -> bool:
    """Whether the backbone's forward has ``token_type_ids`` (checked once per class, not per step)."""
    return "token_type_ids" in inspect.signature(backbone_class.forward).parameters


def _pass(
    backbone: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    output_hidden_states: bool,
    first_position: int,
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    rows, length = input_ids.shape
    real = attention_mask.reshape(-1) != 0
    layout = PackedLayout(real.nonzero().squeeze(1), rows, length)
    positions = (attention_mask.long().cumsum(1) - 1 + first_position).reshape(-1)[layout.index]
    ids = input_ids.reshape(-1)[layout.index]
    extra = (
        {"token_type_ids": torch.zeros_like(ids)[None]}
        if _takes_token_types(cast(Hashable, type(backbone)))
        else {}
    )
    config: Any = backbone.config
    previous = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        out = backbone(
            input_ids=ids[None],
            position_ids=positions[None],
            attention_mask=(attention_mask != 0)[:, None, None, :],  # 4D: used as-is by HF's mask code
            output_hidden_states=output_hidden_states,
            sentcl_layout=layout,
            **extra,
        )
    finally:
        config._attn_implementation = previous
    last = layout.pad(out.last_hidden_state[0])
    hidden = tuple(layout.pad(s[0]) for s in out.hidden_states) if output_hidden_states else None
    return last, hidden


def _probe(backbone: nn.Module) -> int | None:
    """The first position id with which the packed pass reproduces the padded one, or None."""
    config = backbone.config
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    pad_id = getattr(config, "pad_token_id", None)
    pad_id = pad_id if isinstance(pad_id, int) and pad_id >= 0 else None
    candidates = [0] + ([pad_id + 1] if pad_id is not None else [])
    if vocab < 8 or getattr(config, "is_decoder", False):
        return None
    device = next(backbone.parameters()).device
    lengths = [6, 3, 5]
    mask = torch.tensor([[1] * n + [0] * (max(lengths) - n) for n in lengths], device=device)
    ids = (torch.arange(mask.numel(), device=device).view_as(mask) * 7 + 3) % (vocab - 4) + 4
    ids = ids.masked_fill(mask == 0, pad_id or 0)
    was_training = backbone.training
    backbone.eval()
    try:
        with torch.no_grad(), torch.autocast(device.type, enabled=False):
            reference = backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            expected = [s * mask[..., None] for s in reference.hidden_states]
            for first in candidates:
                try:
                    _, found = _pass(backbone, ids, mask, True, first)
                    states = found or ()
                except Exception as exc:  # an architecture the packed pass cannot drive
                    logger.debug("packed pass refused by %s: %s", type(backbone).__name__, exc)
                    return None
                if len(states) == len(expected) and all(
                    torch.allclose(a.float(), b.float(), atol=PROBE_TOLERANCE, rtol=PROBE_TOLERANCE)
                    for a, b in zip(states, expected, strict=True)
                ):
                    return first
    finally:
        backbone.train(was_training)
    return None


def packing_position(backbone: nn.Module) -> int | None:
    """Cached per backbone: the first position id of a packed pass, or None if it cannot be packed."""
    if not hasattr(backbone, _SUPPORT_ATTRIBUTE):
        first = _probe(backbone) if hasattr(backbone, "config") else None
        if first is None:
            logger.info("%s: no unpadded pass (its states differ); padded batches", type(backbone).__name__)
        setattr(backbone, _SUPPORT_ATTRIBUTE, first)
    return getattr(backbone, _SUPPORT_ATTRIBUTE)


def unpad_by_default(device: torch.device) -> bool:
    """Unpadded passes when nobody chose: on the CPU (measured faster there), not on GPUs (unmeasured)."""
    return device.type == "cpu"


def backbone_states(
    backbone: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    output_hidden_states: bool = False,
    unpad: bool = False,
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """(last-layer states [N, L, H], every layer's states or None) of a padded batch; with ``unpad`` the
    backbone runs on the real tokens only when the batch has padding and the backbone allows it."""
    if unpad and not bool(attention_mask.all()):
        first = packing_position(backbone)
        if first is not None:
            return _pass(backbone, input_ids, attention_mask, output_hidden_states, first)
    out = backbone(
        input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states
    )
    return out.last_hidden_state, (out.hidden_states if output_hidden_states else None)
