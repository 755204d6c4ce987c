"""Admission control: which request's model work runs next, and which waits no longer.

One worker thread runs every request's model work (counting its tokens, then its forward pass), one job at a
time: two cores gain nothing from two forward passes at once, and one thread keeps the allocator's arenas and
the tokenizer's buffers to one set. The waiting jobs are few (``max_waiting``) and the smallest runs first, by
a cost known before any work (the request body's bytes, from its Content-Length): a flood of large requests
cannot queue in front of a small one. A waiting job's cost counts half as much for every ``AGING_S`` it
has waited, down to a quarter of it (``AGING_FLOOR``): among requests within 4× of each other's size the
order becomes first come (a search a few bytes longer is not passed by every shorter one that arrives after
it: with smallest first alone, four clients searching without pause held the longest queries back for
seconds), while a job over 4× a fresh one's size still waits behind it. And a job that has waited a quarter
of ``max_wait_s`` runs next, so a stream of small requests cannot starve a large one (a change to an
index). A large job's work yields between
its slices (``yield_point``): waiting jobs smaller than what it has left run there, so a small request waits
for at most one slice of the job running, not the whole of it. A job that finds the queue full pushes out the
largest waiting job if it is smaller than that one; otherwise it is refused at once (``refusal`` says so
before the body is read). A refused or pushed-out job, and one that waited longer than ``max_wait_s``, raises
:class:`BusyError`, which the server answers with 503 and a Retry-After computed from the queued work.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class BusyError(Exception):
    """The server has more work queued than it admits; ``retry_after`` is whole seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class _Job:
    cost: int
    order: int
    work: Callable[[], Any] = field(repr=False)
    future: asyncio.Future = field(repr=False)
    loop: asyncio.AbstractEventLoop = field(repr=False)
    queued_at: float = field(default_factory=time.monotonic)
    abandoned: bool = False  # the request went away before its turn
    exclusive: bool = False  # a write: never run inside another job's yield point


#: a waiting job's cost halves in the queue's order every this many seconds it waits, down to this share of
#: it (module docstring)
AGING_S = 0.25
AGING_FLOOR = 0.25


def _aged(waited: float) -> float:
    """The share of its cost a job that has waited ``waited`` seconds counts for in the queue's order."""
    return max(2.0 ** (-waited / AGING_S), AGING_FLOOR)


class Admission:
    """Runs ``work`` callables on one worker thread, smallest cost first, at most ``max_waiting`` waiting."""

    def __init__(self, max_waiting: int = 16, max_wait_s: float = 60.0):
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be at least 1, got {max_waiting}")
        self.max_waiting, self.max_wait_s = max_waiting, max_wait_s
        #: a job that has waited this long runs next, however large (a quarter of ``max_wait_s``)
        self.patience_s = max_wait_s / 4
        self._waiting: list[_Job] = []
        self._condition = threading.Condition()
        self._order = itertools.count()
        self._running: _Job | None = None
        self._running_since = 0.0
        #: seconds of work per unit of cost, an exponential average of the jobs run (None before the first)
        self._seconds_per_cost: float | None = None
        self._worker: threading.Thread | None = None
        self._nested_seconds = 0.0  # time spent in jobs run inside other jobs' yield points
        self.refused = 0  # jobs answered BusyError (refused, pushed out or waited too long)

    async def run(self, cost: int, work: Callable[[], Any], exclusive: bool = False) -> Any:
        """``work()``'s result (or exception) once its turn came; :class:`BusyError` if it is not admitted.
        An ``exclusive`` job (a change to the index) runs only between other jobs, never inside one's yield
        point, so two changes never interleave."""
        loop = asyncio.get_running_loop()
        job = _Job(
            max(int(cost), 1), next(self._order), work, loop.create_future(), loop, exclusive=exclusive
        )
        with self._condition:
            self._start()
            if len(self._waiting) >= self.max_waiting:
                largest = max(self._waiting, key=lambda j: (j.cost, j.order))
                if largest.cost <= job.cost:
                    self.refused += 1
                    raise self._busy("the server is busy")
                self._waiting.remove(largest)
                self._settle(largest, exception=self._busy("the server is busy with smaller requests"))
            self._waiting.append(job)
            self._condition.notify()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.abandoned = True
            raise

    def refusal(self, cost: int) -> BusyError | None:
        """The BusyError ``run`` would raise for a job of ``cost`` now (the queue full of jobs no larger), or
        None: the server asks before it reads a request's body, so a refused request costs it nothing more."""
        with self._condition:
            if len(self._waiting) < self.max_waiting or cost < max(j.cost for j in self._waiting):
                return None
            self.refused += 1
            return self._busy("the server is busy")

    def waiting(self) -> int:
        """How many jobs wait (read without the lock: a hint for slicing, not a decision)."""
        return len(self._waiting)

    def _busy(self, why: str) -> BusyError:
        """BusyError with a Retry-After of the queued work's expected seconds (at least 1); lock held."""
        rate = self._seconds_per_cost or 0.0
        queued = sum(j.cost for j in self._waiting) * rate
        if self._running is not None:
            queued += max(self._running.cost * rate - (time.monotonic() - self._running_since), 0.0)
        return BusyError(f"{why}: try again later", max(1, math.ceil(queued)))

    def _start(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._serve, name="sentcl-model", daemon=True)
            self._worker.start()

    def _settle(self, job: _Job, result: Any = None, exception: BaseException | None = None) -> None:
        if exception is not None:
            self.refused += isinstance(exception, BusyError)

        def settle() -> None:
            if job.future.done():
                return
            if exception is not None:
                job.future.set_exception(exception)
            else:
                job.future.set_result(result)

        with contextlib.suppress(RuntimeError):  # the event loop has closed (the server is stopping)
            job.loop.call_soon_threadsafe(settle)

    def _next(self) -> _Job:
        """The smallest waiting job by its cost aged by its wait (first come among equals), unless a job has
        waited ``patience_s``: then the one waiting longest, so a stream of small requests cannot hold a large
        one back for ever; lock held."""
        now = time.monotonic()
        overdue = [j for j in self._waiting if now - j.queued_at >= self.patience_s]
        job = (
            min(overdue, key=lambda j: j.order)
            if overdue
            else min(self._waiting, key=lambda j: (j.cost * _aged(now - j.queued_at), j.order))
        )
        self._waiting.remove(job)
        return job

    def _serve(self) -> None:
        while True:
            with self._condition:
                while not self._waiting:
                    self._condition.wait()
                job = self._next()
            self._run(job)

    def _run(self, job: _Job) -> None:
        """Run ``job`` now, on the worker thread (unless it was abandoned or waited too long), and settle it;
        a job run inside another's ``yield_point`` leaves the outer job running after it."""
        with self._condition:
            if job.abandoned:
                return
            if time.monotonic() - job.queued_at > self.max_wait_s:
                self._settle(job, exception=self._busy(f"waited over {self.max_wait_s:g} s"))
                return
            outer = (self._running, self._running_since)
            self._running, self._running_since = job, time.monotonic()
        nested_before = self._nested_seconds
        try:
            result, exception = job.work(), None
        except Exception as exc:  # the request's own error (a 413, a NaN embedding), answered as such
            result, exception = None, exc
        with self._condition:
            elapsed = time.monotonic() - self._running_since
            own = elapsed - (self._nested_seconds - nested_before)  # less the jobs run in its yield points
            rate = max(own, 0.0) / job.cost
            self._seconds_per_cost = (
                rate if self._seconds_per_cost is None else 0.8 * self._seconds_per_cost + 0.2 * rate
            )
            self._running, self._running_since = outer
            if outer[0] is not None:
                self._nested_seconds += max(own, 0.0)  # its own nested jobs were added as they ended
        self._settle(job, result, exception)

    def yield_point(self, cost_left: int) -> int:
        """Called by a job's work between its slices: every job that was waiting when it was called and is
        smaller than ``cost_left`` (what the caller has still to do) runs now, smallest first, except
        exclusive ones; jobs that arrive meanwhile wait for the next slice, so the caller always moves on.
        Returns how many ran. A no-op off the worker."""
        if threading.current_thread() is not self._worker:
            return 0
        with self._condition:
            cutoff = max((j.order for j in self._waiting), default=-1)
        ran = 0
        while True:
            with self._condition:
                smaller = [
                    j for j in self._waiting if j.cost < cost_left and not j.exclusive and j.order <= cutoff
                ]
                if not smaller:
                    return ran
                job = min(smaller, key=lambda j: (j.cost, j.order))
                self._waiting.remove(job)
            self._run(job)
            ran += 1

    def stats(self) -> dict[str, Any]:
        with self._condition:
            return {
                "waiting": len(self._waiting),
                "running": self._running is not None,
                "max_waiting": self.max_waiting,
                "refused": self.refused,
            }
