"""What ``--tasks`` names, evaluated in one call: every family of the registry (evaluation/tasks.py) the
request names, one evaluator each, their metrics merged and their tables printed one after the other."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sentcl.embedder import Embedder
from sentcl.evaluation.sts import STSEvaluator
from sentcl.evaluation.tasks import Options, build_evaluators, parse
from sentcl.evaluation.transfer import TransferEvaluator


class EvaluationSuite:
    def __init__(
        self,
        data_dir: str | Path,
        tasks: str | Sequence[str] = "sts",
        aggregation: str = "all",
        transfer_protocol: str = "simcse",
        retrieval: str = "dense",
        passages: str = "",
        passage_overlap: int | None = None,
    ):
        self.families = [family for family, _ in parse(tasks)]
        options = Options(
            aggregation, transfer_protocol, retrieval, passages=passages, passage_overlap=passage_overlap
        )
        options.validate()
        self.evaluators = build_evaluators(data_dir, tasks, options)
        self.results: dict = {}

    @property
    def sts(self) -> STSEvaluator | None:
        return next((e for e in self.evaluators if isinstance(e, STSEvaluator)), None)

    @property
    def transfer(self) -> TransferEvaluator | None:
        return next((e for e in self.evaluators if isinstance(e, TransferEvaluator)), None)

    def run(self, embedder: Embedder) -> tuple[dict[str, float], str]:
        """All metrics and the printed tables. ``avg`` is the STS table's average; another family's average
        takes its prefix (``transfer_avg``), as does any other name already taken."""
        metrics: dict[str, float] = {}
        tables = []
        self.results = {}
        for family, evaluator in zip(self.families, self.evaluators, strict=True):
            found = evaluator(embedder)
            for key, value in found.items():
                taken = key in metrics or (key == "avg" and family != "sts")
                metrics[f"{family}_{key}" if taken else key] = value
            tables.append(evaluator.format(found))
            self.results[family] = evaluator.results()
        return metrics, "\n\n".join(tables)
