"""Poolers: token states → one sentence vector, exactly as SimCSE's ``Pooler``.

Each takes ``last_hidden`` [N, L, H], ``hidden_states`` (embeddings output followed by one entry per
transformer layer, or None) and ``attention_mask`` [N, L], and returns [N, H].

* ``cls`` / ``cls_before_pooler``: the [CLS] (first) token of the last layer. ``cls`` is the variant
  with the MLP head on top (the head lives in heads.py, applied by the encoder).
* ``avg``: mean of the last layer over real tokens.
* ``avg_first_last``: mean over real tokens of the average of the *first transformer layer*
  (``hidden_states[1]``, as SimCSE's current code; ``hidden_states[0]`` is the embedding layer)
  and the last layer.
* ``avg_top2``: same with the last two layers.
* ``ditto-L-H`` (Ditto, Chen et al., EMNLP 2023): the average of the embedding layer (``hidden_states[0]``, as
  the reference's ``att_first_last``) and the last layer, each token weighted by the diagonal of attention
  head H of layer L (0-based): how much the token attends to itself. Training-free; the layer and head are
  the model's own choice (``sentcl.model.ditto.rank_heads`` ranks them on STS-B dev).
* ``prompt`` (PromptBERT, Jiang et al., EMNLP 2022): the sentence's ids put inside a template (default
  ``This sentence : "[X]" means [MASK] .``) between the tokenizer's special tokens, and the last layer's state
  at [MASK] as the sentence's vector (the encoder wraps the ids: model/encoder.py).
* sentence-transformers' other Pooling modes, each as its ``Pooling`` computes it (padded path):
  ``max`` (per dimension, over real tokens), ``avg_sqrt_len`` (``mean_sqrt_len_tokens``: the sum over
  √(token count)), ``weighted_avg`` (``weightedmean``: token t weighted by its position t + 1, counted from
  the first attended token), ``last_token`` (``lasttoken``: the last real token's state).

**The pooling mask.** ``attention_mask`` may hold 2 beside 0 and 1: a token the backbone attends to but the
pooler leaves out — the prompt of a model whose sentence-transformers Pooling says ``include_prompt: false``
(the encoder marks them; the backbone gets the mask clamped to 1). Every pooler pools the tokens marked 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from sentcl.config import ConfigError

#: the value of ``attention_mask`` for a token that is attended to but not pooled (module docstring)
NOT_POOLED = 2


def pooled(attention_mask: torch.Tensor) -> torch.Tensor:
    """[N, L] bool: the tokens a pooler pools (mask 1; not padding, not an excluded prompt)."""
    return attention_mask == 1


def exclude_prompt(attention_mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """[N, L] mask with its first ``prompt_length`` real tokens marked NOT_POOLED (right-padded rows, as
    sentcl's batches are), as sentence-transformers' Pooling leaves a prompt out."""
    if prompt_length <= 0:
        return attention_mask
    marked = attention_mask.clone()
    head = marked[:, :prompt_length]
    marked[:, :prompt_length] = torch.where(head == 1, torch.full_like(head, NOT_POOLED), head)
    return marked


def _masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = pooled(attention_mask).unsqueeze(-1).to(states.dtype)  # [N, L, 1]
    return (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def _gather_rows(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[N, L, H] states, [N] positions → [N, H]: each row's state at its position."""
    index = positions.view(-1, 1, 1).expand(-1, 1, states.shape[-1])
    return torch.gather(states, 1, index).squeeze(1)


def cls(
    last_hidden: torch.Tensor, hidden_states: Sequence[torch.Tensor] | None, attention_mask
) -> torch.Tensor:
    """The first pooled token's state: [CLS] (position 0 of a right-padded row), or the first token after an
    excluded prompt, as sentence-transformers' CLS pooling takes it."""
    return _gather_rows(last_hidden, pooled(attention_mask).to(torch.int32).argmax(dim=1))


def avg(
    last_hidden: torch.Tensor, hidden_states: Sequence[torch.Tensor] | None, attention_mask
) -> torch.Tensor:
    return _masked_mean(last_hidden, attention_mask)


def avg_sqrt_len(last_hidden: torch.Tensor, hidden_states, attention_mask) -> torch.Tensor:
    """sentence-transformers' ``mean_sqrt_len_tokens``: Σ_t h_t / √(number of pooled tokens)."""
    mask = pooled(attention_mask).unsqueeze(-1).to(last_hidden.dtype)
    return (last_hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9).sqrt()


def max_tokens(last_hidden: torch.Tensor, hidden_states, attention_mask) -> torch.Tensor:
    """sentence-transformers' ``max``: the largest value of each dimension over the pooled tokens."""
    keep = pooled(attention_mask).unsqueeze(-1)
    return last_hidden.masked_fill(~keep, float("-inf")).max(dim=1).values


def weighted_avg(last_hidden: torch.Tensor, hidden_states, attention_mask) -> torch.Tensor:
    """sentence-transformers' ``weightedmean``: token t weighted by t + 1, t counted from the row's first
    attended token (an excluded prompt keeps its positions, so the sentence's weights do not restart)."""
    length = last_hidden.shape[1]
    first = (attention_mask > 0).to(torch.int32).argmax(dim=1)  # [N]: left padding's length
    positions = torch.arange(1, length + 1, device=last_hidden.device, dtype=last_hidden.dtype)
    weights = positions.view(1, -1) - first.view(-1, 1).to(last_hidden.dtype)  # [N, L]
    weights = (weights * pooled(attention_mask).to(last_hidden.dtype)).unsqueeze(-1)
    return (last_hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


def last_token(last_hidden: torch.Tensor, hidden_states, attention_mask) -> torch.Tensor:
    """sentence-transformers' ``lasttoken``: the state of each row's last pooled token."""
    keep = pooled(attention_mask).to(torch.int32)
    length = last_hidden.shape[1]
    found, from_end = keep.flip(1).max(dim=1)
    from_end = torch.where(found == 0, length - 1, from_end)
    return _gather_rows(last_hidden * keep.unsqueeze(-1).to(last_hidden.dtype), length - from_end - 1)


def avg_first_last(last_hidden, hidden_states: Sequence[torch.Tensor] | None, attention_mask) -> torch.Tensor:
    assert hidden_states is not None
    return _masked_mean((hidden_states[1] + hidden_states[-1]) / 2.0, attention_mask)


def avg_top2(last_hidden, hidden_states: Sequence[torch.Tensor] | None, attention_mask) -> torch.Tensor:
    assert hidden_states is not None
    return _masked_mean((hidden_states[-2] + hidden_states[-1]) / 2.0, attention_mask)


Pooler = Callable[[torch.Tensor, "Sequence[torch.Tensor] | None", torch.Tensor], torch.Tensor]

POOLERS: dict[str, Pooler] = {
    "cls": cls,
    "cls_before_pooler": cls,
    "avg": avg,
    "avg_first_last": avg_first_last,
    "avg_top2": avg_top2,
    "max": max_tokens,
    "avg_sqrt_len": avg_sqrt_len,
    "weighted_avg": weighted_avg,
    "last_token": last_token,
}

#: Poolers that read intermediate layers (the backbone must return all hidden states).
NEEDS_HIDDEN_STATES = frozenset({"avg_first_last", "avg_top2"})

#: Poolers that carry the MLP head (SimCSE attaches its MLP to ``cls`` only).
WITH_MLP_HEAD = frozenset({"cls"})

#: a recipe that names no pooler trains SimCSE's: [CLS] with the MLP head
TRAINING_DEFAULT = "cls"
#: a model that records no pooler (a raw Hugging Face checkpoint) is read with mean pooling
LOADING_DEFAULT = "avg"

#: sentence-transformers' Pooling mode → the sentcl pooler that computes it (a Dense after CLS pooling is a
#: module of its own there, so CLS pooling is the vector before any head)
FROM_SENTENCE_TRANSFORMERS = {
    "mean": "avg",
    "cls": "cls_before_pooler",
    "max": "max",
    "mean_sqrt_len_tokens": "avg_sqrt_len",
    "weightedmean": "weighted_avg",
    "lasttoken": "last_token",
}
#: sentcl pooler → sentence-transformers' Pooling mode; the others (intermediate layers) have none
TO_SENTENCE_TRANSFORMERS = {ours: theirs for theirs, ours in FROM_SENTENCE_TRANSFORMERS.items()} | {
    "cls": "cls"
}
#: sentence-transformers' Pooling config: its older boolean keys, in the order its ``forward`` concatenates
#: the modes, and the keys that are not modes
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
POOLING_KEYS = {"word_embedding_dimension", "embedding_dimension", "pooling_mode", "include_prompt"}


#: Ditto's pooler names: ditto-LAYER-HEAD (0-based)
DITTO = re.compile(r"ditto-(\d+)-(\d+)")


def ditto_head(name: str) -> tuple[int, int] | None:
    """(layer, head) of a ``ditto-L-H`` pooler name, None for any other pooler."""
    match = DITTO.fullmatch(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def ditto(
    hidden_states: Sequence[torch.Tensor], self_attention: torch.Tensor, attention_mask
) -> torch.Tensor:
    """[N, H]: Σ_t w_t · (h⁰_t + hᴸ_t) / 2 over real tokens, w_t = the head's attention of token t to itself
    ([N, L]), divided by Σ_t w_t (the reference leaves the sum unnormalised; a positive scale per sentence
    changes no cosine)."""
    weights = self_attention.to(hidden_states[0].dtype) * pooled(attention_mask).to(hidden_states[0].dtype)
    states = (hidden_states[0] + hidden_states[-1]) / 2.0
    return (states * weights.unsqueeze(-1)).sum(1) / weights.sum(1, keepdim=True).clamp_min(1e-12)


#: PromptBERT's representation: the state at [MASK] of the sentence inside a template
PROMPT = "prompt"
#: the reference's template for BERT without training (kongds/Prompt-BERT run.sh, bert-prompt)
DEFAULT_TEMPLATE = 'This sentence : "[X]" means [MASK] .'


def check_pooler(name: str, where: str = "pooler") -> str:
    """``name`` when sentcl has that pooler; else one ConfigError naming ``where`` and the choices."""
    if name not in POOLERS and name != PROMPT and ditto_head(name) is None:
        raise ConfigError(f"{where}: {name!r} is not one of {', '.join(POOLERS)}, prompt, ditto-LAYER-HEAD")
    return name


@dataclass(frozen=True)
class TemplateFrame:
    """A template's ids around a sentence's: ``head`` special tokens (the tokenizer's, kept), ``prefix``, the
    sentence, ``suffix`` (holding [MASK] at ``mask``), ``tail`` special tokens."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    mask: int
    head: int
    tail: int


def special_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after one sentence ([CLS] … [SEP] for BERT)."""
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    content = tokenizer("a", add_special_tokens=False)["input_ids"]
    for start in range(len(full) - len(content) + 1):
        if full[start : start + len(content)] == content:
            return list(full[:start]), list(full[start + len(content) :])
    return [], []


def template_frame(tokenizer, template: str, where: str = "prompt_template") -> TemplateFrame:
    """``template`` (one ``[X]`` where the sentence goes, one ``[MASK]`` after it) as ids around one."""
    if template.count("[X]") != 1 or template.count("[MASK]") != 1:
        raise ConfigError(f"{where}: {template!r} needs one [X] (the sentence) and one [MASK]")
    mask = getattr(tokenizer, "mask_token", None)
    if mask is None:
        raise ConfigError(f"{where}: the tokenizer has no mask token for [MASK]")
    before, after = template.split("[X]")
    prefix = tokenizer(before.rstrip(), add_special_tokens=False)["input_ids"] if before.strip() else []
    suffix = tokenizer(after.replace("[MASK]", mask).lstrip(), add_special_tokens=False)["input_ids"]
    mask_id = tokenizer.mask_token_id
    if mask_id not in prefix + suffix or (prefix + suffix).count(mask_id) != 1:
        raise ConfigError(f"{where}: {template!r} does not tokenise to one mask token")
    if mask_id in prefix:
        raise ConfigError(f"{where}: [MASK] must come after [X] in {template!r}")
    head, tail = special_frame(tokenizer)
    return TemplateFrame(tuple(prefix), tuple(suffix), suffix.index(mask_id), len(head), len(tail))


def pooler_argument(name: str) -> str:
    """``--pooler``'s type: a pooler name, checked (argparse shows the ConfigError's words)."""
    import argparse

    try:
        return check_pooler(name, "--pooler")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def sentence_transformers_mode(pooler: str) -> str | None:
    """The Pooling mode sentence-transformers computes ``pooler`` with, or None."""
    return TO_SENTENCE_TRANSFORMERS.get(pooler)


def from_sentence_transformers(config: dict, where: str) -> tuple[str, bool]:
    """(the sentcl pooler, include_prompt) of a sentence-transformers Pooling config, in its current form
    (``pooling_mode``) or its older boolean keys, read field by field as sentence-transformers 6 reads it
    (no mode set: mean). What sentcl cannot compute as it does — several modes concatenated, an unknown mode
    or field — is one ValueError naming ``where`` and the field: never another pooling in its place."""
    unknown = sorted(set(config) - POOLING_KEYS - set(LEGACY_POOLING_KEYS))
    if unknown:
        raise ValueError(f"{where}: field {unknown[0]!r} is not one sentcl reads; the folder is refused")
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [m for key, m in LEGACY_POOLING_KEYS.items() if config.get(key)]
        mode = modes or ["mean"]
    modes = [mode] if isinstance(mode, str) else mode
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes) or not modes:
        raise ValueError(f"{where}: pooling_mode {mode!r} is not a mode name")
    if len(modes) > 1:
        raise ValueError(
            f"{where}: pooling_mode {'+'.join(modes)} concatenates several poolings, which sentcl does not "
            f"compute; the folder is refused"
        )
    if modes[0] not in FROM_SENTENCE_TRANSFORMERS:
        raise ValueError(
            f"{where}: pooling_mode {modes[0]!r} is not one of {', '.join(FROM_SENTENCE_TRANSFORMERS)}"
        )
    include_prompt = config.get("include_prompt", True)
    if not isinstance(include_prompt, bool):
        raise ValueError(f"{where}: include_prompt {include_prompt!r} is not true or false")
    return FROM_SENTENCE_TRANSFORMERS[modes[0]], include_prompt


def wrap_in_template(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    frame: TemplateFrame,
    pad: int = 0,
    limit: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[N, L] tokenised sentences (with their special tokens) → the same inside the template, padded with
    ``pad``, its mask, and [N] the position of [MASK] in each row. A sentence is cut where the template would
    pass ``limit`` positions."""
    prefix = input_ids.new_tensor(frame.prefix)
    suffix = input_ids.new_tensor(frame.suffix)
    rows, places = [], []
    for ids, mask in zip(input_ids, attention_mask, strict=True):
        real = ids[mask.bool()]
        head, body, tail = (
            real[: frame.head],
            real[frame.head : len(real) - frame.tail],
            real[len(real) - frame.tail :],
        )
        if limit is not None:
            body = body[: max(0, limit - frame.head - frame.tail - len(prefix) - len(suffix))]
        rows.append(torch.cat([head, prefix, body, suffix, tail]))
        places.append(frame.head + len(prefix) + len(body) + frame.mask)
    out, out_mask = pad_rows(rows, pad)
    return out, out_mask.to(attention_mask.dtype), torch.tensor(places, device=input_ids.device)


def pad_rows(rows: Sequence[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id rows of different lengths → [N, longest] padded with ``pad``, and the [N, longest] mask of
    the real tokens."""
    out = torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True, padding_value=pad)
    lengths = torch.tensor([len(row) for row in rows], device=out.device)
    return out, (torch.arange(out.shape[1], device=out.device)[None, :] < lengths[:, None]).long()
