"""The host session and the persistent-kernel spec, against a scripted in-process device.

The device here runs the reference protocol (``RingDevice``) synchronously: on every
doorbell when ``auto``, or when the test calls ``step()``. That makes interleavings,
stops, crashes and wedged kernels deterministic. The real worker thread of the CPU
backend is tested in ``plugins/pdc_cpu/tests``.
"""

from __future__ import annotations

import re
import time
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import numpy as np
import numpy.typing as npt
import pytest
from support.host_memory_backend import HostMemoryBackend

from pdc_core import (
    ActorCrashed,
    ActorStopped,
    Backend,
    Capability,
    CapabilityError,
    DeviceSource,
    KernelBodyMissing,
    KernelStopTimeout,
    PersistentKernel,
    PersistentKernelError,
    PersistentKernelSession,
    RecordError,
    SessionState,
    open_persistent_kernel,
    persistent_kernel,
)
from pdc_core.backend import (
    ErrorCode,
    MemoryKind,
    ResidentKernel,
    RingDevice,
    RingMemory,
    StopMode,
)

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def double(requests: Any) -> Any:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


def batch(start: int, count: int) -> npt.NDArray[Any]:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(start, start + count)
    out["x"] = np.arange(start, start + count) * 0.5
    return out


class ScriptedKernel(ResidentKernel):
    """A device side run inline by the host thread: deterministic, no threads."""

    def __init__(
        self,
        backend: Backend,
        kernel: PersistentKernel,
        memory: RingMemory,
        *,
        auto: bool = True,
        start: bool = True,
        ignore_stop: bool = False,
    ) -> None:
        super().__init__(backend, kernel, memory)
        self.device = RingDevice(memory)
        self.device.check_header()
        self.body = kernel.body_for("scripted")
        self.auto = auto
        self.ignore_stop = ignore_stop
        self.finished = False
        self.released = False
        self.vanish = False  # execution ends without the done word
        if start:
            self.device.mark_started()

    def wake(self) -> None:
        # a manual device still reacts to a stop right away, so sessions can close
        if self.auto or self.device.stop_mode() is StopMode.NOW:
            self.step()

    def step(self, limit: int | None = None) -> int:
        device = self.device
        if self.finished:
            return 0
        stop = device.stop_mode()
        if stop is StopMode.NOW and not self.ignore_stop:
            self.finish()
            return 0
        if stop is StopMode.RUN and device.pause_requested():
            device.set_paused(True)
            return 0
        device.set_paused(False)
        index, count = device.next_batch(limit)
        if count:
            device.outputs(index, count)[...] = self.body(device.inputs(index, count))
            device.publish(count)
        elif stop is StopMode.DRAIN and device.drained():
            self.finish()
        return count

    def crash(self, code: int, message: str) -> None:
        self.device.set_error(code, message)
        self.finish()

    def finish(self) -> None:
        if not self.vanish:
            self.device.mark_done()
        self.finished = True

    @property
    def exited(self) -> bool:
        return self.finished

    def release(self) -> None:
        assert self.finished
        self.released = True


class ScriptedBackend(HostMemoryBackend):
    name: ClassVar[str] = "scripted"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.PERSISTENT_KERNELS})

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)
        self.launched: list[ScriptedKernel] = []

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        return np.full(shape, 0xAB, dtype=np.uint8).view(dtype)  # garbage: must be initialised

    def launch_persistent_kernel(
        self, kernel: PersistentKernel, rings: RingMemory, **options: Any
    ) -> ResidentKernel:
        resident = ScriptedKernel(self, kernel, rings, **options)
        self.launched.append(resident)
        return resident


def make_kernel(capacity: int = 4, body: Any = double, **kwargs: Any) -> PersistentKernel:
    return PersistentKernel("doubler", REQ, REP, capacity=capacity, **kwargs).add_body(
        "scripted", body
    )


async def step_until(
    session: PersistentKernelSession, condition: Any, limit: int | None = None
) -> None:
    """Drive a manual device from a test task until ``condition()`` holds."""
    resident = session.resident
    assert isinstance(resident, ScriptedKernel)
    for _ in range(10_000):
        if condition():
            return
        resident.step(limit)
        await anyio.sleep(0.0005)
    raise AssertionError("condition never held")


async def until(condition: Any) -> None:
    """Wait until ``condition()`` holds: another task has got somewhere by now.

    Polled, since the leader polls its (scripted) device: ``wait_all_tasks_blocked``
    would rarely catch every task asleep under asyncio.
    """
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110 - a state of the session, not an event
            await anyio.sleep(0.001)


# -- the spec ---------------------------------------------------------------------------------


def test_spec_decorators_and_bodies() -> None:
    @persistent_kernel(request_dtype=REQ, reply_dtype=REP, capacity=8)
    def scale(requests: Any) -> Any:
        return double(requests)

    assert isinstance(scale, PersistentKernel)
    assert scale.name == "scale"
    assert scale.capacity == 8
    assert scale.max_batch == 8
    assert scale.body_for("cpu") is not None
    scale.add_body("cuda", "__device__ void pdc_body() {}")
    assert scale.body_for("cuda:1") == DeviceSource("__device__ void pdc_body() {}")

    @scale.body("metal")
    def _metal(requests: Any) -> Any:
        return requests

    assert sorted(scale.bodies) == ["cpu", "cuda", "metal"]
    with pytest.raises(
        KernelBodyMissing, match="no body for the rocm backend; it has bodies for: cpu, cuda, metal"
    ):
        scale.body_for("rocm")
    with pytest.raises(TypeError, match=r"cpu body .* must be a callable"):
        scale.add_body("cpu", 42)
    with pytest.raises(ValueError, match="max_batch"):
        PersistentKernel("k", REQ, REP, max_batch=0)
    with pytest.raises(TypeError, match="non-empty str name"):
        PersistentKernel("", REQ, REP)
    state = np.arange(3.0)
    stateful = PersistentKernel("s", REQ, REP, state=state)
    state[0] = 99
    assert stateful.state is not None
    assert stateful.state[0] == 0


async def test_start_refuses_missing_body_and_capability() -> None:
    with pytest.raises(KernelBodyMissing, match="has bodies for: cuda"):
        await PersistentKernelSession.start(
            PersistentKernel("k", REQ, REP, bodies={"cuda": "src"}), ScriptedBackend()
        )

    class NoPersistent(ScriptedBackend):
        capabilities: ClassVar[frozenset[Capability]] = frozenset()

    with pytest.raises(CapabilityError, match="persistent_kernels"):
        await PersistentKernelSession.start(make_kernel(), NoPersistent())


async def test_polling_waiter_spins_while_replies_are_due_then_backs_off() -> None:
    from pdc_core.backend import PollingWaiter

    requested: list[float] = []

    async def recording_sleep(delay: float) -> None:
        requested.append(delay)
        await anyio.lowlevel.checkpoint()

    waiter = PollingWaiter(spin=0.05, min_sleep=0.0001, max_sleep=0.001)
    waiter._sleep = recording_sleep
    waiter.begin()
    for _ in range(5):
        await waiter.wait(outstanding=True)  # replies due, inside the spin window
    assert requested == [0] * 5
    requested.clear()
    for _ in range(6):
        await waiter.wait(outstanding=False)  # idle: growing sleeps, capped
    assert requested == [0.0001, 0.0002, 0.0004, 0.0008, 0.001, 0.001]
    requested.clear()
    waiter.kick()  # another task changed something: look again at once
    await waiter.wait(outstanding=False)
    await waiter.wait(outstanding=False)
    assert requested == [0, 0.0001]
    requested.clear()
    no_spin = PollingWaiter(spin=0)
    no_spin._sleep = recording_sleep
    no_spin.begin()
    await no_spin.wait(outstanding=True)  # past the (empty) spin window: back off
    assert requested == [0.0001]
    with pytest.raises(ValueError, match="min_sleep"):
        PollingWaiter(min_sleep=0)


def test_spin_until_progress_spins_without_sleeping_unless_the_device_needs_the_gil(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A device that needs no GIL (a GPU, native threads) is polled in a tight loop:
    ``time.sleep(0)`` is a timed sleep on Linux (~50 us of timer slack per look). Only
    a waiter whose device is a Python thread gives the GIL up between looks. Either way
    the spin is bounded by its limit and returns as soon as a reply is published."""
    import pdc_core._backend._resident as resident_module
    from pdc_core.backend import Offset, PollingWaiter, RingHost, RingMemory

    sleeps: list[float] = []
    real_sleep = time.sleep

    def counting_sleep(delay: float) -> None:
        sleeps.append(delay)
        real_sleep(delay)

    monkeypatch.setattr(resident_module.time, "sleep", counting_sleep)
    memory = RingMemory.from_buffer(make_kernel(capacity=4).layout)
    ring = RingHost(memory)
    for needs_gil in (False, True):
        sleeps.clear()
        waiter = PollingWaiter(device_needs_gil=needs_gil)
        started = time.perf_counter()
        assert waiter.spin_until_progress(ring, 0.002) is False  # nothing published
        assert time.perf_counter() - started < 1.0  # bounded (generously, for a loaded CI)
        assert bool(sleeps) is needs_gil
    ring.write(np.zeros(1, make_kernel().request_dtype))
    memory.words64[Offset.OUT_HEAD >> 3] = 1  # the device answered
    sleeps.clear()
    assert PollingWaiter().spin_until_progress(ring, 10.0) is True
    assert sleeps == []


# -- traffic ----------------------------------------------------------------------------------


async def test_request_send_receive_and_statistics() -> None:
    backend = ScriptedBackend()
    async with open_persistent_kernel(make_kernel(capacity=3), backend) as session:
        assert session.state is SessionState.RUNNING
        reply = await session.request((7, 1.5))
        assert reply["id"] == 7
        assert reply["y"] == 3.0
        replies = await session.request_batch(batch(0, 10))  # more than the capacity
        assert replies["id"].tolist() == list(range(10))
        assert replies["y"].tolist() == (np.arange(10) * 1.0).tolist()
        first = await session.send((100, 2.0))
        await session.send_batch(batch(101, 4))
        await session.send((999, 0.0), reply=False)
        got = await session.receive()
        assert got["id"] == 100
        rest: list[int] = []
        while len(rest) < 4:
            rest.extend((await session.receive_batch())["id"].tolist())
        assert rest == [101, 102, 103, 104]
        assert first == 11
        stats = session.statistics()
        assert stats.sent == 17
        assert stats.replied == 17
        assert stats.received == 5
        assert stats.discarded == 1
        assert stats.unprocessed == 0
        assert (await session.request_batch(np.zeros(0, REQ))).shape == (0,)
    assert session.state is SessionState.STOPPED
    assert backend.launched[0].released


async def test_bad_records_write_nothing() -> None:
    async with open_persistent_kernel(make_kernel(), ScriptedBackend()) as session:
        cases: list[Any] = [
            np.zeros(1, REP),
            np.zeros(3, REQ),
            b"x" * (REQ.itemsize + 1),
            (1, 2, 3),
            {"id": 1},
        ]
        for bad in cases:
            with pytest.raises(RecordError):
                await session.send(bad)
            with pytest.raises(RecordError):
                await session.request(bad)
        with pytest.raises(RecordError, match="record 2 of the batch"):
            await session.send_batch([(1, 1.0), (2, 2.0), "bad"])
        with pytest.raises(RecordError, match=f"larger than a {REQ.itemsize}-byte slot"):
            await session.request_batch(np.zeros(2, np.dtype([("big", "S64")])))
        assert session.statistics().sent == 0
        assert session.memory.snapshot()["in_head"] == 0


async def test_records_are_not_guessed() -> None:
    """A scalar is a record only of a one-field dtype, and a number a cast would change
    is refused naming the field; exact conversions are made. Nothing bad is written."""
    async with open_persistent_kernel(make_kernel(capacity=8), ScriptedBackend()) as session:
        with pytest.raises(RecordError, match=r"record 0 of the batch: 1 is not a request "):
            await session.request_batch((1, 2, 3))  # REQ has two fields: not three records
        with pytest.raises(RecordError, match=r"it has 2 fields \(id, x\); give a tuple"):
            await session.request(7)
        with pytest.raises(RecordError, match=r"field 'id' \(uint64\) .*: 1.7 would lose"):
            await session.request((1.7, 1.0))
        with pytest.raises(RecordError, match=r"field 'id' \(uint64\)"):
            await session.send({"id": 2.5, "x": 1.0})
        with pytest.raises(RecordError, match=r"record 1 of the batch: field 'id'"):
            await session.request_batch([(1, 1.0), (np.float32(0.5), 1.0)])
        assert session.statistics().sent == 0
        assert session.memory.snapshot()["in_head"] == 0
        # Exact conversions are made: 2.0 is the integer 2, True is 1, 3 is 3.0.
        replies = await session.request_batch([(2.0, 1), (True, 0.5), (np.float64(3), 3)])
        assert replies["id"].tolist() == [2, 1, 3]
        assert replies["y"].tolist() == [2.0, 1.0, 6.0]

    one = np.dtype([("v", "<f8")])
    kernel = PersistentKernel("scale", one, one, capacity=4).add_body(
        "scripted", lambda requests: requests.copy()
    )
    async with open_persistent_kernel(kernel, ScriptedBackend()) as session:
        assert float((await session.request(1.5))["v"]) == 1.5  # one field: a scalar is fine
        assert (await session.request_batch((1, 2, 3)))["v"].tolist() == [1.0, 2.0, 3.0]


async def test_replies_are_matched_to_concurrent_requests() -> None:
    kernel = make_kernel(capacity=3)
    async with open_persistent_kernel(kernel, ScriptedBackend(), auto=False) as session:
        results: dict[int, Any] = {}

        async def ask(i: int) -> None:
            if i % 3 == 0:
                results[i] = (await session.request_batch(batch(i * 100, 5)))["id"].tolist()
            else:
                results[i] = int((await session.request((i, float(i))))["id"])

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(ask, i)
            await step_until(session, lambda: len(results) == 12, limit=2)
        for i in range(12):
            expected = list(range(i * 100, i * 100 + 5)) if i % 3 == 0 else i
            assert results[i] == expected


async def test_send_waits_while_the_ring_is_full() -> None:
    async with open_persistent_kernel(
        make_kernel(capacity=2), ScriptedBackend(), auto=False, receive_window=100
    ) as session:
        with anyio.move_on_after(0.05) as scope:
            await session.send_batch(batch(0, 5))
        assert scope.cancelled_caught
        assert session.statistics().sent == 2  # a prefix of the batch was sent
        done = anyio.Event()

        async def sender() -> None:
            await session.send_batch(batch(2, 3))
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            await step_until(session, done.is_set)
        got: list[int] = []
        while len(got) < 5:
            session.resident.step()  # type: ignore[attr-defined]
            got.extend((await session.receive_batch())["id"].tolist())
        assert got == [0, 1, 2, 3, 4]


async def test_writers_waiting_for_room_are_served_first_come_first_served() -> None:
    seen: list[int] = []

    def recording(requests: Any) -> Any:
        seen.extend(int(ident) for ident in requests["id"])
        return double(requests)

    kernel = make_kernel(capacity=2, body=recording)
    async with open_persistent_kernel(kernel, ScriptedBackend(), auto=False) as session:
        finished: list[str] = []

        async def first() -> None:
            await session.request_batch(batch(0, 2))  # fills the ring
            await session.request_batch(batch(20, 2))  # at once, while `second` waits
            finished.append("first")

        async def second() -> None:
            await until(lambda: session.statistics().sent == 2)
            await session.request((10, 0.0))
            finished.append("second")

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(second)
            await until(lambda: len(session._writers) == 1)  # `second` waits for room
            await step_until(session, lambda: len(finished) == 2)
    assert seen == [0, 1, 10, 20, 21]


async def test_wait_options_are_checked() -> None:
    with pytest.raises(ValueError, match="wait must be 'sleep' or 'spin', not 'busy'"):
        await PersistentKernelSession.start(make_kernel(), ScriptedBackend(), wait="busy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="spin_limit"):
        await PersistentKernelSession.start(make_kernel(), ScriptedBackend(), spin_limit=-1)


#: Session options refused, with the error and the words it must say (issue 40, 15, 17).
BAD_SESSION_OPTIONS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"spin_limit": 0}, ValueError, "spin_limit"),
    ({"spin_limit": -1}, ValueError, "spin_limit"),
    ({"spin_limit": float("nan")}, ValueError, "spin_limit is NaN"),
    ({"spin_limit": True}, TypeError, "spin_limit"),
    ({"wait": "bogus"}, ValueError, "wait must be 'sleep' or 'spin', not 'bogus'"),
    ({"wait": None}, ValueError, "wait must be"),
    ({"receive_window": 0}, ValueError, "receive_window must be at least 1, got 0"),
    ({"receive_window": -3}, ValueError, "receive_window"),
    ({"receive_window": True}, TypeError, "receive_window must be an int, got bool True"),
    ({"receive_window": 1.5}, TypeError, "receive_window must be an int, got float 1.5"),
    ({"receive_window": 2.0}, TypeError, "receive_window must be an int, got float 2.0"),
    ({"receive_window": "2"}, TypeError, "receive_window"),
    ({"stop_timeout": float("nan")}, ValueError, "stop_timeout"),
]


@pytest.mark.parametrize(("options", "error", "words"), BAD_SESSION_OPTIONS)
async def test_every_session_option_is_checked_before_anything_is_launched(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    backend = ScriptedBackend()
    with pytest.raises(error, match=re.escape(words)):
        await PersistentKernelSession.start(make_kernel(), backend, **options)
    with pytest.raises(error, match=re.escape(words)):
        async with open_persistent_kernel(make_kernel(), backend, **options):
            pass  # pragma: no cover - refused before it opens
    assert backend.launched == []  # nothing launched, so nothing left running


async def test_wait_and_spin_limit_may_change_between_calls_and_are_checked() -> None:
    async with open_persistent_kernel(make_kernel(), ScriptedBackend()) as session:
        assert (session.wait, session.spin_limit) == ("sleep", 100e-6)
        session.wait = "spin"
        session.spin_limit = 0.001
        assert (session.wait, session.spin_limit) == ("spin", 0.001)
        assert (await session.request((1, 2.0)))["y"] == 4.0
        with pytest.raises(ValueError, match="wait must be 'sleep' or 'spin', not 'busy'"):
            session.wait = "busy"  # type: ignore[assignment]
        for bad, error in ((0, ValueError), (float("nan"), ValueError), (True, TypeError)):
            with pytest.raises(error, match="spin_limit"):
                session.spin_limit = bad
        assert (session.wait, session.spin_limit) == ("spin", 0.001)  # refused: unchanged
        session.spin_limit = None  # type: ignore[assignment]  # no bound
        assert session.spin_limit == float("inf")


async def test_a_receive_window_by_the_integer_rule_is_used() -> None:
    async with open_persistent_kernel(
        make_kernel(capacity=2), ScriptedBackend(), receive_window=np.int64(3)
    ) as session:
        assert session.receive_window == 3
        assert type(session.receive_window) is int


async def test_receive_batch_counts_by_the_integer_rule() -> None:
    async with open_persistent_kernel(make_kernel(), ScriptedBackend()) as session:
        await session.send_batch(batch(0, 3))
        for bad in (True, 1.5, 2.0, "1"):
            with pytest.raises(TypeError, match="max_count must be an int"):
                await session.receive_batch(bad)  # type: ignore[arg-type]
        for bad in (0, -1):
            with pytest.raises(ValueError, match="max_count must be at least 1"):
                await session.receive_batch(bad)
        assert session.statistics().received == 0  # a refused call takes nothing
        assert (await session.receive_batch(np.int64(2)))["id"].tolist() == [0, 1]
        assert (await session.receive_batch())["id"].tolist() == [2]


async def test_a_spinning_caller_falls_back_to_the_event_loop() -> None:
    # The device answers only when the test steps it: every spin times out, and the
    # caller must then sleep in the event loop, where the stepping task runs.
    async with open_persistent_kernel(
        make_kernel(), ScriptedBackend(), auto=False, wait="spin", spin_limit=0.0002
    ) as session:
        results: list[Any] = []

        async def caller() -> None:
            results.append(await session.request((5, 2.0)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await step_until(session, lambda: bool(results))
        assert (int(results[0]["id"]), float(results[0]["y"])) == (5, 4.0)


async def test_receive_window_bounds_unreceived_replies() -> None:
    async with open_persistent_kernel(
        make_kernel(capacity=2), ScriptedBackend(), receive_window=3
    ) as session:
        await session.send_batch(batch(0, 3))
        with anyio.move_on_after(0.05) as scope:
            await session.send((3, 0.0))  # nobody received: the window is full
        assert scope.cancelled_caught
        assert session.statistics().sent == 3

        async def receiver() -> None:
            await until(lambda: session._leader.leading)  # the send below is waiting now
            assert (await session.receive())["id"] == 0

        async with anyio.create_task_group() as tg:
            tg.start_soon(receiver)
            await session.send((3, 0.0))  # unblocked by the receive
        assert (await session.receive_batch())["id"].tolist() == [1, 2, 3]
        await session.request((9, 0.0))  # requests do not count against the window


async def test_pause_and_resume() -> None:
    async with open_persistent_kernel(make_kernel(), ScriptedBackend()) as session:
        await session.pause()
        assert session.state is SessionState.PAUSED
        assert session.resident.paused
        await session.send((1, 1.0))
        with anyio.move_on_after(0.05):
            await session.receive()
        assert session.statistics().replied == 0  # nothing processed while paused
        await session.resume()
        assert session.state is SessionState.RUNNING
        assert (await session.receive())["id"] == 1


async def test_cancelled_request_leaves_no_trace() -> None:
    async with open_persistent_kernel(make_kernel(), ScriptedBackend(), auto=False) as session:
        with anyio.move_on_after(0.02):
            await session.request((1, 1.0))
        session.resident.step()  # type: ignore[attr-defined]
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def ask() -> None:
                result.append(await session.request((2, 2.0)))

            tg.start_soon(ask)
            await step_until(session, lambda: bool(result))
        assert result[0]["id"] == 2  # the cancelled request's reply was discarded
        assert session.statistics().discarded == 1


async def test_leader_cancelled_follower_takes_over() -> None:
    async with open_persistent_kernel(make_kernel(), ScriptedBackend(), auto=False) as session:
        got: list[int] = []

        async def ask(i: int) -> None:
            got.append(int((await session.request((i, 0.0)))["id"]))

        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as leaders:
                leaders.start_soon(ask, 1)
                await until(lambda: session._leader.leading)  # 1 leads
                tg.start_soon(ask, 2)
                await until(lambda: len(session._leader.followers) == 1)  # 2 follows
                leaders.cancel_scope.cancel()  # the first (leading) waiter goes away
            await step_until(session, lambda: got == [2])


async def test_a_leader_remains_when_leader_and_promoted_follower_are_cancelled() -> None:
    async with open_persistent_kernel(make_kernel(), ScriptedBackend(), auto=False) as session:
        got: list[int] = []

        async def ask(i: int) -> None:
            got.append(int((await session.request((i, 0.0)))["id"]))

        async with anyio.create_task_group() as tg:
            leader, promoted = anyio.CancelScope(), anyio.CancelScope()

            async def doomed(scope: anyio.CancelScope, i: int) -> None:
                with scope:
                    await ask(i)

            tg.start_soon(doomed, leader, 1)  # leads
            await until(lambda: session._leader.leading)
            tg.start_soon(doomed, promoted, 2)  # first follower: promoted when the leader goes
            await until(lambda: len(session._leader.followers) == 1)
            tg.start_soon(ask, 3)  # must still be served
            await until(lambda: len(session._leader.followers) == 2)
            leader.cancel()  # the leader leaves and promotes 2 ...
            promoted.cancel()  # ... which leaves before it can lead
            # let both go before the device answers: 3 is left, and leads
            await until(lambda: session._leader.leading and not session._leader.followers)
            with anyio.fail_after(5):
                await step_until(session, lambda: bool(got))
        assert got == [3]


async def test_wait_until_and_notify_changed() -> None:
    """A long-lived task (an actor's serving loop) waits for its own condition and leads
    the ring meanwhile: requests from other tasks still complete."""
    async with open_persistent_kernel(make_kernel(), ScriptedBackend(), auto=False) as session:
        flag: list[bool] = []
        finished = anyio.Event()

        async def serve() -> None:
            await session.wait_until(lambda: bool(flag))
            finished.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            await until(lambda: session._leader.leading)  # serve() leads now
            got: list[int] = []

            async def ask() -> None:
                got.append(int((await session.request((5, 0.0)))["id"]))

            tg.start_soon(ask)
            await step_until(session, lambda: bool(got))
            assert got == [5]
            assert not finished.is_set()
            flag.append(True)
            session.notify_changed()
            with anyio.fail_after(2):
                await finished.wait()


async def test_watch_until_leaves_the_ring_to_callers_and_sees_an_idle_crash() -> None:
    """A watcher (an actor's serving loop) never leads: a caller leads its own request;
    with nobody leading, the watcher's pumping sees a crash; notify_changed wakes it."""
    async with open_persistent_kernel(make_kernel(), ScriptedBackend(), auto=False) as session:
        resident = session.resident
        assert isinstance(resident, ScriptedKernel)
        flag: list[bool] = []
        watched = anyio.Event()

        async def watch() -> None:
            await session.watch_until(lambda: bool(flag))
            watched.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await until(lambda: bool(session._leader.watchers))  # watch() is waiting now
            assert not session._leader.leading  # watching is not leading
            got: list[int] = []

            async def ask() -> None:
                got.append(int((await session.request((5, 0.0)))["id"]))

            tg.start_soon(ask)
            await until(lambda: session.statistics().sent == 1)  # ask() has sent, and waits
            assert session._leader.leading  # the caller leads its own request
            resident.step()
            with anyio.fail_after(2):
                while not got:  # noqa: ASYNC110 - the caller is woken by the ring
                    await anyio.sleep(0.001)
            assert got == [5]
            assert not watched.is_set()
            flag.append(True)
            session.notify_changed()
            with anyio.fail_after(0.5):
                await watched.wait()

        # Nobody waits on the ring: the watcher's own pumping sees the crash.
        crashed = anyio.Event()

        async def watch_forever() -> None:
            await session.watch_until(lambda: False)
            crashed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_forever)
            await anyio.sleep(0.05)  # the watcher has backed off to its longest sleep
            resident.crash(ErrorCode.USER + 1, "idle failure")
            with anyio.fail_after(0.5):
                await crashed.wait()
        assert session.state is SessionState.CRASHED
        with pytest.raises(ActorCrashed, match="idle failure"):
            await session.receive()


# -- stopping and crashing ----------------------------------------------------------------------


async def test_stop_fails_unprocessed_requests_and_keeps_published_replies() -> None:
    backend = ScriptedBackend()
    session = await PersistentKernelSession.start(make_kernel(capacity=8), backend, auto=False)
    errors: list[BaseException] = []
    replies: list[int] = []

    async def ask(i: int) -> None:
        try:
            replies.append(int((await session.request((i, 0.0)))["id"]))
        except ActorStopped as exc:
            errors.append(exc)

    await session.send_batch(batch(100, 2))
    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(ask, i)
        await until(lambda: session.statistics().sent == 6)  # all four requests are waiting
        session.resident.step(3)  # type: ignore[attr-defined]  # answers 100, 101, one request
        await session.stop()
    assert len(replies) == 1  # the first request published (task order is the library's)
    assert len(errors) == 3
    assert all(type(e) is ActorStopped for e in errors)
    assert "3 published request(s) were not handled" in str(errors[0])
    assert session.statistics().unprocessed == 3
    # replies published before the stop are still delivered, then receive says stopped
    assert (await session.receive_batch())["id"].tolist() == [100, 101]
    with pytest.raises(ActorStopped, match="is stopped"):
        await session.receive()
    with pytest.raises(ActorStopped):
        await session.request((1, 0.0))
    with pytest.raises(ActorStopped):
        await session.send((1, 0.0))
    with pytest.raises(ActorStopped):
        await session.pause()
    await session.stop()  # idempotent
    assert backend.launched[0].released


async def test_drain_stop_answers_everything() -> None:
    session = await PersistentKernelSession.start(
        make_kernel(capacity=8), ScriptedBackend(), auto=False
    )
    replies: list[Any] = []

    async def ask() -> None:
        replies.append(await session.request_batch(batch(0, 7)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await until(lambda: session._leader.leading)  # the batch is published and waiting
        session.resident.step(2)  # type: ignore[attr-defined]
        assert session.statistics().sent == 7

        async def drive() -> None:
            while not session.resident.exited:
                session.resident.step()  # type: ignore[attr-defined]
                await anyio.sleep(0.001)

        tg.start_soon(drive)
        await session.stop(drain=True)
    assert replies[0]["id"].tolist() == list(range(7))
    assert session.statistics().unprocessed == 0


async def test_error_word_surfaces_as_actor_crashed() -> None:
    session = await PersistentKernelSession.start(make_kernel(), ScriptedBackend(), auto=False)
    resident = session.resident
    assert isinstance(resident, ScriptedKernel)
    await session.send((1, 0.0))
    resident.step()
    caught: list[ActorCrashed] = []

    async def ask() -> None:
        try:
            await session.request((2, 0.0))
        except ActorCrashed as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await until(lambda: session._leader.leading)  # request 2 is published and waiting
        resident.crash(ErrorCode.USER + 1, "matrix not invertible")
    (crash,) = caught
    assert isinstance(crash.cause, PersistentKernelError)
    assert crash.cause.code == 257
    assert crash.cause.detail == "matrix not invertible"
    assert "matrix not invertible" in str(crash)
    assert session.state is SessionState.CRASHED
    assert session.error is not None
    assert session.error.code == 257
    assert (await session.receive())["id"] == 1  # published before the crash
    with pytest.raises(ActorCrashed):
        await session.send((3, 0.0))
    await session.aclose()  # the crash was reported: closing does not raise again


async def test_unreported_crash_is_raised_on_exit() -> None:
    async def run() -> None:
        async with open_persistent_kernel(make_kernel(), ScriptedBackend()) as session:
            session.resident.crash(ErrorCode.BODY, "boom")  # type: ignore[attr-defined]
            await anyio.wait_all_tasks_blocked()  # nobody looks at the ring meanwhile

    with pytest.raises(ActorCrashed, match="boom"):
        await run()


async def test_kernel_that_ends_without_done_or_uninvited() -> None:
    session = await PersistentKernelSession.start(make_kernel(), ScriptedBackend(), auto=False)
    resident = session.resident
    assert isinstance(resident, ScriptedKernel)
    resident.vanish = True
    resident.finish()  # execution ended, done word never set
    with pytest.raises(ActorCrashed, match="without setting the done word"):
        await session.request((1, 0.0))
    await session.aclose()

    session = await PersistentKernelSession.start(make_kernel(), ScriptedBackend(), auto=False)
    session.resident.finish()  # type: ignore[attr-defined]
    with pytest.raises(ActorCrashed, match="without being asked to stop"):
        await session.request((1, 0.0))
    await session.aclose()


async def test_stop_timeout_never_hangs() -> None:
    backend = ScriptedBackend()
    session = await PersistentKernelSession.start(make_kernel(), backend, ignore_stop=True)
    with anyio.fail_after(2):
        with pytest.raises(KernelStopTimeout, match=r"did not stop within 0.05 s: its done word"):
            await session.stop(timeout=0.05)
    assert not backend.launched[0].released  # memory kept: the device may still use it
    backend.launched[0].finish()
    await session.stop()
    assert backend.launched[0].released


async def test_kernel_that_never_starts() -> None:
    backend = ScriptedBackend()
    with pytest.raises(PersistentKernelError, match=r"did not signal STARTED within 0\.05 s"):
        await PersistentKernelSession.start(
            make_kernel(), backend, launch_timeout=0.05, start=False
        )
    assert backend.launched[0].released  # stopped and released


async def test_cancelling_the_scope_stops_the_kernel() -> None:
    backend = ScriptedBackend()
    with anyio.move_on_after(0.02):
        async with open_persistent_kernel(make_kernel(), backend, auto=False) as session:
            await session.request((1, 0.0))  # never answered; cancelled
    assert backend.launched[0].finished
    assert backend.launched[0].released


async def test_resident_handle_protocol_methods() -> None:
    backend = ScriptedBackend()
    kernel = make_kernel()
    resident = backend.launch_persistent_kernel(kernel, RingMemory.allocate(backend, kernel.layout))
    assert isinstance(resident, ScriptedKernel)
    status = resident.status
    assert status.started
    assert not status.done
    assert status.stop is StopMode.RUN
    resident.pause()
    assert resident.paused
    resident.resume()
    assert not resident.paused
    assert resident.error is None
    await resident.stop(timeout=1)
    assert resident.done
    assert resident.exited
    resident.device.set_error(5, "late")
    assert resident.error is not None
    assert resident.error.code == 5


async def test_leaving_the_block_after_a_stop_timed_out_does_not_wait_again() -> None:
    backend = ScriptedBackend()
    with anyio.fail_after(2):  # a second stop would wait stop_timeout (4 s) again
        async with open_persistent_kernel(
            make_kernel(), backend, stop_timeout=4, ignore_stop=True
        ) as session:
            assert session.stop_timeout == 4
            with pytest.raises(KernelStopTimeout, match=r"within 0\.05 s"):
                await session.stop(timeout=0.05)
    assert not backend.launched[0].released  # the device may still use the memory


async def test_leaving_the_block_releases_a_kernel_that_exited_after_its_stop_timed_out() -> None:
    backend = ScriptedBackend()
    with anyio.fail_after(2):
        async with open_persistent_kernel(make_kernel(), backend, ignore_stop=True) as session:
            with pytest.raises(KernelStopTimeout):
                await session.stop(timeout=0.05)
            backend.launched[0].finish()
    assert backend.launched[0].released


async def test_stop_timeout_is_checked_before_anything_is_launched() -> None:
    backend = ScriptedBackend()
    for bad in (float("nan"), 0, -1):
        with pytest.raises(ValueError, match="stop_timeout"):
            await PersistentKernelSession.start(make_kernel(), backend, stop_timeout=bad)
    assert backend.launched == []


async def test_a_session_used_from_another_event_loop_says_so_and_goes_on() -> None:
    """Every async method, from a loop in another thread (asyncio or trio), raises the
    session's RuntimeError before it touches the ring; the owner's loop goes on."""
    async with open_persistent_kernel(make_kernel(), ScriptedBackend()) as session:
        assert (await session.request((1, 1.0)))["y"] == 2.0
        uses = {
            "request": lambda: session.request((2, 1.0)),
            "request_batch": lambda: session.request_batch(batch(0, 2)),
            "send": lambda: session.send((3, 1.0)),
            "send_batch": lambda: session.send_batch(batch(0, 2)),
            "receive": session.receive,
            "receive_batch": session.receive_batch,
            "pause": session.pause,
            "resume": session.resume,
            "wait_until": lambda: session.wait_until(lambda: False),
            "watch_until": lambda: session.watch_until(lambda: False),
            "stop": session.stop,
        }

        def from_another_loop(library: str) -> dict[str, str]:
            async def misuse() -> dict[str, str]:
                errors = {}
                for name, use in uses.items():
                    with pytest.raises(RuntimeError) as info:
                        await use()
                    errors[name] = str(info.value)
                return errors

            return anyio.run(misuse, backend=library)

        for library in ("asyncio", "trio"):
            errors = await anyio.to_thread.run_sync(from_another_loop, library)
            assert set(errors) == set(uses)
            for text in errors.values():
                assert "persistent kernel 'doubler' belongs to the " in text
                assert "cannot be used from another event loop" in text
        stats = session.statistics()
        assert (stats.sent, stats.replied) == (1, 1)  # nothing was written
        assert session.state is SessionState.RUNNING
        assert (await session.request((4, 2.0)))["y"] == 4.0
    assert session.state is SessionState.STOPPED
