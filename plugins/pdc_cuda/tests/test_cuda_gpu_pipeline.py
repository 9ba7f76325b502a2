"""Kernel-to-kernel pipelines on a real GPU: marked ``cuda``, skipped with the backend's
reason elsewhere (``pytest -m cuda plugins/pdc_cuda``).

They mirror ``plugins/pdc_cpu/tests/test_cpu_pipeline.py``: three stages, each a
resident block, linked in device memory. Every ``async`` test runs under asyncio and
trio. Nothing sleeps for a fixed time: the tests wait for words the device stores
(the gate's *entered*, the host region's ``STOP``), under the watchdog of
``conftest.py``. Every body here is compiled with NVRTC on every CI run by
``test_cuda_pipeline_source.py``.
"""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_pipeline_support import (
    FRAGILE,
    FRAGILE_CODE,
    GATED,
    NEGATIVE_CODE,
    NEGATIVE_FAILS,
    TWICE,
    abc,
    expected,
    gate_state,
    records,
    stage,
)
from cuda_test_support import requires_gpu
from pdc_cuda import CudaCompileError

from pdc_core import (
    ActorCrashed,
    ActorStopped,
    KernelActorRef,
    PersistentKernelError,
    PersistentPipeline,
    PersistentPipelineActor,
    open_nursery,
    open_persistent_pipeline,
)
from pdc_core.backend import MemoryKind, Offset, StopMode
from pdc_core.testing.pytest_plugin import anyio_backend  # noqa: F401 - asyncio and trio

pytestmark = [
    pytest.mark.cuda,
    requires_gpu(),
    pytest.mark.anyio,
    pytest.mark.usefixtures("gpu_watchdog"),
]


class Gate:
    """Two u32 words of mapped host memory: the gated body stores *entered*, the test
    stores *release*. :meth:`pipeline` is a -> b -> c with the gated b; the gate's
    address reaches b in its device state, so b's source is the same in every test."""

    def __init__(self, cuda: Any, hold: int) -> None:
        self.words = cuda.allocate((2,), np.dtype("<u4"), MemoryKind.MAPPED)
        self.words[:] = 0
        self.state = gate_state(cuda.device_pointer(self.words), hold)

    def pipeline(self, caps: tuple[int, int, int]) -> PersistentPipeline:
        return abc(caps, GATED, self.state)

    async def entered(self) -> None:
        with anyio.fail_after(30):
            while self.words[0] == 0:  # noqa: ASYNC110 - the device stores it
                await anyio.sleep(0.0005)

    def release(self) -> None:
        self.words[1] = 1


async def wait_for_stop_word(pipe: Any, mode: StopMode) -> None:
    words = pipe.memory.words32
    while words[Offset.STOP >> 2] != mode:
        await anyio.lowlevel.checkpoint()


async def test_three_stages_in_order_with_backpressure_through_small_links(cuda):
    async with open_persistent_pipeline(abc((2, 1, 3)), cuda) as pipe:
        resident = pipe.resident
        assert [link.placement.memory for link in resident.links] == [MemoryKind.DEVICE] * 2
        assert [link.scope for link in resident.links] == ["device", "device"]
        assert len(cuda.resident_kernels()) == 3  # one block per stage, all resident
        reply = await pipe.request((7, 1.5))
        assert reply["id"] == 7
        assert reply["x"] == expected(np.float64(1.5))
        batch = records(5000)
        replies = await pipe.request_batch(batch)  # 5000 records through a 1-slot link
        assert replies["id"].tolist() == batch["id"].tolist()
        assert np.array_equal(replies["x"], expected(batch["x"]))
        assert pipe.statistics().replied == 5001
    assert cuda.resident_kernels() == []


async def test_concurrent_callers_each_get_their_own_replies(cuda):
    results: dict[int, np.ndarray] = {}
    async with open_persistent_pipeline(abc((3, 2, 2)), cuda) as pipe:

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
    assert cuda.resident_kernels() == []


async def test_a_crash_in_the_middle_stage_names_it_and_fails_what_is_in_flight(cuda):
    async with open_persistent_pipeline(abc((4, 2, 4), FRAGILE), cuda) as pipe:
        with pytest.raises(ActorCrashed) as info:
            await pipe.request_batch(records(100))
        cause = info.value.cause
        assert isinstance(cause, PersistentKernelError)
        assert cause.kernel == "b"
        assert cause.code == FRAGILE_CODE
        assert "stage 1 ('b'): the kernel body returned an error for request #13" in str(cause)
        assert "a->b->c" in str(cause)
        with pytest.raises(ActorCrashed):
            await pipe.request((1, 1.0))
    assert cuda.resident_kernels() == []


async def test_drain_stop_answers_everything_in_flight_stage_by_stage(cuda):
    gate = Gate(cuda, hold=3)
    async with open_persistent_pipeline(gate.pipeline((8, 8, 8)), cuda) as pipe:
        await pipe.send_batch(records(16))  # the receive window is 16
        await gate.entered()  # record 3 is in stage b's hands; the rest queue
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: pipe.stop(drain=True))
            await wait_for_stop_word(pipe, StopMode.DRAIN)
            gate.release()
        replies = await pipe.receive_batch()
        assert replies["id"].tolist() == list(range(16))
        assert np.array_equal(replies["x"], expected(replies["id"].astype(np.float64)))
        assert pipe.statistics().unprocessed == 0
        links = pipe.resident.read_links()  # the last words, kept at the release
        assert [link.load32(Offset.STOP) for link in links] == [StopMode.DRAIN] * 2
        assert all(link.load32(Offset.DONE) for link in links)
    assert cuda.resident_kernels() == []


async def test_stop_now_fails_every_request_in_flight(cuda):
    gate = Gate(cuda, hold=0)
    failed: list[BaseException] = []
    # b's ring holds one record, so record 0 is alone in b's hands when NOW comes
    # (NOW is seen between runs: with room for four, b may have taken a run of all four
    # before the gate, and then answers them all) and records 1-3 wait in a.
    async with open_persistent_pipeline(gate.pipeline((4, 1, 4)), cuda) as pipe:

        async def caller() -> None:
            try:
                await pipe.request_batch(records(12))
            except ActorStopped as exc:
                failed.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(caller)
            await gate.entered()
            group.start_soon(pipe.stop)
            await wait_for_stop_word(pipe, StopMode.NOW)
            gate.release()
        assert len(failed) == 1
        assert not isinstance(failed[0], ActorCrashed)
        assert pipe.statistics().unprocessed > 0
    assert cuda.resident_kernels() == []


async def test_pause_and_resume_go_through_every_stage(cuda):
    async with open_persistent_pipeline(abc(), cuda) as pipe:
        await pipe.pause()
        assert pipe.memory.load32(Offset.PAUSED)
        assert all(link.load32(Offset.PAUSED) for link in pipe.resident.read_links())
        await pipe.send_batch(records(3))
        await pipe.resume()
        assert not any(link.load32(Offset.PAUSED) for link in pipe.resident.read_links())
        replies = await pipe.receive_batch(3)
        assert replies["id"].tolist() == [0, 1, 2]
    assert cuda.resident_kernels() == []


async def test_the_pipeline_as_an_actor(cuda):
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(PersistentPipelineActor(abc(), cuda))
        assert isinstance(ref, KernelActorRef)
        assert ref.actor_id == "a->b->c"
        reply = await ref.ask((1, 2.0))
        assert reply["x"] == expected(np.float64(2.0))
        replies = await ref.ask_batch(records(300))
        assert np.array_equal(replies["x"], expected(records(300)["x"]))
        await ref.stop(drain=True)
    assert cuda.resident_kernels() == []


async def test_a_stage_crash_crashes_the_nursery_naming_the_stage(cuda):
    pipeline = PersistentPipeline(stage("a", TWICE), stage("b", TWICE), stage("c", NEGATIVE_FAILS))

    async def crash() -> None:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(PersistentPipelineActor(pipeline, cuda, name="p"))
            await ref.tell((1, -1.0))
            await anyio.sleep_forever()  # cancelled by the crash

    with pytest.raises(ActorCrashed) as info:
        await crash()
    assert info.value.actor_id == "p"
    cause = info.value.cause
    assert isinstance(cause, PersistentKernelError)
    assert cause.kernel == "c"
    assert cause.code == NEGATIVE_CODE
    assert "stage 2 ('c')" in str(cause)
    assert cuda.resident_kernels() == []


async def test_cancellation_leaves_no_stage_running(cuda):
    first = anyio.Event()
    with anyio.CancelScope() as scope:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(PersistentPipelineActor(abc((2, 2, 2)), cuda))

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
    assert cuda.resident_kernels() == []


async def test_a_stage_that_does_not_compile_is_named_and_nothing_runs(cuda):
    broken = stage("b", TWICE.replace("reply.x =", "reply.missing ="))
    pipeline = PersistentPipeline(stage("a", TWICE), broken, stage("c", TWICE))
    with pytest.raises(CudaCompileError, match=r"stage 1 \('b'\) of pipeline 'a->b->c'"):
        async with open_persistent_pipeline(pipeline, cuda):
            pass
    assert cuda.resident_kernels() == []
