"""The seed facade launching persistent kernels: ``runtime.launch(id, PersistentKernel)``."""

# ruff: noqa: PT012

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest
from support.held_batch import HeldBatch

from pdc_core import (
    ActorCrashed,
    ActorStopped,
    KernelAlreadyExistsError,
    KernelBodyMissing,
    KernelState,
    KernelStateError,
    KernelStopTimeout,
    MessageTimeout,
    PersistentKernel,
    PersistentKernelActor,
    PersistentKernelError,
    PersistentRingKernel,
    RecordError,
    RingKernelRuntime,
    open_nursery,
)
from pdc_core.backend import StopMode
from pdc_core.testing import settle_threads, thread_count

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)
LIMIT = 10


def double(requests: Any) -> Any:
    if (requests["x"] < 0).any():
        raise ValueError("negative input")
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


def make_kernel(capacity: int = 8, body: Callable[[Any], Any] = double) -> PersistentKernel:
    return PersistentKernel("double", REQ, REP, capacity=capacity, bodies={"cpu": body})


async def wait_for(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(LIMIT):
        while not predicate():  # noqa: ASYNC110 - a thread's progress has no anyio event
            await anyio.sleep(0.001)


async def release_once_escalated(held: HeldBatch, ref: Any) -> None:
    """Let the held batch go once the stop word is ``NOW``: the stop was escalated."""
    resident = ref.session.resident
    await wait_for(lambda: resident.status.stop is StopMode.NOW)
    held.release.set()


async def test_lifecycle_send_receive_ask_and_telemetry() -> None:
    baseline = thread_count()
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("double", make_kernel(), backend="cpu")
        assert isinstance(kernel, PersistentRingKernel)
        assert runtime.get_kernel("double") is kernel
        assert runtime.get_kernel_state("double") is KernelState.LAUNCHED
        assert thread_count() == baseline + 1  # resident before activation

        # Launched: parked, requests wait in the ring.
        await runtime.send("double", (1, 1.5))
        with pytest.raises(MessageTimeout):
            await runtime.receive("double", timeout=0.05)

        await runtime.activate("double")
        assert runtime.get_kernel_state("double") is KernelState.ACTIVE
        reply = await runtime.receive("double", timeout=5)
        assert (int(reply["id"]), float(reply["y"])) == (1, 3.0)
        reply = await runtime.ask("double", (2, 4.0))
        assert (int(reply["id"]), float(reply["y"])) == (2, 8.0)

        await runtime.deactivate("double")
        assert runtime.get_kernel_state("double") is KernelState.DEACTIVATED
        await runtime.send("double", (3, 0.5))
        with pytest.raises(MessageTimeout):
            await runtime.receive("double", timeout=0.05)
        await runtime.reactivate("double")
        assert float((await runtime.receive("double", timeout=5))["y"]) == 1.0

        telemetry = runtime.get_telemetry("double")
        assert telemetry is not None
        assert telemetry.state == "ACTIVE"
        assert telemetry.messages_received == 3
        assert telemetry.messages_processed == 3
        assert telemetry.output_depth == 0
        assert telemetry.latency_count == 1  # the ask
        assert telemetry.latency_p50_ns > 0
        assert telemetry.active_seconds > 0

        with pytest.raises(KernelStateError, match="activate"):
            await runtime.activate("double")
        await runtime.terminate("double", timeout=5)
        assert runtime.get_kernel_state("double") is KernelState.TERMINATED
        with pytest.raises(KernelStateError, match="TERMINATED"):
            await runtime.send("double", (4, 1.0))
        with pytest.raises(KernelStateError, match="receive"):
            await runtime.receive("double")
    await settle_threads(baseline, within=3)


async def test_terminate_drains_what_was_sent_before_a_launched_kernel_ran() -> None:
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("double", make_kernel(capacity=4), backend="cpu")
        for i in range(3):
            await kernel.send((i, float(i)))
        await runtime.terminate("double", timeout=5)  # a drain overrides the pause
        replies = [await runtime.receive("double") for _ in range(3)]
        assert [float(r["y"]) for r in replies] == [0.0, 2.0, 4.0]
        assert kernel.telemetry().messages_discarded == 0
        with pytest.raises(KernelStateError):
            await runtime.receive("double")


async def test_runtime_exit_terminates_persistent_kernels() -> None:
    baseline = thread_count()
    async with RingKernelRuntime() as runtime:
        await runtime.launch("a", make_kernel(), backend="cpu")
        await runtime.launch("b", make_kernel(), backend="cpu")
        await runtime.activate("a")
        assert float((await runtime.ask("a", (1, 1.0)))["y"]) == 2.0
        assert thread_count() == baseline + 2
    assert runtime.kernel_states == {"a": KernelState.TERMINATED, "b": KernelState.TERMINATED}
    await settle_threads(baseline, within=3)


async def test_terminate_escalates_after_the_timeout_and_fails_unconsumed_requests() -> None:
    held = HeldBatch(double)
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch(
            "double", make_kernel(capacity=8, body=held), backend="cpu", stop_timeout=5
        )
        await runtime.activate("double")
        results: dict[int, Any] = {}

        async def ask(record: tuple[int, float]) -> None:
            try:
                results[record[0]] = float((await kernel.ask(record))["y"])
            except ActorStopped as exc:
                results[record[0]] = exc

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, (0, 1000.0))  # keeps the kernel busy until the escalation
                await wait_for(held.entered.is_set)  # the kernel has it in hand
                tg.start_soon(ask, (1, 1.0))  # published, never consumed: the stop comes first
                await wait_for(lambda: kernel.telemetry().messages_received == 2)
                tg.start_soon(release_once_escalated, held, kernel)
                started = time.monotonic()
                await runtime.terminate("double", timeout=0.2)
                assert time.monotonic() - started < 3
        finally:
            held.release.set()
        assert results[0] == 2000.0  # the batch in hand is finished and answered
        assert isinstance(results[1], ActorStopped)
        assert kernel.kernel_state is KernelState.TERMINATED
        assert kernel.telemetry().messages_discarded == 1


async def test_a_kernel_that_does_not_stop_crashes_the_runtime_with_stop_timeout() -> None:
    held = HeldBatch(double)
    try:
        with pytest.raises(ActorCrashed) as info:
            async with RingKernelRuntime() as runtime:
                kernel = await runtime.launch(
                    "double", make_kernel(body=held), backend="cpu", stop_timeout=0.1
                )
                await runtime.activate("double")
                await kernel.send((0, 1000.0))
                await wait_for(held.entered.is_set)  # held until after the crash
                await runtime.terminate("double", timeout=0.05)
        assert isinstance(info.value.cause, KernelStopTimeout)
        assert kernel.kernel_state is KernelState.FAILED
    finally:
        held.release.set()  # let the body finish: its worker then exits
    session = kernel.session
    assert session is not None
    await wait_for(lambda: session.resident.exited)


async def test_error_word_crashes_the_runtime_and_fails_pending_requests() -> None:
    outcomes: list[BaseException] = []
    with pytest.raises(ActorCrashed) as info:
        async with RingKernelRuntime() as runtime:
            kernel = await runtime.launch("double", make_kernel(), backend="cpu")
            await runtime.activate("double")
            try:
                await runtime.ask("double", (1, -1.0))
            except ActorCrashed as exc:
                outcomes.append(exc)
                raise
    assert isinstance(info.value.cause, PersistentKernelError)
    assert "negative input" in str(info.value.cause)
    assert len(outcomes) == 1
    assert kernel.kernel_state is KernelState.FAILED
    telemetry = kernel.telemetry()
    assert telemetry.error_count == 1
    assert telemetry.last_error is not None
    assert "negative input" in telemetry.last_error


async def test_bad_input_is_refused_with_a_clear_error() -> None:
    async with RingKernelRuntime() as runtime:
        with pytest.raises(TypeError, match="queue_size do not apply to a PersistentKernel"):
            await runtime.launch("double", make_kernel(), queue_size=10)
        with pytest.raises(KernelBodyMissing, match="cpu"):
            no_cpu = PersistentKernel("gpu_only", REQ, REP, bodies={"cuda": "/* body */"})
            await runtime.launch("gpu_only", no_cpu, backend="cpu")
        assert runtime.kernel_ids == []

        async def echo(ctx: Any) -> None:
            await ctx.send(await ctx.receive())

        with pytest.raises(TypeError, match="persistent kernels only"):
            await runtime.launch("echo", echo, backend="cpu")

        kernel = await runtime.launch("double", make_kernel(), backend="cpu")
        with pytest.raises(KernelAlreadyExistsError):
            await runtime.launch("double", make_kernel(), backend="cpu")
        with pytest.raises(RecordError):
            await runtime.send("double", (1, 2.0, 3.0))
        with pytest.raises(ValueError, match="priority"):
            await kernel.send((1, 2.0), priority=300)
        with pytest.raises(KernelStateError, match="deactivate"):
            await runtime.deactivate("double")
        assert kernel.telemetry().messages_received == 0


async def test_cancellation_stops_the_kernel_and_leaves_nothing_running() -> None:
    baseline = thread_count()
    with anyio.CancelScope() as scope:
        async with RingKernelRuntime() as runtime:
            await runtime.launch("double", make_kernel(), backend="cpu")
            await runtime.activate("double")
            scope.cancel()  # once the kernel runs, not at a deadline that could come first
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert runtime.kernel_states == {"double": KernelState.TERMINATED}
    await settle_threads(baseline, within=3)


async def test_kernel_actor_stop_without_drain_escalates_a_draining_stop() -> None:
    held = HeldBatch(double)
    try:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(PersistentKernelActor(make_kernel(body=held), "cpu"))
            await ref.tell((0, 1000.0))
            await wait_for(held.entered.is_set)  # the kernel has it in hand
            await ref.tell((1, 1.0))
            assert ref.session is not None
            resident = ref.session.resident
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: ref.stop(drain=True))
                await wait_for(lambda: resident.status.stop is StopMode.DRAIN)  # it drains
                tg.start_soon(release_once_escalated, held, ref)
                await ref.stop()  # escalates: the unconsumed request is not answered
            assert ref.session is not None
            assert ref.session.statistics().unprocessed == 1
    finally:
        held.release.set()
