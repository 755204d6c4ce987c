"""Connection limits for the HTTP server: timeouts, a connection cap, and an open-file limit that fits.

uvicorn's HTTP/1.1 protocol starts no timer when a connection opens, so a socket that never sends a byte,
or sends its headers one byte a minute, is held for ever; 20,050 of them exhausted the open-file limit
and /health stopped answering. :func:`protocol_class` gives uvicorn a protocol that

- closes a connection whose request headers are not complete ``header_timeout_s`` after it opened (or
  after its previous response: the keep-alive wait is the same rule);
- closes one whose body does not arrive within ``body_timeout_s`` of its headers;
- closes one that does not read its response within ``write_timeout_s``;
- holds at most ``max_connections``: a new connection beyond them closes the longest-idle one (no request
  in progress), so idle sockets cannot lock out a client that has a request to make; when every
  connection is busy, the new one is closed at once.

Closing a socket stops reading it: after a 413 the server does not read the rest of the body.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("sentcl.serve")


class _Connections:
    """What every connection of one server shares: the idle ones, oldest first."""

    def __init__(self) -> None:
        self.idle: OrderedDict[int, Any] = OrderedDict()  # id → LimitedH11Protocol
        self.open = 0
        self.closed_by_limit = 0


def protocol_class(
    max_connections: int, header_timeout_s: float, body_timeout_s: float, write_timeout_s: float
) -> type[H11Protocol]:
    """An HTTP/1.1 protocol class for uvicorn (``uvicorn.run(..., http=...)``) with these limits."""
    shared = _Connections()

    class LimitedH11Protocol(H11Protocol):
        connections_state = shared
        _timer: asyncio.TimerHandle | None
        _write_timer: asyncio.TimerHandle | None
        _timer_reason: str
        _seen_cycle: Any

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            shared.open += 1
            self._timer = None
            self._write_timer = None
            self._seen_cycle = None
            self._mark_idle()
            if shared.open > max_connections:
                victim = next(iter(shared.idle.values()), None) if len(shared.idle) > 1 else None
                if victim is None or victim is self:
                    victim = self  # every other connection has a request in progress
                shared.closed_by_limit += 1
                victim._close("the connection cap is reached")

        def connection_lost(self, exc) -> None:
            shared.open -= 1
            shared.idle.pop(id(self), None)
            self._cancel(self._timer)
            self._cancel(self._write_timer)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._mark_idle()  # the next request's headers are due within header_timeout_s
            self._follow()

        def pause_writing(self) -> None:
            super().pause_writing()
            self._cancel(self._write_timer)
            self._write_timer = self.loop.call_later(
                write_timeout_s, self._close, f"the client read nothing for {write_timeout_s:g} s"
            )

        def resume_writing(self) -> None:
            super().resume_writing()
            self._cancel(self._write_timer)
            self._write_timer = None

        def _mark_idle(self) -> None:
            shared.idle[id(self)] = self
            shared.idle.move_to_end(id(self))
            self._restart(header_timeout_s, "no complete request headers")

        def _follow(self) -> None:
            """Move the timers on as the request advances: headers in (body timer), body in (none)."""
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                return
            if cycle is not self._seen_cycle:  # a new request's headers arrived
                self._seen_cycle = cycle
                shared.idle.pop(id(self), None)
                self._restart(body_timeout_s, "the request body did not arrive")
            if (
                not cycle.more_body
                and self._timer is not None
                and self._timer_reason.startswith("the request")
            ):
                self._cancel(self._timer)
                self._timer = None

        def _restart(self, seconds: float, reason: str) -> None:
            self._cancel(self._timer)
            self._timer_reason = reason
            self._timer = self.loop.call_later(seconds, self._close, f"{reason} within {seconds:g} s")

        @staticmethod
        def _cancel(timer) -> None:
            if timer is not None:
                timer.cancel()

        def _close(self, reason: str) -> None:
            shared.idle.pop(id(self), None)
            if not self.transport.is_closing():
                logger.debug("closing %s: %s", self.client, reason)
                self.transport.close()

    return LimitedH11Protocol


def fit_open_file_limit(max_connections: int, spare: int = 256, ceiling: int = 65536) -> int:
    """Raise the soft open-file limit to the hard limit (at most ``ceiling``; the kernel's own limit where
    the hard one is unlimited), log it, and return the connection cap that fits under it: sockets are
    accepted before the connection cap closes the longest-idle one, so a burst needs room beyond
    ``max_connections`` (``spare``), and a limit near it ended in "Too many open files" in accept()."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        target = ceiling if hard == resource.RLIM_INFINITY else min(hard, max(ceiling, soft))
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
    logger.info("open-file limit: %s (hard %s)", "unlimited" if soft == resource.RLIM_INFINITY else soft,
                "unlimited" if hard == resource.RLIM_INFINITY else hard)  # fmt: skip
    wanted = max_connections + spare
    if soft != resource.RLIM_INFINITY and soft < wanted:
        fitted = max(soft - spare, 16)
        logger.warning(
            "the open-file limit is %d: at most %d connections (not %d)", soft, fitted, max_connections
        )
        return fitted
    return max_connections


class RateLimitedLog(logging.Filter):
    """Passes at most ``burst`` records of one message template per ``period_s``; then one line saying how
    many were dropped. A flood of one error (4xx, closed sockets, a file limit) cannot fill a disk."""

    def __init__(self, burst: int = 10, period_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.burst, self.period_s, self.clock = burst, period_s, clock
        self._windows: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self.clock()
        start, count = self._windows.get(key, (now, 0))
        if now - start >= self.period_s:
            if count > self.burst:
                record.msg = (
                    f"{record.msg} [{count - self.burst} like it dropped in the last {self.period_s:g} s]"
                )
            start, count = now, 0
        count += 1
        if len(self._windows) > 10_000:  # templates are few; a record with its data in msg must not grow this
            self._windows.clear()
        self._windows[key] = (start, count)
        return count <= self.burst
