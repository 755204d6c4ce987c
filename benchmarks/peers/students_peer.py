"""The students' anchors: model2vec's ``distill`` (in the peers' environment, benchmarks/peers/.venv: it needs
transformers < 5.4) and sentence-transformers' own static training (in sentcl's, where its trainer's datasets
and accelerate are). Called by benchmarks/students.py; prints one JSON line.

    distill TEACHER OUT            model2vec's distill (PCA 256, its defaults), saved as a
                                   sentence-transformers folder (one StaticEmbedding module) at OUT
    mnrl START DATA LR STEPS OUT   a StaticEmbedding from START (a static folder) trained with
                                   MultipleNegativesRankingLoss on DATA/nli/triplets.csv.gz (anchor,
                                   entailment, contradiction as a hard negative: its documented NLI
                                   recipe), batch 256, STEPS steps at LR, STS-B dev every 250 steps, the
                                   best kept, saved at OUT
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path


def distill(teacher: str, out: str) -> dict:
    from model2vec.distill import distill as model2vec_distill
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import StaticEmbedding

    start = time.perf_counter()
    model = model2vec_distill(model_name=teacher, pca_dims=256)
    seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        SentenceTransformer(modules=[StaticEmbedding.from_model2vec(tmp)], device="cpu").save(out)
    return {"train_seconds": seconds}


def mnrl(start_folder: str, data: str, lr: float, steps: int, out: str, seed: int = 42) -> dict:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    lines = Path(data, "stsb", "senteval", "sts-dev.csv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines]
    dev = EmbeddingSimilarityEvaluator(
        [r[5] for r in rows], [r[6] for r in rows], [float(r[4]) / 5 for r in rows], name="stsb-dev"
    )
    model = SentenceTransformer(start_folder, device="cpu").float()  # model2vec's table is stored in fp16
    with gzip.open(f"{data}/nli/triplets.csv.gz", "rt", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    train = Dataset.from_dict({key: [r[key] for r in table] for key in ("sent0", "sent1", "hard_neg")})
    every = max(1, min(250, steps // 2))  # STS-B dev every 250 steps (fewer in a quick run)
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp, max_steps=steps, per_device_train_batch_size=256, learning_rate=lr,
            warmup_ratio=0.05, eval_strategy="steps", eval_steps=every, save_strategy="steps",
            save_steps=every, save_total_limit=1, load_best_model_at_end=True,
            metric_for_best_model="eval_stsb-dev_spearman_cosine",
            logging_steps=250, seed=seed, report_to="none", use_cpu=True, dataloader_drop_last=True,
        )  # fmt: skip
        started = time.perf_counter()
        loss = losses.MultipleNegativesRankingLoss(model)
        SentenceTransformerTrainer(
            model=model, args=args, train_dataset=train, loss=loss, evaluator=dev
        ).train()
        seconds = time.perf_counter() - started
    model.save(out)
    return {"train_seconds": seconds, "stsb_dev": dev(model)["stsb-dev_spearman_cosine"] * 100, "lr": lr}


def main() -> int:
    kind, *rest = sys.argv[1:]
    if kind == "distill":
        result = distill(*rest)
    elif kind == "mnrl":
        start, data, lr, steps, out, *seed = rest  # seed: 42 unless given
        result = mnrl(start, data, float(lr), int(steps), out, int(seed[0]) if seed else 42)
    else:
        raise SystemExit(f"unknown anchor {kind!r}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
