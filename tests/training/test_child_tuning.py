import pytest
import torch
from torch import nn

from sentcl.config import ConfigError, from_dict
from sentcl.model import SentenceEncoder
from sentcl.training import recipe_from_dict, train
from sentcl.training.child_tuning import ChildTuning, ChildTuningConfig
from tests.conftest import SENTENCES


def test_f_keeps_a_p_share_of_gradient_elements_rescaled_by_one_over_p():
    layer = nn.Linear(200, 100)
    child = ChildTuning(ChildTuningConfig(mode="F", reserve=0.3, scope="backbone"), layer)
    layer.weight.grad = torch.ones_like(layer.weight)
    child.mask_gradients(step=1)
    grad = layer.weight.grad
    values = grad.unique().tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(1 / 0.3)
    assert (grad != 0).float().mean().item() == pytest.approx(0.3, abs=0.01)
    total = torch.zeros_like(layer.weight)
    for step in range(2, 202):  # unbiased: the mean of many masked gradients is the gradient
        layer.weight.grad = torch.full_like(layer.weight, 2.0)
        child.mask_gradients(step)
        total += layer.weight.grad
    assert (total / 200).mean().item() == pytest.approx(2.0, abs=0.02)


def test_d_keeps_the_top_fisher_share_against_a_naive_reference():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 1))
    batches = [torch.randn(4, 6) for _ in range(3)]

    def backward(x):
        model(x).pow(2).sum().backward()

    fisher = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    for x in batches:  # the reference: one batch at a time, Σ grad²
        model.zero_grad()
        backward(x)
        for name, p in model.named_parameters():
            fisher[name] += p.grad.pow(2)
    model.zero_grad()
    flat = torch.cat([f.flatten() for f in fisher.values()])
    top = set(flat.argsort(descending=True)[: round(0.25 * flat.numel())].tolist())
    child = ChildTuning(ChildTuningConfig(mode="D", reserve=0.25, scope="backbone"), model)
    child.estimate_fisher(batches, backward)
    chosen = torch.cat([m.flatten() for m in child.masks()]).nonzero().flatten().tolist()
    assert set(chosen) == top
    assert all(p.grad is None for p in model.parameters())  # estimation leaves no gradient behind
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    child.mask_gradients(step=1)
    assert torch.equal(
        torch.cat([p.grad.flatten() for p in model.parameters()]) != 0, flat >= flat[list(top)].min()
    )


def test_d_leaves_no_gradient_of_any_trained_part_for_the_first_step(tmp_path, tiny_model_dir, monkeypatch):
    """The Fisher passes reach the MLP head too: its gradients must not be added to step 1."""
    import sentcl.training.steps as loop_module

    calls, seen = [], []
    real = loop_module.forward_backward

    def spy(objective, batch, chunk=0):
        calls.append(1)
        if len(calls) == 3:  # after the 2 Fisher batches: the first training step
            seen.extend(p.grad for p in objective.parameters())  # the encoder's among them
        return real(objective, batch, chunk)

    monkeypatch.setattr(loop_module, "forward_backward", spy)
    data = tmp_path / "wiki.txt"
    data.write_text("\n".join(SENTENCES * 2) + "\n")
    train(recipe_from_dict({
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "cls", "mlp_only_train": True},
        "data": {"train_file": str(data), "max_length": 16},
        "objective": {"name": "simcse"},
        "training": {"output_dir": str(tmp_path / "run"), "batch_size": 4, "max_steps": 1, "eval_steps": 0,
                     "child_tuning": {"mode": "D", "reserve": 0.2, "fisher_batches": 2}},
    }))  # fmt: skip
    assert len(calls) == 3 and seen and all(g is None for g in seen)


@pytest.mark.parametrize("scope", ["reference", "backbone"])
def test_d_updates_only_the_child_network_and_leaves_the_rest_bit_identical(tmp_path, tiny_model_dir, scope):
    """Of the masked tensors only the child network moves; under the reference scope the embeddings are not
    masked (AliceMind masks '*layer*' parameters only) and move freely."""
    data = tmp_path / "wiki.txt"
    data.write_text("\n".join(SENTENCES * 2) + "\n")
    config = recipe_from_dict({
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "cls", "mlp_only_train": True},
        "data": {"train_file": str(data), "max_length": 16},
        "objective": {"name": "simcse"},
        "training": {"output_dir": str(tmp_path / "run"), "batch_size": 4, "learning_rate": 1e-3,
                     "max_steps": 5, "eval_steps": 0, "seed": 3, "weight_decay": 0.0,
                     "child_tuning": {"mode": "D", "reserve": 0.2, "fisher_batches": 2, "scope": scope}},
    })  # fmt: skip
    train(config)
    before = SentenceEncoder.load(str(tiny_model_dir), pooler="avg").backbone.state_dict()
    after = SentenceEncoder.load(str(tmp_path / "run"), pooler="avg").backbone.state_dict()
    floats = [k for k in before if before[k].is_floating_point()]
    masked = [k for k in floats if scope == "backbone" or "layer" in k]
    changed = torch.cat([(after[k] != before[k]).flatten() for k in masked])
    assert 0 < changed.sum().item() <= round(0.2 * changed.numel())  # at most the child network moved
    free = [k for k in floats if k not in masked]
    assert (scope == "backbone") == (free == [])
    if free:  # the embeddings: every row of a word in the data moved
        assert all(not torch.equal(after[k], before[k]) for k in free if "word_embeddings" in k)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "X"}, "mode"),
        ({"mode": "F", "reserve": 0}, "reserve"),
        ({"fisher_batches": -1}, "fisher"),
        ({"scope": "all"}, "scope"),
    ],
)
def test_bad_settings_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(ChildTuningConfig, values, prefix="training.child_tuning")


def test_the_reference_scope_masks_what_alicemind_masks(tiny_model_dir):
    """AliceMind's ChildTuningAdamW: F masks every parameter of the optimiser (the MLP head too), D only the
    parameters named '*layer*' (the transformer layers; embeddings, pooler and heads stay free)."""
    from sentcl.model import ModelConfig
    from sentcl.objectives import SimCSE

    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="cls"))
    objective = SimCSE(encoder=encoder)
    f = ChildTuning(ChildTuningConfig(mode="F"), encoder.backbone, optimized=objective)
    assert {id(p) for p in f.targets} == {id(p) for p in objective.parameters()}
    d = ChildTuning(ChildTuningConfig(mode="D"), encoder.backbone, optimized=objective)
    layers = {id(p) for n, p in encoder.backbone.named_parameters() if n.startswith("encoder.layer.")}
    assert {id(p) for p in d.targets} == layers and layers
    both = ChildTuning(ChildTuningConfig(mode="D", scope="backbone"), encoder.backbone, optimized=objective)
    assert {id(p) for p in both.targets} == {id(p) for p in encoder.backbone.parameters()}
    with pytest.raises(ConfigError, match="no trainable parameter to mask"):
        ChildTuning(ChildTuningConfig(mode="D"), nn.Linear(3, 3))


def test_f_masks_depend_on_the_seed_and_step_only():
    layer = nn.Linear(50, 40)
    child = ChildTuning(ChildTuningConfig(mode="F", reserve=0.5, scope="backbone"), layer, seed=7)

    def mask(step):
        layer.weight.grad = torch.ones_like(layer.weight)
        layer.bias.grad = torch.ones_like(layer.bias)
        torch.manual_seed(step * 13)  # the global RNG plays no part
        child.mask_gradients(step)
        return layer.weight.grad != 0

    assert torch.equal(mask(3), mask(3)) and not torch.equal(mask(3), mask(4))
