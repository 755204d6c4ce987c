"""The evaluation contract and the one registry of task names.

An **evaluator** is a callable ``evaluator(embedder) → dict[str, float]`` on the Embedder protocol
(``texts → vectors``), with

* ``primary``: the name of the metric that chooses checkpoints (``training.eval_task``) and ranks models;
* ``missing``: task → why its data could not be found (missing tasks are reported, never averaged);
* ``format(metrics)``: the table ``sentcl evaluate`` prints;
* ``results()``: everything else worth keeping, JSON-ready (``sentcl evaluate --json``).

A **family** builds one evaluator for the task names of it a request lists (the STS tasks share one
encoding pass and one average; the transfer tasks one SentEval run). ``TASKS`` (evaluation/registry.py, the
one grammar of task names) maps every name a user can write — in ``sentcl evaluate --tasks``,
``training.eval_task``, a reproduction plan — to its family and the family's own names for it. Adding a
task is one module with its evaluator, one ``register`` line below and a test (docs/extending.md walks
through one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from sentcl.embedder import Embedder
from sentcl.evaluation.local import PairFileEvaluator, RetrievalFolderEvaluator
from sentcl.evaluation.local_files import is_pair_file, is_retrieval
from sentcl.evaluation.registry import (
    TASKS,
    Family,
    Options,
    TaskSpecError,
    known_tasks,
    needs_data_dir,
    parse,
    register,
    register_family,
)
from sentcl.evaluation.retrieval import RetrievalEvaluator
from sentcl.evaluation.sts import STS_MEMBERS, STSEvaluator
from sentcl.evaluation.sts_data import DISPLAY_NAMES, STS_TASKS
from sentcl.evaluation.transfer import TRANSFER_TASKS, TransferEvaluator
from sentcl.passages import PassageSettings

__all__ = [
    "TASKS",
    "Evaluator",
    "Family",
    "Options",
    "TaskSpecError",
    "build_evaluator",
    "build_evaluators",
    "known_tasks",
    "needs_data_dir",
    "parse",
    "register",
    "register_family",
]


@runtime_checkable
class Evaluator(Protocol):
    primary: str
    missing: dict[str, str]

    def __call__(self, embedder: Embedder) -> dict[str, float]: ...

    def format(self, metrics: dict[str, float]) -> str: ...

    def results(self) -> dict: ...


def build_evaluators(data_dir: str | Path, spec: str | Sequence[str], options: Options | None = None) -> list:
    """One evaluator per family the request names, in the request's order."""
    options = options or Options()
    return [TASKS.families[family].build(Path(data_dir), names, options) for family, names in parse(spec)]


def build_evaluator(data_dir: str | Path, spec: str | Sequence[str], options: Options | None = None):
    """The one evaluator of a request naming tasks of one family (what ``training.eval_task`` needs: one
    primary metric)."""
    evaluators = build_evaluators(data_dir, spec, options)
    if len(evaluators) != 1:
        families = ", ".join(family for family, _ in parse(spec))
        raise TaskSpecError(f"{spec!r} names tasks of several families ({families}); name tasks of one")
    return evaluators[0]


# ----------------------------------------------------------------------------------------- the registry
register_family(
    Family("sts", lambda root, names, o: STSEvaluator(root, names, o.aggregation), "STS (Spearman)")
)
register_family(
    Family("transfer", lambda root, names, o: TransferEvaluator(root, names, o.transfer_protocol), "SentEval")
)

register_family(Family("retrieval", lambda root, names, o: RetrievalEvaluator(root), "STS-B as retrieval"))
# the user's own files, named by path (evaluation/local.py)
register_family(Family("pairs", lambda root, paths, o: PairFileEvaluator(paths), "pair files", is_pair_file))
register_family(
    Family(
        "beir",
        lambda root, paths, o: RetrievalFolderEvaluator(
            paths,
            o.retrieval,
            o.document_words,
            PassageSettings(o.passages, o.passage_overlap) if o.passages else None,
        ),
        "retrieval folders",
        is_retrieval,
    )
)

register("sts", "sts", STS_TASKS)  # SimCSE's 7-task table
for member in STS_MEMBERS:  # stsb-dev/-train, then the seven tasks
    register(member, "sts", aliases=[DISPLAY_NAMES[member]] if member in DISPLAY_NAMES else [])
    if member == "stsb-train":  # the table's STS-B entry is the test split: one entry, whichever name
        register("stsb-test", "sts", ["STSBenchmark"])
register("stsb", "sts", ["STSBenchmark"])
register("sickr", "sts", ["SICKRelatedness"])
register("transfer", "transfer", TRANSFER_TASKS)  # MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC
for task in TRANSFER_TASKS:
    register(task, "transfer", aliases=["SST-2"] if task == "SST2" else [])
register("stsb-retrieval", "retrieval")  # paraphrase retrieval over STS-B dev (evaluation/retrieval.py)
