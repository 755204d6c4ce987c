"""What ``--tasks`` names, evaluated: STS tasks (``sts``, ``stsb-dev``, task names) and transfer tasks
(``transfer`` or MR, CR, SUBJ, MPQA, SST2, TREC, MRPC), in one call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from sentcl.embedder import Embedder
from sentcl.evaluation.sts import STSEvaluator, TaskSpecError
from sentcl.evaluation.transfer import TRANSFER_TASKS, TransferEvaluator

_TRANSFER_ALIASES = {name.lower(): name for name in TRANSFER_TASKS} | {"sst-2": "SST2"}


class EvaluationSuite:
    def __init__(
        self,
        data_dir: str | Path,
        tasks: str | Sequence[str] = "sts",
        aggregation: str = "all",
        transfer_protocol: str = "simcse",
    ):
        items = [s.strip() for s in (tasks.split(",") if isinstance(tasks, str) else tasks) if s.strip()]
        sts, transfer = [], []
        for item in items:
            if item.lower() == "transfer":
                transfer += [t for t in TRANSFER_TASKS if t not in transfer]
            elif item.lower() in _TRANSFER_ALIASES:
                transfer.append(_TRANSFER_ALIASES[item.lower()])
            else:
                sts.append(item)
        if not items:
            raise TaskSpecError("no evaluation task given")
        self.sts = STSEvaluator(data_dir, sts, aggregation) if sts else None
        self.transfer = TransferEvaluator(data_dir, transfer, transfer_protocol) if transfer else None
        self.results: dict = {}

    def run(self, embedder: Embedder) -> tuple[dict[str, float], str]:
        """All metrics (STS and transfer keys) and the printed tables."""
        metrics: dict[str, float] = {}
        tables = []
        self.results = {}
        if self.sts is not None:
            report = self.sts.report(embedder)
            sts_metrics = self.sts.metrics(report)
            metrics |= sts_metrics
            tables.append(self.sts.format(report))
            self.results["sts"] = {
                "metrics": sts_metrics,
                "missing": report.missing,
                "tasks": {
                    name: {
                        "datasets": {k: asdict(v) for k, v in scores.datasets.items()},
                        "aggregated": {k: asdict(v) for k, v in scores.aggregated.items()},
                    }
                    for name, scores in report.scores.items()
                },
            }
        if self.transfer is not None:
            transfer_metrics = self.transfer(embedder)
            metrics |= {f"transfer_{k}" if k == "avg" else k: v for k, v in transfer_metrics.items()}
            tables.append(self.transfer.format(transfer_metrics))
            self.results["transfer"] = {
                "metrics": transfer_metrics,
                "details": self.transfer.details,
                "missing": self.transfer.missing,
            }
        return metrics, "\n\n".join(tables)
