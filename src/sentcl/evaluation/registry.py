"""The one grammar of evaluation task names: the registry every request goes through.

``TASKS.names`` maps every name a user can write — in ``sentcl evaluate --tasks``, ``training.eval_task``,
a reproduction plan, ``STSEvaluator(data_dir, "stsb-dev")`` — case-insensitively to a family and the
family's own (canonical) names for it; anything else is the path of a user's file or folder that a family
``accepts``, or one TaskSpecError listing the known names. The families and the names are registered in
evaluation/tasks.py, which imports every evaluator; this module imports none, so an evaluator may parse
its own argument here without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sentcl.config import ConfigError
from sentcl.errors import UserError
from sentcl.passages import PassageSettings


class TaskSpecError(UserError, ValueError):
    """An evaluation task name or option that does not exist."""


#: STS12–16's aggregations of their datasets (evaluation/sts.py)
AGGREGATIONS = ("all", "mean", "wmean")


@dataclass(frozen=True)
class Options:
    """What a request may set for every family (each reads what concerns it): ``sentcl evaluate``'s options,
    and a recipe's ``training.eval_options``."""

    aggregation: str = "all"  # STS12–16: all | mean | wmean
    transfer_protocol: str = "simcse"  # SentEval transfer: simcse | senteval-sklearn (checked by its family)
    #: retrieval folders: how documents are ranked, comma-separated among dense (the model), bm25 and
    #: hybrid (the two fused by reciprocal rank; search/lexical.py); the first one is primary
    retrieval: str = "dense"
    #: retrieval folders: each document cut to its first N words for the ranking (0: whole). Choosing a
    #: checkpoint on a domain's train queries during training costs an encoding of the corpus per evaluation;
    #: cut documents make it cheaper (stated with the choice; the final report encodes them whole)
    document_words: int = 0
    #: retrieval folders: long documents as passages scored by their best (max) or first passage
    #: (sentcl/passages.py); "" reads each document as the model truncates it. BM25 reads whole documents
    passages: str = ""
    passage_overlap: int | None = None

    def validate(self) -> None:
        if self.document_words < 0:
            raise ConfigError(f"document_words: must be ≥ 0 (0: whole documents), got {self.document_words}")
        if self.passages:
            PassageSettings(self.passages, self.passage_overlap).validate("passages")
            if self.document_words:
                raise ConfigError("passages: documents cut to their first words have no passages to split")
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(f"aggregation: {self.aggregation!r} is not one of {', '.join(AGGREGATIONS)}")
        modes = self.retrieval.split(",")
        if not modes or any(m not in RETRIEVAL_MODES for m in modes) or len(set(modes)) != len(modes):
            raise ConfigError(
                f"retrieval: {self.retrieval!r} is not a list of distinct {', '.join(RETRIEVAL_MODES)}"
            )


RETRIEVAL_MODES = ("dense", "bm25", "hybrid")


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[Path, list[str], Options], Any]
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
    seen: set[tuple[str, str]] = set()  # a task named twice (or a path spelled two ways) is evaluated once
    for item in items:
        if item.lower() in TASKS.names:
            family, members = TASKS.names[item.lower()]
            keys = [(family, m) for m in members]
        else:
            family, members = local_family(item), (item,)
            keys = [(family, str(Path(item).expanduser().resolve()))]
        grouped.setdefault(family, [])
        for member, key in zip(members, keys, strict=True):
            if key not in seen:
                seen.add(key)
                grouped[family].append(member)
    return list(grouped.items())


def parse_family(spec: str | Sequence[str], family: str) -> list[str]:
    """The family's own names for a request that must name tasks of ``family`` only (what an evaluator
    built directly, e.g. ``STSEvaluator(data_dir, "stsb-dev")``, accepts)."""
    parsed = parse(spec)
    for other, members in parsed:
        if other != family:
            raise TaskSpecError(
                f"{other} tasks ({', '.join(members)}) are not {family} tasks; "
                f"sentcl.evaluation.build_evaluators builds an evaluator for any task"
            )
    return parsed[0][1]


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
    if path.parent.name == "qrels" and path.parent.is_dir():  # a split the folder does not have
        splits = ", ".join(sorted(p.stem for p in path.parent.glob("*.tsv"))) or "none"
        raise TaskSpecError(f"{item}: no such split; {path.parent} holds: {splits}")
    raise TaskSpecError(
        f"unknown evaluation task {item!r}; known: {known_tasks()}; or the path of a pair file or a "
        f"retrieval folder (no such file or folder here)"
    )


def needs_data_dir(spec: str | Sequence[str]) -> bool:
    """Whether a request names any task of the shared data (not only the user's own files)."""
    return any(TASKS.families[family].accepts is None for family, _ in parse(spec))
