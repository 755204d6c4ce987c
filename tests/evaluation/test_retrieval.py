"""stsb-retrieval: nDCG@10, MRR@10 and Recall@1/10 against loops written from their definitions."""

import math
from typing import ClassVar

import numpy as np
import pytest

from sentcl.evaluation import build_evaluator
from sentcl.evaluation.retrieval import RetrievalEvaluator
from tests.conftest import SENTENCES, write_stsb

PAIRS = [  # (gold, sentence1, sentence2): three paraphrase groups and unrelated pairs
    (5.0, "a man plays the ball", "the man plays a ball"),
    (4.2, "a man plays the ball", "a man plays ball in the park"),
    (4.8, "the dog runs on the street", "a dog runs on the street"),
    (4.0, "two children eat food", "two children eat some food"),
    (1.0, "a woman reads a book", "the cat sleeps in the house"),
    (0.4, "a young man drives a red car", "people sing music in the city"),
    (2.0, "the dog runs on the street", "the small dog jumps"),
]


class Random:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def encode(self, sentences):
        return self.rng.normal(size=(len(sentences), 8))


def by_definition(evaluator, vectors):
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    index = {text: i for i, text in enumerate(evaluator.corpus)}
    ndcg = mrr = r1 = r10 = 0.0
    for query, relevant in evaluator.relevant.items():
        others = [d for d in evaluator.corpus if d != query]
        ranked = sorted(others, key=lambda d: -float(unit[index[query]] @ unit[index[d]]))
        gains = [1.0 if d in relevant else 0.0 for d in ranked[:10]]
        dcg = sum(g / math.log2(r + 2) for r, g in enumerate(gains))
        ndcg += dcg / sum(1 / math.log2(r + 2) for r in range(min(len(relevant), 10)))
        mrr += next((1 / (r + 1) for r, g in enumerate(gains) if g), 0.0)
        r1 += len(relevant & set(ranked[:1])) / len(relevant)
        r10 += len(relevant & set(ranked[:10])) / len(relevant)
    n = len(evaluator.relevant)
    return [100 * x / n for x in (ndcg, mrr, r1, r10)]


@pytest.fixture
def data(tmp_path):
    write_stsb(tmp_path / "stsb" / "senteval", "dev", PAIRS)
    return tmp_path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_their_definitions(data, seed):
    evaluator = RetrievalEvaluator(data)
    assert sorted(evaluator.relevant) == [
        "a man plays the ball",
        "the dog runs on the street",
        "two children eat food",
    ]
    vectors = Random(seed).encode(evaluator.corpus)

    class Fixed:
        def encode(self, sentences):
            return vectors[[evaluator.corpus.index(s) for s in sentences]]

    metrics = evaluator(Fixed())
    expected = by_definition(evaluator, vectors)
    got = [metrics[f"stsb_retrieval_{m}"] for m in ("ndcg@10", "mrr@10", "recall@1", "recall@10")]
    assert got == pytest.approx(expected, abs=1e-9)
    assert evaluator.primary == "stsb_retrieval_ndcg@10" and "3 queries" in evaluator.format(metrics)


def test_a_perfect_ranker_scores_100_and_a_missing_split_is_reported(data, tmp_path):
    groups = {
        "ball": ["a man plays the ball", "the man plays a ball", "a man plays ball in the park"],
        "dog": ["the dog runs on the street", "a dog runs on the street"],
        "food": ["two children eat food", "two children eat some food"],
    }

    class Perfect:
        def encode(self, sentences):
            out = np.eye(len(sentences) + 3)[: len(sentences)] * 0.1
            for i, sentence in enumerate(sentences):
                for g, (_, members) in enumerate(groups.items()):
                    if sentence in members:
                        out[i, len(sentences) + g] = 1.0
            return out

    metrics = build_evaluator(data, "stsb-retrieval")(Perfect())
    assert metrics["stsb_retrieval_ndcg@10"] == pytest.approx(100.0)
    assert metrics["stsb_retrieval_mrr@10"] == pytest.approx(100.0)
    assert metrics["stsb_retrieval_recall@10"] == pytest.approx(100.0)
    assert metrics["stsb_retrieval_recall@1"] == pytest.approx(100 * (0.5 + 1 + 1) / 3)  # 2 relevant, 1 slot
    empty = RetrievalEvaluator(tmp_path / "nothing")
    assert "sts-dev.csv" in next(iter(empty.missing.values())) and empty(Perfect()) == {}


def test_training_keeps_the_model_with_the_best_retrieval(tmp_path, tiny_model_dir, data):
    from sentcl.training import recipe_from_dict, train

    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n")
    result = train(recipe_from_dict({
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
        "data": {"train_file": str(corpus), "max_length": 16},
        "training": {"output_dir": str(tmp_path / "run"), "batch_size": 4, "max_steps": 2, "eval_steps": 1,
                     "eval_task": "stsb-retrieval", "eval_data_dir": str(data)},
    }))  # fmt: skip
    assert result.primary_metric == "stsb_retrieval_ndcg@10"
    assert set(result.best_metrics) >= {"stsb_retrieval_ndcg@10", "stsb_retrieval_mrr@10"}


def test_a_models_prompts_encode_the_queries_apart(data):
    evaluator = RetrievalEvaluator(data)

    class WithPrompts(Random):
        prompts: ClassVar = {"query": "query: "}

        def encode(self, sentences):
            self.seen = [*getattr(self, "seen", []), *sentences]
            return super().encode(sentences)

    embedder = WithPrompts(0)
    evaluator(embedder)
    asked = [s for s in embedder.seen if s.startswith("query: ")]
    assert sorted(asked) == sorted("query: " + q for q in evaluator.relevant)
    assert len(embedder.seen) == len(evaluator.corpus) + len(asked)  # documents as they are, no prompt
