"""Admission control: the model's work runs smallest first on one worker, a bounded
number wait, and what is not admitted is answered 503 with Retry-After at once."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sentcl.serving.admission import Admission, BusyError


def test_the_smallest_waiting_job_runs_next_and_one_at_a_time():
    admission = Admission(max_waiting=8)
    order, running, overlaps = [], [], []
    gate = threading.Event()

    def job(name, hold=None):
        def work():
            running.append(name)
            overlaps.append(len(running))
            if hold is not None:
                hold.wait(5)
            time.sleep(0.01)
            order.append(name)
            running.remove(name)
            return name

        return work

    async def scenario():
        first = asyncio.create_task(admission.run(1000, job("big-running", gate)))
        await asyncio.sleep(0.1)  # it holds the worker
        waiting = [
            asyncio.create_task(admission.run(cost, job(name)))
            for name, cost in [("big", 5000), ("medium", 300), ("small", 10), ("medium-2", 300)]
        ]
        await asyncio.sleep(0.1)
        gate.set()
        return await asyncio.gather(first, *waiting)

    results = asyncio.run(scenario())
    assert results == ["big-running", "big", "medium", "small", "medium-2"]
    assert order == ["big-running", "small", "medium", "medium-2", "big"]  # equal costs: first come first
    assert max(overlaps) == 1


def test_a_full_queue_pushes_out_its_largest_job_or_refuses_a_larger_one():
    admission = Admission(max_waiting=2)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(admission.run(100, lambda: gate.wait(5)))
        await asyncio.sleep(0.1)
        big = asyncio.create_task(admission.run(5000, lambda: "big"))
        mid = asyncio.create_task(admission.run(500, lambda: "mid"))
        await asyncio.sleep(0.05)
        with pytest.raises(BusyError) as refused:  # larger than everything waiting: refused at once
            await admission.run(9000, lambda: "huge")
        small = asyncio.create_task(admission.run(5, lambda: "small"))  # pushes out "big"
        await asyncio.sleep(0.05)
        gate.set()
        outcomes = await asyncio.gather(running, big, mid, small, return_exceptions=True)
        return refused.value, outcomes

    refused, (_ran, big, mid, small) = asyncio.run(scenario())
    assert refused.retry_after >= 1 and "busy" in str(refused)
    assert isinstance(big, BusyError) and mid == "mid" and small == "small"
    assert admission.stats()["refused"] == 2


def test_a_job_that_waited_too_long_is_answered_busy_not_served_late():
    admission = Admission(max_waiting=4, max_wait_s=0.1)
    gate = threading.Event()
    served = []

    async def scenario():
        running = asyncio.create_task(admission.run(10, lambda: gate.wait(5)))
        await asyncio.sleep(0.05)
        late = asyncio.create_task(admission.run(10, lambda: served.append("late")))
        await asyncio.sleep(0.3)
        gate.set()
        return await asyncio.gather(running, late, return_exceptions=True)

    _, late = asyncio.run(scenario())
    assert isinstance(late, BusyError) and "waited over 0.1 s" in str(late) and served == []


def test_a_jobs_own_error_reaches_its_caller_and_the_worker_goes_on():
    admission = Admission()

    async def scenario():
        with pytest.raises(ValueError, match="bad input"):
            await admission.run(1, lambda: (_ for _ in ()).throw(ValueError("bad input")))
        return await admission.run(1, lambda: "next")

    assert asyncio.run(scenario()) == "next"


def test_a_small_job_runs_between_the_slices_of_a_large_one():
    """A large job's work yields between its slices: a smaller job that arrived meanwhile runs there, not
    after the whole large job; a larger one still waits. One job at a time throughout."""
    admission = Admission(max_waiting=8)
    order, running, overlaps = [], [], []
    started = threading.Event()

    def large():
        for part in range(4):
            running.append("large")
            overlaps.append(len(running))
            started.set()
            time.sleep(0.1)
            order.append(f"large-{part}")
            running.remove("large")
            admission.yield_point(cost_left=1000 * (3 - part))
        return "large"

    def quick(name):
        def work():
            running.append(name)
            overlaps.append(len(running))
            order.append(name)
            running.remove(name)
            return name

        return work

    async def scenario():
        first = asyncio.create_task(admission.run(4000, large))
        while not started.is_set():
            await asyncio.sleep(0.01)
        small = asyncio.create_task(admission.run(50, quick("small")))
        huge = asyncio.create_task(admission.run(9000, quick("huge")))
        return await asyncio.gather(first, small, huge)

    assert asyncio.run(scenario()) == ["large", "small", "huge"]
    assert order.index("small") == 1  # after the first slice, not after the fourth
    assert order[-1] == "huge" and max(overlaps) == 1


def test_an_exclusive_job_never_runs_inside_another_ones_yield_point():
    """Two changes to an index must not interleave: a small write waits for the large job's end, while a
    small read still runs between its slices."""
    admission = Admission(max_waiting=8)
    order = []
    started = threading.Event()

    def large():
        for part in range(3):
            started.set()
            time.sleep(0.1)
            order.append(f"large-{part}")
            admission.yield_point(cost_left=1000 * (3 - part))
        return "large"

    async def scenario():
        first = asyncio.create_task(admission.run(4000, large, exclusive=True))
        while not started.is_set():
            await asyncio.sleep(0.01)
        write = asyncio.create_task(admission.run(10, lambda: order.append("write"), exclusive=True))
        read = asyncio.create_task(admission.run(50, lambda: order.append("read")))
        await asyncio.gather(first, write, read)

    asyncio.run(scenario())
    assert order.index("read") == 1 and order[-1] == "write"


def test_a_stream_of_small_jobs_does_not_starve_a_large_one():
    """Smallest first alone runs a large job only once no small one waits: three clients that each send
    their next small request as soon as the last is answered would hold it back until all 3 × 100 are done.
    Once it has waited its patience (here 0.25 s, about a dozen small jobs), it runs."""
    admission = Admission(max_waiting=8, max_wait_s=1.0)
    done = []

    async def client():
        for _ in range(100):
            await admission.run(10, lambda: (time.sleep(0.02), done.append("small")))

    async def scenario():
        clients = [asyncio.create_task(client()) for _ in range(3)]
        await asyncio.sleep(0.05)
        await admission.run(10_000, lambda: done.append("large"))
        await asyncio.gather(*clients)

    asyncio.run(scenario())
    assert done.index("large") < 150, done.index("large")  # not after the 300 small ones


def test_a_yield_point_runs_only_the_jobs_already_waiting():
    """Small jobs that keep arriving while a large job yields run at its next yield point, not all at this
    one: the large job moves on (three clients resending at once held it at its first yield point)."""
    admission = Admission(max_waiting=8, max_wait_s=60.0)
    order = []

    started = threading.Event()

    def large():
        for part in range(3):
            started.set()
            time.sleep(0.05)  # a slice, while the clients queue
            order.append(f"large-{part}")
            admission.yield_point(cost_left=1000 * (3 - part))
        return "large"

    async def client():
        for _ in range(30):
            await admission.run(10, lambda: (time.sleep(0.01), order.append("small")))

    async def scenario():
        first = asyncio.create_task(admission.run(4000, large))
        while not started.is_set():
            await asyncio.sleep(0.005)
        clients = [asyncio.create_task(client()) for _ in range(3)]
        await asyncio.gather(first, *clients)

    asyncio.run(scenario())
    assert order.index("large-2") < 80, order  # not after all 90 small jobs


def test_yield_point_off_the_worker_runs_nothing():
    assert Admission().yield_point(10**9) == 0


def test_a_request_is_cut_into_slices_of_about_the_slice_size():
    from sentcl.serving.server import slices

    texts = ["x" * 1500] * 32
    bounds = slices(texts, size=12_000)
    assert bounds == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert slices(["x" * 50_000, "y"], size=12_000) == [(0, 1), (1, 2)]  # one text at least
    assert slices(["a", "b"], size=12_000) == [(0, 2)]


def test_the_admission_decision_is_known_before_the_body_is_read():
    """``refusal(cost)`` says what ``run`` would answer now, and BodyLimit answers it from Content-Length
    without reading the body (a client resending refused requests then costs headers, not bodies)."""
    from sentcl.serving.server import MODEL_PATHS, BodyLimit

    admission = Admission(max_waiting=1)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(admission.run(10, lambda: gate.wait(5)))
        await asyncio.sleep(0.1)
        waiting = asyncio.create_task(admission.run(500, lambda: "waiting"))
        await asyncio.sleep(0.05)
        decisions = (admission.refusal(400), admission.refusal(500), admission.refusal(9000))

        sent, reads = [], []

        async def receive():
            reads.append(1)
            return {"type": "http.request", "body": b"x" * 600, "more_body": False}

        async def send(event):
            sent.append(event)

        async def app(scope, receive, send):  # never reached for a refused request
            raise AssertionError("the body was read")

        limit = BodyLimit(app, max_bytes=10_000, admission=admission, queued_paths=MODEL_PATHS)
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/embeddings",
            "headers": [(b"content-length", b"600")],
        }
        await limit(scope, receive, send)
        gate.set()
        await asyncio.gather(running, waiting)
        return decisions, sent, reads

    (smaller, equal, larger), sent, reads = asyncio.run(scenario())
    assert smaller is None  # it would push the waiting job out: admitted
    assert isinstance(equal, BusyError) and isinstance(larger, BusyError)
    start = next(e for e in sent if e["type"] == "http.response.start")
    headers = dict(start["headers"])
    assert start["status"] == 503 and b"retry-after" in headers and headers[b"connection"] == b"close"
    assert reads == []  # the body was never read


def test_a_job_a_little_larger_is_not_passed_by_every_smaller_one_that_arrives():
    """Three clients that search without pause with 100-byte queries: a 150-byte one, queued among them,
    runs within a few of their jobs (its cost halves every AGING_S it waits), not after all of them (smallest
    first alone would hold it back until its patience, here 15 s: past the 180 small jobs)."""
    admission = Admission(max_waiting=8, max_wait_s=60.0)
    done = []

    async def client():
        for _ in range(60):
            await admission.run(100, lambda: (time.sleep(0.02), done.append("small")))

    async def scenario():
        clients = [asyncio.create_task(client()) for _ in range(3)]
        await asyncio.sleep(0.05)
        await admission.run(150, lambda: done.append("longer"))
        await asyncio.gather(*clients)

    asyncio.run(scenario())
    assert done.index("longer") < 40, done.index("longer")
