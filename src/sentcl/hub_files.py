"""Files from the Hugging Face hub, checked before use.

``huggingface_hub`` downloads a file into sentcl's cache (``$SENTCL_CACHE/hub``, default
``~/.cache/sentcl/hub``) and checks its size. sentcl then checks its content against the hash the hub
states for it (the ETag: a sha256 for files stored in LFS, the git blob sha1 for small ones) and deletes a
copy that does not match, so the cache never holds a corrupt file. ``HF_ENDPOINT`` (a mirror, or a local
server in the tests) and ``HF_HUB_OFFLINE`` mean what they mean to ``huggingface_hub``; ``HF_ENDPOINT`` is
read at each call, not once at import.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from pathlib import Path

from sentcl.errors import UserError

logger = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


class HubFileError(UserError, RuntimeError):
    """A hub file that could not be had, or whose content does not match the hub's hash."""


def cache_dir() -> Path:
    """sentcl's cache: ``$SENTCL_CACHE``, default ``~/.cache/sentcl``."""
    return Path(os.environ.get("SENTCL_CACHE", Path.home() / ".cache" / "sentcl")).expanduser()


def hub_file(repo: str, filename: str, repo_type: str = "dataset", revision: str | None = None) -> Path:
    """``repo``'s ``filename`` (at ``revision``, default the newest), from the cache or downloaded into it,
    its hash checked.

    Raises :class:`HubFileError` (one line) when it cannot be downloaded (offline, not found) or when the
    content does not match; a mismatching copy is removed from the cache first."""
    path = _download(repo, filename, repo_type, revision, missing_ok=False)
    assert path is not None
    return path


def hub_file_if_present(
    repo: str, filename: str, repo_type: str = "dataset", revision: str | None = None
) -> Path | None:
    """As :func:`hub_file`, but ``None`` for a file the hub says the repository does not have (any other
    failure still raises)."""
    return _download(repo, filename, repo_type, revision, missing_ok=True)


def _download(
    repo: str, filename: str, repo_type: str, revision: str | None, missing_ok: bool
) -> Path | None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        path = hf_hub_download(
            repo, filename, repo_type=repo_type, revision=revision, cache_dir=cache_dir() / "hub",
            endpoint=os.environ.get("HF_ENDPOINT") or None,
        )  # fmt: skip
    except EntryNotFoundError as exc:
        if missing_ok and (
            not isinstance(exc, LocalEntryNotFoundError)
            or _known_missing(repo, filename, repo_type, revision)
        ):
            return None
        raise _failed(repo, filename, exc) from None
    except Exception as exc:  # network, offline mode, 404, size mismatch: all one line for the caller
        raise _failed(repo, filename, exc) from None
    verify(Path(path), f"{repo}/{filename}")
    return Path(path)


def _known_missing(repo: str, filename: str, repo_type: str, revision: str | None) -> bool:
    """Whether the cache remembers the hub saying ``repo`` has no ``filename`` (offline, it still holds)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(
        repo, filename, cache_dir=cache_dir() / "hub", revision=revision, repo_type=repo_type
    )
    return found is not None and not isinstance(found, str)  # huggingface_hub's "known not to exist" marker


def _failed(repo: str, filename: str, exc: Exception) -> HubFileError:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        reason = "HF_HUB_OFFLINE is set and the cache has no copy"
    else:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HubFileError(f"{repo}/{filename}: could not be downloaded ({reason})")


def verify(path: Path, label: str) -> None:
    """Check the cached file at ``path`` against the hash its blob is named by (the hub's ETag)."""
    blob = path.resolve()
    etag = blob.name
    if _SHA256.fullmatch(etag):
        kind, actual = "sha256", _digest(blob, hashlib.sha256())
    elif _SHA1.fullmatch(etag):  # a file kept in git, not LFS: git's blob hash
        kind, actual = "git sha1", _digest(blob, hashlib.sha1(f"blob {blob.stat().st_size}\0".encode()))
    else:
        _remove(path, blob)
        raise HubFileError(f"{label}: the hub gave no hash to check it against (ETag {etag!r}); not kept")
    if actual != etag:
        _remove(path, blob)
        raise HubFileError(
            f"{label}: {kind} {actual[:12]}… does not match the hub's {etag[:12]}…; the download was corrupt "
            "and is removed from the cache: try again"
        )


def _digest(path: Path, hasher) -> str:
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def _remove(link: Path, blob: Path) -> None:
    """Remove a cached file (its snapshot link and blob), and the repository's cache folder when no
    other blob is left in it."""
    link.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)
    storage = blob.parent.parent  # <cache>/hub/datasets--owner--name
    blobs = storage / "blobs"
    emptied = not any(blobs.iterdir()) if blobs.is_dir() else True
    if storage.parent.resolve() == (cache_dir() / "hub").resolve() and emptied:
        shutil.rmtree(storage, ignore_errors=True)
    logger.warning("removed %s from the cache", blob)
