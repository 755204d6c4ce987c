"""Forward and backward of one contrastive step, optionally with GradCache (Gao et al., RepL4NLP 2021).

A contrastive loss couples every example of the batch (in-batch negatives), so its batch cannot be
split like a cross-entropy batch. GradCache keeps the coupling and bounds the memory:

1. embed the batch in chunks of ``chunk_size`` examples *without* a graph, remembering each chunk's RNG
   state (so the dropout masks can be drawn again);
2. compute the loss on all the embeddings and backpropagate it to the embeddings only;
3. re-run each chunk *with* a graph under its remembered RNG state and backpropagate the cached
   embedding gradients through it; only one chunk's activations are alive at a time.

The parameter gradients equal those of the full batch embedded chunk by chunk with the same dropout
masks, at the cost of a second forward pass. Gradient *accumulation* is different: each micro-batch's
loss sees only its own in-batch negatives, so accumulating 8 micro-batches of 64 is 8 losses with 63
negatives each, not one loss with 511 — it does not enlarge the negative set.
"""

from __future__ import annotations

import torch

from sentcl.data import Batch
from sentcl.objectives import ContrastiveObjective, ObjectiveOutput


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def chunkable(objective: torch.nn.Module) -> bool:
    """Whether GradCache can train ``objective``: a loss on the batch's embeddings (a
    ``ContrastiveObjective``, objectives/base.py, whose ``embedding_loss`` GradCache calls)."""
    return isinstance(objective, ContrastiveObjective)


def forward_backward(objective: torch.nn.Module, batch: Batch, chunk_size: int = 0) -> ObjectiveOutput:
    """Loss of ``batch`` with gradients accumulated into the parameters (backward already done)."""
    size = batch.input_ids.shape[0]
    if chunk_size <= 0 or chunk_size >= size or not chunkable(objective):
        output: ObjectiveOutput = objective(batch)
        if torch.isfinite(output.loss):
            output.loss.backward()  # type: ignore[no-untyped-call]  # torch's, unannotated
        return output
    assert isinstance(objective, ContrastiveObjective)  # chunkable() said so
    encoder = objective.require_encoder()
    device = batch.input_ids.device
    chunks = [slice(start, start + chunk_size) for start in range(0, size, chunk_size)]

    def part(chunk: slice) -> torch.Tensor:
        return encoder.embed(Batch(batch.input_ids[chunk], batch.attention_mask[chunk], batch.indices[chunk]))

    states, parts = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(_rng_state(device))
            parts.append(part(chunk))
    embeddings = torch.cat(parts).requires_grad_()  # [B, V, D], a leaf: the encoder's graph stops here
    output = objective.embedding_loss(embeddings, batch)  # the whole batch: ids, labels
    if not torch.isfinite(output.loss):
        return output
    output.loss.backward()  # type: ignore[no-untyped-call]  # into the embeddings and the loss's own parameters
    cached = embeddings.grad
    assert cached is not None  # the loss reached the embeddings (a finite loss of them)
    end_state = _rng_state(device)
    for chunk, state in zip(chunks, states, strict=True):
        _set_rng_state(state, device)
        part(chunk).backward(cached[chunk])  # type: ignore[no-untyped-call]
    _set_rng_state(end_state, device)
    return output
