"""A persistent kernel's ring memory goes back as soon as its kernel has exited.

Rings live in memory the device maps (pinned host memory on CUDA), and freeing that may
wait for the whole device: it must happen when the session ends, not whenever the
garbage collector runs (beside a later resident kernel). The collector is disabled here,
so only reference counting can free anything.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pdc_core import ActorCrashed, PersistentKernel, PersistentKernelSession, open_persistent_kernel

pytest.importorskip(
    "pdc_cpu", reason="the cpu backend is not installed: pip install plugins/pdc_cpu"
)

REQ = np.dtype([("x", "<f8")])
REP = np.dtype([("y", "<f8")])


def fails(requests: Any) -> Any:
    raise ArithmeticError("the body gave up")


def doubles(requests: Any) -> Any:
    replies = np.empty(len(requests), REP)
    replies["y"] = 2 * requests["x"]
    return replies


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _run(body: Any) -> tuple[weakref.ref[PersistentKernelSession], weakref.ref[Any]]:
    kernel = PersistentKernel("rings", REQ, REP, capacity=8, bodies={"cpu": body})
    crashed = False
    try:
        async with open_persistent_kernel(kernel, "cpu") as session:
            session_ref = weakref.ref(session)
            allocation = weakref.ref(session.memory.owner)
            try:
                reply = await session.request((1.0,))
            except ActorCrashed:
                crashed = True
            else:
                assert float(reply["y"]) == 2.0
    except ActorCrashed:  # an unreported crash is raised at exit
        crashed = True
    assert crashed is (body is fails)
    return session_ref, allocation


@pytest.mark.usefixtures("no_collector")
@pytest.mark.parametrize("body", [fails, doubles], ids=["crashed", "stopped"])
async def test_rings_and_session_are_freed_without_the_collector(body: Any) -> None:
    session, allocation = await _run(body)
    assert allocation() is None, "the ring allocation outlived its session"
    assert session() is None, "a reference cycle keeps the session alive"


async def test_a_detached_ring_keeps_its_last_values() -> None:
    kernel = PersistentKernel("rings", REQ, REP, capacity=8, bodies={"cpu": doubles})
    async with open_persistent_kernel(kernel, "cpu") as session:
        await session.request((1.0,))
        await session.request((2.0,))
    assert session.memory.owner is None  # let go at the stop
    status = session.resident.status
    assert status.done
    assert status.in_head == status.in_tail == 2
    assert session.statistics().sent == 2
