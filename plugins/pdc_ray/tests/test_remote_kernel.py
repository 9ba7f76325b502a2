"""Remote persistent kernels over the fake engine (no Ray): the kernel runs resident in
the "remote" process on the CPU backend, a batch crosses the wire as one structured
array each way and goes into the ring with one write, and the remote runner's
guarantees hold (crash with its cause, stop with or without drain, cancellation,
heartbeat, priority across a reordering wire, remote skipping of cancelled requests)."""

# ruff: noqa: PT012

from __future__ import annotations

import math
import threading
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pdc_ray
import pytest
from pdc_ray.testing import FakeEngine

from pdc_core import (
    ActorCrashed,
    ActorNursery,
    ActorState,
    ActorStopped,
    BackendUnavailable,
    MessageTimeout,
    PersistentKernel,
    PersistentKernelError,
    RecordError,
    open_nursery,
)
from pdc_core.testing import settle_threads, thread_count

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)
LIMIT = 10
#: A request with this id makes the body wait for :data:`GATE`.
HOLD_ID = 999_999

#: The sizes of the batches the body was called with, and the ids it saw, in order
#: (the fake engine runs the kernel in this process: its body is pickled by reference).
BATCHES: list[int] = []
SEEN: list[int] = []
GATE = threading.Event()


def double(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    BATCHES.append(len(requests))
    SEEN.extend(int(i) for i in requests["id"])
    if (requests["id"] == HOLD_ID).any():
        GATE.wait(LIMIT)
    if (requests["x"] < 0).any():
        raise ValueError("negative input")
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


DOUBLE = PersistentKernel("double", REQ, REP, capacity=16, bodies={"cpu": double})


def records(start: int, count: int) -> npt.NDArray[Any]:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(start, start + count)
    out["x"] = np.arange(start, start + count) * 0.5
    return out


def on(engine: FakeEngine, **options: Any) -> pdc_ray.RayPlacement:
    return pdc_ray.on(engine=engine, backend="cpu", **options)


async def start(
    nursery: ActorNursery,
    placement: pdc_ray.RayPlacement,
    *,
    max_batch: int = 1024,
    paused: bool = False,
) -> pdc_ray.RemoteKernelRef:
    """Start :data:`DOUBLE` at ``placement``; its handle, typed."""
    ref = await nursery.start_actor(DOUBLE, placement=placement, max_batch=max_batch, paused=paused)
    assert isinstance(ref, pdc_ray.RemoteKernelRef)
    return ref


@pytest.fixture(autouse=True)
def _fresh_logs() -> None:
    BATCHES.clear()
    SEEN.clear()
    GATE.clear()


async def test_a_kernel_runs_resident_remotely_and_a_batch_is_one_call_and_one_ring_write() -> None:
    baseline = thread_count()
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=1) as engine, open_nursery() as nursery:
            ref = await start(nursery, on(engine, num_gpus=1))
            assert ref.kernel.name == "double"
            assert ref.actor_id.startswith("double@fake-")
            assert ref.state is ActorState.RUNNING  # resident: the start was a handshake
            assert ref.location is not None
            assert ref.location.gpu_ids == ("0",)
            assert thread_count() == baseline + 1  # the CPU kernel's worker thread

            reply = await ref.ask((1, 2.0))
            assert reply.dtype == REP
            assert (int(reply["id"]), float(reply["y"])) == (1, 4.0)

            calls, BATCHES[:] = engine.calls["deliver"], []
            replies = await ref.ask_batch(records(100, 10))
            assert engine.calls["deliver"] == calls + 1  # one Ray call
            assert BATCHES == [10]  # published at once: one ring write there
            assert isinstance(replies, np.ndarray)
            assert replies.dtype == REP
            assert replies.flags.writeable
            assert list(replies["id"]) == list(range(100, 110))
            assert list(replies["y"]) == [float(i) for i in range(100, 110)]

            await ref.tell((2, 1.0))
            told = records(200, 40)  # larger than the ring: written in pieces there
            await ref.tell_many(told)
            told["x"] = -1.0  # tells are copied: reusing the array changes nothing
            many = await ref.ask_many([(7, 3.0), {"id": 8, "x": 4.0}], timeout=5)
            assert [float(r["y"]) for r in many] == [6.0, 8.0]
            assert list(await ref.ask_many([])) == []
            assert len(await ref.ask_batch(np.empty(0, REQ))) == 0
            handled = 1 + 10 + 1 + 40 + 2
            assert ref.statistics().handled == handled  # records, as a local kernel counts
            remote = await ref.remote_statistics()
            assert remote.handled == handled
        assert engine.alive() == []
        assert ref.state is ActorState.STOPPED
    await settle_threads(baseline, within=2)  # the kernel's worker thread was joined


async def test_concurrent_asks_share_one_array_and_each_gets_its_own_replies() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=2, reorder=12) as engine, open_nursery() as nursery:
            ref = await start(nursery, on(engine, window=2))
            results: dict[int, Any] = {}

            async def one(i: int) -> None:
                results[i] = await ref.ask((i, float(i)))

            async def batch(i: int) -> None:
                results[i] = await ref.ask_batch(records(1000 * i, i))

            async with anyio.create_task_group() as tg:
                for i in range(1, 30):
                    tg.start_soon(one if i % 3 else batch, i)
                    if i % 5 == 0:
                        await ref.tell((0, 0.0))
            for i, value in results.items():
                if i % 3:
                    assert (int(value["id"]), float(value["y"])) == (i, 2.0 * i)
                else:
                    assert list(value["id"]) == list(range(1000 * i, 1000 * i + i))
        assert engine.alive() == []


async def test_bad_records_are_refused_before_anything_is_sent() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await start(nursery, on(engine))
            calls = engine.calls["deliver"]
            with pytest.raises(RecordError, match="dtype"):
                await ref.ask(np.zeros(1, REP))
            with pytest.raises(RecordError, match="record 1 of the batch"):
                await ref.ask_batch([(1, 1.0), (1, 2.0, 3.0)])
            with pytest.raises(RecordError, match="1-D"):
                await ref.tell_many(np.zeros((2, 2), REQ))
            with pytest.raises(ValueError, match="priority"):
                await ref.ask((1, 1.0), priority=256)
            with pytest.raises(ValueError, match="timeout is NaN"):
                await ref.ask_batch(records(0, 2), timeout=math.nan)
            assert engine.calls["deliver"] == calls
            assert ref.statistics().mailbox.sent == 0  # type: ignore[union-attr]
            assert float((await ref.ask((3, 1.5)))["y"]) == 3.0


async def test_placements_a_kernel_cannot_use_are_refused_naming_the_problem() -> None:
    async with FakeEngine() as engine, open_nursery() as nursery:
        with pytest.raises(ValueError, match=r"whole GPUs, not num_gpus=0\.5"):
            await nursery.start_actor(DOUBLE, placement=on(engine, num_gpus=0.5))
        with pytest.raises(TypeError, match="positional arguments"):
            await nursery.start_actor(DOUBLE, 1, placement=on(engine))
        with pytest.raises(TypeError, match="applies to a PersistentKernel only"):
            await nursery.start_actor(double, placement=on(engine))
        with pytest.raises(TypeError, match="backend must be a backend name"):
            pdc_ray.on(backend="")
        assert nursery.actors == {}
        assert engine.processes == []


async def test_a_backend_the_worker_lacks_fails_the_start_and_leaves_nothing() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            placement = pdc_ray.on(engine=engine, backend="no-such-backend")
            with pytest.raises(ActorCrashed, match="while starting") as info:
                await nursery.start_actor(DOUBLE, placement=placement)
            assert isinstance(info.value.cause, BackendUnavailable)
            assert "no-such-backend" in str(info.value.cause)
            assert engine.alive() == []
            assert nursery.actors == {}


async def test_a_kernel_crash_reaches_the_nursery_and_the_callers_naming_its_cause() -> None:
    errors: list[ActorCrashed] = []
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine:
            with pytest.raises(ActorCrashed) as info:
                async with open_nursery() as nursery:
                    ref = await start(nursery, on(engine))
                    assert float((await ref.ask((1, 1.0)))["y"]) == 2.0
                    try:
                        await ref.ask_batch([(2, 1.0), (3, -1.0)])
                    except ActorCrashed as exc:
                        errors.append(exc)
                    await anyio.sleep_forever()
            assert engine.alive() == []
    cause = info.value.cause
    assert isinstance(cause, PersistentKernelError)
    assert "negative input" in str(cause)
    assert [exc.cause for exc in errors] == [cause]
    assert ref.state is ActorState.CRASHED
    with pytest.raises(ActorCrashed):
        await ref.ask((4, 1.0))


async def test_stop_with_drain_answers_everything_queued_and_stop_now_fails_it() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=3) as engine, open_nursery() as nursery:
            ref = await start(nursery, on(engine))
            await ref.pause()
            results: list[float] = []

            async def asker(i: int) -> None:
                results.append(float((await ref.ask((i, float(i))))["y"]))

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(asker, i)
                await anyio.wait_all_tasks_blocked()
                await ref.stop(drain=True)
            assert sorted(results) == [2.0 * i for i in range(20)]
            assert ref.state is ActorState.STOPPED

            now = await start(nursery, on(engine))
            await now.pause()
            failed: list[BaseException] = []

            async def doomed() -> None:
                try:
                    await now.ask_batch(records(0, 3))
                except ActorStopped as exc:
                    failed.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(doomed)
                await anyio.wait_all_tasks_blocked()
                await now.stop()
            assert len(failed) == 1
            with pytest.raises(ActorStopped):
                await now.ask((1, 1.0))
        assert engine.alive() == []


async def test_cancelling_the_nursery_kills_the_process_and_ends_the_kernel() -> None:
    baseline = thread_count()
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine:
            with anyio.CancelScope() as scope:
                async with open_nursery() as nursery:
                    ref = await start(nursery, on(engine))
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(ref.ask, (HOLD_ID, 1.0))
                        while HOLD_ID not in SEEN:  # noqa: ASYNC110 - the body runs in a thread
                            await anyio.sleep(0.001)
                        scope.cancel()
            assert scope.cancelled_caught
            assert engine.alive() == []
            assert engine.processes[0].killed
            assert ref.state is ActorState.STOPPED
            GATE.set()  # the body in hand returns; the dead process's kernel stops
    await settle_threads(baseline, within=2)


async def test_a_hung_process_is_lost_at_its_heartbeat() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine:
            with pytest.raises(ActorCrashed) as info:
                async with open_nursery() as nursery:
                    ref = await start(nursery, on(engine, heartbeat=0.2))
                    assert float((await ref.ask((1, 1.0)))["y"]) == 2.0
                    engine.hang()
                    await anyio.sleep_forever()
            assert engine.alive() == []
    assert isinstance(info.value.cause, pdc_ray.RemoteActorLost)
    assert "heartbeat" in str(info.value.cause)


@pytest.mark.parametrize("seed", [0, 1])
async def test_priority_orders_requests_before_they_reach_the_ring(seed: int) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=seed, reorder=20) as engine, open_nursery() as nursery:
            ref = await start(nursery, on(engine, window=4), max_batch=3, paused=True)
            sent: list[tuple[int, int]] = []
            for i in range(30):
                priority = (0, 128, 255)[(i * 7) % 3]
                sent.append((priority, i))
                if i % 4:
                    await ref.tell((i, 1.0), priority=priority)
                else:
                    await ref.tell_many([(i, 1.0)], priority=priority)
            await ref.resume()
            await ref.stop(drain=True)
    expected = [i for _, i in sorted(sent, key=lambda item: -item[0])]  # FIFO within
    assert expected == SEEN


async def test_a_shipped_ask_batch_that_is_cancelled_never_reaches_the_kernel() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=5) as engine, open_nursery() as nursery:
            ref = await start(nursery, on(engine), paused=True)
            engine.hold("deliver")
            kept: list[Any] = []
            doomed = anyio.CancelScope()

            async def cancelled_batch() -> None:
                with doomed:
                    await ref.ask_batch(records(500, 3))

            async def kept_batch() -> None:
                kept.append(await ref.ask_batch(records(600, 2)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancelled_batch)
                tg.start_soon(kept_batch)
                await anyio.wait_all_tasks_blocked()
                await ref.resume()  # one shipper takes both: one call, held on the wire
                await anyio.wait_all_tasks_blocked()
                assert ref.statistics().mailbox.depth == 0  # type: ignore[union-attr]
                doomed.cancel()
                await anyio.wait_all_tasks_blocked()  # the cancellation went ahead
                engine.release("deliver")
            assert engine.calls["deliver"] == 1
            assert list(kept[0]["id"]) == [600, 601]
            assert SEEN == [600, 601]  # the cancelled records were cut out there
            remote = await ref.remote_statistics()
            assert remote.handled == 2


async def test_an_ask_timeout_is_a_message_timeout_and_the_kernel_goes_on() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await start(nursery, on(engine))
            await ref.pause()
            with pytest.raises(MessageTimeout):
                await ref.ask_batch(records(0, 4), timeout=0.01)
            await ref.resume()
            assert float((await ref.ask((1, 2.0)))["y"]) == 4.0
            assert ref.statistics().skipped == 1  # the timed-out batch was never shipped
            assert SEEN == [1]
        assert engine.alive() == []
