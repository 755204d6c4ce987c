"""Files from the Hugging Face hub, checked before use.

``huggingface_hub`` downloads a file into sentcl's cache (``$SENTCL_CACHE/hub``, default
``~/.cache/sentcl/hub``) and checks its size. sentcl then checks its content against the hash the hub
states for it (the ETag: a sha256 for files stored in LFS, the git blob sha1 for small ones) and deletes a
copy that does not match, so the cache never holds a corrupt file. ``HF_ENDPOINT`` (a mirror, or a local
server in the tests) and ``HF_HUB_OFFLINE`` mean what they mean to ``huggingface_hub``; ``HF_ENDPOINT`` is
read at each call, not once at import.

A server that takes the connection and never answers is waited for ``$SENTCL_HUB_TIMEOUT`` seconds (default
30) before anything is downloaded: then one HubTimeoutError says so (or the cached copy is used, with a
warning), instead of huggingface_hub's retries (measured: 396 s of silence). Every later request of the
process through huggingface_hub — sentcl's, transformers', sentence-transformers' — is bounded the same way
(:func:`bound_hub_waits`): a server silent for that long ends the command with one HubTimeoutError, not
retried. Online, each download is said at INFO before it starts ("downloading X from ENDPOINT"), and
huggingface_hub shows its progress.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sentcl.errors import UserError

logger = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


class HubFileError(UserError, RuntimeError):
    """A hub file that could not be had, or whose content does not match the hub's hash."""


class HubFileCorruptError(HubFileError):
    """A downloaded file whose content does not match the hub's hash (removed from the cache)."""


class HubTimeoutError(HubFileError):
    """The hub (or HF_ENDPOINT) took the connection and did not answer in time."""


#: the default of $SENTCL_HUB_TIMEOUT: seconds a server may stay silent before sentcl gives up on it
HUB_TIMEOUT = 30.0


def hub_timeout() -> float:
    value = os.environ.get("SENTCL_HUB_TIMEOUT", "")
    try:
        seconds = float(value) if value else HUB_TIMEOUT
    except ValueError:
        raise HubFileError(f"SENTCL_HUB_TIMEOUT={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise HubFileError(f"SENTCL_HUB_TIMEOUT={value!r} is not a positive number of seconds")
    return seconds


_bounded_with: float | None = None
_bound_lock = threading.Lock()


def bound_hub_waits() -> None:
    """Make huggingface_hub's shared HTTP client (every hub request of the process, whoever makes it) give up
    on a server silent for ``$SENTCL_HUB_TIMEOUT`` seconds: connecting, waiting for an answer or for the
    next bytes of a download. The silence is one :class:`HubTimeoutError`, which huggingface_hub does not
    retry (its own retries of a timeout wait up to five times as long, with pauses between). Idempotent;
    nothing to do offline."""
    global _bounded_with
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return
    seconds = hub_timeout()
    with _bound_lock:
        if _bounded_with == seconds:
            return
        from huggingface_hub.utils import _http

        def client() -> Any:
            made = _http.default_client_factory()
            bounded = _bounded_transport()
            made._transport = bounded(made._transport, seconds)
            made._mounts = {  # the proxies of HTTP(S)_PROXY, where set
                pattern: None if mounted is None else bounded(mounted, seconds)
                for pattern, mounted in made._mounts.items()
            }
            return made

        _http.set_client_factory(client)
        _bounded_with = seconds


@functools.cache
def _bounded_transport():
    """An httpx transport that lets every wait of a request (connect, answer, each read of the body) last
    ``seconds`` at most, whatever timeout the caller asked for, and turns a timeout into HubTimeoutError;
    its responses' bodies do the same. Made lazily, on the httpx huggingface_hub itself uses (``httpx`` in
    its 1.x, ``httpx2`` in 2.x), imported only where the hub is reached."""
    from huggingface_hub.utils import _http

    httpx: Any = getattr(_http, "httpx2", None) or getattr(_http, "httpx")  # noqa: B009  # 1.x's name

    class BoundedTransport(httpx.BaseTransport):
        def __init__(self, inner: Any, seconds: float):
            self.inner, self.seconds = inner, seconds

        def handle_request(self, request: Any) -> Any:
            request.extensions["timeout"] = dict.fromkeys(("connect", "read", "write", "pool"), self.seconds)
            try:
                response = self.inner.handle_request(request)
            except Exception as exc:
                raise (self.silence(request) if _timed_out(exc) else exc) from None
            response.stream = BoundedStream(response.stream, self, request)
            return response

        def silence(self, request: Any) -> HubTimeoutError:
            where = f"{request.url.scheme}://{request.url.netloc.decode()}"
            said = f"did not answer in {self.seconds:g} s (SENTCL_HUB_TIMEOUT)"
            return HubTimeoutError(f"{request.url.path}: the server at {where} {said}")

        def close(self) -> None:
            self.inner.close()

    class BoundedStream(httpx.SyncByteStream):
        """A response body whose reads end in HubTimeoutError when the server falls silent."""

        def __init__(self, inner: Any, transport: BoundedTransport, request: Any):
            self.inner, self.transport, self.request = inner, transport, request

        def __iter__(self):
            try:
                yield from self.inner
            except Exception as exc:
                raise (self.transport.silence(self.request) if _timed_out(exc) else exc) from None

        def close(self) -> None:
            self.inner.close()

    return BoundedTransport


def _answers(url: str, endpoint: str | None, seconds: float) -> bool:
    """Whether the server answers a HEAD of ``url`` (any answer, an error status included) within
    ``seconds``; the request runs in a daemon thread, so a silent server never holds the process. The
    request's own timeout is not an answer: it may fire a moment before the wait ends (under load it did,
    and the download then waited on the silent server for minutes)."""
    from huggingface_hub import get_hf_file_metadata

    answered = threading.Event()

    def ask() -> None:
        try:
            get_hf_file_metadata(url, timeout=seconds, endpoint=endpoint)
        except Exception as exc:  # an answer that is an error: the download says what it is
            if _timed_out(exc):
                return
        answered.set()

    threading.Thread(target=ask, daemon=True, name="sentcl-hub-probe").start()
    return answered.wait(seconds)


def _causes(exc: BaseException | None, depth: int = 10) -> Iterator[BaseException]:
    """``exc`` and what it was raised from, nearest first (at most ``depth``)."""
    while exc is not None and depth > 0:
        yield exc
        exc, depth = exc.__cause__ or exc.__context__, depth - 1


def silence_in(exc: BaseException | None) -> HubTimeoutError | None:
    """The HubTimeoutError ``exc`` was raised from, where another library (transformers) wrapped it."""
    return next((cause for cause in _causes(exc) if isinstance(cause, HubTimeoutError)), None)


def _timed_out(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it was raised from) is a timeout: the server said nothing."""
    return any(
        isinstance(cause, TimeoutError) or "timeout" in type(cause).__name__.lower() for cause in _causes(exc)
    )


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
    from huggingface_hub import constants, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    endpoint = os.environ.get("HF_ENDPOINT") or None
    local_only, silence = bool(constants.HF_HUB_OFFLINE), ""
    if not local_only:
        seconds = hub_timeout()
        bound_hub_waits()
        where = endpoint or constants.ENDPOINT
        url = hf_hub_url(repo, filename, repo_type=repo_type, revision=revision, endpoint=endpoint)
        if not _answers(url, endpoint, seconds):
            local_only = True
            silence = f"the server at {where} did not answer in {seconds:g} s (SENTCL_HUB_TIMEOUT)"
            logger.warning("%s/%s: %s; looking in the cache", repo, filename, silence)
        else:
            logger.info("downloading %s/%s from %s …", repo, filename, where)
    try:
        path = hf_hub_download(
            repo, filename, repo_type=repo_type, revision=revision, cache_dir=cache_dir() / "hub",
            endpoint=endpoint, local_files_only=local_only,
        )  # fmt: skip
    except EntryNotFoundError as exc:
        if missing_ok and (
            not isinstance(exc, LocalEntryNotFoundError)
            or _known_missing(repo, filename, repo_type, revision)
        ):
            return None
        raise _failed(repo, filename, exc, silence) from None
    except HubTimeoutError:  # a silence after the probe's answer: said as a silence, not as a missing file
        raise
    except Exception as exc:  # network, offline mode, 404, size mismatch: all one line for the caller
        raise _failed(repo, filename, exc, silence) from None
    verify(Path(path), f"{repo}/{filename}")
    return Path(path)


def _known_missing(repo: str, filename: str, repo_type: str, revision: str | None) -> bool:
    """Whether the cache remembers the hub saying ``repo`` has no ``filename`` (offline, it still holds)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(
        repo, filename, cache_dir=cache_dir() / "hub", revision=revision, repo_type=repo_type
    )
    return found is not None and not isinstance(found, str)  # huggingface_hub's "known not to exist" marker


def _failed(repo: str, filename: str, exc: Exception, silence: str = "") -> HubFileError:
    from huggingface_hub import constants

    if silence:  # the server was silent and the cache has no copy
        return HubTimeoutError(f"{repo}/{filename}: could not be downloaded ({silence})")
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
        raise HubFileCorruptError(
            f"{label}: the hub gave no hash to check it against (ETag {etag!r}); not kept"
        )
    if actual != etag:
        _remove(path, blob)
        raise HubFileCorruptError(
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
