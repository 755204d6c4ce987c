"""Which evaluated checkpoint becomes ``model/``: ``training.select_by``.

* ``stsb-dev`` (SimCSE's policy, the default): the highest STS metric of ``training.eval_task``. It needs
  labelled STS pairs, which a new domain does not have, and it lets a labelled set choose the model of an
  "unsupervised" method.
* ``align_uniform``: the lowest ℓ_align + ℓ_uniform on held-out *unlabelled* training sentences.
  ℓ_align (α = 2) is over two dropout views of each sentence, the only positive pair that exists without
  labels and the one unsupervised SimCSE trains on; ℓ_uniform (t = 2) is over the sentences themselves,
  encoded as at test time. Both are Wang & Isola's, on L2-normalised embeddings. The rule is their loss
  with its default weight λ = 1, ℓ_align + ℓ_uniform, fixed before any measurement: a model that collapses
  (perfect alignment) pays in uniformity, one that spreads its embeddings by noise (good uniformity) pays
  in alignment, and Wang & Isola found the two together, with equal weight, track downstream quality over
  hundreds of encoders.
* ``loss``: the lowest training objective on the held-out examples: the same loss, the same views and
  batch size, no update.

The held-out examples (``training.select_holdout``, 1,000 by default) are taken out of the training data
by a permutation with a fixed seed (0, not ``training.seed``), so every seed of a comparison trains on the
same rows and is judged on the same held-out ones. Their evaluation runs under a forked RNG with a fixed
seed, so it is the same at every evaluation and does not move the training's dropout masks: exact resume
is unchanged. The objective's own state (MoCo's queue and key encoder) is restored after the loss pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sentcl.analysis.alignment_uniformity import alignment, uniformity
from sentcl.config import ConfigError
from sentcl.data import ContrastiveDataset, Records
from sentcl.data.collate import collate_views, tokenize_texts

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sentcl.model import TrainableEncoder

SELECT_BY = ("stsb-dev", "align_uniform", "loss")
HOLDOUT_SEED = 0
PROBE_SEED = 1234  # the dropout masks of every held-out evaluation


@dataclass(frozen=True)
class Selection:
    """The metric that chooses ``model/`` and its direction."""

    key: str
    lower_is_better: bool = False

    def better(self, new: dict[str, float], best: dict[str, float] | None) -> bool:
        if best is None:
            return True
        return new[self.key] < best[self.key] if self.lower_is_better else new[self.key] > best[self.key]


def selection(select_by: str, sts_primary: str | None) -> Selection:
    if select_by == "stsb-dev":
        if sts_primary is None:
            raise ConfigError("training.select_by: stsb-dev needs training.eval_task (it is none)")
        return Selection(sts_primary)
    if select_by not in SELECT_BY:
        raise ConfigError(f"training.select_by: {select_by!r} is not one of {', '.join(SELECT_BY)}")
    return Selection(f"heldout_{select_by}", lower_is_better=True)


def hold_out(records: Records, size: int) -> tuple[Records, Records]:
    """(training rows, ``size`` held-out rows), split by a permutation with a fixed seed; both keep their
    source lines for error messages."""
    if size < 2:
        raise ConfigError(f"training.select_holdout: needs at least 2 examples, got {size}")
    if size >= len(records):
        raise ConfigError(
            f"training.select_holdout: {size} held-out examples leave none of the {len(records)} in "
            f"{records.path} to train on"
        )
    order = np.random.default_rng(HOLDOUT_SEED).permutation(len(records))
    held, kept = np.sort(order[:size]), np.sort(order[size:])

    def subset(rows: np.ndarray) -> Records:
        return Records(
            records.path, [records.rows[i] for i in rows], [records.lines[i] for i in rows], records.unit
        )

    return subset(kept), subset(held)


class HeldOutProbe:
    """The label-free measurements of a model at one moment, on held-out training examples:
    ``heldout_align``, ``heldout_uniform``, ``heldout_align_uniform`` and ``heldout_loss``."""

    def __init__(self, dataset: ContrastiveDataset, tokenizer: Any, batch_size: int, max_length: int):
        self.dataset = dataset
        self.batch_size = batch_size
        # ℓ_uniform runs over distinct pairs: each distinct first-column text once (NLI premises repeat)
        texts = sorted({row[0] for row in dataset.records.rows})
        if len(texts) < 2:
            raise ConfigError(
                "training.select_holdout: the held-out examples hold fewer than 2 distinct texts"
            )
        self.sentences = tokenize_texts(tokenizer, texts, max_length, desc="tokenising held-out")
        self.pad_token_id = dataset.pad_token_id

    def sentence_batches(self, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self.sentences), self.batch_size):
            rows = range(start, min(start + self.batch_size, len(self.sentences)))
            batch = collate_views([(i, [self.sentences[i]]) for i in rows], self.pad_token_id).to(device)
            yield batch.input_ids[:, 0], batch.attention_mask[:, 0]

    def embed(self, encoder: TrainableEncoder, device: torch.device, dropout: bool) -> np.ndarray:
        encoder.train(dropout)
        parts = [
            encoder.encode_tokens(ids, mask).float().cpu() for ids, mask in self.sentence_batches(device)
        ]
        return torch.cat(parts).numpy()

    def loss(self, objective: torch.nn.Module, device: torch.device) -> float:
        """The objective's loss over the held-out examples in a fixed order, in batches of the training
        batch size, averaged per example; the objective's non-trained state is restored afterwards."""
        kept = {
            name: tensor.detach().clone()
            for name, tensor in objective.state_dict(keep_vars=True).items()
            if not (isinstance(tensor, torch.nn.Parameter) and tensor.requires_grad)
        }
        total, count = 0.0, 0
        objective.train()
        try:
            for start in range(0, len(self.dataset), self.batch_size):
                rows = range(start, min(start + self.batch_size, len(self.dataset)))
                if len(rows) < 2:  # an in-batch loss needs a negative
                    continue
                batch = self.dataset.collate([self.dataset[i] for i in rows]).to(device)
                total += float(objective(batch).loss) * len(rows)
                count += len(rows)
        finally:
            objective.load_state_dict(kept, strict=False)
        return total / count

    @torch.no_grad()
    def __call__(
        self, objective: torch.nn.Module, encoder: TrainableEncoder, device: torch.device
    ) -> dict[str, float]:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(PROBE_SEED)
            first = self.embed(encoder, device, dropout=True)
            second = self.embed(encoder, device, dropout=True)
            clean = self.embed(encoder, device, dropout=False)
            loss = self.loss(objective, device)
        align, uniform = alignment(first, second), uniformity(clean)
        return {
            "heldout_align": align,
            "heldout_uniform": uniform,
            "heldout_align_uniform": align + uniform,
            "heldout_loss": loss,
        }
