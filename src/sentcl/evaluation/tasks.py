"""The evaluation contract and the one registry of task names.

An **evaluator** is a callable ``evaluator(embedder) → dict[str, float]`` on the Embedder protocol
(``texts → vectors``), with

* ``primary``: the name of the metric that chooses checkpoints (``training.eval_task``) and ranks models;
* ``missing``: task → why its data could not be found (missing tasks are reported, never averaged);
* ``format(metrics)``: the table ``sentcl evaluate`` prints;
* ``results()``: everything else worth keeping, JSON-ready (``sentcl evaluate --json``).

A **family** builds one evaluator for the task names of it a request lists (the STS tasks share one
encoding pass and one average; the transfer tasks one SentEval run). ``TASKS`` maps every name a user can
write — in ``sentcl evaluate --tasks``, ``training.eval_task``, a reproduction plan — to its family and the
family's own name for it. Adding a task is one module with its evaluator, one ``register`` line below and a
test (docs/extending.md walks through one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from sentcl.embedder import Embedder
from sentcl.evaluation.local import PairFileEvaluator, RetrievalFolderEvaluator
from sentcl.evaluation.local_files import is_pair_file, is_retrieval
from sentcl.evaluation.retrieval import RetrievalEvaluator
from sentcl.evaluation.sts import STSEvaluator, TaskSpecError
from sentcl.evaluation.sts_data import DISPLAY_NAMES, STS_TASKS
from sentcl.evaluation.transfer import TRANSFER_TASKS, TransferEvaluator


@runtime_checkable
class Evaluator(Protocol):
    primary: str
    missing: dict[str, str]

    def __call__(self, embedder: Embedder) -> dict[str, float]: ...

    def format(self, metrics: dict[str, float]) -> str: ...

    def results(self) -> dict: ...


@dataclass(frozen=True)
class Options:
    """What a request may set for every family (each reads what concerns it)."""

    aggregation: str = "all"  # STS12–16: all | mean | wmean
    transfer_protocol: str = "simcse"


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[Path, list[str], Options], Evaluator]
    #: how its names read in help texts
    summary: str = ""
    #: a family of the user's own files: which paths are its tasks (``--tasks path``)
    accepts: Callable[[Path], bool] | None = None


@dataclass
class _Registry:
    families: dict[str, Family] = field(default_factory=dict)
    #: lower-cased name a user writes → (family, the family's names for it)
    names: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    #: the names as shown in help and errors, in registration order
    shown: list[str] = field(default_factory=list)


TASKS = _Registry()


def register_family(family: Family) -> None:
    TASKS.families[family.name] = family


def register(
    name: str, family: str, members: Sequence[str] | None = None, aliases: Sequence[str] = ()
) -> None:
    """``name`` (and its ``aliases``) evaluate ``members`` (default: ``[name]``) of ``family``."""
    if family not in TASKS.families:
        raise ValueError(f"unknown evaluation family {family!r}")
    for key in (name, *aliases):
        if key.lower() in TASKS.names:
            raise ValueError(f"evaluation task {key!r} is registered twice")
        TASKS.names[key.lower()] = (family, tuple(members or (name,)))
    TASKS.shown.append(name)


def known_tasks() -> str:
    return ", ".join(TASKS.shown)


def parse(spec: str | Sequence[str]) -> list[tuple[str, list[str]]]:
    """``--tasks`` → [(family, its names)] in the order the families first appear; unknown names are one
    TaskSpecError listing the known ones."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not items:
        raise TaskSpecError("no evaluation task given")
    grouped: dict[str, list[str]] = {}
    for item in items:
        if item.lower() in TASKS.names:
            family, members = TASKS.names[item.lower()]
        else:
            family, members = local_family(item), (item,)
        grouped.setdefault(family, [])
        grouped[family] += [m for m in members if m not in grouped[family]]
    return list(grouped.items())


def local_family(item: str) -> str:
    """The family of the user's own file or folder ``item``; a TaskSpecError when it is neither a known name
    nor such a path."""
    path = Path(item).expanduser()
    for family in TASKS.families.values():
        if family.accepts is not None and path.exists() and family.accepts(path):
            return family.name
    if path.exists():
        raise TaskSpecError(
            f"{item}: neither a pair file (.csv, .tsv, .jsonl) nor a retrieval folder (corpus.jsonl, "
            f"queries.jsonl, qrels/)"
        )
    raise TaskSpecError(
        f"unknown evaluation task {item!r}; known: {known_tasks()}; or the path of a pair file or a "
        f"retrieval folder (no such file or folder here)"
    )


def needs_data_dir(spec: str | Sequence[str]) -> bool:
    """Whether a request names any task of the shared data (not only the user's own files)."""
    return any(TASKS.families[family].accepts is None for family, _ in parse(spec))


def build_evaluators(data_dir: str | Path, spec: str | Sequence[str], options: Options = Options()) -> list:
    """One evaluator per family the request names, in the request's order."""
    return [TASKS.families[family].build(Path(data_dir), names, options) for family, names in parse(spec)]


def build_evaluator(data_dir: str | Path, spec: str | Sequence[str], options: Options = Options()):
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
    Family("beir", lambda root, paths, o: RetrievalFolderEvaluator(paths), "retrieval folders", is_retrieval)
)

register("sts", "sts", STS_TASKS)  # SimCSE's 7-task table
for split in ("dev", "train", "test"):
    register(f"stsb-{split}", "sts")
for task in STS_TASKS:
    register(task, "sts", aliases=[DISPLAY_NAMES[task]] if task in DISPLAY_NAMES else [])
register("stsb", "sts", ["STSBenchmark"])
register("sickr", "sts", ["SICKRelatedness"])
register("transfer", "transfer", TRANSFER_TASKS)  # MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC
for task in TRANSFER_TASKS:
    register(task, "transfer", aliases=["SST-2"] if task == "SST2" else [])
register("stsb-retrieval", "retrieval")  # paraphrase retrieval over STS-B dev (evaluation/retrieval.py)
