"""Long documents as passages against truncation, on one BEIR folder's report judgements.

    python -m sentcl_reproduction.passages_study configs/domain/passages_cpu.yaml

For each model of the plan, on the report judgements only: the documents as the model truncates them
(dense, hybrid with BM25, BM25 alone), as passages scored by their best passage (``max``: dense and hybrid)
and by their first (``first``: dense); nDCG@10 and Recall@100, each passage setting against truncation with
a 95 % paired bootstrap over the queries, the verdict (holds / fails / not distinguishable), and what each
costs to encode (texts encoded, seconds, on the machine named). ``first`` reuses ``max``'s passage vectors
(one encoding of the passages; its seconds are ``max``'s). Each model's scores are kept in the output folder:
a finished model is read back, not measured again; the report is written after each model.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sentcl.config import expand_path, load_yaml
from sentcl.embedder import Batched, CachedEmbedder
from sentcl.evaluation.registry import Options
from sentcl.evaluation.significance import RESAMPLES, MeanBootstrap
from sentcl.evaluation.tasks import build_evaluator
from sentcl.hardware import describe_machine, resolve_device
from sentcl.model.inference import for_inference, load_encoder
from sentcl.passages import DEFAULT_OVERLAP_SHARE
from sentcl.precision import TRAINING, canonical, decide
from sentcl_reproduction.judgement_curve import verdict

logger = logging.getLogger(__name__)

#: the settings measured: name → (Options.passages, the retrieval modes)
SETTINGS = {
    "truncated": ("", "dense,hybrid,bm25"),
    "max": ("max", "dense,hybrid"),
    "first": ("first", "dense"),
}
#: what each passage setting is compared on against truncation
COMPARED = (("max", ""), ("max", "hybrid_"), ("first", ""))


@dataclass
class Study:
    output_dir: Path
    report: Path
    qrels: str
    models: dict[str, str]  # label → hub id or folder
    dtype: str
    batch_size: int
    source: Path

    @classmethod
    def load(cls, path: str | Path) -> Study:
        raw = load_yaml(Path(path))
        return cls(Path(raw["output_dir"]), Path(raw["report"]), expand_path(str(raw["qrels"]), "qrels"),
                   {str(k): str(v) for k, v in raw["models"].items()}, str(raw.get("dtype", "auto")),
                   int(raw.get("batch_size", 64)), Path(path))  # fmt: skip


def measure(study: Study, label: str, model: str) -> dict[str, Any]:
    """The model's per-query metrics under every setting, its encode costs and the machine; kept in the
    output folder (read back when there)."""
    kept = study.output_dir / f"{label.replace(' ', '-').replace('/', '-')}.json"
    if kept.is_file():
        found: dict[str, Any] = json.loads(kept.read_text(encoding="utf-8"))
        return found
    device = resolve_device("auto", "the passages study")
    dtype = decide(canonical(study.dtype, "dtype", TRAINING), device)
    encoder = for_inference(load_encoder(model), dtype, device=str(device))
    cached = CachedEmbedder(Batched(encoder, study.batch_size))  # first reads max's passage vectors back
    settings: dict[str, Any] = {}
    for name, (passages, modes) in SETTINGS.items():
        logger.info("%s: %s", label, name)
        evaluator = build_evaluator(Path(), study.qrels, Options(retrieval=modes, passages=passages))
        metrics = evaluator(cached)
        task = evaluator.names[0]
        record = evaluator.results()[task]["retrieval"]
        settings[name] = {
            "metrics": {k.removeprefix(f"{task}_"): v for k, v in metrics.items()},
            "per_query": {k.removeprefix(f"{task}_"): v.tolist() for k, v in evaluator.each_query.items()},
            "texts": (record["passages"] or {}).get("passages") or len(evaluator.sets[0].corpus),
            "documents_split": (record["passages"] or {}).get("documents_split", 0),
            "encode_seconds": record["document_encode_seconds"] if name != "first" else None,
        }
    task_set = evaluator.sets[0]
    found = {"model": model, "dtype": dtype, "machine": describe_machine(), "settings": settings,
             "documents": len(task_set.corpus), "queries": len(task_set.queries)}  # fmt: skip
    study.output_dir.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(found), encoding="utf-8")
    return found


def model_table(label: str, found: dict[str, Any]) -> list[str]:
    settings = found["settings"]
    lines = [
        f"### {label}", "",
        f"`{found['model']}`, encoded in {found['dtype']} on {found['machine']}.", "",
        "| documents as | dense nDCG@10 | dense Recall@100 | hybrid nDCG@10 | hybrid Recall@100 "
        "| texts encoded | encode s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for name, row in settings.items():
        m = row["metrics"]
        cells = [f"{m[k]:.2f}" if k in m else "–" for k in ("ndcg@10", "recall@100", "hybrid_ndcg@10",
                                                            "hybrid_recall@100")]  # fmt: skip
        seconds = f"{row['encode_seconds']:.0f}" if row["encode_seconds"] is not None else "(max's)"
        lines.append(f"| {name} | {' | '.join(cells)} | {row['texts']:,} | {seconds} |")
    bm25 = settings["truncated"]["metrics"]
    lines += ["", f"BM25 alone (whole documents): nDCG@10 {bm25['bm25_ndcg@10']:.2f}, Recall@100 "
              f"{bm25['bm25_recall@100']:.2f}.", ""]  # fmt: skip
    bootstrap = MeanBootstrap(found["queries"])
    for name, row in settings.items():
        for key, values in row["per_query"].items():
            bootstrap.add(f"{name}:{key}", np.asarray(values))
    lines += ["| compared with truncation | nDCG@10 (95 % interval) | verdict | Recall@100 | verdict |",
              "|---|---:|---|---:|---|"]  # fmt: skip
    for name, mode in COMPARED:
        cells = []
        for metric in ("ndcg@10", "recall@100"):
            difference = bootstrap.compare(f"{name}:{mode}{metric}", f"truncated:{mode}{metric}")
            cells += [str(difference), verdict(difference)]
        lines.append(f"| {name} passages, {'hybrid' if mode else 'dense'} | {' | '.join(cells)} |")
    return [*lines, ""]


def write_report(study: Study, results: dict[str, dict[str, Any]], missing: list[str]) -> None:
    first = next(iter(results.values()))
    lines = [
        "# Long documents: passages against truncation",
        "",
        f"Made by `python -m sentcl_reproduction.passages_study {study.source}` on {first['documents']:,} "
        f"documents and {first['queries']} queries ({study.qrels}). A document longer than the model reads "
        "is split into whole-word token windows with the title before each, neighbouring windows sharing "
        f"{DEFAULT_OVERLAP_SHARE:.1%} of a window (sentcl/passages.py); `max` scores a document by its best "
        "passage, `first` by its first; the hybrid fuses the dense ranking with BM25's over whole documents "
        f"by reciprocal rank. Intervals: a paired bootstrap over the queries ({RESAMPLES:,} draws).",
        "",
    ]
    for label, found in results.items():
        lines += model_table(label, found)
    if missing:
        lines += ["Not measured: " + "; ".join(missing), ""]
    study.report.parent.mkdir(parents=True, exist_ok=True)
    study.report.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="e.g. configs/domain/passages_cpu.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    study = Study.load(args.plan)
    results: dict[str, dict[str, Any]] = {}
    missing = []
    for label, model in study.models.items():
        if model.startswith(("runs/", "./", "/")) and not Path(model).exists():  # a run not made yet
            missing.append(f"{label} ({model} is not there)")
            continue
        results[label] = measure(study, label, model)
        write_report(study, results, missing)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
