"""pdc-ray's runner over the fake engine: a remote actor is an actor like any other."""

# ruff: noqa: PT012

from __future__ import annotations

import math
import threading
from typing import Any

import anyio
import pdc_ray
import pytest
from pdc_ray.testing import FakeEngine

from pdc_core import (
    Actor,
    ActorCrashed,
    ActorRef,
    ActorState,
    ActorStopped,
    MessageTimeout,
    RestartPolicy,
    open_nursery,
)

LIMIT = 10


class Echo(Actor[Any, Any]):
    def __init__(self, scale: int = 1) -> None:
        self.scale = scale
        self.started = False

    async def on_start(self) -> None:
        self.started = True

    async def handle(self, message: Any) -> Any:
        if isinstance(message, BaseException):
            raise message
        if isinstance(message, int):
            return message * self.scale
        return message


def state_of(ref: ActorRef[Any, Any]) -> ActorState:
    """The state now (a call: mypy keeps no narrowing of a property across awaits)."""
    return ref.state


async def double(message: int) -> int:
    return 2 * message


async def test_ask_tell_and_batches_through_a_reordering_engine() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=1) as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, 3, placement=pdc_ray.on(engine=engine))
            assert isinstance(ref, pdc_ray.RemoteActorRef)
            assert ref.state is ActorState.RUNNING
            assert nursery.actors == {ref.actor_id: ref}
            assert await ref.ask(5) == 15
            await ref.tell(1)
            assert await ref.ask_many(list(range(100))) == [3 * i for i in range(100)]
            replies = [r async for r in ref.ask_stream(range(10), window=4)]
            assert replies == [3 * i for i in range(10)]
            assert ref.location is not None
            assert ref.location.node_id == "fake-node"
            remote = await ref.remote_statistics()
            assert remote.handled == 1 + 1 + 100 + 10
            assert ref.statistics().handled == remote.handled
        assert engine.alive() == []
        assert isinstance(ref, pdc_ray.RemoteActorRef)
        assert ref.state is ActorState.STOPPED
        assert ref.location is None


async def test_an_async_handler_function_runs_remotely() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(double, name="d", placement=pdc_ray.on(engine=engine))
            assert ref.actor_id == "d"
            assert await ref.ask(21) == 42
        assert engine.alive() == []


async def test_many_concurrent_askers_each_get_their_own_reply() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=7) as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, 2, placement=pdc_ray.on(engine=engine))
            got: dict[int, int] = {}

            async def one(i: int) -> None:
                got[i] = await ref.ask(i)

            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(one, i)
            assert got == {i: 2 * i for i in range(200)}
        assert engine.alive() == []


async def test_remote_exception_arrives_with_its_type_and_remote_traceback() -> None:
    asked: list[BaseException] = []
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, anyio.create_task_group() as outside:

            async def asker(ref: pdc_ray.RemoteActorRef[Any, Any]) -> None:
                try:
                    await ref.ask(KeyError("boom"))
                except ActorCrashed as exc:
                    asked.append(exc)

            with pytest.raises(ActorCrashed) as info:
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(Echo, placement=pdc_ray.on(engine=engine))
                    assert isinstance(ref, pdc_ray.RemoteActorRef)
                    outside.start_soon(asker, ref)
                    await anyio.sleep_forever()
            assert engine.alive() == []
    assert info.value.actor_id == ref.actor_id
    assert isinstance(info.value.cause, KeyError)
    [crash] = asked
    assert isinstance(crash, ActorCrashed)
    assert crash.cause is info.value.cause  # one crash, one cause object
    notes = "\n".join(getattr(info.value.cause, "__notes__", []))
    assert "remote traceback" in notes
    assert "in handle" in notes
    assert ref.state is ActorState.CRASHED
    with pytest.raises(ActorCrashed):
        await ref.ask(1)


class Unbuildable(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}/{b}")


class RaisesUnbuildable(Actor[int, int]):
    async def handle(self, message: int) -> int:
        raise Unbuildable(message, 2)


async def test_a_cause_that_cannot_be_rebuilt_is_boxed_as_remote_error() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine:
            with pytest.raises(ActorCrashed) as info:
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(
                        RaisesUnbuildable, placement=pdc_ray.on(engine=engine)
                    )
                    await ref.tell(1)
                    await anyio.sleep_forever()
            assert engine.alive() == []
    cause = info.value.cause
    assert isinstance(cause, pdc_ray.RemoteError)
    assert cause.type_name.endswith("Unbuildable")
    assert cause.message == "1/2"
    assert "raise Unbuildable" in cause.remote_traceback


class FailsToStart(Actor[int, int]):
    async def on_start(self) -> None:
        raise RuntimeError("no device here")


async def test_a_failing_on_start_fails_the_start_and_leaves_nothing() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            with pytest.raises(ActorCrashed, match="while starting") as info:
                await nursery.start_actor(FailsToStart, placement=pdc_ray.on(engine=engine))
            assert isinstance(info.value.cause, RuntimeError)
            assert "no device here" in str(info.value.cause)
            assert nursery.actors == {}
            assert engine.alive() == []


async def test_an_unsatisfiable_placement_fails_at_start_timeout_and_leaves_nothing() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(resources={"CPU": 2, "accelerator": 1}) as engine:
            async with open_nursery() as nursery:
                placement = pdc_ray.on(
                    resources={"accelerator": 2}, start_timeout=0.05, engine=engine
                )
                with pytest.raises(ActorCrashed, match="while starting") as info:
                    await nursery.start_actor(Echo, placement=placement)
                assert isinstance(info.value.cause, pdc_ray.PlacementTimeout)
                assert "start_timeout" in str(info.value.cause)
                assert nursery.actors == {}
                assert engine.alive() == []
                # One accelerator is there: that placement starts.
                ok = pdc_ray.on(resources={"accelerator": 1}, engine=engine)
                ref = await nursery.start_actor(Echo, placement=ok)
                assert await ref.ask(2) == 2
            assert engine.alive() == []


async def test_a_hanging_start_is_bounded_by_start_timeout() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            engine.hold("start")
            with pytest.raises(ActorCrashed, match="while starting") as info:
                await nursery.start_actor(
                    Echo, placement=pdc_ray.on(start_timeout=0.05, engine=engine)
                )
            assert isinstance(info.value.cause, pdc_ray.PlacementTimeout)
            assert engine.alive() == []
            engine.release("start")


async def test_an_unpicklable_target_fails_the_start_naming_it() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:

            async def local_handler(message: int) -> int:
                return message

            with pytest.raises(ActorCrashed, match="while starting") as info:
                await nursery.start_actor(local_handler, placement=pdc_ray.on(engine=engine))
            assert isinstance(info.value.cause, TypeError)
            assert "does not pickle" in str(info.value.cause)
            assert engine.alive() == []


async def test_an_unpicklable_message_fails_its_ask_and_the_rest_go_on() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, placement=pdc_ray.on(engine=engine))
            with pytest.raises(TypeError, match="cannot send to remote actor"):
                await ref.ask(threading.Lock())
            assert await ref.ask(4) == 4
            assert await ref.ask_many([1, 2]) == [1, 2]
        assert engine.alive() == []


class LockMaker(Actor[Any, Any]):
    """Replies with something that cannot be pickled when asked for "lock"."""

    async def handle(self, message: Any) -> Any:
        return threading.Lock() if message == "lock" else message


async def test_an_unpicklable_reply_fails_its_ask_with_a_type_error_and_the_actor_goes_on() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(LockMaker, placement=pdc_ray.on(engine=engine))
            with pytest.raises(TypeError) as info:
                await ref.ask("lock")
            text = str(info.value)
            assert "could not be sent back" in text
            assert "LockMaker" in text or ref.actor_id in text
            assert "lock" in text  # pickle's own reason ("cannot pickle '_thread.lock'")
            assert "\x1b[" not in text  # no terminal colours
            assert await ref.ask(4) == 4  # the actor goes on
            with pytest.raises(TypeError, match="could not be sent back"):
                await ref.ask_many([1, "lock", 2])  # one bad reply fails that ask only
            assert await ref.ask_many([1, 2]) == [1, 2]
            await ref.tell("lock")  # nobody waits for it: nothing to fail, no crash
            assert await ref.ask(5) == 5
            assert ref.state is ActorState.RUNNING
            assert ref.statistics().errors == 0
        assert engine.alive() == []


async def test_restart_policy_restarts_in_a_fresh_process_with_the_same_ref() -> None:
    policy = RestartPolicy(max_restarts=2, within=10, backoff=0)
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(
                Echo, 10, placement=pdc_ray.on(engine=engine), restart=policy
            )
            assert isinstance(ref, pdc_ray.RemoteActorRef)
            first = ref.location
            with pytest.raises(ActorCrashed) as info:
                await ref.ask(ValueError("once"))
            assert isinstance(info.value.cause, ValueError)
            assert await ref.ask(7) == 70  # queued here until the next incarnation
            assert ref.statistics().restarts == 1
            assert ref.location is not None
            assert first is not None
            assert ref.location.pid != first.pid
            assert len(engine.processes) == 2
            assert len(engine.alive()) == 1
        assert engine.alive() == []


async def test_stop_fails_what_is_queued_and_ask_after_stop_raises() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, placement=pdc_ray.on(engine=engine))
            await ref.pause()
            assert ref.state is ActorState.PAUSED
            failed: list[BaseException] = []

            async def asker() -> None:
                try:
                    await ref.ask(1)
                except ActorStopped as exc:
                    failed.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(asker)
                await anyio.wait_all_tasks_blocked()
                await ref.stop()
            assert len(failed) == 1
            assert state_of(ref) is ActorState.STOPPED
            with pytest.raises(ActorStopped):
                await ref.ask(1)
            assert engine.alive() == []


async def test_stop_with_drain_handles_everything_queued_first() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=3) as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, 2, placement=pdc_ray.on(engine=engine))
            await ref.pause()
            results: list[int] = []

            async def asker(i: int) -> None:
                results.append(await ref.ask(i))

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(asker, i)
                await anyio.wait_all_tasks_blocked()
                await ref.stop(drain=True)
            assert sorted(results) == [2 * i for i in range(20)]
            assert engine.alive() == []


async def test_ask_timeout_is_a_message_timeout_and_the_actor_goes_on() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, placement=pdc_ray.on(engine=engine))
            await ref.pause()
            with pytest.raises(MessageTimeout):
                await ref.ask(1, timeout=0.01)
            await ref.resume()
            assert await ref.ask(2) == 2
            assert ref.statistics().skipped == 1  # the timed-out request was never shipped
        assert engine.alive() == []


async def test_bad_input_is_refused_naming_the_problem() -> None:
    with pytest.raises(ValueError, match="window"):
        pdc_ray.on(window=0)
    with pytest.raises(ValueError, match="num_gpus"):
        pdc_ray.on(num_gpus=-1)
    with pytest.raises(TypeError, match="num_cpus"):
        pdc_ray.on(num_cpus="2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start_timeout"):
        pdc_ray.on(start_timeout=0)
    with pytest.raises(ValueError, match="num_gpus"):
        pdc_ray.on(resources={"GPU": 1})
    with pytest.raises(ValueError, match="bundle_index needs"):
        pdc_ray.on(bundle_index=0)
    with pytest.raises(TypeError, match="engine"):
        pdc_ray.on(engine="ray")  # type: ignore[arg-type]
    async with FakeEngine() as engine, open_nursery() as nursery:
        placement = pdc_ray.on(engine=engine)
        with pytest.raises(TypeError, match="cannot place 42"):
            await nursery.start_actor(42, placement=placement)
        ref = await nursery.start_actor(Echo, placement=placement)
        with pytest.raises(ValueError, match="priority"):
            await ref.ask(1, priority=256)
        with pytest.raises(ValueError, match="timeout is NaN"):
            await ref.ask(1, timeout=math.nan)  # -1 means "now", as on a local actor
        assert nursery.actors == {ref.actor_id: ref}
