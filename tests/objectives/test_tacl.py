import math

import pytest
import torch

from sentcl.objectives import TaCLConfig, build_objective
from sentcl.objectives.masked_lm import MaskedLMObjective
from sentcl.objectives.tacl import TaCL, token_contrastive_loss
from sentcl.training.gradcache import chunkable
from tests.objectives.helpers import batch_of, tiny_encoder


@pytest.fixture
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return tiny_encoder(tiny_model_dir, "avg")


def test_equals_a_naive_reference():
    torch.manual_seed(0)
    student, teacher = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 5, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    selected = torch.zeros(3, 5, dtype=torch.bool)
    selected[0, 1] = selected[0, 3] = selected[1, 2] = selected[2, 1] = True

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    total, count = 0.0, 0
    for n in range(3):
        for i in range(5):
            if not selected[n, i]:
                continue
            scores = [cos(student[n, i], teacher[n, j]) / 0.1 for j in range(5) if mask[n, j]]
            total += -cos(student[n, i], teacher[n, i]) / 0.1 + math.log(sum(math.exp(s) for s in scores))
            count += 1
    ours = token_contrastive_loss(student, teacher, mask, selected, 0.1)
    assert ours.item() == pytest.approx(total / count, abs=1e-6)  # computed in float32


def test_closed_forms():
    mask, selected = torch.ones(2, 6), torch.ones(2, 6, dtype=torch.bool)
    same = torch.ones(2, 6, 8)  # every teacher state alike: log(sequence length)
    assert token_contrastive_loss(same, same, mask, selected, 0.05).item() == pytest.approx(
        math.log(6), abs=1e-5
    )
    basis = torch.eye(6)[None].repeat(2, 1, 1)  # orthogonal states, student = teacher
    expected = -math.log(math.exp(1 / 0.5) / (math.exp(1 / 0.5) + 5))
    assert token_contrastive_loss(basis, basis, mask, selected, 0.5).item() == pytest.approx(
        expected, abs=1e-5
    )
    mask[:, 4:] = 0  # padding is never a negative
    expected = -math.log(math.exp(1 / 0.5) / (math.exp(1 / 0.5) + 3))
    got = token_contrastive_loss(basis, basis, mask, selected & mask.bool(), 0.5)
    assert got.item() == pytest.approx(expected, abs=1e-5)


def test_objective_trains_the_student_never_the_teacher(encoder):
    objective = build_objective("tacl", TaCLConfig(mlm_probability=0.4), encoder)
    assert isinstance(objective, TaCL)  # its own MLM term: not wrapped
    assert isinstance(objective, MaskedLMObjective) and not chunkable(objective)
    batch = batch_of(encoder, views=1)
    torch.manual_seed(3)
    out = objective(batch)
    assert set(out.terms) == {"tacl", "mlm"}
    assert out.loss.item() == pytest.approx(out.terms["tacl"].item() + out.terms["mlm"].item(), abs=1e-5)
    out.loss.backward()
    assert encoder.backbone.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in objective.teacher.parameters())
    objective.train()
    assert not objective.teacher.training  # the teacher never drops out


def test_the_teacher_starts_equal_to_the_student_and_stays_fixed(encoder):
    objective = TaCL(TaCLConfig(), encoder)
    before = {k: v.clone() for k, v in objective.teacher.state_dict().items()}
    for name, value in encoder.state_dict().items():
        assert torch.equal(value, before[name])
    trained = {id(p): p for p in [*encoder.parameters(), *objective.head.parameters()]}  # decoder is tied
    optimiser = torch.optim.Adam(trained.values(), lr=3e-3)
    batch = batch_of(encoder, views=1)
    losses = []
    for step in range(12):
        torch.manual_seed(step % 3)  # a few fixed maskings, visited repeatedly
        out = objective(batch)
        optimiser.zero_grad()
        out.loss.backward()
        optimiser.step()
        losses.append(out.loss.item())
    assert sum(losses[-3:]) < sum(losses[:3])
    for name, value in objective.teacher.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_mlm_weight_zero_leaves_the_token_contrast_only(encoder):
    objective = TaCL(TaCLConfig(mlm_weight=0.0), encoder)
    torch.manual_seed(1)
    out = objective(batch_of(encoder, views=1))
    assert out.loss.item() == pytest.approx(out.terms["tacl"].item(), abs=1e-6)


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler"])
def test_a_recipe_measuring_tacl_on_cls_is_refused(pooler):
    """TaCL's loss never trains [CLS]: a row on it would measure the starting model's [CLS]."""
    from sentcl.config import ConfigError
    from sentcl.training import recipe_from_dict

    recipe = {"model": {"name_or_path": "m", "pooler": pooler}, "data": {"train_file": "x.txt"}}
    with pytest.raises(ConfigError, match=f"model.pooler: '{pooler}' is never trained by TaCL"):
        recipe_from_dict(recipe | {"objective": {"name": "tacl"}})
    recipe["model"]["pooler"] = "avg"
    assert recipe_from_dict(recipe | {"objective": {"name": "tacl"}}).model.pooler == "avg"
