"""The lean single-record path: how many Python calls one ``session.request`` costs.

A request whose session has nothing else in flight takes a short path (issue 33): the
record is converted straight into its slot and published (``RingHost.put_one``), the
caller spins, and the reply is copied out (``RingHost.take_one``). cProfile counts every
Python and C function call of that path; the bound is 16. The device here answers
inside ``wake`` with NumPy stores only, so the count is the host's own path, the same on
every run. The same path on the cpu backend, whose device is a worker thread, is
checked too (its fastest request: a loaded machine may make others wait past the spin).
A kernel actor's ``ask`` is held to a few calls more than its session's request.
``benchmarks/cuda_floor.py`` prints the count beside the round trips.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import numpy as np
import pytest
from support.inline_echo import InlineBackend, InlineEcho

from pdc_core import PersistentKernel, PersistentKernelActor, open_nursery, open_persistent_kernel
from pdc_core._loop import TURN_CHECK_EVERY
from pdc_core.backend import Backend, PersistentKernelSpec, ResidentKernel, RingMemory

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)

#: The issue's bound on Python calls per single-record request.
MOST_CALLS = 16
#: What a kernel actor's ``ask`` may add to its session's request: ActorRef.ask, its
#: entry check (the actor's loop's own), the handle's ``_request`` and ready session.
ASK_EXTRA_CALLS = 6


def _echo(requests: Any) -> Any:
    return requests.copy()


def _calls(profile: cProfile.Profile) -> int:
    """The calls ``profile`` counted, less its own ``disable()``."""
    return int(pstats.Stats(profile).total_calls) - 1  # type: ignore[attr-defined]


def _echo_kernel(backend: Backend | str) -> PersistentKernel[Any, Any]:
    kernel = PersistentKernel("echo", REQ, REQ, capacity=8)
    kernel.add_body(backend if isinstance(backend, str) else backend.name, _echo)
    return kernel


async def _count_calls(request: Callable[[Any], Awaitable[Any]], count: int) -> list[int]:
    for index in range(20):  # warm: caches, the loop binding
        await request((index, 0.5))
    calls = []
    for index in range(count):
        profile = cProfile.Profile()
        profile.enable()
        reply = await request((index, 0.5))
        profile.disable()
        assert (int(reply["id"]), float(reply["x"])) == (index, 0.5)
        calls.append(_calls(profile))
    return calls


async def _calls_per_request(backend: Backend | str, count: int) -> list[int]:
    async with open_persistent_kernel(_echo_kernel(backend), backend, wait="spin") as session:
        calls = await _count_calls(session.request, count)
        stats = session.statistics()
        assert stats.sent == stats.replied == count + 20
    return calls


async def test_a_kernel_actors_ask_adds_few_calls_to_its_sessions_request() -> None:
    backend = InlineBackend()
    count = 200
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(
            PersistentKernelActor(_echo_kernel(backend), backend=backend, wait="spin")
        )
        calls = sorted(await _count_calls(ref.ask, count))
        await ref.stop()
    looks = count // TURN_CHECK_EVERY + 1  # as for the request: the fair turn's clock
    assert calls[-looks - 1] <= MOST_CALLS + ASK_EXTRA_CALLS, calls


async def test_a_single_record_request_costs_at_most_16_python_calls() -> None:
    count = 200
    calls = sorted(await _calls_per_request(InlineBackend(), count))
    # Every TURN_CHECK_EVERY-th call of the loop also looks at the clock for its fair
    # turn (and yields if the turn is over): those few may cost more.
    looks = count // TURN_CHECK_EVERY + 1
    assert calls[-looks - 1] <= MOST_CALLS, calls


async def test_the_lean_path_on_the_cpu_backend() -> None:
    calls = await _calls_per_request("cpu", 200)
    assert min(calls) <= MOST_CALLS, sorted(calls)[:20]


class FailingDoorbell(InlineEcho):
    """Echoes inside ``wake`` as ``InlineEcho`` does, then fails its first ring once
    (a doorbell that raises after the device saw the request)."""

    failed = False

    def wake(self) -> None:
        super().wake()
        if not FailingDoorbell.failed and not self._done:
            FailingDoorbell.failed = True
            raise OSError("the doorbell failed")


class FailingDoorbellBackend(InlineBackend):
    name: ClassVar[str] = "failing-doorbell"

    def launch_persistent_kernel(
        self, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
    ) -> ResidentKernel:
        return FailingDoorbell(self, kernel, rings)


async def test_a_request_failing_after_its_record_is_published_misroutes_no_reply() -> None:
    # The lean path publishes the record before it wakes the device: a wake (or spin)
    # that raises must leave its reply routed (discarded when it comes), or the next
    # request would take it as its own.
    FailingDoorbell.failed = False
    backend = FailingDoorbellBackend()
    kernel = PersistentKernel("echo", REQ, REQ, capacity=8)
    kernel.add_body(backend.name, _echo)
    async with open_persistent_kernel(kernel, backend, wait="spin") as session:
        with pytest.raises(OSError, match="doorbell"):
            await session.request((1, 0.5))
        reply = await session.request((2, 0.25))
        assert (int(reply["id"]), float(reply["x"])) == (2, 0.25)
        stats = session.statistics()
        assert (stats.sent, stats.replied, stats.discarded) == (2, 2, 1)
