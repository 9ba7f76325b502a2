"""``pdc_core.testing.settle_threads``: it waits for the threads work started to end,
fails on one that stays, and does not mistake an older thread ending for a leak."""

from __future__ import annotations

import functools
import threading

import anyio
import pytest

from pdc_core._loop import _idle_loop_worker
from pdc_core.testing import settle_threads, thread_count


def _start(stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=stop.wait, args=(10,), name="test-settle")
    thread.start()
    return thread


async def test_it_waits_for_a_thread_that_ends_soon() -> None:
    baseline = thread_count()
    stop = threading.Event()
    thread = _start(stop)
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(settle_threads, baseline, within=5))
        await anyio.lowlevel.checkpoint()  # the wait has begun: now end the thread
        stop.set()
    thread.join(5)


async def test_it_fails_naming_the_threads_when_one_stays() -> None:
    baseline = thread_count()
    stop = threading.Event()
    thread = _start(stop)
    try:
        with pytest.raises(AssertionError, match="test-settle"):
            await settle_threads(baseline, within=0.05)
    finally:
        stop.set()
        thread.join(5)


async def test_an_older_thread_ending_meanwhile_is_no_leak() -> None:
    stop = threading.Event()
    older = _start(stop)
    baseline = thread_count()  # counts the older thread
    stop.set()
    older.join(5)
    await settle_threads(baseline, within=1)  # one thread fewer than the baseline


async def test_it_is_a_checkpoint_with_nothing_to_wait_for() -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await settle_threads(thread_count(), within=1)
    assert scope.cancelled_caught


async def test_the_event_loop_s_idle_worker_threads_are_not_counted() -> None:
    # AnyIO's worker threads on asyncio stay idle 10 s after a call, trio's are cached:
    # neither is work left behind (pdc check's beside probe runs in one). Asked of the
    # thread itself: the count moves with whatever else this process runs meanwhile.
    baseline = thread_count()
    worker = await anyio.to_thread.run_sync(threading.current_thread)
    assert worker.name.startswith(("AnyIO worker thread", "Trio thread")), worker.name
    assert worker.is_alive()
    assert _idle_loop_worker(worker)  # idle in its cache: thread_count leaves it out
    await settle_threads(baseline, within=1)


async def test_a_worker_thread_still_running_a_call_is_counted() -> None:
    # Left running (a call that outlived its caller), it is work left behind.
    release = threading.Event()
    started = threading.Event()
    workers: list[threading.Thread] = []

    def work() -> None:
        workers.append(threading.current_thread())
        started.set()
        release.wait(10)

    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(anyio.to_thread.run_sync, work))
        await anyio.to_thread.run_sync(started.wait, 10)
        try:
            assert not _idle_loop_worker(workers[0])  # busy: thread_count counts it
        finally:
            release.set()
    assert _idle_loop_worker(workers[0])  # its call returned: idle again
