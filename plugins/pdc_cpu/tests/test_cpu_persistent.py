"""The CPU backend's persistent kernel: a real worker thread on the ring protocol."""

from __future__ import annotations

import gc
import resource
import threading
import time
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdc_core import (
    ActorCrashed,
    ActorStopped,
    Capability,
    KernelBodyMissing,
    KernelStopTimeout,
    PersistentKernel,
    PersistentKernelError,
    PersistentKernelSession,
    RecordError,
    SessionState,
    get_backend,
    open_persistent_kernel,
    persistent_kernel,
)
from pdc_core.backend import ErrorCode, RingMemory

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def doubled(requests: Any) -> Any:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


def make(capacity: int = 8, body: Any = doubled, **kwargs: Any) -> PersistentKernel:
    return PersistentKernel("doubled", REQ, REP, capacity=capacity, **kwargs).add_body("cpu", body)


def batch(start: int, count: int) -> Any:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(start, start + count)
    out["x"] = np.arange(start, start + count) * 0.25
    return out


def kernel_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pdc-cpu-kernel-")]


def test_cpu_backend_declares_persistent_kernels() -> None:
    backend = get_backend("cpu")
    assert backend.has(Capability.PERSISTENT_KERNELS)


async def test_round_trips_and_batches() -> None:
    seen_writeable: list[bool] = []

    @persistent_kernel(request_dtype=REQ, reply_dtype=REP, capacity=4)
    def probe(requests: Any) -> Any:
        seen_writeable.append(requests.flags.writeable)
        return doubled(requests)

    async with open_persistent_kernel(probe, "cpu") as session:
        reply = await session.request((3, 1.5))
        assert (int(reply["id"]), float(reply["y"])) == (3, 3.0)
        replies = await session.request_batch(batch(0, 1000))  # 250 ring-fulls
        assert replies["id"].tolist() == list(range(1000))
        assert np.array_equal(replies["y"], np.arange(1000) * 0.5)
        await session.send_batch(batch(5000, 6))
        got: list[int] = []
        while len(got) < 6:
            got.extend((await session.receive_batch())["id"].tolist())
        assert got == list(range(5000, 5006))
        assert session.statistics().batches >= 1
    assert not any(seen_writeable)  # the body sees the ring read-only
    assert session.state is SessionState.STOPPED


@settings(max_examples=30, deadline=None)
@given(
    capacity=st.sampled_from([1, 2, 3, 5]),
    max_batch=st.sampled_from([None, 1, 2]),
    jobs=st.lists(st.integers(1, 9), min_size=1, max_size=8),
)
async def test_exactly_once_in_order_with_concurrent_callers(
    capacity: int, max_batch: int | None, jobs: list[int]
) -> None:
    kernel = make(capacity, max_batch=max_batch)
    results: dict[int, list[int]] = {}
    async with open_persistent_kernel(kernel, "cpu") as session:

        async def job(index: int, size: int) -> None:
            start = index * 1000
            if size == 1:
                results[index] = [int((await session.request((start, 1.0)))["id"])]
            elif index % 2:
                results[index] = (await session.request_batch(batch(start, size)))["id"].tolist()
            else:  # send + receive from one task: order is kept within its own stream
                await session.send_batch(batch(start, size))
                results[index] = []

        received: list[int] = []
        expected_received = [
            i * 1000 + k
            for i, size in enumerate(jobs)
            if size > 1 and i % 2 == 0
            for k in range(size)
        ]

        async def receiver() -> None:  # concurrently: sends wait for room in the window
            while len(received) < len(expected_received):
                received.extend((await session.receive_batch())["id"].tolist())

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(receiver)
                for index, size in enumerate(jobs):
                    tg.start_soon(job, index, size)
        stats = session.statistics()
    for index, size in enumerate(jobs):
        if size == 1 or index % 2:
            assert results[index] == list(range(index * 1000, index * 1000 + size))
    assert sorted(received) == sorted(expected_received)  # exactly once
    for index in range(len(jobs)):  # each send_batch's replies in order
        mine = [r for r in received if r // 1000 == index]
        assert mine == sorted(mine)
    assert stats.sent == stats.replied == sum(jobs)


async def test_pause_and_resume() -> None:
    async with open_persistent_kernel(make(), "cpu") as session:
        await session.pause()
        assert session.resident.paused
        assert session.state is SessionState.PAUSED
        await session.send((1, 1.0))
        with anyio.move_on_after(0.05):
            await session.receive()
        assert session.statistics().replied == 0
        await session.resume()
        assert not session.resident.paused
        assert int((await session.receive())["id"]) == 1


@pytest.mark.parametrize("drain", [False, True])
async def test_stop_during_traffic_loses_nothing_acknowledged(drain: bool) -> None:
    def slow(requests: Any) -> Any:
        time.sleep(0.0005)
        return doubled(requests)

    session = await PersistentKernelSession.start(make(4, body=slow), "cpu")
    answered: list[int] = []
    stopped: list[int] = []

    async def client(index: int) -> None:
        for k in range(1000):
            ident = index * 10_000 + k
            try:
                reply = await session.request((ident, 1.0))
            except ActorStopped:
                stopped.append(ident)
                return
            assert int(reply["id"]) == ident
            assert float(reply["y"]) == 2.0
            answered.append(ident)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for index in range(5):
                tg.start_soon(client, index)
            # mid-traffic: every client has had a reply, and none is near its last request
            while len({ident // 10_000 for ident in answered}) < 5:  # noqa: ASYNC110
                await anyio.sleep(0.001)
            await session.stop(drain=drain)
    stats = session.statistics()
    assert len(stopped) == 5  # every client was told, none hangs
    assert len(answered) == stats.replied == len(set(answered))
    if drain:
        assert stats.unprocessed == 0  # everything published was answered
    assert stats.replied + stats.unprocessed == stats.sent
    assert not kernel_threads()


async def test_body_that_raises_surfaces_as_actor_crashed() -> None:
    def fragile(requests: Any) -> Any:
        if (requests["id"] == 13).any():
            raise ZeroDivisionError("unlucky record")
        return doubled(requests)

    session = await PersistentKernelSession.start(make(body=fragile), "cpu")
    assert int((await session.request((1, 0.0)))["id"]) == 1
    with pytest.raises(ActorCrashed, match="unlucky record") as info:
        await session.request((13, 0.0))
    error = info.value.cause
    assert isinstance(error, PersistentKernelError)
    assert error.code == ErrorCode.BODY
    assert "ZeroDivisionError: unlucky record" in error.detail
    assert isinstance(error.__cause__, ZeroDivisionError)  # the original exception
    with pytest.raises(ActorCrashed):
        await session.request((2, 0.0))
    await session.aclose()
    assert not kernel_threads()


@pytest.mark.parametrize(
    ("result", "match"),
    [
        (lambda r: np.zeros(len(r), REQ), "dtype"),
        (lambda r: np.zeros(len(r) + 1, REP), "shape"),
        (lambda r: None, "returned None"),
    ],
)
async def test_bad_replies_are_reported(result: Any, match: str) -> None:
    with pytest.raises(ActorCrashed, match=match) as info:
        async with open_persistent_kernel(make(body=result), "cpu") as session:
            await session.request((1, 0.0))
    assert isinstance(info.value.cause, PersistentKernelError)
    assert info.value.cause.code == ErrorCode.BAD_REPLY


async def test_a_body_returning_replies_and_state_is_a_bad_reply_naming_the_tuple() -> None:
    state = np.zeros(1, np.float64)

    def stateful(requests: Any, total: Any) -> Any:
        return doubled(requests), total + requests["x"].sum()  # state is updated in place

    kernel = make(body=stateful, state=state)
    with pytest.raises(ActorCrashed, match="returned a tuple of 2 item") as info:
        async with open_persistent_kernel(kernel, "cpu") as session:
            await session.request_batch(batch(0, 3))  # NumPy: "inhomogeneous shape"
    error = info.value.cause
    assert isinstance(error, PersistentKernelError)
    assert error.code == ErrorCode.BAD_REPLY
    assert "a body returns only its replies" in error.detail
    assert "updates the state array it is given in place" in error.detail
    assert error.detail.endswith("is the metal body's form)")  # all of it fits the word
    assert not kernel_threads()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
async def test_an_interrupted_body_is_its_own_error_and_reaches_the_event_loop(
    interrupt: type[BaseException],
) -> None:
    """The error word is BODY (not a device failure), and the interrupt itself is
    raised in the event loop's thread wherever the crash would be: the request in
    flight, later calls and a watcher (which an actor's serving loop is)."""

    def interrupted(requests: Any) -> Any:
        if (requests["id"] == 13).any():
            raise interrupt("from the body")
        return doubled(requests)

    session = await PersistentKernelSession.start(make(body=interrupted), "cpu")
    loop_thread = threading.get_ident()
    assert int((await session.request((1, 0.0)))["id"]) == 1
    with pytest.raises(interrupt) as info:
        await session.request((13, 0.0))
    assert threading.get_ident() == loop_thread
    assert info.value.args == ("from the body",)
    error = info.value.__cause__
    assert isinstance(error, PersistentKernelError)
    assert error is session.error
    assert error.code == ErrorCode.BODY
    assert f"{interrupt.__name__}: from the body" in error.detail
    assert isinstance(error.__cause__, interrupt)  # the body's own, raised on the worker
    with pytest.raises(interrupt):
        await session.request((2, 0.0))
    with pytest.raises(interrupt):
        await session.watch_until(lambda: False)
    await session.aclose()  # the caller was told: nothing more is raised
    assert session.state is SessionState.CRASHED
    assert not kernel_threads()


async def test_an_interrupted_body_reaches_the_watcher_and_the_exit() -> None:
    def interrupted(requests: Any) -> Any:
        raise KeyboardInterrupt

    async def watched() -> None:
        async with open_persistent_kernel(make(body=interrupted), "cpu") as session:
            await session.send((1, 0.0), reply=False)
            with anyio.fail_after(10):
                await session.watch_until(lambda: False)  # raises, never returns

    with pytest.raises(KeyboardInterrupt):
        await watched()

    async def unwatched() -> None:
        async with open_persistent_kernel(make(body=interrupted), "cpu") as session:
            await session.send((1, 0.0), reply=False)
            with anyio.fail_after(10):  # the worker thread writes the error word
                while session.resident.error is None:  # noqa: ASYNC110 - a thread
                    await anyio.sleep(0.001)

    with pytest.raises(KeyboardInterrupt):  # nobody was told: the exit raises it
        await unwatched()
    assert not kernel_threads()


async def test_unreported_crash_raises_on_exit() -> None:
    def explode(requests: Any) -> Any:
        raise RuntimeError("nobody asked")

    async def run() -> None:
        async with open_persistent_kernel(make(body=explode), "cpu") as session:
            await session.send((1, 0.0), reply=False)
            with anyio.fail_after(10):  # the worker thread writes the error word
                while session.resident.error is None:  # noqa: ASYNC110 - a thread
                    await anyio.sleep(0.001)

    with pytest.raises(ActorCrashed, match="nobody asked"):
        await run()


async def test_stop_timeout_reports_a_kernel_that_does_not_stop() -> None:
    release = threading.Event()
    busy = threading.Event()

    def stuck(requests: Any) -> Any:
        busy.set()
        release.wait(10)
        return doubled(requests)

    session = await PersistentKernelSession.start(make(body=stuck), "cpu")
    await session.send((1, 0.0))
    with anyio.fail_after(10):  # the worker has the batch in hand
        while not busy.is_set():  # noqa: ASYNC110 - a thread
            await anyio.sleep(0.001)
    started = time.monotonic()
    with pytest.raises(KernelStopTimeout, match=r"did not stop within 0\.1 s"):
        await session.stop(timeout=0.1)
    assert time.monotonic() - started < 2
    release.set()
    await session.stop()
    assert (await session.receive())["id"] == 1  # its reply was published before done
    assert not kernel_threads()


async def test_device_resident_state() -> None:
    def counting(requests: Any, state: Any) -> Any:
        state[0] += len(requests)
        state[1] = max(state[1], requests["x"].max())
        return doubled(requests)

    kernel = make(body=counting, state=np.zeros(2))
    async with open_persistent_kernel(kernel, "cpu") as session:
        await session.request_batch(batch(0, 20))
        await session.pause()
        state = session.read_state()
        assert state is not None
        assert state[0] == 20
        assert state[1] == 19 * 0.25
        await session.resume()
    assert kernel.state is not None
    assert kernel.state[0] == 0


@pytest.mark.slow
async def test_idle_worker_burns_no_cpu_and_spinning_does() -> None:
    def cpu_seconds() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    async def idle_cost(**options: Any) -> float:
        async with open_persistent_kernel(make(), "cpu", **options) as session:
            await session.request((1, 0.0))
            before = cpu_seconds()
            await anyio.sleep(0.3)
            return cpu_seconds() - before

    assert await idle_cost() < 0.05  # 0.3 s idle: the worker sleeps on its doorbell
    assert await idle_cost(worker_wait="spin") > 0.1  # a spinning worker eats a core


async def test_polling_host_waiter_also_works() -> None:
    async with open_persistent_kernel(make(), "cpu", host_wait="poll") as session:
        replies = await session.request_batch(batch(0, 50))
        assert replies["id"].tolist() == list(range(50))


async def test_cancellation_stops_the_worker() -> None:
    busy = threading.Event()

    def body(requests: Any) -> None:
        busy.set()
        # Still running when the session stops (it returns no replies: a bad reply).
        deadline = time.monotonic() + 10
        while session.resident.status.stop.name == "RUN" and time.monotonic() < deadline:
            time.sleep(0.001)

    async def cancel_when_busy(scope: anyio.CancelScope) -> None:
        with anyio.fail_after(10):
            while not busy.is_set():  # noqa: ASYNC110 - a thread
                await anyio.sleep(0.001)
        scope.cancel()  # while the request is in flight and its batch in hand

    with anyio.CancelScope() as scope:
        async with (
            open_persistent_kernel(make(body=body)) as session,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(cancel_when_busy, scope)
            await session.request((1, 0.0))
    # the stop is shielded and bounded: the worker finishes its batch and exits
    assert session.state in (SessionState.STOPPED, SessionState.CRASHED) or kernel_threads()
    deadline = time.monotonic() + 3
    while kernel_threads() and time.monotonic() < deadline:  # noqa: ASYNC110 - a thread
        await anyio.sleep(0.01)
    assert not kernel_threads()


async def test_bad_launches() -> None:
    backend = get_backend("cpu")
    kernel = make()
    memory = RingMemory.allocate(backend, kernel.layout)
    with pytest.raises(TypeError, match="unknown launch option"):
        backend.launch_persistent_kernel(kernel, memory, bogus=1)
    with pytest.raises(ValueError, match="worker_wait"):
        backend.launch_persistent_kernel(kernel, memory, worker_wait="nap")
    with pytest.raises(ValueError, match="host_wait"):
        backend.launch_persistent_kernel(kernel, memory, host_wait="nap")
    other = PersistentKernel("x", REP, REQ).add_body("cpu", doubled)
    with pytest.raises(TypeError, match="layout"):
        backend.launch_persistent_kernel(other, memory)
    with pytest.raises(KernelBodyMissing, match="it has bodies for: cuda"):
        await PersistentKernelSession.start(
            PersistentKernel("gpu-only", REQ, REP, bodies={"cuda": "src"}), "cpu"
        )
    async with open_persistent_kernel(kernel, "cpu") as session:
        with pytest.raises(RecordError, match="larger than a 16-byte slot"):
            await session.request(b"x" * 17)
        assert session.statistics().sent == 0
    assert not kernel_threads()


async def test_an_abandoned_session_stops_its_worker() -> None:
    session = await PersistentKernelSession.start(make(), "cpu")
    await session.request((1, 0.0))
    thread = session.resident._thread  # type: ignore[attr-defined]
    del session
    gc.collect()
    thread.join(2)
    assert not thread.is_alive()


async def test_spinning_callers_get_every_reply_and_let_other_tasks_run() -> None:
    ticks = 0
    done = anyio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await anyio.lowlevel.checkpoint()

    async with open_persistent_kernel(make(64), "cpu", wait="spin", spin_limit=0.001) as session:
        assert session.wait == "spin"
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            for i in range(300):
                reply = await session.request((i, 1.5))
                assert (int(reply["id"]), float(reply["y"])) == (i, 3.0)
            replies = await session.request_batch(batch(0, 500))  # wraps the 64-slot ring
            assert replies["id"].tolist() == list(range(500))
            started = ticks
            # a spinning caller holds the loop for 1 ms at most, then lets it run
            await session.request_batch(batch(0, 5_000))
            assert ticks > started
            done.set()
    assert not kernel_threads()


async def test_spinning_caller_sees_a_crash() -> None:
    def fragile(requests: Any) -> Any:
        raise RuntimeError("boom")

    with pytest.raises(ActorCrashed):
        async with open_persistent_kernel(make(body=fragile), "cpu", wait="spin") as session:
            await session.request((1, 1.0))
    assert not kernel_threads()


@pytest.mark.parametrize(
    "options",
    [
        {"spin_limit": 0},
        {"spin_limit": -1},
        {"spin_limit": float("nan")},
        {"spin_limit": True},
        {"wait": "bogus"},
        {"receive_window": 0},
        {"receive_window": True},
        {"receive_window": 1.5},
        {"receive_window": 2.0},
    ],
)
async def test_a_refused_option_leaves_no_worker_thread(options: dict[str, Any]) -> None:
    """Every option is checked before the kernel is launched (issue 40, 15): a refused
    call leaves no worker thread running, however often it is made."""
    from pdc_core import PersistentKernelActor, PersistentPipeline, open_persistent_pipeline

    before = threading.active_count()
    kernels = len(kernel_threads())
    for _ in range(3):
        with pytest.raises((TypeError, ValueError)):
            async with open_persistent_kernel(make(), "cpu", **options):
                pass  # pragma: no cover - refused before it opens
        with pytest.raises((TypeError, ValueError)):
            await PersistentKernelSession.start(make(), "cpu", **options)
        with pytest.raises((TypeError, ValueError)):
            async with open_persistent_pipeline(
                PersistentPipeline(make(), make()), "cpu", **options
            ):
                pass  # pragma: no cover - refused before it opens
        with pytest.raises((TypeError, ValueError)):
            PersistentKernelActor(make(), "cpu", **options)
    assert len(kernel_threads()) == kernels
    assert threading.active_count() == before
