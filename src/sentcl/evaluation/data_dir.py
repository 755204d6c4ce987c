"""Where evaluation data lives: ``--data-dir`` > ``$SENTCL_DATA`` > a cache filled by download.

The download is SimCSE's SentEval bundle (STS12–16, STS-B, SICK-R, transfer tasks) from the Hugging
Face hub (:func:`sentcl.hub_files.hub_file`: cached, checked against the hub's sha256), unpacked once into
``$SENTCL_CACHE/senteval`` (default ``~/.cache/sentcl``). The tests exercise it against a local server
that plays the hub (``HF_ENDPOINT``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from sentcl.errors import UserError
from sentcl.hub_files import HubFileError, cache_dir, hub_file

logger = logging.getLogger(__name__)

SENTEVAL_REPO = "princeton-nlp/datasets-for-simcse"
SENTEVAL_FILE = "senteval.tar"


class DataDirError(UserError, RuntimeError):
    pass


def resolve_data_dir(explicit: str | Path | None = None, download: bool = True) -> Path:
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            raise DataDirError(f"--data-dir {path}: no such folder")
        return path
    env = os.environ.get("SENTCL_DATA")
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataDirError(f"SENTCL_DATA={env}: no such folder")
        return path
    target = cache_dir() / "senteval"
    if target.is_dir():
        return target
    if not download:
        raise DataDirError("no evaluation data: pass --data-dir, set SENTCL_DATA, or allow the download")
    return download_senteval(target)


def download_senteval(target: Path) -> Path:
    """Fetch SimCSE's SentEval bundle and unpack it into ``target`` (atomically)."""
    logger.info("downloading %s/%s (SentEval data, ~2 GB unpacked) …", SENTEVAL_REPO, SENTEVAL_FILE)
    try:
        archive = hub_file(SENTEVAL_REPO, SENTEVAL_FILE)
    except HubFileError as exc:
        raise DataDirError(
            f"no evaluation data: {exc}; offline, pass --data-dir or set SENTCL_DATA"
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".senteval-", dir=target.parent))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def data_dir_for(tasks, explicit: str | Path | None = None, also_needed: bool = False) -> Path:
    """The data folder a request of ``tasks`` reads: none (``Path()``) when every task is the user's own
    file or folder (and nothing else, ``also_needed``, wants the shared data), else ``resolve_data_dir``'s
    (``explicit``, $SENTCL_DATA or the download cache). The one place this is decided, for ``sentcl
    evaluate`` and ``training.eval_task`` alike."""
    from sentcl.evaluation.registry import needs_data_dir

    return resolve_data_dir(explicit) if also_needed or needs_data_dir(tasks) else Path()
