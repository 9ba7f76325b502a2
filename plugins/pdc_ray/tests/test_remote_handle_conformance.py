"""pdc-ray's handles pass the handle conformance kit: a remote actor and a remote
persistent kernel, through the fake engine (which reorders calls and pickles what
crosses the wire), and the three drifts of the old copy of the rules, pinned."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
import pdc_ray
import pytest
from pdc_ray.testing import FakeEngine

from pdc_core import (
    Actor,
    ActorNursery,
    ActorRef,
    MessageTimeout,
    open_nursery,
)
from pdc_core.testing import ActorRefConformance, Echo

LIMIT = 20


class RemoteEcho(Actor[Any, int]):
    """The kit's echo, run remotely: found again by its key after pickling."""

    def __init__(self, key: str) -> None:
        self.key = key

    async def handle(self, message: Any) -> int:
        return await Echo.named(self.key).handle_async(message.value)


class _OnFakeEngine(ActorRefConformance):
    """One call on the wire at a time (``window=1``): a request sent while the actor is
    busy waits here, so a stop without drain fails it here, as the kit expects; with a
    wider window it may already be in the remote mailbox and be answered before the
    stop arrives there (delivery is at most once, never lost without an error)."""

    engine: FakeEngine

    @asynccontextmanager
    async def around(self) -> AsyncIterator[None]:
        async with FakeEngine(seed=7) as engine:
            self.engine = engine
            yield

    def tracked(self, ref: ActorRef[Any, Any]) -> int | None:
        runner = ref._runner  # type: ignore[attr-defined]
        return len(runner._inflight) + len(runner._mailbox)


class TestRemoteActorHandles(_OnFakeEngine):
    async def start(self, nursery: ActorNursery, echo: Echo) -> ActorRef[Any, Any]:
        placement = pdc_ray.on(engine=self.engine, heartbeat=60, window=1)
        return await nursery.start_actor(RemoteEcho, echo.key, placement=placement)


class TestRemoteKernelHandles(_OnFakeEngine):
    orders_by_priority = True  # a remote kernel's requests wait in a local mailbox
    messages_carry_priority = False

    async def start(self, nursery: ActorNursery, echo: Echo) -> ActorRef[Any, Any]:
        kernel = echo.kernel()
        placement = pdc_ray.on(engine=self.engine, backend="cpu", heartbeat=60, window=1)
        return await nursery.start_actor(kernel, placement=placement)

    def message(self, value: int, priority: int | None = None) -> Any:
        return (value,)

    def value(self, reply: Any) -> int:
        return int(reply["v"])


async def double(message: int) -> int:
    return message * 2


async def _outcome(call: Any) -> str:
    """What a call did: its reply, or its error's type and text (actor id elided)."""
    try:
        return f"reply {await call()!r}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".replace("'remote'", "'X'").replace("'local'", "'X'")


async def test_the_three_drifts_behave_as_on_a_local_actor() -> None:
    """pdc-ray once copied the rules and drifted: ``timeout=-1`` raised ValueError,
    ``timeout=inf`` went on as inf, ``priority=numpy.int64(5)`` raised TypeError."""

    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=3) as engine, open_nursery() as nursery:
            local = await nursery.start_actor(double, name="local")
            remote = await nursery.start_actor(
                double, name="remote", placement=pdc_ray.on(engine=engine)
            )
            outcomes: dict[str, list[str]] = {}
            for ref in (local, remote):
                held: list[str] = outcomes.setdefault(ref.actor_id, [])
                held.append(await _outcome(lambda r=ref: r.ask(2, timeout=math.inf)))
                held.append(await _outcome(lambda r=ref: r.ask(3, priority=np.int64(5))))
                held.append(await _outcome(lambda r=ref: r.ask_many([4], priority=np.int64(5))))
                held.append(await _outcome(lambda r=ref: r.ask_many([5], timeout=np.float64(30))))
            assert (
                outcomes["local"]
                == outcomes["remote"]
                == [
                    "reply 4",
                    "reply 6",
                    "reply [8]",
                    "reply [10]",
                ]
            )
            # -1 means "now": a MessageTimeout with the same text (the actor may or may
            # not have handled the request; nobody waits for its reply).
            for ref in (local, remote):
                with pytest.raises(MessageTimeout) as info:
                    await ref.ask(1, timeout=-1)
                assert str(info.value) == f"actor {ref.actor_id!r} did not reply within -1 s"


@pytest.mark.usefixtures("ray_cluster")
async def test_the_three_drifts_behave_as_on_a_local_actor_on_real_ray() -> None:
    """The same, with the actor in a real Ray worker process (the kit itself needs the
    echo in this process, which only the fake engine gives)."""
    with anyio.fail_after(120):
        async with open_nursery() as nursery:
            local = await nursery.start_actor(double, name="local")
            remote = await nursery.start_actor(
                double, name="remote", placement=pdc_ray.on(num_cpus=0)
            )
            for ref in (local, remote):
                assert await ref.ask(2, timeout=math.inf) == 4
                assert await ref.ask(3, priority=np.int64(5)) == 6
                assert await ref.ask_many([5], timeout=np.float64(30)) == [10]
                with pytest.raises(MessageTimeout) as info:
                    await ref.ask(1, timeout=-1)
                assert str(info.value) == f"actor {ref.actor_id!r} did not reply within -1 s"
