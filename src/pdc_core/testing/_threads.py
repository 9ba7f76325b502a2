"""Checks that work leaves no thread behind (worker streams, resident kernels' host
threads, remote actors' bridges): count the threads before, wait for the count to come
back after."""

from __future__ import annotations

import threading

import anyio

from .._loop import thread_count

__all__ = ["settle_threads", "thread_count"]

#: How often :func:`settle_threads` looks again (a thread's end sets no event to wait on).
_POLL_SECONDS = 0.005


async def settle_threads(baseline: int, *, within: float) -> None:
    """Return once :func:`thread_count` is back to ``baseline`` or below (a thread that
    was already running when the baseline was taken may end meanwhile: that is no
    leak); after ``within`` seconds without that, fail with an ``AssertionError``
    listing the live threads. Cancelling it ends the wait only. A checkpoint on every
    path, as every public async call of pdc."""
    await anyio.lowlevel.checkpoint()
    with anyio.move_on_after(within):
        while thread_count() > baseline:  # noqa: ASYNC110 - no event for a thread's end
            await anyio.sleep(_POLL_SECONDS)
    left = thread_count()
    if left > baseline:
        raise AssertionError(f"{left} threads, not {baseline}: {threading.enumerate()}")
