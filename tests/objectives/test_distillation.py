"""Distillation: the embedding and the listwise (RankCSE) losses against loops written from their definitions,
their closed forms, the teacher's table cached once and refused when it does not match, and a layer-reduced
student."""

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sentcl.config import ConfigError
from sentcl.data import Records
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import Distillation, DistillationConfig, build_objective
from sentcl.objectives import teacher as teacher_module
from sentcl.objectives.distillation import (
    consistency_loss,
    embedding_distillation,
    listmle_loss,
    listnet_loss,
)
from sentcl.objectives.teacher import TeacherError, teacher_table
from tests.conftest import SENTENCES
from tests.objectives.helpers import batch_of, tiny_encoder


def naive_listnet(student, teacher):
    total = 0.0
    for i in range(len(student)):
        others = [j for j in range(len(student)) if j != i]
        t = np.exp([teacher[i][j] for j in others])
        s = np.exp([student[i][j] for j in others])
        total += -sum((t[k] / t.sum()) * math.log(s[k] / s.sum()) for k in range(len(others)))
    return total / len(student)


def naive_listmle(student, teacher):
    """−log of the Plackett–Luce probability of each row's teacher order (the whole row), per row."""
    total = 0.0
    for i in range(len(student)):
        order = sorted(range(len(student)), key=lambda j: -teacher[i][j])
        for r, j in enumerate(order):
            total += math.log(sum(math.exp(student[i][k]) for k in order[r:])) - student[i][j]
    return total / len(student)


def naive_js(forward, backward):
    total = 0.0
    for f, b in zip(forward, backward, strict=True):
        p, q = np.exp(f) / np.exp(f).sum(), np.exp(b) / np.exp(b).sum()
        m = (p + q) / 2
        total += 0.5 * (np.sum(p * np.log(p / m)) + np.sum(q * np.log(q / m)))
    return total / len(forward)


def test_the_ranking_losses_equal_their_definitions():
    torch.manual_seed(0)
    student, teacher = torch.randn(5, 5, dtype=torch.float64), torch.randn(5, 5, dtype=torch.float64)
    s, t = student.tolist(), teacher.tolist()
    assert listnet_loss(student, teacher).item() == pytest.approx(naive_listnet(s, t), abs=1e-9)
    assert listmle_loss(student, teacher).item() == pytest.approx(naive_listmle(s, t), abs=1e-9)
    js = consistency_loss(student, teacher).item()
    assert js == pytest.approx(naive_js(student.numpy(), teacher.numpy()), abs=1e-9)


def test_closed_forms():
    flat = torch.zeros(6, 6)  # every score equal: both distributions uniform over the 5 others
    assert listnet_loss(flat, flat).item() == pytest.approx(math.log(5), abs=1e-6)
    # ListMLE of equal scores: Σ_r log(6 − r) = log 6! per row
    assert listmle_loss(flat, flat).item() == pytest.approx(math.log(math.factorial(6)), abs=1e-5)
    assert consistency_loss(flat, flat).item() == pytest.approx(0, abs=1e-7)
    x = torch.randn(4, 8)
    assert embedding_distillation(x, x, "mse").item() == 0
    assert embedding_distillation(x, 2 * x, "cosine").item() == pytest.approx(0, abs=1e-6)
    assert embedding_distillation(x, torch.zeros_like(x), "mse").item() == pytest.approx((x**2).mean().item())


@pytest.fixture
def objective(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    # a layer-reduced student of the teacher: one of its layers
    student = SentenceEncoder.from_config(
        ModelConfig(name_or_path=str(tiny_model_dir), pooler="avg", keep_layers=[0])
    )
    data = SimpleNamespace(records=Records("train.txt", [(s,) for s in SENTENCES[:6]], list(range(1, 7))))
    config = DistillationConfig(teacher=str(tiny_model_dir), listwise="listnet", contrastive_weight=0.1)
    return build_objective("distillation", config, student, data), student


def test_the_loss_falls_and_the_teacher_table_is_the_teachers_encoding(objective, tiny_model_dir):
    distillation, student = objective
    teacher = SentenceEncoder.load(str(tiny_model_dir)).eval()
    expected = teacher.encode(SENTENCES[:6])
    assert np.allclose(distillation.table, expected, atol=1e-5)
    batch = batch_of(student)
    optimizer = torch.optim.Adam(distillation.parameters(), lr=1e-3)
    student.eval()  # no dropout: the same loss is compared step to step
    losses = []
    for _ in range(10):
        output = distillation(batch)
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
        losses.append(output.loss.item())
    assert losses[-1] < losses[0]
    assert set(output.terms) == {"info_nce", "embedding", "listnet"}


def test_the_table_is_computed_once(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    first = teacher_table(str(tiny_model_dir), SENTENCES[:4])

    def no_teacher(*args, **kwargs):
        raise AssertionError("the teacher ran again")

    monkeypatch.setattr(teacher_module, "load_teacher", no_teacher)
    again = teacher_table(str(tiny_model_dir), SENTENCES[:4])
    assert np.array_equal(first, again)


def _swap(tables):
    a, b = (np.load(t) for t in tables)
    np.save(tables[0], b)
    np.save(tables[1], a)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda tables: np.save(tables[0], np.load(tables[0])[::-1]), "its content is not the table"),
        (_swap, "its content is not the table"),
        (lambda tables: tables[0].write_bytes(b""), "it cannot be read"),
        (lambda tables: np.save(tables[0], np.zeros((3, 32), dtype=np.float32)), r"shape \[3, 32\]"),
    ],
    ids=["rows reversed", "two tables swapped", "0 bytes", "3 rows for 4"],
)
def test_a_cache_that_is_not_its_teachers_table_is_rebuilt(
    tiny_model_dir, tmp_path, monkeypatch, caplog, damage, why
):
    """Issue 55: swapped or reordered tables were used as the teacher's (step-3 loss 7.18 vs 6.17), and a
    0-byte table was a 31-line EOFError."""
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    texts = [SENTENCES[:4], SENTENCES[4:8]]
    truth = [np.array(teacher_table(str(tiny_model_dir), t)) for t in texts]
    key = [teacher_module.table_key(str(tiny_model_dir), t, None, None) for t in texts]
    tables = [tmp_path / "cache" / "teachers" / f"{k}.npy" for k in key]
    damage(tables)
    with caplog.at_level("WARNING", logger="sentcl.objectives.teacher"):
        again = teacher_table(str(tiny_model_dir), texts[0])
    np.testing.assert_array_equal(again, truth[0])
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        line.startswith(f"{tables[0]}: the cached teacher table is not used and is rebuilt")
        and "\n" not in line
    )
    assert re.search(why, line)
    assert teacher_table(str(tiny_model_dir), texts[0]) is not None  # rebuilt: read back as is
    caplog.clear()
    teacher_table(str(tiny_model_dir), texts[0])
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_folder_where_the_cache_goes_is_one_line_before_encoding(
    tiny_model_dir, tmp_path, monkeypatch, caplog
):
    """Issue 70 item 7: the WARNING said "rebuilt", the teacher encoded all, and the run then failed."""
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    key = teacher_module.table_key(str(tiny_model_dir), SENTENCES[:4], None, None)
    (tmp_path / "cache" / "teachers" / f"{key}.npy").mkdir(parents=True)
    encoded = []
    monkeypatch.setattr(teacher_module, "load_teacher", lambda *a: encoded.append(a))
    with pytest.raises(
        TeacherError, match=rf"{key}.npy: not a file, where sentcl caches the teacher's table"
    ):
        teacher_table(str(tiny_model_dir), SENTENCES[:4])
    assert not encoded and "rebuilt" not in caplog.text


def test_a_teacher_that_does_not_load_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(TeacherError, match=r"objective.teacher: the teacher does not load"):
        teacher_table(str(tmp_path / "nowhere"), SENTENCES[:2])
    assert not (tmp_path / "cache" / "teachers").exists() or not any(
        (tmp_path / "cache" / "teachers").iterdir()
    )


def test_config_errors_name_their_key():
    with pytest.raises(ConfigError, match="teacher: a teacher model"):
        DistillationConfig().validate()
    with pytest.raises(ConfigError, match="listwise: 'rank' is not one of"):
        DistillationConfig(teacher="t", listwise="rank").validate()
    with pytest.raises(ConfigError, match="every term is off"):
        DistillationConfig(teacher="t", contrastive_weight=0, embedding_weight=0).validate()


def test_a_layer_reduced_student_keeps_the_layers_it_names(tiny_model_dir):
    full = SentenceEncoder.from_config(ModelConfig(name_or_path=str(tiny_model_dir), pooler="avg"))
    layers = len(full.backbone.encoder.layer)
    student = SentenceEncoder.from_config(
        ModelConfig(name_or_path=str(tiny_model_dir), pooler="avg", keep_layers=[layers - 1])
    )
    assert len(student.backbone.encoder.layer) == 1 and student.backbone.config.num_hidden_layers == 1
    kept = student.backbone.encoder.layer[0].state_dict()
    for name, value in full.backbone.encoder.layer[layers - 1].state_dict().items():
        assert torch.equal(kept[name], value)
    with pytest.raises(ConfigError, match=r"model.keep_layers: \[1, 0\] must be distinct layer numbers"):
        SentenceEncoder.from_config(
            ModelConfig(name_or_path=str(tiny_model_dir), pooler="avg", keep_layers=[1, 0])
        )


def test_a_saved_student_loads_as_the_smaller_model(tiny_model_dir, tmp_path):
    student = SentenceEncoder.from_config(
        ModelConfig(name_or_path=str(tiny_model_dir), pooler="avg", keep_layers=[0])
    )
    student.save(tmp_path / "student")
    loaded = SentenceEncoder.load(str(tmp_path / "student"))
    assert len(loaded.backbone.encoder.layer) == 1
    assert np.allclose(loaded.encode(SENTENCES[:3]), student.eval().encode(SENTENCES[:3]), atol=1e-6)


def test_distillation_refuses_streamed_data(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    student = tiny_encoder(tiny_model_dir, "avg")
    with pytest.raises(ConfigError, match="needs the training data in memory"):
        Distillation(DistillationConfig(teacher=str(tiny_model_dir)), student, SimpleNamespace())


def test_one_view_ranks_each_list_against_itself_and_refuses_the_two_view_terms(objective):
    distillation, student = objective
    embeddings = torch.randn(6, 1, student.output_dim)
    batch = SimpleNamespace(indices=torch.arange(6))
    with pytest.raises(ValueError, match="InfoNCE and consistency terms need 2 views"):
        distillation.loss_from_embeddings(embeddings, batch)
    distillation.config.contrastive_weight = 0.0
    output = distillation.loss_from_embeddings(embeddings, batch)
    two_views = distillation.loss_from_embeddings(embeddings.expand(6, 2, -1), batch)
    assert set(output.terms) == {"embedding", "listnet"}
    assert output.loss.item() == pytest.approx(two_views.loss.item(), abs=1e-6)
