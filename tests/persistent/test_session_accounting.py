"""Every reply of a persistent session is counted once (issue 35, item 16): replies that
reached a ``request_batch`` before its caller was cancelled (or failed) are discarded,
so ``replied == returned + received + discarded`` holds beside ``sent == replied +
unprocessed``. Run on the cpu backend's worker thread, whose body is held between two
device batches so that a batch is half answered when its caller goes."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import ActorCrashed, PersistentKernel, SessionState, open_persistent_kernel

REC = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
LIMIT = 10


class HeldBody:
    """Answers its first ``free`` device batches at once and holds the next ones until
    released (or fails them, with ``fail``)."""

    def __init__(self, fail: bool = False, free: int = 1) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.fail = fail
        self.free = free

    def __call__(self, requests: Any) -> Any:
        self.calls += 1
        if self.calls > self.free:
            if self.fail:
                raise RuntimeError("the second batch fails")
            self.release.wait(LIMIT)
        return requests.copy()


def records(count: int) -> Any:
    out = np.zeros(count, REC)
    out["id"] = np.arange(count)
    return out


async def until(condition: Any) -> None:
    """Poll a state of the session (its worker thread sets no event)."""
    with anyio.fail_after(LIMIT):
        while not condition():  # noqa: ASYNC110 - a state of the session, not an event
            await anyio.sleep(0.001)


async def cancel_a_batch(session: Any, count: int, when: Any) -> None:
    """Send a batch of ``count`` from a task, and cancel that task once ``when()``."""
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def ask() -> None:
            with scope:
                await session.request_batch(records(count))

        tg.start_soon(ask)
        await until(when)
        scope.cancel()


async def test_replies_into_a_cancelled_request_batch_are_discarded() -> None:
    body = HeldBody()
    kernel = PersistentKernel("held", REC, REC, capacity=4, max_batch=2, bodies={"cpu": body})
    async with open_persistent_kernel(kernel, "cpu") as session:
        returned = 0
        with anyio.fail_after(LIMIT):
            # cancelled once half answered
            await cancel_a_batch(session, 4, lambda: session.statistics().replied == 2)
            body.release.set()
            returned += len(await session.request_batch(records(1)))  # routes the rest
        stats = session.statistics()
        assert stats.sent == 5
        assert stats.replied == 5
        assert stats.received == 0
        assert stats.discarded == 4  # the two that had reached it, and the two after
        assert stats.replied == returned + stats.received + stats.discarded


async def test_replies_into_a_request_batch_that_failed_are_discarded() -> None:
    kernel = PersistentKernel(
        "failing", REC, REC, capacity=4, max_batch=2, bodies={"cpu": HeldBody(fail=True)}
    )
    with anyio.fail_after(LIMIT):
        async with open_persistent_kernel(kernel, "cpu") as session:
            with pytest.raises(ActorCrashed):
                await session.request_batch(records(4))
            stats = session.statistics()
    assert stats.sent == 4
    assert stats.replied == 2
    assert stats.discarded == 2  # the replies that came before the crash: not returned
    assert stats.unprocessed == 2
    assert stats.sent == stats.replied + stats.unprocessed
    assert stats.replied == 0 + stats.received + stats.discarded


async def test_requests_of_a_cancelled_batch_left_unprocessed_by_a_stop_are_not_replies() -> None:
    """After a stop, the cancelled batch's requests the kernel never answered are
    ``unprocessed``, not ``discarded`` replies: both identities hold."""
    body = HeldBody(free=0)
    kernel = PersistentKernel("stopped", REC, REC, capacity=8, max_batch=2, bodies={"cpu": body})
    with anyio.fail_after(LIMIT):
        async with open_persistent_kernel(kernel, "cpu") as session:
            # cancelled while the body holds the first two
            await cancel_a_batch(session, 6, lambda: body.calls == 1)
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.stop)  # the kernel stops after the batch in hand
                await until(lambda: session.state is SessionState.STOPPING)
                body.release.set()
            stats = session.statistics()
    assert stats.sent == 6
    assert stats.replied == 2
    assert stats.unprocessed == 4
    assert stats.discarded == 2
    assert stats.sent == stats.replied + stats.unprocessed
    assert stats.replied == 0 + stats.received + stats.discarded
