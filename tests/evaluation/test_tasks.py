"""The evaluation contract and its registry: every name a user can write is registered once, builds an
evaluator that keeps the contract, and requests are grouped by family."""

import pytest

from sentcl.evaluation import TASKS, Evaluator, TaskSpecError, build_evaluator, build_evaluators
from sentcl.evaluation.tasks import parse


class Hashing:
    """A deterministic Embedder: bag of hashed words."""

    def encode(self, sentences):
        import numpy as np

        out = np.zeros((len(sentences), 64), dtype=np.float32)
        for i, sentence in enumerate(sentences):
            for word in sentence.lower().split():
                out[i, hash(word) % 64] += 1.0
        return out


def test_requests_are_grouped_by_family_in_order_and_unknown_names_list_the_known():
    assert parse("stsb-dev,MR,STS12,sst-2") == [("sts", ["stsb-dev", "STS12"]), ("transfer", ["MR", "SST2"])]
    assert parse("sts")[0][1][-1] == "SICKRelatedness"
    with pytest.raises(TaskSpecError, match=r"unknown evaluation task 'nope'; known: sts, stsb-dev"):
        parse("nope")
    with pytest.raises(TaskSpecError, match="no evaluation task given"):
        parse(" , ")


def test_every_registered_name_builds_an_evaluator_that_keeps_the_contract(tmp_path):
    for name in TASKS.shown:
        evaluators = build_evaluators(tmp_path, name)  # no data here: every task reports itself missing
        for evaluator in evaluators:
            assert isinstance(evaluator, Evaluator), name
            assert isinstance(evaluator.primary, str) and evaluator.missing, name


def test_one_family_for_checkpoint_selection(stsb_data_dir):
    evaluator = build_evaluator(stsb_data_dir, "stsb-dev")
    metrics = evaluator(Hashing())
    assert evaluator.primary in metrics and not evaluator.missing
    assert "STS-B dev" in evaluator.format(metrics) and evaluator.results()["metrics"] == metrics
    with pytest.raises(TaskSpecError, match="several families"):
        build_evaluator(stsb_data_dir, "stsb-dev,MR")


def test_an_sts_evaluator_built_directly_reads_its_tasks_by_the_registry_grammar(tmp_path):
    """One grammar: every name the registry maps to the STS family (aliases and case included) means the
    same to ``STSEvaluator`` as to ``--tasks``, and a name of another family is refused by name."""
    from sentcl.evaluation import STSEvaluator

    sts_names = [name for name, (family, _) in TASKS.names.items() if family == "sts"]
    assert {"sts-b", "sick-r", "stsbenchmark", "stsb-dev"} <= set(sts_names)
    for name in sts_names:
        direct = STSEvaluator(tmp_path, name.upper())
        (built,) = build_evaluators(tmp_path, name)
        assert direct.requests == built.requests and direct.primary == built.primary, name
    with pytest.raises(TaskSpecError, match=r"transfer tasks \(MR\) are not sts tasks"):
        STSEvaluator(tmp_path, "stsb-dev,mr")


def test_every_sts_dataset_of_the_table_is_a_task_by_its_name():
    """STS datasets are data (sts_data.STS_DATASETS): each row is an STS entry and a registered name."""
    from sentcl.evaluation.sts import STS_MEMBERS
    from sentcl.evaluation.sts_data import STS_DATASETS

    for name in STS_DATASETS:
        assert name in STS_MEMBERS and TASKS.names[name.lower()] == ("sts", (name,))
