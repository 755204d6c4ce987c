"""mteb evaluates a sentcl model through MTEBEncoder: a custom STS task built from the STS-B dev split here
gives mteb's cosine Spearman equal to sentcl's own stsb-dev, offline; queries and documents get the model's
prompts; an ONNX export works the same way."""

from typing import Any

import mteb
import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.types import PromptType

from sentcl.evaluation import STSEvaluator, load_task
from sentcl.integrations.mteb import MTEBEncoder
from sentcl.model import ModelConfig, SentenceEncoder


def stsb_dev_task(data_dir):
    pairs = load_task(data_dir, "STSBenchmark", ("dev",)).datasets["dev"]

    class LocalSTSB(AbsTaskSTS):
        metadata = TaskMetadata(
            name="LocalSTSBenchmarkDev", type="STS", main_score="cosine_spearman", category="t2t",
            description="STS-B dev from the local data folder", reference="https://ixa2.si.ehu.eus/stswiki",
            dataset={"path": "local", "revision": "local"}, eval_splits=["test"], eval_langs=["eng-Latn"],
            date=("2017-01-01", "2017-12-31"), dialect=["Written"], domains=[], task_subtypes=[],
            license="cc-by-sa-4.0", annotations_creators="human-annotated", modalities=["text"],
            sample_creation="found", bibtex_citation="",
        )  # fmt: skip
        min_score, max_score = 0, 5

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            rows = {
                "sentence1": pairs.sentences1,
                "sentence2": pairs.sentences2,
                "score": pairs.scores.tolist(),
            }
            self.dataset = DatasetDict({"test": Dataset.from_dict(rows)})
            self.data_loaded = True

    return LocalSTSB()


def main_score(result) -> float:
    return 100 * result.task_results[0].scores["test"][0]["main_score"]


@pytest.mark.integration
def test_mteb_scores_minilm_as_sentcl_does(shared_data):
    """The packaged all-MiniLM-L6-v2 on STS-B dev: mteb's cosine Spearman and sentcl's stsb-dev agree."""
    encoder = MTEBEncoder("sentence-transformers/all-MiniLM-L6-v2")
    result = mteb.evaluate(encoder, stsb_dev_task(shared_data), cache=None, show_progress_bar=False)
    ours = STSEvaluator(shared_data, "stsb-dev")(
        SentenceEncoder.load("sentence-transformers/all-MiniLM-L6-v2")
    )
    assert main_score(result) == pytest.approx(ours["stsb_dev_spearman"], abs=0.01)
    assert main_score(result) > 80 and encoder.mteb_model_meta.embed_dim == 384


def test_queries_and_documents_get_the_models_prompts(tiny_model_dir, tmp_path):
    prompts = {"query": "query: ", "document": "passage: "}
    folder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), "avg", prompts=prompts)).save(
        tmp_path / "m"
    )
    encoder, plain = MTEBEncoder(str(folder)), SentenceEncoder.load(str(folder))
    batches = [{"text": ["a cat sits", "a dog runs"]}, {"text": ["the end"]}]
    texts = ["a cat sits", "a dog runs", "the end"]
    for prompt_type, prefix in (
        (PromptType.query, "query: "),
        (PromptType.document, "passage: "),
        (None, ""),
    ):
        got = encoder.encode(
            batches, task_metadata=None, hf_split="test", hf_subset="default", prompt_type=prompt_type
        )
        np.testing.assert_allclose(got, plain.encode([prefix + t for t in texts]), atol=1e-6)


def test_an_onnx_export_is_evaluated_too(tiny_model_dir, stsb_data_dir, tmp_path):
    from sentcl.model.onnx import export_onnx

    folder = export_onnx(SentenceEncoder.load(str(tiny_model_dir)), tmp_path / "onnx")
    encoder = MTEBEncoder(str(folder))
    texts = ["a cat sits on the mat", "the dog runs"]
    np.testing.assert_allclose(
        encoder.encode([{"text": texts}], prompt_type=None),
        SentenceEncoder.load(str(tiny_model_dir)).encode(texts),
        atol=1e-4,
    )
    result = mteb.evaluate(encoder, stsb_dev_task(stsb_data_dir), cache=None, show_progress_bar=False)
    assert np.isfinite(main_score(result))


def test_sentcl_mteb_runs_named_tasks_and_writes_their_scores(
    tiny_model_dir, stsb_data_dir, tmp_path, monkeypatch, capsys
):
    """`sentcl mteb MODEL --tasks NAME`: mteb's own task lookup, here answered with the local STS-B dev task
    (the public tasks download their data)."""
    import json

    from sentcl.cli.main import main

    task = stsb_dev_task(stsb_data_dir)
    asked = []
    monkeypatch.setattr(mteb, "get_tasks", lambda tasks: asked.append(tasks) or [task])
    out = tmp_path / "mteb.json"
    assert main(["mteb", str(tiny_model_dir), "--tasks", "LocalSTSBenchmarkDev", "--out", str(out)]) == 0
    assert asked == [["LocalSTSBenchmarkDev"]]
    saved = json.loads(out.read_text())["main_scores"]["LocalSTSBenchmarkDev"]["test"]
    assert f"LocalSTSBenchmarkDev test: main score {100 * saved[0]:.2f}" in capsys.readouterr().out
    ours = STSEvaluator(stsb_data_dir, "stsb-dev")(SentenceEncoder.load(str(tiny_model_dir)))
    assert np.isfinite(saved[0]) and abs(100 * saved[0] - ours["stsb_dev_spearman"]) < 5


def test_the_old_import_path_is_the_same_class():
    from sentcl.mteb_encoder import MTEBEncoder as OldPath

    assert OldPath is MTEBEncoder
