"""TSDAE (Wang, Reimers & Gurevych, Findings of EMNLP 2021): a denoising auto-encoder whose bottleneck is the
sentence vector.

Each sentence x is damaged by deleting words (each word independently with probability ``deletion``, 0.6 in
the paper; at least one word kept), the damaged sentence x̃ is encoded to one vector s = pool(enc(x̃)), and a
transformer decoder reconstructs x from s alone: its cross-attention sees one key, s, and nothing else of
the encoder. The loss is the decoder's token cross-entropy,

    L = − (1 / N) Σ_i Σ_t log p(x_{i,t} | x_{i,<t}, s_i)

over the N real target tokens (padding ignored), as sentence-transformers' ``DenoisingAutoEncoderLoss``
computes it (the test equals it on the same batch and weights). The decoder is the encoder's own
architecture as a causal LM with cross-attention, initialised from the same checkpoint, every parameter it
shares with the encoder tied to it (one tensor; ``model.heads.build_causal_decoder``), its output embedding
the input embedding; only the encoder is kept. The paper's pooler is [CLS] without a head
(``model.pooler: cls_before_pooler``).

Words here are the tokenizer's: a WordPiece token "##…" continues the word before it, a SentencePiece or
byte-level BPE token without its word-start mark ("▁", "Ġ") too; special tokens are never deleted. The
reference deletes nltk ``word_tokenize`` words from the text and detokenises it before tokenising: the
same words up to punctuation (docs/methods/tsdae.md). The deletion is drawn with torch's generator every
step, so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.model import pad_rows
from sentcl.objectives.base import Objective, ObjectiveConfig, ObjectiveOutput


@dataclass
class TSDAEConfig(ObjectiveConfig):
    #: the share of words deleted from each sentence (the paper's best: 0.6)
    deletion: float = 0.6

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.deletion < 1:
            raise ConfigError(f"deletion: must be in [0, 1), got {self.deletion}")


def continuation_table(tokenizer: Any) -> torch.Tensor:
    """[vocabulary] True where a token continues the word before it (WordPiece "##", or no "▁" / "Ġ" word
    start in SentencePiece / byte-level BPE vocabularies); special tokens start their own."""
    vocabulary: dict[str, int] = tokenizer.get_vocab()
    table = torch.zeros(max(vocabulary.values()) + 1, dtype=torch.bool)
    tokens = list(vocabulary)
    if any(token.startswith("##") for token in tokens):
        continues = [token.startswith("##") for token in tokens]
    else:
        mark = next((m for m in ("▁", "Ġ") if any(token.startswith(m) for token in tokens)), None)
        continues = [mark is not None and not token.startswith(mark) for token in tokens]
    table[list(vocabulary.values())] = torch.tensor(continues, dtype=torch.bool)
    table[list(tokenizer.all_special_ids)] = False
    return table


def delete_words(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    deletion: float,
    continues: torch.Tensor,
    special: torch.Tensor,
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, L] ids → the damaged [N, L'] ids and mask: each word (a token and the tokens continuing it) of a
    row deleted with probability ``deletion`` (torch's generator), at least one kept; ``special`` ids stay."""
    rows = []
    for ids, mask in zip(input_ids, attention_mask, strict=True):
        real = ids[mask.bool()]
        kept_special = torch.isin(real, special)
        starts = ~continues[real.clamp(max=len(continues) - 1)] | kept_special
        starts[0] = True
        word = torch.cumsum(starts.long(), 0) - 1  # each token's word
        words = int(word[-1]) + 1 if len(real) else 0
        is_special_word = torch.zeros(words, dtype=torch.bool, device=ids.device)
        is_special_word[word[kept_special]] = True
        candidates = (~is_special_word).nonzero().flatten()
        keep = torch.rand(words, device=ids.device) > deletion
        if len(candidates) and not keep[candidates].any():
            keep[candidates[torch.randint(len(candidates), (), device=ids.device)]] = True
        keep |= is_special_word
        rows.append(real[keep[word]])
    return pad_rows(rows, pad_token_id)


class TSDAE(Objective):
    paper = "Wang, Reimers & Gurevych, TSDAE, Findings of EMNLP 2021"
    matryoshka_refusal = "reconstructs the sentence from the full vector (the decoder's cross-attention)"
    config: TSDAEConfig
    continues: torch.Tensor
    special: torch.Tensor

    def __init__(self, config: TSDAEConfig | None = None, encoder: Any = None, data: Any = None):
        super().__init__(config or TSDAEConfig(), encoder)
        encoder = self.require_encoder()
        if encoder.output_dim != encoder.hidden_size:
            raise ConfigError(
                f"model.pooler: TSDAE's decoder attends to the sentence vector as a hidden state, so it "
                f"must have the model's size {encoder.hidden_size}, not {encoder.output_dim} (use "
                f"cls_before_pooler or avg, without a head or projection)"
            )
        self.decoder = encoder.causal_decoder()
        tokenizer = encoder.tokenizer
        self.pad_token_id = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else 0
        self.register_buffer("continues", continuation_table(tokenizer), persistent=False)
        self.register_buffer("special", torch.tensor(sorted(tokenizer.all_special_ids)), persistent=False)

    def reconstruction_loss(
        self, source_ids: torch.Tensor, source_mask: torch.Tensor, target_ids: torch.Tensor
    ) -> torch.Tensor:
        """The decoder's cross-entropy of ``target_ids`` given the sentence vectors of the damaged
        ``source_ids`` (the loss without the noise: what the test holds to the reference)."""
        encoder = self.require_encoder()
        vectors = encoder.embed_tokens(source_ids, source_mask)  # [B, H]
        logits = self.decoder(
            input_ids=target_ids[:, :-1],
            encoder_hidden_states=vectors[:, None],
            encoder_attention_mask=source_mask[:, :1],
            use_cache=False,
        ).logits
        return F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            target_ids[:, 1:].reshape(-1),
            ignore_index=self.pad_token_id,
        )

    def forward(self, batch: Any) -> ObjectiveOutput:
        ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
        damaged, damaged_mask = delete_words(
            ids, mask, self.config.deletion, self.continues, self.special, self.pad_token_id
        )
        loss = self.reconstruction_loss(damaged, damaged_mask, ids)
        return ObjectiveOutput(loss=loss, terms={"tsdae": loss.detach()})
