"""pdc-ray's guarantees, tested over the fake engine (no Ray): loss, hangs, slow kills,
cancellation, ordering and priority across a reordering wire, bounded mailboxes,
remote cancellation of shipped requests, control calls beside a busy data path."""

# ruff: noqa: PT012

from __future__ import annotations

import functools
import logging
import math
import time
from typing import Any, ClassVar

import anyio
import pdc_ray
import pytest
from pdc_ray.testing import FakeEngine

from pdc_core import (
    Actor,
    ActorCrashed,
    ActorState,
    ActorStopped,
    MailboxFull,
    MessageDropped,
    MessageTimeout,
    open_nursery,
)

LIMIT = 10


class Recorder(Actor[Any, Any]):
    """Records what it handles in a class-level log (shared: the fake engine runs the
    actor in this process; its target is pickled by reference)."""

    log: ClassVar[list[Any]] = []
    gate: ClassVar[anyio.Event | None] = None
    entered: ClassVar[anyio.Event | None] = None

    async def handle(self, message: Any) -> Any:
        if message == "block":
            assert Recorder.gate is not None
            assert Recorder.entered is not None
            Recorder.entered.set()
            await Recorder.gate.wait()
        elif message == "stop-yourself":
            await self.ref.stop()
        Recorder.log.append(message)
        return message


@pytest.fixture
def recorder() -> type[Recorder]:
    Recorder.log = []
    Recorder.gate = anyio.Event()
    Recorder.entered = anyio.Event()
    return Recorder


# -- loss, hangs and kills -------------------------------------------------------------


async def test_a_lost_process_crashes_the_actor_and_fails_what_was_in_flight(
    recorder: type[Recorder],
) -> None:
    errors: list[BaseException] = []
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, anyio.create_task_group() as outside:

            async def asker(ref: Any, message: Any) -> None:
                try:
                    await ref.ask(message)
                except ActorCrashed as exc:
                    errors.append(exc)

            with pytest.raises(ActorCrashed) as info:
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
                    outside.start_soon(asker, ref, "block")
                    await recorder.entered.wait()  # type: ignore[union-attr]
                    outside.start_soon(asker, ref, 1)
                    await anyio.wait_all_tasks_blocked()
                    engine.lose()
                    await anyio.sleep_forever()
            assert engine.alive() == []
    assert isinstance(info.value.cause, pdc_ray.RemoteActorLost)
    assert len(errors) == 2
    assert all(isinstance(exc.cause, pdc_ray.RemoteActorLost) for exc in errors)  # type: ignore[attr-defined]
    assert ref.state is ActorState.CRASHED


async def test_a_hung_process_is_lost_at_its_heartbeat(recorder: type[Recorder]) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine:
            started = anyio.current_time()
            with pytest.raises(ActorCrashed) as info:
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(
                        recorder, placement=pdc_ray.on(heartbeat=0.2, engine=engine)
                    )
                    assert await ref.ask(1) == 1
                    engine.hang()
                    await anyio.sleep_forever()
            elapsed = anyio.current_time() - started
            assert engine.alive() == []
    assert isinstance(info.value.cause, pdc_ray.RemoteActorLost)
    assert "heartbeat" in str(info.value.cause)
    assert elapsed < 2.0  # a third of a beat, then at most one beat without an answer


async def test_a_stall_of_this_process_past_the_heartbeat_loses_no_live_worker(
    recorder: type[Recorder],
) -> None:
    """This process's event loop blocks for longer than the whole heartbeat while a
    ping is on its way: the worker answers it once the loop runs again, so it is not
    lost (the stall is this side's, not the worker's)."""
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(
                recorder, placement=pdc_ray.on(heartbeat=1.0, engine=engine)
            )
            assert await ref.ask(1) == 1
            engine.hold("ping")
            pings = engine.calls["ping"]
            while engine.calls["ping"] == pings:  # noqa: ASYNC110 - until a ping is sent
                await anyio.sleep(0.01)
            engine.release("ping")  # it runs once the loop turns again
            time.sleep(1.25)  # noqa: ASYNC251 - the stall: past the ping's whole heartbeat
            assert await ref.ask(2) == 2
            assert ref.state is ActorState.RUNNING
        assert engine.alive() == []
    assert ref.state is ActorState.STOPPED
    assert Recorder.log == [1, 2]


async def test_nursery_exit_waits_until_a_slow_kill_is_confirmed(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(kill_delay=0.05) as engine:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
                assert await ref.ask(1) == 1
            assert engine.alive() == []  # not a moment before Ray reports it dead
            assert engine.processes[0].killed


async def test_a_kill_never_confirmed_is_bounded_by_kill_timeout(
    recorder: type[Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="pdc.ray"):
        async with FakeEngine(kill_delay=math.inf) as engine:
            async with open_nursery() as nursery:
                placement = pdc_ray.on(kill_timeout=0.05, engine=engine)
                ref = await nursery.start_actor(recorder, placement=placement)
                assert await ref.ask(1) == 1
            assert [p.killed for p in engine.processes] == [True]
            assert "did not report its process dead" in caplog.text
            assert ref.state is ActorState.STOPPED


async def test_creation_failing_fails_the_start(recorder: type[Recorder]) -> None:
    async with FakeEngine(fail_create=OSError("no cluster")) as engine, open_nursery() as nursery:
        with pytest.raises(ActorCrashed, match="while starting") as info:
            await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
        assert isinstance(info.value.cause, OSError)
        assert nursery.actors == {}


# -- cancellation ----------------------------------------------------------------------


async def test_cancelling_the_nursery_fails_every_request_and_kills_the_process(
    recorder: type[Recorder],
) -> None:
    outcomes: list[BaseException] = []
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, anyio.create_task_group() as outside:

            async def asker(ref: Any, message: Any) -> None:
                try:
                    await ref.ask(message)
                except ActorStopped as exc:
                    outcomes.append(exc)

            with anyio.CancelScope() as scope:
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(
                        recorder, placement=pdc_ray.on(engine=engine), capacity=4
                    )
                    outside.start_soon(asker, ref, "block")  # in hand, remotely
                    await recorder.entered.wait()  # type: ignore[union-attr]
                    for i in range(3):
                        outside.start_soon(asker, ref, i)  # shipped, or queued here
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()
            assert engine.alive() == []
    assert len(outcomes) == 4
    assert not any(isinstance(exc, ActorCrashed) for exc in outcomes)
    assert ref.state is ActorState.STOPPED


async def test_cancelled_while_starting_leaves_nothing(recorder: type[Recorder]) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            engine.hold("start")
            with anyio.move_on_after(0.05) as scope:
                await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
            assert scope.cancelled_caught
            assert nursery.actors == {}
            assert engine.alive() == []
            engine.release("start")


async def test_a_shipped_ask_that_is_cancelled_is_skipped_remotely(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=5) as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
            assert isinstance(ref, pdc_ray.RemoteActorRef)
            async with anyio.create_task_group() as tg:
                tg.start_soon(ref.ask, "block")
                await recorder.entered.wait()  # type: ignore[union-attr]
                doomed = anyio.CancelScope()
                tg.start_soon(_ask_in, ref, "doomed", doomed)
                await anyio.wait_all_tasks_blocked()  # shipped, waiting remotely
                assert ref.statistics().mailbox.depth == 0  # type: ignore[union-attr]
                doomed.cancel()
                await anyio.wait_all_tasks_blocked()  # the cancellation has arrived
                recorder.gate.set()  # type: ignore[union-attr]
            assert await ref.ask("after") == "after"
            assert recorder.log == ["block", "after"]
            remote = await ref.remote_statistics()
            assert remote.handled == 2
        assert engine.alive() == []


async def _ask_in(ref: Any, message: Any, scope: anyio.CancelScope) -> None:
    with scope:
        await ref.ask(message)


# -- ordering, priority, bounded mailboxes ---------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_priority_order_and_fifo_hold_across_a_reordering_wire(
    recorder: type[Recorder], seed: int
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=seed, reorder=20) as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(
                recorder,
                placement=pdc_ray.on(engine=engine, window=4),
                max_batch=3,  # many batches, several in flight at once
                paused=True,
            )
            sent: list[tuple[int, int]] = []
            for i in range(60):
                priority = (0, 128, 255)[(i * 7) % 3]
                sent.append((priority, i))
                await ref.tell((priority, i), priority=priority)
            await ref.resume()
            await ref.stop(drain=True)
    expected = sorted(sent, key=lambda item: -item[0])  # stable: FIFO within a priority
    assert recorder.log == expected


@pytest.mark.parametrize("seed", [3, 4])
async def test_fifo_holds_for_a_stream_of_tells_under_load(
    recorder: type[Recorder], seed: int
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=seed, reorder=20) as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(
                recorder, placement=pdc_ray.on(engine=engine, window=3), max_batch=5
            )
            for i in range(300):
                await ref.tell(i)
            assert await ref.ask("last") == "last"
    assert recorder.log == [*range(300), "last"]


async def test_the_local_mailbox_is_bounded_with_its_policy_and_counters(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            placement = pdc_ray.on(engine=engine)
            raising = await nursery.start_actor(
                recorder, placement=placement, capacity=3, backpressure="raise", paused=True
            )
            for i in range(3):
                await raising.tell(i)
            with pytest.raises(MailboxFull):
                await raising.tell(3)
            stats = raising.statistics().mailbox
            assert stats is not None
            assert (stats.depth, stats.rejected) == (3, 1)

            dropping = await nursery.start_actor(
                recorder, placement=placement, capacity=2, backpressure="drop_oldest", paused=True
            )
            dropped: list[BaseException] = []

            async def asker(message: Any) -> None:
                try:
                    await dropping.ask(message, priority=10)
                except MessageDropped as exc:
                    dropped.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(asker, "old")
                await anyio.wait_all_tasks_blocked()
                await dropping.tell("a", priority=200)
                await dropping.tell("b", priority=200)  # full: the priority-10 ask goes
                await anyio.wait_all_tasks_blocked()
            assert len(dropped) == 1
            stats = dropping.statistics().mailbox
            assert stats is not None
            assert stats.dropped == 1
            assert dict(stats.dropped_by_priority) == {10: 1}
            await raising.stop()
            await dropping.stop()
        assert engine.alive() == []


# -- lifetime ---------------------------------------------------------------------------


async def test_the_nursery_drains_what_was_sent_before_its_body_ended(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=9) as engine:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(
                    recorder, placement=pdc_ray.on(engine=engine), max_batch=7
                )
                for i in range(50):
                    await ref.tell(i)
            assert recorder.log == list(range(50))
            assert engine.alive() == []
            assert ref.state is ActorState.STOPPED


async def test_an_actor_that_stops_itself_remotely_stops_here(recorder: type[Recorder]) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
            await ref.tell("stop-yourself")
            await ref.wait()
            assert ref.state is ActorState.STOPPED
            assert nursery.actors == {}
            with pytest.raises(ActorStopped):
                await ref.ask(1)
            assert engine.alive() == []


async def test_control_calls_are_answered_while_the_data_path_is_busy(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
            assert isinstance(ref, pdc_ray.RemoteActorRef)
            async with anyio.create_task_group() as tg:
                tg.start_soon(ref.ask, "block")
                await recorder.entered.wait()  # type: ignore[union-attr]
                for i in range(10):
                    await ref.tell(i)
                remote = await ref.remote_statistics()
                assert remote.state is ActorState.RUNNING
                await ref.pause()
                assert ref.state is ActorState.PAUSED
                await ref.resume()
                recorder.gate.set()  # type: ignore[union-attr]
            await ref.stop(drain=True)
            assert recorder.log == ["block", *range(10)]
        assert engine.alive() == []


# -- a lone ask, shipped by its caller ----------------------------------------------------


async def test_a_lone_ask_is_shipped_by_its_caller_and_counted_as_passing_the_mailbox(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=2) as engine, open_nursery() as nursery:
            ref: Any = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
            for i in range(5):
                assert await ref.ask(i) == i
            stats = ref.statistics()
            assert stats.handled == 5
            assert stats.mailbox.sent == stats.mailbox.received == 5
            assert stats.mailbox.peak_depth == 0  # none of them waited in the mailbox
            assert engine.calls["deliver"] == 5
            assert ref._runner._direct == 5  # shipped by the askers themselves
        assert recorder.log == [0, 1, 2, 3, 4]


async def test_a_direct_ask_whose_caller_gives_up_is_collected_and_cancelled_remotely(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=3) as engine, open_nursery() as nursery:
            ref: Any = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
            blocked = anyio.CancelScope()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_ask_in, ref, "block", blocked)
                await recorder.entered.wait()  # type: ignore[union-attr]
                assert ref._runner._direct == 1  # in flight from its caller
                blocked.cancel()
            with pytest.raises(MessageTimeout):
                await ref.ask(1, timeout=0.05)  # queued behind the batch in flight
            await anyio.wait_all_tasks_blocked()
            assert engine.calls["cancel"] >= 1
            recorder.gate.set()  # type: ignore[union-attr]
            assert await ref.ask("after") == "after"  # the adopted answer came in
            assert ref._runner._inflight == {}
            await ref.stop(drain=True)
        assert recorder.log == ["block", "after"]
        assert engine.alive() == []


async def test_a_direct_ask_that_times_out_leaves_the_actor_going_on(
    recorder: type[Recorder],
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref: Any = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))
            with pytest.raises(MessageTimeout):
                await ref.ask("block", timeout=0.05)
            assert ref._runner._direct == 1
            recorder.gate.set()  # type: ignore[union-attr]
            assert await ref.ask(2) == 2
        assert recorder.log == ["block", 2]
        assert engine.alive() == []


@pytest.mark.parametrize("window", [1, 2])
async def test_a_direct_call_counts_in_the_window_of_calls_on_the_wire(
    recorder: type[Recorder], window: int
) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=4) as engine, open_nursery() as nursery:
            ref: Any = await nursery.start_actor(
                recorder, placement=pdc_ray.on(engine=engine, window=window), max_batch=1
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(ref.ask, "block")
                await recorder.entered.wait()  # type: ignore[union-attr]
                for i in range(5):
                    await ref.tell(i)
                await anyio.wait_all_tasks_blocked()
                assert ref._runner._calls == window  # the direct call holds one place
                assert engine.calls["deliver"] == window
                recorder.gate.set()  # type: ignore[union-attr]
            await ref.stop(drain=True)
        assert recorder.log == ["block", *range(5)]


async def test_a_draining_stop_waits_for_the_answer_to_a_direct_call(
    recorder: type[Recorder],
) -> None:
    replies: list[Any] = []
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref: Any = await nursery.start_actor(recorder, placement=pdc_ray.on(engine=engine))

            async def ask_block() -> None:
                replies.append(await ref.ask("block"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask_block)
                await recorder.entered.wait()  # type: ignore[union-attr]
                tg.start_soon(functools.partial(ref.stop, drain=True))
                await anyio.wait_all_tasks_blocked()
                assert ref.state is ActorState.STOPPING
                assert engine.calls["stop"] == 0  # not before the direct call is answered
                recorder.gate.set()  # type: ignore[union-attr]
        assert replies == ["block"]
        assert engine.alive() == []
