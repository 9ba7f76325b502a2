"""Batch actors lose nothing silently, and actors can be unbuffered (issue 41).

* ``handle_batch`` returning ``None`` is accepted for a batch of tells; for a batch with
  asks it is an error naming the actor and the count it must return.
* When ``handle_batch`` raises, every message of that batch is accounted: each ask fails
  with ``ActorCrashed`` and every message is counted in ``ActorStatistics.failed``, so
  ``mailbox.received == handled + failed + skipped`` holds.
* ``start_actor(..., capacity=0)``: a tell waits until the actor takes the message.

Every test runs under asyncio and trio.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from pdc_core import Actor, ActorCrashed, RestartPolicy, open_nursery

LIMIT = 20  # seconds: no test may hang


def accounted(ref: Any) -> None:
    stats = ref.statistics()
    assert stats.mailbox is not None
    assert stats.mailbox.received == stats.handled + stats.failed + stats.skipped


class Summer(Actor[str, None]):
    """A tell-only batch actor whose first draft returns nothing; "x" is a bad message."""

    def __init__(self) -> None:
        self.total = 0

    async def handle_batch(self, messages: list[str]) -> None:  # type: ignore[override]
        self.total += sum(int(m) for m in messages)


async def test_handle_batch_returning_none_is_accepted_for_tells() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Summer, max_batch=8)
            await ref.tell_many(["1"] * 50)
            await ref.stop(drain=True)
    stats = ref.statistics()
    assert stats.handled == 50
    assert stats.failed == 0
    accounted(ref)


async def test_handle_batch_returning_none_for_an_ask_names_the_actor_and_count() -> None:
    with pytest.raises(ActorCrashed) as info:  # noqa: PT012 - the crash leaves the nursery
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Summer, name="summer")
            await ref.ask("1")
    cause = info.value.cause
    assert isinstance(cause, TypeError)
    assert "'summer'" in str(cause)
    assert "returned None" in str(cause)
    assert "list of 1 replies" in str(cause)


async def test_a_failing_batch_fails_all_its_messages_and_counts_them() -> None:
    policy = RestartPolicy(max_restarts=5, within=60, backoff=0)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(
                Summer, restart=policy, max_batch=16, paused=True, capacity=1024
            )
            await ref.tell_many(["7"] * 30 + ["x"] + ["7"] * 30)
            await ref.resume()
            await ref.stop(drain=True)
    stats = ref.statistics()
    assert stats.mailbox is not None
    assert stats.mailbox.sent == 61
    assert stats.errors == 1
    assert stats.failed == 16  # the batch that held "x": all of it
    assert stats.handled == 61 - 16
    accounted(ref)


async def test_a_failing_batch_fails_each_ask_with_actor_crashed() -> None:
    class Picky(Actor[str, str]):
        async def handle_batch(self, messages: list[str]) -> list[str]:
            if "x" in messages:
                raise ValueError("bad message")
            return messages

    policy = RestartPolicy(max_restarts=5, within=60, backoff=0)
    outcomes: list[Any] = []
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Picky, restart=policy, max_batch=8, paused=True)

            async def ask(message: str) -> None:
                try:
                    outcomes.append(await ref.ask(message))
                except ActorCrashed as exc:
                    outcomes.append(exc)

            async with anyio.create_task_group() as tg:
                for message in ("a", "x", "b"):
                    tg.start_soon(ask, message)
                with anyio.fail_after(LIMIT):
                    while ref.statistics().mailbox.depth < 3:  # type: ignore[union-attr]  # noqa: ASYNC110
                        await anyio.sleep(0.001)
                await ref.resume()
            assert await ref.ask("c") == "c"  # restarted
    assert len(outcomes) == 3
    assert all(isinstance(outcome, ActorCrashed) for outcome in outcomes)
    stats = ref.statistics()
    assert stats.failed == 3
    accounted(ref)


async def test_unbuffered_actor_tell_waits_for_the_actor_to_take_it() -> None:
    got: list[int] = []
    gate = anyio.Event()

    async def slow(message: int) -> int:
        await gate.wait()
        got.append(message)
        return message

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(slow, capacity=0)
            await ref.tell(1)  # the idle actor takes it at once
            told = anyio.Event()

            async def tell_second() -> None:
                await ref.tell(2)
                told.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(tell_second)
                while ref.statistics().mailbox.senders_waiting < 1:  # type: ignore[union-attr]  # noqa: ASYNC110
                    await anyio.sleep(0.001)
                assert not told.is_set()  # the actor is busy with 1: the tell waits
                gate.set()
            assert await ref.ask(3) == 3
            await ref.stop(drain=True)
    assert got == [1, 2, 3]
    stats = ref.statistics()
    assert stats.mailbox is not None
    assert stats.mailbox.capacity == 0
    assert stats.mailbox.depth == 0
    accounted(ref)
