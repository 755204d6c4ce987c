"""Readers for the seven STS tasks in SentEval's layouts, exactly as SimCSE's SentEval copy reads them.

* STS12–STS16: ``STS.input.<name>.txt`` (two tab-separated sentences per line; extra fields ignored)
  and ``STS.gs.<name>.txt`` (one score per line, *empty where unscored*: those pairs are dropped).
  STS16's originals are named ``STS2016.input.<name>.txt`` / ``STS2016.gs.<name>.txt``; both names work.
* STS-B: ``sts-{train,dev,test}.csv``, tab-separated, score in field 5, sentences in fields 6 and 7.
* SICK-R: ``SICK_{train,trial,test_annotated}.txt`` with a header; sentences in fields 2–3, score in 4.

Sentences are whitespace-normalised (SentEval splits on whitespace and joins with one space).
A task whose files are absent is reported missing (with where we looked); a malformed file is an error
naming file:line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentcl.errors import UserError
from sentcl.text_files import read_text

STS_YEARS = {
    "STS12": ("2012", ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"]),
    "STS13": ("2013", ["FNWN", "headlines", "OnWN"]),
    "STS14": ("2014", ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"]),
    "STS15": ("2015", ["answers-forums", "answers-students", "belief", "headlines", "images"]),
    "STS16": ("2016", ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"]),
}
STSB_SPLITS = ("train", "dev", "test")
SICK_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
#: the seven tasks of SimCSE's table, in its order
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
DISPLAY_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}


class STSDataError(UserError, ValueError):
    """A malformed STS file; the message starts with file:line."""


@dataclass
class PairSet:
    """Scored sentence pairs of one dataset (a file or a split)."""

    name: str
    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray  # [N] gold similarity

    def __len__(self) -> int:
        return len(self.scores)


@dataclass
class STSTask:
    name: str
    datasets: dict[str, PairSet]  # empty when missing
    missing: str | None = None  # why the task could not be loaded


def _normalize(text: str) -> str:
    return " ".join(text.split())


def _read_lines(path: Path) -> list[str]:
    return read_text(path, STSDataError).splitlines()


#: the gold scale of each format: STS 0–5, SICK relatedness 1–5
STS_SCALE = (0.0, 5.0)
SICK_SCALE = (1.0, 5.0)


def _float(value: str, path: Path, line: int, scale: tuple[float, float] = STS_SCALE) -> float:
    try:
        score = float(value)
    except ValueError:
        raise STSDataError(f"{path}:{line}: score {value!r} is not a number") from None
    low, high = scale
    if not low <= score <= high:  # also false for NaN
        raise STSDataError(f"{path}:{line}: score {value!r} is outside the gold scale {low:g}–{high:g}")
    return score


def _pairs(name: str, path: Path, s1: list[str], s2: list[str], scores: list[float]) -> PairSet:
    if not scores:
        raise STSDataError(f"{path}: no scored sentence pairs (the file is empty)")
    if len(scores) < 2:
        raise STSDataError(f"{path}: one scored pair; a correlation needs at least two")
    if min(scores) == max(scores):
        raise STSDataError(f"{path}: every gold score is {scores[0]:g}; a correlation with them is undefined")
    return PairSet(name, s1, s2, np.asarray(scores, dtype=np.float64))


def _candidate_dirs(root: Path, names: list[str]) -> list[Path]:
    prefixes = [
        "",
        "STS",
        "downstream",
        "downstream/STS",
        "SentEval/data/downstream",
        "SentEval/data/downstream/STS",
    ]
    return [root / prefix / name for name in names for prefix in prefixes]


def read_senteval_sts(input_file: Path, gold_file: Path, name: str) -> PairSet:
    inputs = _read_lines(input_file)
    gold = _read_lines(gold_file)
    if len(inputs) != len(gold):
        raise STSDataError(
            f"{gold_file}: {len(gold)} score lines but {input_file.name} has {len(inputs)} sentence pairs"
        )
    s1, s2, scores = [], [], []
    for number, (pair, score) in enumerate(zip(inputs, gold, strict=True), start=1):
        if not score.strip():
            continue  # unscored pair: SentEval drops it
        fields = pair.split("\t")
        if len(fields) < 2:
            raise STSDataError(f"{input_file}:{number}: expected two tab-separated sentences")
        s1.append(_normalize(fields[0]))
        s2.append(_normalize(fields[1]))
        scores.append(_float(score.strip(), gold_file, number))
    return _pairs(name, gold_file, s1, s2, scores)


def load_sts_year(root: Path, task: str) -> STSTask:
    spec = STS_DATASETS[task]
    year, names = spec.year, spec.datasets
    for folder in _candidate_dirs(root, list(spec.folders)):
        if not folder.is_dir():
            continue
        datasets = {}
        for name in names:
            for stem in ("STS", f"STS{year}"):
                inp, gs = folder / f"{stem}.input.{name}.txt", folder / f"{stem}.gs.{name}.txt"
                if inp.is_file() and gs.is_file():
                    datasets[name] = read_senteval_sts(inp, gs, name)
                    break
        absent = [n for n in names if n not in datasets]
        if absent:
            return STSTask(task, {}, missing=f"{folder}: no input/gold files for {', '.join(absent)}")
        return STSTask(task, datasets)
    looked = ", ".join(spec.folders[:2])
    return STSTask(task, {}, missing=f"no {task} folder under {root} (looked for {looked})")


def _read_tab_pairs(
    path: Path, split: str, score: int, first: int, second: int, header: bool, scale: tuple[float, float]
) -> PairSet:
    """Tab-separated scored pairs; ``score``/``first``/``second`` are 0-based field positions."""
    s1, s2, scores = [], [], []
    lines = _read_lines(path)
    needed = max(score, first, second) + 1
    for number, line in enumerate(lines[1:] if header else lines, start=2 if header else 1):
        if not line.strip():
            continue
        fields = line.strip().split("\t")
        if len(fields) < needed:
            raise STSDataError(
                f"{path}:{number}: expected at least {needed} tab-separated fields, got {len(fields)}"
            )
        scores.append(_float(fields[score], path, number, scale))
        s1.append(_normalize(fields[first]))
        s2.append(_normalize(fields[second]))
    return _pairs(split, path, s1, s2, scores)


def read_stsb_split(path: Path, split: str) -> PairSet:
    """sts-*.csv: genre, file, year, id, score, sentence1, sentence2 (extra fields ignored)."""
    return _read_tab_pairs(path, split, score=4, first=5, second=6, header=False, scale=STS_SCALE)


def read_sick(path: Path, split: str) -> PairSet:
    """SICK_*.txt: header row; pair_ID, sentence_A, sentence_B, relatedness_score, …"""
    return _read_tab_pairs(path, split, score=3, first=1, second=2, header=True, scale=SICK_SCALE)


def _load_splits(task: str, root: Path, folders: list[str], files: dict[str, str], reader) -> STSTask:
    """Find the first candidate folder holding any of ``files`` (split → file name) and read them all."""
    for folder in _candidate_dirs(root, folders):
        paths = {split: folder / name for split, name in files.items()}
        if not any(p.is_file() for p in paths.values()):
            continue
        absent = [p.name for p in paths.values() if not p.is_file()]
        if absent:
            return STSTask(task, {}, missing=f"{folder}: {', '.join(absent)} not found")
        return STSTask(task, {split: reader(p, split) for split, p in paths.items()})
    wanted = ", ".join(files.values())
    return STSTask(task, {}, missing=f"no {wanted} under {root} (looked in {', '.join(folders)})")


@dataclass(frozen=True)
class STSDataset:
    """One STS task as data: the folder names it may lie under (each also under SentEval's prefixes, see
    ``_candidate_dirs``) and how its files read — SentEval's per-dataset input/gold files (``datasets``, with
    the year of STS2016's own file stem), or one file per split (``files``, read by ``reader``)."""

    name: str
    folders: tuple[str, ...]
    datasets: tuple[str, ...] = ()
    year: str = ""
    files: dict[str, str] = field(default_factory=dict)
    reader: Callable[[Path, str], PairSet] | None = None
    #: the splits read when a request names none (the 7-task table's: test)
    default_splits: tuple[str, ...] = ("test",)


def _senteval_year(task: str) -> STSDataset:
    year, names = STS_YEARS[task]
    return STSDataset(task, (f"{task}-en-test", task, task.lower()), tuple(names), year)


#: every STS dataset sentcl reads, in one table: adding one is a row here (and a registry name follows from
#: it: evaluation/sts.py's STS_MEMBERS, evaluation/tasks.py)
STS_DATASETS: dict[str, STSDataset] = {
    **{task: _senteval_year(task) for task in STS_YEARS},
    "STSBenchmark": STSDataset(
        "STSBenchmark", ("stsb/senteval", "STSBenchmark", "stsbenchmark", "stsb"),
        files={split: f"sts-{split}.csv" for split in STSB_SPLITS}, reader=read_stsb_split,
    ),
    "SICKRelatedness": STSDataset("SICKRelatedness", ("SICK", "sick"), files=SICK_FILES, reader=read_sick),
}  # fmt: skip


def load_task(root: Path, task: str, splits: tuple[str, ...] | None = None) -> STSTask:
    spec = STS_DATASETS.get(task)
    if spec is None:
        raise ValueError(f"unknown STS task {task!r}; known: {', '.join(STS_DATASETS)}")
    if spec.datasets:
        return load_sts_year(root, task)
    assert spec.reader is not None
    files = {split: spec.files[split] for split in splits or spec.default_splits}
    return _load_splits(task, root, list(spec.folders), files, spec.reader)
