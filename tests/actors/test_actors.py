"""Actor nurseries and mailbox actors, under asyncio and trio.

Covers the start handshake, tell/ask and their batch and stream forms, priorities,
backpressure, one-for-all crashes, restart supervision, stopping, cancellation with
nothing leaked, overload with bounded memory, and a 100,000-message soak.
"""

# The statement under test in pytest.raises is often a whole `async with open_nursery()`.
# ruff: noqa: PT012

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import sniffio

from pdc_core import (
    Actor,
    ActorCrashed,
    ActorRef,
    ActorState,
    ActorStopped,
    DuplicateActorError,
    LifecycleError,
    MailboxFull,
    MessageDropped,
    MessageTimeout,
    RestartPolicy,
    ShutdownTimeout,
    open_nursery,
)

LIMIT = 10  # seconds: no test may hang


class Boom(Exception):
    pass


async def echo(message: Any) -> Any:
    return message


class Counter(Actor[Any, int]):
    """Counts messages; raises on "boom"; its state resets with each instance."""

    instances = 0

    def __init__(self) -> None:
        Counter.instances += 1
        self.count = 0
        self.seen: list[Any] = []

    async def handle(self, message: Any) -> int:
        if message == "boom":
            raise Boom("asked to crash")
        self.count += 1
        self.seen.append(message)
        return self.count


def task_count() -> int:
    """Tasks alive in the running event loop."""
    if sniffio.current_async_library() == "trio":
        import trio

        count, stack = 0, [trio.lowlevel.current_root_task()]
        while stack:
            task = stack.pop()
            count += 1
            for nursery in task.child_nurseries:
                stack.extend(nursery.child_tasks)
        return count
    return len(asyncio.all_tasks())


async def test_ask_tell_function_and_class_actors() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo)
            assert await ref.ask("hi") == "hi"
            counter = await nursery.start_actor(Counter, name="counter")
            await counter.tell("a")
            await counter.tell("b")
            assert await counter.ask("c") == 3
            assert counter.actor_id == "counter"
            assert nursery.actors["counter"] is counter
            stats = counter.statistics()
            assert stats.handled == 3
            assert stats.mailbox is not None
            assert stats.mailbox.sent == stats.mailbox.received == 3


async def test_start_is_a_handshake() -> None:
    events: list[str] = []

    class Slow(Actor[Any, Any]):
        async def on_start(self) -> None:
            # Still starting while every other task runs as far as it can: start_actor()
            # must not have returned by then.
            await anyio.wait_all_tasks_blocked()
            events.append("started")

        async def handle(self, message: Any) -> Any:
            return message

    async with open_nursery() as nursery:
        ref = await nursery.start_actor(Slow)
        events.append("returned")
        assert ref.state is ActorState.RUNNING
    assert events == ["started", "returned"]


async def test_start_failure_raises_and_leaves_nursery_usable() -> None:
    class Broken(Actor[Any, Any]):
        async def on_start(self) -> None:
            raise Boom("no device")

    async with open_nursery() as nursery:
        with pytest.raises(ActorCrashed) as info:
            await nursery.start_actor(Broken, name="broken")
        assert info.value.actor_id == "broken"
        assert isinstance(info.value.cause, Boom)
        assert nursery.actors == {}
        ref = await nursery.start_actor(echo, name="broken")  # the name is free again
        assert await ref.ask(1) == 1


async def test_crash_cancels_siblings_and_nursery_raises_actor_crashed() -> None:
    sibling_cancelled = anyio.Event()
    body_finished = False

    class Sibling(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            try:
                await anyio.sleep_forever()
            finally:
                sibling_cancelled.set()

    with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed) as info:
        async with open_nursery() as nursery:
            sibling = await nursery.start_actor(Sibling)
            await sibling.tell("wait")
            crashy = await nursery.start_actor(Counter, name="crashy")
            await crashy.ask("boom")
            body_finished = True
    exc = info.value
    assert exc.actor_id == "crashy"
    assert isinstance(exc.cause, Boom)
    assert exc.__cause__ is exc.cause
    assert "crashy" in str(exc)
    assert "asked to crash" in str(exc)
    assert sibling_cancelled.is_set()
    assert not body_finished
    assert sibling.state is ActorState.STOPPED
    assert crashy.state is ActorState.CRASHED
    with pytest.raises(ActorStopped):
        await crashy.tell("after")


async def test_crash_fails_requests_waiting_outside_the_nursery() -> None:
    outcomes: list[BaseException] = []
    ready = anyio.Event()
    refs: list[ActorRef[Any, Any]] = []

    async def outside_caller() -> None:
        await ready.wait()
        try:
            await refs[0].ask("slow")
        except BaseException as exc:
            outcomes.append(exc)

    class Slow(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            if message == "boom":
                raise Boom
            return message  # never reached: "boom" is handled first and crashes the actor

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(outside_caller)
            with pytest.raises(ActorCrashed):
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(Slow, paused=True)
                    refs.append(ref)
                    await ref.tell("boom")
                    ready.set()
                    await _wait_for_depth(ref, 2)  # the outside ask is queued behind "boom"
                    await ref.resume()
                    await anyio.sleep_forever()
    assert len(outcomes) == 1
    assert isinstance(outcomes[0], ActorCrashed)


async def test_restart_policy_restarts_with_fresh_state() -> None:
    policy = RestartPolicy(max_restarts=3, within=10, backoff=0)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Counter, restart=policy)
            assert await ref.ask("a") == 1
            assert await ref.ask("b") == 2
            with pytest.raises(ActorCrashed) as info:
                await ref.ask("boom")
            assert isinstance(info.value.cause, Boom)
            assert await ref.ask("c") == 1  # a new Counter
            stats = ref.statistics()
            assert stats.restarts == 1
            assert stats.errors == 1
            assert ref.state is ActorState.RUNNING


async def test_restart_keeps_queued_messages() -> None:
    policy = RestartPolicy(max_restarts=1, within=10, backoff=0)
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(Counter, restart=policy, paused=True)
        boom = await _spawn_ask(nursery, ref, "boom")
        await ref.tell("x")
        await ref.tell("y")
        await ref.resume()
        assert isinstance(await boom.wait(), ActorCrashed)
        assert await ref.ask("z") == 3  # x and y survived the restart


class _Result:
    def __init__(self) -> None:
        self._event = anyio.Event()
        self.value: Any = None

    def set(self, value: Any) -> None:
        self.value = value
        self._event.set()

    async def wait(self) -> Any:
        await self._event.wait()
        return self.value


async def _spawn_ask(nursery: Any, ref: ActorRef[Any, Any], message: Any) -> _Result:
    result = _Result()
    started = anyio.Event()

    async def run() -> None:
        started.set()
        try:
            result.set(await ref.ask(message))
        except Exception as exc:
            result.set(exc)

    nursery._tg.start_soon(run)
    await started.wait()
    return result


async def test_restart_budget_exhausted_escalates() -> None:
    policy = RestartPolicy(max_restarts=2, within=10, backoff=0)
    with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed) as info:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Counter, name="fragile", restart=policy)
            for _ in range(2):
                with pytest.raises(ActorCrashed):
                    await ref.ask("boom")
            await ref.ask("boom")  # third crash in the window: escalated
    assert info.value.actor_id == "fragile"
    assert ref.statistics().restarts == 2


async def test_restart_waits_for_the_backoff() -> None:
    policy = RestartPolicy(max_restarts=1, within=10, backoff=0.05)
    crashed_at: list[float] = []
    started_at: list[float] = []
    restart_may_finish = anyio.Event()

    class Timed(Counter):
        async def on_start(self) -> None:
            started_at.append(time.monotonic())
            if len(started_at) > 1:  # the restart: RESTARTING until the test has looked
                await restart_may_finish.wait()

        async def handle(self, message: Any) -> int:
            if message == "boom":
                crashed_at.append(time.monotonic())  # the backoff starts after this
            return await super().handle(message)

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Timed, restart=policy)
            with pytest.raises(ActorCrashed):
                await ref.ask("boom")
            assert ref.state is ActorState.RESTARTING
            restart_may_finish.set()
            assert await ref.ask("after") == 1
    # From the crash to the new instance's start: the backoff, measured from both ends
    # by the actor itself, so a late test task cannot shorten it.
    assert started_at[1] - crashed_at[0] >= 0.04


def test_restart_policy_validation_and_backoff() -> None:
    with pytest.raises(ValueError, match="max_restarts"):
        RestartPolicy(max_restarts=-1)
    policy = RestartPolicy(backoff=0.1, backoff_factor=2, max_backoff=0.3)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == pytest.approx([0.1, 0.2, 0.3, 0.3])


async def test_stop_fails_pending_asks_with_actor_stopped() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Counter, paused=True)
            pending = [await _spawn_ask(nursery, ref, i) for i in range(5)]
            await ref.tell("t")
            await ref.stop()
            results = [await p.wait() for p in pending]
            assert all(isinstance(r, ActorStopped) for r in results)
            assert not any(isinstance(r, ActorCrashed) for r in results)
            assert ref.state is ActorState.STOPPED
            assert not ref.alive
            with pytest.raises(ActorStopped):
                await ref.ask(1)
            with pytest.raises(ActorStopped):
                await ref.tell(1)
            stats = ref.statistics()
            assert stats.mailbox is not None
            assert stats.mailbox.discarded == 6
            assert stats.handled == 0
            await ref.stop()  # idempotent


async def test_stop_drain_handles_everything_queued() -> None:
    seen: list[int] = []

    async def record(message: int) -> None:
        seen.append(message)

    async with open_nursery() as nursery:
        ref = await nursery.start_actor(record, paused=True)
        for i in range(10):
            await ref.tell(i)
        await ref.stop(drain=True)
    assert seen == list(range(10))


async def test_stop_timeout_cancels_a_stuck_handler() -> None:
    handling = anyio.Event()

    class Stuck(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            handling.set()
            await anyio.sleep_forever()

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Stuck)
            stuck = await _spawn_ask(nursery, ref, "x")
            await handling.wait()  # the handler is stuck now
            await ref.stop(timeout=0.05)
            assert isinstance(await stuck.wait(), ActorStopped)
            assert ref.state is ActorState.STOPPED


async def test_actor_can_stop_itself() -> None:
    stopped = anyio.Event()

    class Quitter(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            await self.ref.stop()
            return "bye"

        async def on_stop(self) -> None:
            stopped.set()

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Quitter)
            assert await ref.ask("quit") == "bye"
            await ref.wait()
            assert stopped.is_set()


async def test_ask_timeout_is_a_timeout_error_and_the_request_is_skipped() -> None:
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(Counter, paused=True)
        with pytest.raises(MessageTimeout):
            await ref.ask("late", timeout=0.02)
        with pytest.raises(asyncio.TimeoutError):
            await ref.ask("late too", timeout=0)
        await ref.resume()
        assert await ref.ask("now") == 1  # the timed-out requests were never handled
        assert ref.statistics().skipped == 2


async def test_cancelled_ask_is_skipped() -> None:
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(Counter, paused=True)
        with anyio.move_on_after(0.01):
            await ref.ask("cancelled")
        await ref.resume()
        assert await ref.ask("next") == 1
        assert ref.statistics().skipped == 1


async def test_priorities_are_served_highest_first() -> None:
    counter = Counter()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(counter, paused=True)
        for name, priority in [("low", 1), ("high", 250), ("mid", 100), ("high2", 250)]:
            await ref.tell(name, priority=priority)
        await ref.resume()
        await ref.ask("last", priority=0)
    assert counter.seen == ["high", "high2", "mid", "low", "last"]


async def test_priority_out_of_range_is_a_value_error() -> None:
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo)
        with pytest.raises(ValueError, match="300"):
            await ref.tell("x", priority=300)
        with pytest.raises(ValueError, match="-1"):
            await ref.ask("x", priority=-1)
        with pytest.raises(ValueError, match="999"):
            await ref.ask_many(["x"], priority=999)


async def test_batch_forms_and_stream() -> None:
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, capacity=16)
        assert await ref.ask_many(range(100)) == list(range(100))
        assert await ref.ask_many([]) == []
        counter = Counter()
        cref = await nursery.start_actor(counter, capacity=8)
        await cref.tell_many(range(50))
        assert await cref.ask("x") == 51
        replies = [r async for r in ref.ask_stream(range(300), window=32)]
        assert replies == list(range(300))

        async def gen() -> Any:
            for i in range(10):
                yield i

        assert [r async for r in ref.ask_stream(gen(), window=4)] == list(range(10))
        with pytest.raises(ValueError, match="window"):
            async for _ in ref.ask_stream([1], window=0):
                pass


async def test_ask_many_timeout_and_mixed_priorities() -> None:
    class Tagged:
        def __init__(self, n: int, priority: int) -> None:
            self.n = n
            self.priority = priority

    async def tag(message: Tagged) -> int:
        return message.n

    async with open_nursery() as nursery:
        ref = await nursery.start_actor(tag, paused=True)
        batch = [Tagged(i, p) for i, p in enumerate([5, 200, 5, 100])]
        result = await _spawn_ask_many(nursery, ref, batch)
        await _wait_for_depth(ref, 4)
        await ref.resume()
        assert await result.wait() == [0, 1, 2, 3]  # replies in request order
        await ref.pause()
        with pytest.raises(MessageTimeout):
            await ref.ask_many([Tagged(9, 1)], timeout=0.02)


async def _wait_for_depth(ref: ActorRef[Any, Any], depth: int) -> None:
    with anyio.fail_after(LIMIT):
        while (stats := ref.statistics().mailbox) is None or stats.depth < depth:  # noqa: ASYNC110
            await anyio.sleep(0.001)


def _depth(ref: ActorRef[Any, Any]) -> int:
    stats = ref.statistics().mailbox
    assert stats is not None
    return stats.depth


async def _spawn_ask_many(nursery: Any, ref: ActorRef[Any, Any], batch: list[Any]) -> _Result:
    result = _Result()

    async def run() -> None:
        result.set(await ref.ask_many(batch))

    nursery._tg.start_soon(run)
    await anyio.lowlevel.checkpoint()
    return result


async def test_handle_batch_receives_what_is_waiting() -> None:
    calls: list[list[int]] = []

    class Doubler(Actor[int, int]):
        async def handle_batch(self, messages: list[int]) -> list[int]:
            calls.append(list(messages))
            return [m * 2 for m in messages]

    async with open_nursery() as nursery:
        ref = await nursery.start_actor(Doubler, capacity=64, max_batch=10, paused=True)
        await ref.tell_many(range(5))
        result = await _spawn_ask_many(nursery, ref, list(range(5, 25)))
        await _wait_for_depth(ref, 25)
        await ref.resume()
        assert await result.wait() == [m * 2 for m in range(5, 25)]
        assert await ref.ask(100) == 200
    assert sum(len(c) for c in calls) == 26
    assert max(len(c) for c in calls) <= 10
    assert calls[0] == list(range(10))


async def test_handle_batch_must_return_one_reply_per_message() -> None:
    class Wrong(Actor[int, int]):
        async def handle_batch(self, messages: list[int]) -> list[int]:
            return []

    with pytest.raises(ActorCrashed) as info:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Wrong)
            await ref.ask(1)
    assert isinstance(info.value.cause, ValueError)


async def test_backpressure_raise_and_drop_for_actors() -> None:
    async with open_nursery() as nursery:
        strict = await nursery.start_actor(echo, capacity=2, backpressure="raise", paused=True)
        await strict.tell(1)
        await strict.tell(2)
        with pytest.raises(MailboxFull):
            await strict.tell(3)
        lossy = await nursery.start_actor(echo, capacity=1, backpressure="drop_oldest", paused=True)
        first = await _spawn_ask(nursery, lossy, "first")
        second = await _spawn_ask(nursery, lossy, "second")  # evicts "first"
        assert isinstance(await first.wait(), MessageDropped)
        await lossy.resume()
        assert await second.wait() == "second"
        stats = lossy.statistics()
        assert stats.mailbox is not None
        assert stats.mailbox.dropped == 1


@pytest.mark.parametrize("policy", ["block", "raise", "drop_oldest"])
async def test_overload_keeps_memory_bounded(policy: str) -> None:
    """A producer much faster than the actor: the mailbox never holds more than its
    capacity, and every message is handled, refused or dropped (and counted)."""
    handled = 0
    produced_all = False

    async def slow(message: int) -> None:
        nonlocal handled
        handled += 1
        if message % 50 == 0:
            # Fall behind: let the producer fill the mailbox (or finish) before going on.
            while not produced_all and _depth(ref) < 32:
                await anyio.lowlevel.checkpoint()

    offered = 5000
    rejected = 0
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(slow, capacity=32, backpressure=policy)
            for i in range(offered):
                try:
                    await ref.tell(i)
                except MailboxFull:
                    rejected += 1
                    await anyio.lowlevel.checkpoint()
            produced_all = True
            await ref.stop(drain=True)
    stats = ref.statistics().mailbox
    assert stats is not None
    assert stats.peak_depth <= 32
    assert handled + stats.dropped + rejected == offered
    assert stats.rejected == rejected
    if policy == "block":
        assert handled == offered
    if policy != "drop_oldest":
        assert stats.dropped == 0
    else:
        assert stats.dropped > 0
    if policy != "raise":
        assert rejected == 0


async def test_duplicate_names_are_refused() -> None:
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, name="only")
        with pytest.raises(DuplicateActorError, match="only"):
            await nursery.start_actor(echo, name="only")
        await ref.stop()
        again = await nursery.start_actor(echo, name="only")
        assert await again.ask(1) == 1


async def test_bad_targets_and_closed_nursery() -> None:
    nursery = open_nursery()
    with pytest.raises(LifecycleError):
        await nursery.start_actor(echo)
    async with nursery:
        with pytest.raises(TypeError):
            await nursery.start_actor(42)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await nursery.start_actor(echo, 1)
    with pytest.raises(LifecycleError):
        await nursery.start_actor(echo)
    with pytest.raises(TypeError):
        ActorRef()  # type: ignore[abstract]


async def test_nursery_exit_drains_and_calls_on_stop() -> None:
    events: list[Any] = []

    class Recorder(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            events.append(message)

        async def on_stop(self) -> None:
            events.append("on_stop")

    async with open_nursery() as nursery:
        ref = await nursery.start_actor(Recorder)
        for i in range(20):
            await ref.tell(i)
    assert events == [*range(20), "on_stop"]
    assert ref.state is ActorState.STOPPED


async def test_shutdown_timeout_cancels_stuck_actors() -> None:
    class Stuck(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            await anyio.sleep_forever()

    start = time.monotonic()
    with anyio.fail_after(LIMIT), pytest.raises(ShutdownTimeout) as timed_out:
        async with open_nursery(shutdown_timeout=0.05) as nursery:
            ref = await nursery.start_actor(Stuck, name="stuck")
            await ref.tell("x")
            await ref.tell("y")
            await anyio.wait_all_tasks_blocked()  # "x" in hand, "y" queued
    assert time.monotonic() - start < 2
    assert ref.state is ActorState.STOPPED
    assert timed_out.value.left == {"stuck": 2}
    assert "'stuck': 2" in str(timed_out.value)
    assert "0.05 s" in str(timed_out.value)


async def test_body_error_cancels_actors_and_is_raised_unwrapped() -> None:
    with pytest.raises(KeyError):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Counter)
            await ref.tell("x")
            raise KeyError("body")
    assert ref.state is ActorState.STOPPED


async def test_cancellation_mid_traffic_leaves_nothing_behind() -> None:
    # Warm up whatever the event loop creates once per run (trio's timer task).
    with pytest.raises(MessageTimeout):
        async with open_nursery() as warm:
            ref = await warm.start_actor(echo, paused=True)
            await ref.ask(0, timeout=0.001)
    await anyio.lowlevel.checkpoint()
    tasks_before = task_count()
    threads_before = set(threading.enumerate())  # by identity: an older thread may end
    refs: list[ActorRef[Any, Any]] = []
    outcomes: list[str] = []
    producers = 9
    flowing = 0
    all_flowing = anyio.Event()

    async def producer(ref: ActorRef[Any, Any], kind: str) -> None:
        nonlocal flowing
        try:
            i = 0
            while True:
                i += 1
                if kind == "ask":
                    await ref.ask(i)
                elif kind == "timed":
                    await ref.ask(i, timeout=1)
                else:
                    await ref.tell(i)
                if i == 100:  # this producer's traffic is flowing
                    flowing += 1
                    if flowing == producers:
                        all_flowing.set()
        except BaseException as exc:
            outcomes.append(type(exc).__name__)
            raise

    class Busy(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            if message % 7 == 0:
                await anyio.lowlevel.checkpoint()
            return message

    with anyio.fail_after(LIMIT), anyio.CancelScope() as scope:
        async with open_nursery() as nursery:
            for i in range(3):
                ref = await nursery.start_actor(Busy, name=f"busy-{i}", capacity=16)
                refs.append(ref)
                for kind in ("ask", "timed", "tell"):
                    nursery._tg.start_soon(producer, ref, kind)
            await all_flowing.wait()
            scope.cancel()  # mid-traffic: every producer is still sending
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    await anyio.lowlevel.checkpoint()
    assert task_count() == tasks_before
    assert set(threading.enumerate()) <= threads_before
    assert len(outcomes) == 9
    for ref in refs:
        assert ref.state is ActorState.STOPPED
        stats = ref.statistics()
        assert stats.mailbox is not None
        assert stats.mailbox.depth == 0
        assert stats.mailbox.receivers_waiting == 0
        assert stats.mailbox.senders_waiting == 0
        assert stats.mailbox.sent == (
            stats.mailbox.received + stats.mailbox.dropped + stats.mailbox.discarded
        )


async def test_soak_100k_messages_nothing_lost() -> None:
    producers = 4
    per_producer = 25_000
    total = 0
    count = 0

    class Summer(Actor[int, int]):
        async def handle(self, message: int) -> int:
            nonlocal total, count
            total += message
            count += 1
            return count

    start = time.monotonic()
    with anyio.fail_after(30):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Summer, capacity=256)

            async def produce(pid: int) -> None:
                base = pid * per_producer
                for i in range(per_producer):
                    if i % 100 == 99:
                        await ref.ask(base + i)
                    else:
                        await ref.tell(base + i)

            async with anyio.create_task_group() as tg:
                for pid in range(producers):
                    tg.start_soon(produce, pid)
            assert await ref.ask(0) == producers * per_producer + 1
    n = producers * per_producer
    assert count == n + 1
    assert total == n * (n - 1) // 2
    stats = ref.statistics()
    assert stats.mailbox is not None
    assert stats.mailbox.sent == stats.mailbox.received == n + 1
    assert stats.mailbox.peak_depth <= 256
    assert time.monotonic() - start < 10


async def test_a_tell_cancelled_at_its_checkpoint_sends_nothing() -> None:
    """tell() yields to the scheduler now and then; when it does, it has not sent yet."""
    bound = 200_000  # tells, if the checkpoints never came
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, paused=True, capacity=bound)
        cancelled = told = 0
        while cancelled < 3 and told < bound:
            with anyio.CancelScope() as scope:
                scope.cancel()
                await ref.tell(told)
            told += 1
            cancelled += scope.cancelled_caught
        stats = ref.statistics().mailbox
        assert stats is not None
        assert cancelled == 3  # the periodic checkpoints met the cancellation
        assert stats.depth == told - cancelled
