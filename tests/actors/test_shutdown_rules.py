"""Stopping holds in every state; misuse that used to hang or fail late is refused early."""

from __future__ import annotations

import math
from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import (
    Actor,
    ActorState,
    LifecycleError,
    PersistentKernel,
    PersistentKernelActor,
    RestartPolicy,
    ShutdownTimeout,
    open_nursery,
)

LIMIT = 10  # seconds: no test may hang
SLOW_RESTART = RestartPolicy(max_restarts=5, backoff=60.0, max_backoff=60.0)


class CrashOnce(Actor[Any, Any]):
    """Crashes on "boom", so a restart policy makes it wait out its backoff."""

    async def handle(self, message: Any) -> Any:
        if message == "boom":
            raise RuntimeError("boom")
        return message


async def _until_restarting(ref: Any) -> None:
    await anyio.wait_all_tasks_blocked()  # the crash is handled: the backoff has begun
    assert ref.state is ActorState.RESTARTING


@pytest.mark.parametrize("drain", [False, True])
async def test_stop_with_a_timeout_holds_during_a_restart_backoff(drain: bool) -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(CrashOnce, restart=SLOW_RESTART)
            await ref.tell("boom")
            await _until_restarting(ref)
            await ref.stop(drain=drain, timeout=0.05)  # a 60 s backoff must not hold it
            assert ref.state is ActorState.STOPPED


async def test_stop_without_drain_ends_a_restart_backoff_at_once() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(CrashOnce, restart=SLOW_RESTART)
            await ref.tell("boom")
            await _until_restarting(ref)
            await ref.stop()
            assert ref.state is ActorState.STOPPED


async def test_shutdown_timeout_holds_during_a_restart_backoff() -> None:
    with anyio.fail_after(LIMIT), pytest.raises(ShutdownTimeout) as timed_out:  # noqa: PT012
        async with open_nursery(shutdown_timeout=0.05) as nursery:
            ref = await nursery.start_actor(CrashOnce, name="phoenix", restart=SLOW_RESTART)
            await ref.tell("boom")
            await _until_restarting(ref)
            await ref.tell("queued")  # for the next incarnation: the exit waits for it
    assert timed_out.value.left == {"phoenix": 1}


async def test_the_nursery_exit_stops_an_idle_actor_waiting_out_its_backoff_at_once() -> None:
    """An actor waiting to restart with nothing queued is idle: the exit does not wait
    out its 60 s backoff."""
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(CrashOnce, restart=SLOW_RESTART)
            other = await nursery.start_actor(CrashOnce)
            await ref.tell("boom")
            await _until_restarting(ref)
            exiting = anyio.current_time()
        assert anyio.current_time() - exiting < LIMIT / 2
    assert ref.state is ActorState.STOPPED
    assert other.state is ActorState.STOPPED
    stats = ref.statistics()
    assert (stats.errors, stats.restarts) == (1, 1)


async def test_at_the_nursery_exit_a_message_queued_during_a_backoff_is_handled() -> None:
    handled: list[Any] = []

    class Remembers(CrashOnce):
        async def handle(self, message: Any) -> Any:
            handled.append(message)
            return await super().handle(message)

    quick = RestartPolicy(max_restarts=5, backoff=0.2, max_backoff=0.2)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Remembers, restart=quick)
            await ref.tell("boom")
            await _until_restarting(ref)
            await ref.tell("after")  # not idle: the exit waits for the new incarnation
    assert handled == ["boom", "after"]
    assert ref.state is ActorState.STOPPED


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"within": math.nan}, ValueError, "within must be finite"),
        ({"backoff": math.inf}, ValueError, "backoff must be finite"),
        ({"max_backoff": math.nan}, ValueError, "max_backoff must be finite"),
        ({"max_restarts": 2.5}, TypeError, "max_restarts must be an int"),
        ({"max_restarts": "3"}, TypeError, "max_restarts must be an int"),
        ({"max_restarts": True}, TypeError, "max_restarts must be an int"),
        ({"backoff": "1"}, TypeError, "backoff must be a number"),
        ({"max_restarts": -1}, ValueError, "max_restarts must be >= 0"),
    ],
)
def test_restart_policy_is_validated_at_construction(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        RestartPolicy(**options)


async def test_start_actor_checks_the_restart_policy() -> None:
    async with open_nursery() as nursery:
        with pytest.raises(TypeError, match="restart must be a RestartPolicy"):
            await nursery.start_actor(CrashOnce, restart=5)  # type: ignore[arg-type]
        assert nursery.actors == {}


async def test_an_actor_asking_itself_is_refused_by_name() -> None:
    errors: list[BaseException] = []

    class Narcissus(Actor[Any, Any]):
        async def handle(self, message: Any) -> Any:
            for call in (self.ref.ask(message), self.ref.ask_many([message])):
                try:
                    await call
                except LifecycleError as exc:
                    errors.append(exc)
            return "done"

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Narcissus, name="narcissus")
            assert await ref.ask("me") == "done"
    assert len(errors) == 2
    assert all("'narcissus'" in str(error) for error in errors)
    assert "ask() on itself" in str(errors[0])
    assert "ask_many() on itself" in str(errors[1])


async def test_a_runner_that_already_ran_is_refused() -> None:
    pytest.importorskip("pdc_cpu", reason="needs the cpu backend")
    dtype = np.dtype([("x", "<f8")])
    kernel = PersistentKernel("once", dtype, dtype, capacity=4, bodies={"cpu": lambda r: r})
    actor = PersistentKernelActor(kernel, "cpu")
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(actor)
        assert float((await ref.ask((2.0,)))["x"]) == 2.0
    async with open_nursery() as nursery:
        with pytest.raises(LifecycleError, match="has already run in a nursery"):
            await nursery.start_actor(actor)


async def test_a_plain_def_handler_is_named_at_start() -> None:
    def forgot_async(message: Any) -> Any:
        return message

    async with open_nursery() as nursery:
        with pytest.raises(TypeError, match=r"'forgot_async' is a plain function .* `async def"):
            await nursery.start_actor(forgot_async)
        assert nursery.actors == {}


async def test_a_factory_returning_something_else_says_what_a_handler_is() -> None:
    def factory() -> Any:
        return 42

    with pytest.raises(Exception, match=r"returned int, not an Actor .*async def"):
        async with open_nursery() as nursery:
            await nursery.start_actor(factory)


def test_a_mailbox_belongs_to_the_loop_that_first_used_it() -> None:
    import asyncio

    from pdc_core import Mailbox

    mailbox: Mailbox[int] = Mailbox()

    async def first() -> None:
        await mailbox.send(1)
        assert await mailbox.receive() == 1

    async def second() -> None:
        await mailbox.receive()

    asyncio.run(first())
    with pytest.raises(RuntimeError, match="belongs to the asyncio event loop that first used it"):
        asyncio.run(second())
