"""The layer subsets a student may keep, each scored on STS-B dev as model.keep_layers would start it."""

import pytest

from sentcl.config import ConfigError
from sentcl.evaluation import STSEvaluator
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.model.layer_choice import rank_layer_subsets
from tests.conftest import make_tiny_model


def test_every_subset_is_scored_as_its_student_starts_best_first(tmp_path, stsb_data_dir):
    teacher = make_tiny_model(tmp_path / "four", layers=4)
    ranked = rank_layer_subsets(str(teacher), 2, stsb_data_dir)
    assert sorted(layers for _, layers in ranked) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert [score for score, _ in ranked] == sorted((score for score, _ in ranked), reverse=True)
    evaluate = STSEvaluator(stsb_data_dir, "stsb-dev")
    for score, layers in (ranked[0], ranked[-1]):  # the scores are those of the students themselves
        student = SentenceEncoder.from_config(
            ModelConfig(str(teacher), pooler="avg", keep_layers=list(layers))
        )
        assert evaluate(student.eval())["stsb_dev_spearman"] == pytest.approx(score, abs=1e-6)
    assert len({score for score, _ in ranked}) > 1  # different layers, different starts
    with pytest.raises(ConfigError, match="keeps 1…4 of the model's 4 layers, not 5"):
        rank_layer_subsets(str(teacher), 5, stsb_data_dir)
