"""Fair turns of a persistent-kernel session's per-message calls.

``request``, ``request_batch``, ``send`` and ``receive`` complete without waiting when
the device answers at once or the ring has room. Such a call does not yield by itself,
so each takes the event loop's fair turn (as a mailbox's ``send`` and ``receive`` do):
a task that calls them in a loop yields within about a millisecond, so other tasks run
and a deadline that passes ends the loop. The device here answers inside ``wake``, the
fastest a device can be.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from support.inline_echo import InlineBackend

from pdc_core import PersistentKernel, PersistentKernelSession, open_persistent_kernel

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)

#: Far more calls than a millisecond holds: a loop that never yields reaches it.
MOST_CALLS = 200_000


def _echo(requests: Any) -> Any:
    return requests.copy()


async def _request(session: PersistentKernelSession[Any, Any]) -> None:
    await session.request((1, 0.5))


async def _request_batch(session: PersistentKernelSession[Any, Any]) -> None:
    await session.request_batch(np.zeros(2, REQ))


async def _send_receive(session: PersistentKernelSession[Any, Any]) -> None:
    await session.send((1, 0.5))
    await session.receive()


async def _send_no_reply(session: PersistentKernelSession[Any, Any]) -> None:
    await session.send((1, 0.5), reply=False)


CALLS = pytest.mark.parametrize(
    "call",
    [_request, _request_batch, _send_receive, _send_no_reply],
    ids=["request", "request_batch", "send_receive", "send_no_reply"],
)

Call = Callable[[PersistentKernelSession[Any, Any]], Awaitable[None]]


def _kernel() -> PersistentKernel[Any, Any]:
    kernel = PersistentKernel("echo", REQ, REQ, capacity=8)
    kernel.add_body(InlineBackend.name, _echo)
    return kernel


@pytest.mark.parametrize("wait", ["spin", "sleep"])
@CALLS
async def test_a_task_whose_calls_never_wait_lets_the_others_run(call: Call, wait: str) -> None:
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await anyio.lowlevel.checkpoint()

    async with open_persistent_kernel(_kernel(), InlineBackend(), wait=wait) as session:
        await call(session)  # the loop is bound
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(other)
            calls = 0
            # Yielding once is not enough: the calling task must go on giving turns.
            while turns < 5 and calls < MOST_CALLS:
                await call(session)
                calls += 1
            tasks.cancel_scope.cancel()
        assert turns >= 5, f"the other task ran {turns} times in {calls} calls"


@CALLS
async def test_a_deadline_ends_a_loop_of_calls_that_never_wait(call: Call) -> None:
    async with open_persistent_kernel(_kernel(), InlineBackend(), wait="spin") as session:
        calls = 0
        with anyio.move_on_after(0.01) as scope:
            while calls < MOST_CALLS:
                await call(session)
                calls += 1
        assert scope.cancelled_caught, f"the deadline never ended {calls} calls"
    stats = session.statistics()  # after the stop: every request is accounted for
    assert stats.sent == stats.replied + stats.unprocessed
