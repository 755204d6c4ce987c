"""Under training.autocast (bf16) the similarities and losses stay fp32: the same embeddings give the same
loss inside autocast as outside it (bf16 products of unit vectors / τ = 0.05 would move it by ~1e-2)."""

import pytest
import torch

from sentcl.objectives import (
    AlignUniform,
    DebiasedSimCSE,
    MoCo,
    MoCoConfig,
    NTXent,
    SimCSE,
    SimCSEConfig,
    VaSCL,
    VaSCLConfig,
)
from sentcl.objectives.cline import cline_contrast
from sentcl.objectives.similarity import cosine_matrix
from sentcl.objectives.tacl import token_contrastive_loss
from tests.objectives.helpers import batch_of, tiny_encoder


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_cosine_matrix_is_fp32_inside_autocast():
    torch.manual_seed(0)
    a, b = torch.randn(16, 384), torch.randn(16, 384)
    with bf16():
        inside = cosine_matrix(a, b)
        from_bf16 = cosine_matrix(a.bfloat16(), b.bfloat16())  # an MLP head's output under autocast
    assert inside.dtype == from_bf16.dtype == torch.float32
    assert torch.equal(inside, cosine_matrix(a, b))


@pytest.mark.parametrize(
    "objective",
    [
        SimCSE(SimCSEConfig(hard_negative_weight=2.0)),
        SimCSE(SimCSEConfig(matryoshka_dims=[64, 8])),
        NTXent(),
        DebiasedSimCSE(),
        AlignUniform(),
        VaSCL(VaSCLConfig(topk=3), dimension=64),
        VaSCL(VaSCLConfig(variant="paper", topk=3)),
    ],
    ids=lambda o: type(o).__name__ + ("-matryoshka" if getattr(o.config, "matryoshka_dims", None) else ""),
)
def test_embedding_losses_are_fp32_inside_autocast(objective):
    torch.manual_seed(0)
    views = 3 if getattr(objective.config, "hard_negative_weight", 1.0) != 1.0 else 2
    z = torch.randn(8, views, 64)
    torch.manual_seed(1)  # the same draws inside (VaSCL's random direction)
    outside = objective.embedding_loss(z).loss
    torch.manual_seed(1)
    with bf16():
        inside = objective.embedding_loss(z).loss
    assert inside.dtype == torch.float32
    assert inside.item() == pytest.approx(outside.item(), abs=1e-5)


def test_moco_logits_are_fp32_inside_autocast(tiny_model_dir, monkeypatch):
    torch.manual_seed(0)
    encoder = tiny_encoder(tiny_model_dir, "avg").eval()
    batch = batch_of(encoder)
    z = torch.randn(len(batch.input_ids), 2, encoder.dimension)
    keys, queued = torch.randn(len(z), encoder.dimension), torch.randn(8, encoder.dimension)
    losses = []
    for precision in (torch.autocast("cpu", enabled=False), bf16()):
        objective = MoCo(MoCoConfig(queue_size=16), encoder)
        objective.enqueue(torch.nn.functional.normalize(queued, dim=-1))
        # the key encoder's pass is a forward pass (bf16 under autocast); fixed keys isolate the logits
        monkeypatch.setattr(objective.key_encoder, "embed_tokens", lambda ids, mask: keys)
        with precision:
            losses.append(objective.embedding_loss(z, batch).loss.item())
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)


def test_tacl_and_cline_scores_are_fp32_inside_autocast():
    torch.manual_seed(0)
    student, teacher = torch.randn(4, 7, 32), torch.randn(4, 7, 32)
    mask, selected = torch.ones(4, 7), torch.rand(4, 7) < 0.5
    anchor, synonym, antonym = torch.randn(3, 6, 32).unbind(0)
    outside = [
        token_contrastive_loss(student, teacher, mask, selected, 0.05),
        cline_contrast(anchor, synonym, antonym, "cos", 0.05),
    ]
    with bf16():
        inside = [
            token_contrastive_loss(student, teacher, mask, selected, 0.05),
            cline_contrast(anchor.bfloat16(), synonym.bfloat16(), antonym.bfloat16(), "cos", 0.05),
        ]
    assert inside[0].item() == pytest.approx(outside[0].item(), abs=1e-5)
    # the bf16 inputs are rounded once; the scores from them are fp32
    rounded = cline_contrast(
        anchor.bfloat16().float(), synonym.bfloat16().float(), antonym.bfloat16().float(), "cos", 0.05
    )
    assert inside[1].item() == pytest.approx(rounded.item(), abs=1e-6)
