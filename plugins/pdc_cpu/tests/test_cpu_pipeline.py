"""Kernel-to-kernel pipelines on the CPU backend: stage worker threads linked by rings.

Every ``async def`` test runs under asyncio and trio (the root conftest). No test
sleeps for a fixed time: it waits for events the bodies set, or for control words.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from pdc_core import (
    ActorCrashed,
    ActorStopped,
    KernelActorRef,
    PersistentKernel,
    PersistentKernelError,
    PersistentPipeline,
    PersistentPipelineActor,
    open_nursery,
    open_persistent_pipeline,
)
from pdc_core.backend import Offset, StopMode

REC = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
WIDE = np.dtype([("id", "<u8"), ("x", "<f8"), ("y", "<f8")], align=True)


def stage(
    name: str, fn: Callable[[npt.NDArray[Any]], npt.NDArray[Any]], capacity: int = 4, **kw: Any
) -> PersistentKernel:
    kernel = PersistentKernel(name, REC, REC, capacity=capacity, **kw)

    @kernel.body("cpu")
    def body(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
        replies = np.empty(len(requests), REC)
        replies["id"] = requests["id"]
        replies["x"] = fn(requests["x"])
        return replies

    return kernel


def records(count: int, start: int = 0) -> npt.NDArray[Any]:
    batch = np.zeros(count, REC)
    batch["id"] = np.arange(start, start + count)
    batch["x"] = np.arange(start, start + count, dtype=np.float64)
    return batch


def expected(x: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return (x + 1) * 2 - 3


def abc(caps: tuple[int, int, int] = (4, 3, 5), middle: Any = None) -> PersistentPipeline:
    b = stage("b", middle if middle is not None else (lambda x: x * 2), caps[1])
    return PersistentPipeline(
        stage("a", lambda x: x + 1, caps[0]), b, stage("c", lambda x: x - 3, caps[2])
    )


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("pdc-cpu-kernel-")]


class Gate:
    """A middle-stage function that, on the record with id ``hold``, says it has it
    (``entered``) and holds it until the test sets ``release`` (at most 10 s)."""

    def __init__(self, hold: int) -> None:
        self.hold = hold
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, x: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if (x == self.hold + 1).any():  # stage a added 1
            self.entered.set()
            self.release.wait(10)
        return x * 2


async def wait_event(event: threading.Event) -> None:
    assert await anyio.to_thread.run_sync(event.wait, 10)


# -- the API ------------------------------------------------------------------------------


def test_a_mismatched_link_names_both_stages_and_dtypes() -> None:
    a = stage("a", lambda x: x)
    wide = PersistentKernel("wide", WIDE, REC, capacity=2)
    with pytest.raises(TypeError) as info:
        PersistentPipeline(a, wide)
    text = str(info.value)
    assert "stage 0 ('a')" in text
    assert "stage 1 ('wide')" in text
    assert "[id: u8, x: f8]" in text  # short field lists, not NumPy's raw dicts
    assert "[id: u8, x: f8, y: f8]" in text


def test_bad_pipelines_are_refused() -> None:
    a = stage("a", lambda x: x)
    with pytest.raises(ValueError, match="at least two stages"):
        PersistentPipeline(a)
    with pytest.raises(TypeError, match="stage 1 of a pipeline must be a PersistentKernel"):
        PersistentPipeline(a, "b")  # type: ignore[arg-type]
    pipeline = PersistentPipeline([a, a])
    assert pipeline.name == "a->a"
    assert len(pipeline) == 2
    assert pipeline.kernel.request_dtype == REC


# -- end to end -------------------------------------------------------------------------------


async def test_three_stages_in_order_with_backpressure_through_small_links() -> None:
    async with open_persistent_pipeline(abc((2, 1, 3)), "cpu") as pipe:
        reply = await pipe.request((7, 1.5))
        assert reply["id"] == 7
        assert reply["x"] == expected(np.float64(1.5))
        batch = records(5000)
        replies = await pipe.request_batch(batch)  # 5000 records through 1-slot links
        assert replies["id"].tolist() == batch["id"].tolist()
        assert np.array_equal(replies["x"], expected(batch["x"]))
        assert pipe.statistics().replied == 5001
    assert stage_threads() == []


async def test_concurrent_callers_each_get_their_own_replies() -> None:
    results: dict[int, npt.NDArray[Any]] = {}
    async with open_persistent_pipeline(abc((3, 2, 2)), "cpu") as pipe:

        async def caller(index: int) -> None:
            for round_ in range(20):
                start = index * 1000 + round_ * 10
                results[start] = await pipe.request_batch(records(1 + (index + round_) % 9, start))

        async with anyio.create_task_group() as group:
            for index in range(6):
                group.start_soon(caller, index)
    assert len(results) == 120
    for start, replies in results.items():
        assert replies["id"].tolist() == list(range(start, start + len(replies)))
        assert np.array_equal(replies["x"], expected(replies["id"].astype(np.float64)))
    assert stage_threads() == []


async def test_a_crash_in_the_middle_stage_names_it_and_fails_what_is_in_flight() -> None:
    def fragile(x: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if (x == 14).any():  # record 13 after stage a
            raise ValueError("thirteen")
        return x * 2

    async with open_persistent_pipeline(abc((4, 2, 4), fragile), "cpu") as pipe:
        with pytest.raises(ActorCrashed) as info:
            await pipe.request_batch(records(100))
        cause = info.value.cause
        assert isinstance(cause, PersistentKernelError)
        assert cause.kernel == "b"
        assert "stage 1 ('b')" in str(cause)
        assert "thirteen" in str(cause)
        assert "a->b->c" in str(cause)
        assert isinstance(cause.__cause__, ValueError)
        with pytest.raises(ActorCrashed):
            await pipe.request((1, 1.0))
    assert stage_threads() == []


async def test_drain_stop_answers_everything_in_flight_stage_by_stage() -> None:
    gate = Gate(hold=3)
    async with open_persistent_pipeline(abc((8, 8, 8), gate), "cpu") as pipe:
        await pipe.send_batch(records(16))  # the receive window is 16
        await wait_event(gate.entered)  # record 3 is in stage b's hands; the rest queue
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: pipe.stop(drain=True))
            words = pipe.memory.words32
            while words[Offset.STOP >> 2] != StopMode.DRAIN:
                await anyio.lowlevel.checkpoint()
            gate.release.set()
        replies = await pipe.receive_batch()
        assert replies["id"].tolist() == list(range(16))
        assert np.array_equal(replies["x"], expected(replies["id"].astype(np.float64)))
        assert pipe.statistics().unprocessed == 0
    assert stage_threads() == []


async def test_stop_now_fails_every_request_in_flight() -> None:
    gate = Gate(hold=0)
    failed: list[BaseException] = []
    async with open_persistent_pipeline(abc((4, 4, 4), gate), "cpu") as pipe:

        async def caller() -> None:
            try:
                await pipe.request_batch(records(12))
            except ActorStopped as exc:
                failed.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(caller)
            await wait_event(gate.entered)
            group.start_soon(pipe.stop)
            words = pipe.memory.words32
            while words[Offset.STOP >> 2] != StopMode.NOW:
                await anyio.lowlevel.checkpoint()
            gate.release.set()
        assert len(failed) == 1
        assert not isinstance(failed[0], ActorCrashed)
        assert pipe.statistics().unprocessed > 0
    assert stage_threads() == []


async def test_pause_and_resume_go_through_every_stage() -> None:
    async with open_persistent_pipeline(abc(), "cpu") as pipe:
        await pipe.pause()
        session_regions = pipe.resident.regions  # type: ignore[attr-defined]
        assert all(region.load32(Offset.PAUSED) for region in session_regions)
        await pipe.send_batch(records(3))
        await pipe.resume()
        replies = await pipe.receive_batch(3)
        assert replies["id"].tolist()[:1] == [0]
    assert stage_threads() == []


# -- as an actor --------------------------------------------------------------------------------


async def test_the_pipeline_as_an_actor() -> None:
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(abc())
        assert isinstance(ref, KernelActorRef)
        assert ref.actor_id == "a->b->c"
        reply = await ref.ask((1, 2.0))
        assert reply["x"] == expected(np.float64(2.0))
        replies = await ref.ask_batch(records(300))
        assert np.array_equal(replies["x"], expected(records(300)["x"]))
        await ref.stop(drain=True)
    assert stage_threads() == []


async def test_a_stage_crash_crashes_the_nursery_naming_the_stage() -> None:
    def fragile(x: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if (x < 0).any():
            raise ValueError("negative input")
        return x

    pipeline = PersistentPipeline(
        stage("a", lambda x: x), stage("b", lambda x: x), stage("c", fragile)
    )

    async def crash() -> None:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(PersistentPipelineActor(pipeline, "cpu", name="p"))
            await ref.tell((1, -1.0))
            await anyio.sleep(10)  # cancelled by the crash

    with pytest.raises(ActorCrashed) as info:
        await crash()
    assert info.value.actor_id == "p"
    cause = info.value.cause
    assert isinstance(cause, PersistentKernelError)
    assert cause.kernel == "c"
    assert "stage 2 ('c')" in str(cause)
    assert stage_threads() == []


async def test_cancellation_leaves_no_stage_running() -> None:
    first = anyio.Event()
    with anyio.CancelScope() as scope:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(abc((2, 2, 2)))

            async def caller(start: int) -> None:
                while True:
                    await ref.ask_batch(records(50, start))
                    first.set()

            async with anyio.create_task_group() as group:
                for index in range(3):
                    group.start_soon(caller, index * 100)
                await first.wait()
                scope.cancel()
    assert scope.cancelled_caught
    assert stage_threads() == []
