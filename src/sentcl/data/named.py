"""Named training sets: ``data.train_file: simcse:wiki1m`` instead of a path.

A name resolves, in this order, to:

1. a full local copy under ``$SENTCL_DATA`` (the hub's file name at its root or in the folder named
   in :data:`NAMED`, plain or ``.gz``);
2. the copy in sentcl's cache, or a download into it from the hub (:func:`sentcl.hub_files.hub_file`:
   checked against the hub's sha256; ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` are honoured);
3. a *partial* local copy (a head of the file) where one is declared, with a warning that says how much
   of the set it holds; a head cut mid-line loses that last, unfinished line, and the warning says so;
4. otherwise one :class:`~sentcl.config.ConfigError` naming the key, what was looked for and why the
   download failed.

A path is a path: only ``simcse:…`` is read as a name, so no file name is ever taken for one.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sentcl.atomic_write import atomic_file
from sentcl.config import ConfigError, expand_path
from sentcl.hub_files import HubFileError, cache_dir, hub_file

logger = logging.getLogger(__name__)

#: the prefix that marks a name; anything else is a path
PREFIX = "simcse:"


@dataclass(frozen=True)
class NamedDataset:
    name: str
    repo: str
    filename: str
    #: what it is, for messages and ``sentcl data``
    about: str
    rows: int
    #: folders under $SENTCL_DATA (besides its root) where a full copy may lie
    folders: tuple[str, ...] = ()
    #: heads of the file under $SENTCL_DATA, used only when neither a full copy nor the hub is there
    partial: tuple[str, ...] = ()


SIMCSE_REPO = "princeton-nlp/datasets-for-simcse"

_SETS = (
    NamedDataset(
        "simcse:wiki1m", SIMCSE_REPO, "wiki1m_for_simcse.txt",
        "SimCSE's unsupervised set: 10^6 English Wikipedia sentences, one per line", 1_000_000,
        folders=("wiki",), partial=("wiki/wiki1m_for_simcse.first1280000bytes.txt.gz",),
    ),
    NamedDataset(
        "simcse:nli", SIMCSE_REPO, "nli_for_simcse.csv",
        "SimCSE's supervised set: SNLI + MNLI triplets sent0,sent1,hard_neg (premise, entailment, "
        "contradiction)", 275_601, folders=("nli",),
    ),
)  # fmt: skip
NAMED = {dataset.name: dataset for dataset in _SETS}


def resolve_train_file(value: str, key: str) -> str:
    """The path ``value`` names: a named set resolved as the module says, else the path expanded."""
    if not value.startswith(PREFIX):
        return expand_path(value, key)
    dataset = NAMED.get(value)
    if dataset is None:
        raise ConfigError(f"{key}: no dataset named {value!r}; named sets: {', '.join(NAMED)}")
    root = Path(os.environ["SENTCL_DATA"]).expanduser() if os.environ.get("SENTCL_DATA") else None
    for candidate in _full_copies(dataset, root):
        if candidate.is_file():
            rows = _count_rows(candidate, key)
            if rows < dataset.rows:
                logger.warning(
                    "%s: the local copy %s holds %s of the set's %s rows; training reads those",
                    value, candidate, f"{rows:,}", f"{dataset.rows:,}",
                )  # fmt: skip
            else:
                logger.info("%s: %s (local copy, %s rows)", value, candidate, f"{rows:,}")
            return str(candidate)
    try:
        return str(hub_file(dataset.repo, dataset.filename))
    except HubFileError as exc:
        failure = str(exc)
    for head in (root / name for name in dataset.partial) if root else ():
        if head.is_file():
            return str(_usable_head(dataset, head, failure))
    looked = f"$SENTCL_DATA={root} holds no {dataset.filename}" if root else "SENTCL_DATA is not set"
    raise ConfigError(
        f"{key}: {value} is not here: {looked}, and {failure}. Set SENTCL_DATA to a folder with "
        f"{dataset.filename} (a recipe that chooses its checkpoint on STS-B dev needs "
        f"stsb/senteval/sts-dev.csv there too), or go online (HF_HUB_OFFLINE unset, or HF_ENDPOINT at a "
        f"mirror)"
    )


def _full_copies(dataset: NamedDataset, root: Path | None) -> list[Path]:
    if root is None:
        return []
    folders = [root, *(root / folder for folder in dataset.folders)]
    return [folder / f"{dataset.filename}{suffix}" for folder in folders for suffix in ("", ".gz")]


def _count_rows(path: Path, key: str) -> int:
    """The number of lines of a local copy (gzipped or not), counted once per version of the file (a run of
    several seeds reads it once); a copy that cannot be read is one ConfigError naming it."""
    try:
        stat = path.stat()
        return _rows_of(str(path), stat.st_size, stat.st_mtime_ns)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; a cut gzip ends in EOFError
        raise ConfigError(f"{key}: {path}: the local copy cannot be read ({_reason(exc)})") from None


@functools.lru_cache(maxsize=8)
def _rows_of(path: str, size: int, mtime_ns: int) -> int:
    rows, last = 0, b"\n"
    with gzip.open(path, "rb") if path.endswith(".gz") else Path(path).open("rb") as handle:
        while block := handle.read(1 << 22):
            rows += block.count(b"\n")
            last = block[-1:]
    return rows + (last != b"\n")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else f"{type(exc).__name__}: the file ends too early"


def _usable_head(dataset: NamedDataset, head: Path, failure: str) -> Path:
    """The head's complete lines, as a cached text file (written once; the source is never touched)."""
    data = head.read_bytes()
    try:
        text = gzip.decompress(data) if head.suffix == ".gz" else data
    except (OSError, EOFError) as exc:
        raise ConfigError(
            f"data.train_file: {dataset.name}: the partial local copy {head} cannot be read ({_reason(exc)})"
        ) from None
    cut = not text.endswith(b"\n")
    if cut:
        text = text[: text.rfind(b"\n") + 1]
    lines = text.count(b"\n")
    target = cache_dir() / "datasets" / f"{dataset.filename}.head-{hashlib.sha256(data).hexdigest()[:12]}.txt"
    if not target.is_file():
        with atomic_file(target, "wb") as handle:
            handle.write(text)
    logger.warning(
        "%s: %s; using the partial local copy %s: its first %s of %s rows%s",
        dataset.name, failure, head, f"{lines:,}", f"{dataset.rows:,}",
        " (its last line, cut mid-way, is left out)" if cut else "",
    )  # fmt: skip
    return target
