"""A mailbox hands items and room over as anyio's memory streams do (issue 41).

* An item sent while a receiver waits is that receiver's: another task's
  ``receive_nowait`` cannot take it, and ``send_nowait`` succeeds while a receiver waits
  (a waiting receiver is room).
* The receive that makes room moves the first waiting sender's item in at once: senders
  are served in the order they began to wait, a later ``send_nowait`` finds the mailbox
  full, and a send that was handed room is done even if ``close()`` follows.
* ``Mailbox(0)`` is unbuffered (anyio's ``max_buffer_size=0``): a send completes when a
  receiver takes the item; the policies keep a meaning; the counters hold.
* ``MailboxFull`` is an ``anyio.WouldBlock`` naming the real policy; ``with mailbox:``.

Every test runs under asyncio and trio; waits are for conditions, never for time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from pdc_core import Mailbox, MailboxClosed, MailboxFull

LIMIT = 10  # seconds: no test may hang


async def wait_until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(LIMIT):
        while not condition():  # noqa: ASYNC110 - a condition on the mailbox, not an event
            await anyio.sleep(0.001)


def holds(box: Mailbox[Any]) -> None:
    stats = box.statistics()
    assert stats.sent == stats.received + stats.dropped + stats.discarded + stats.depth


async def test_an_item_sent_to_a_waiting_receiver_is_that_receivers() -> None:
    box: Mailbox[str] = Mailbox(1)
    got: list[Any] = []

    async def receiver() -> None:
        got.append(await box.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await wait_until(lambda: box.statistics().receivers_waiting == 1)
        box.send_nowait("x")
        with pytest.raises(anyio.WouldBlock):
            box.receive_nowait()  # "x" is the waiting receiver's
    assert got == ["x"]
    holds(box)


async def test_send_nowait_succeeds_while_receivers_wait() -> None:
    box: Mailbox[str] = Mailbox(1)
    got: list[Any] = []

    async def receiver() -> None:
        got.append(await box.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        tg.start_soon(receiver)
        await wait_until(lambda: box.statistics().receivers_waiting == 2)
        box.send_nowait("hello")
        box.send_nowait("anyio")  # room: a second receiver waits
    assert sorted(got) == ["anyio", "hello"]
    holds(box)


async def test_a_receive_moves_the_first_waiting_senders_item_in_at_once() -> None:
    box: Mailbox[int] = Mailbox(1)
    box.send_nowait(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(box.send, 2)
        await wait_until(lambda: box.statistics().senders_waiting == 1)
        assert box.receive_nowait() == 1
        with pytest.raises(MailboxFull):
            box.send_nowait(3)  # 2 moved in at the receive: full again
    assert box.receive_nowait() == 2
    holds(box)


async def test_waiting_senders_are_served_in_order() -> None:
    box: Mailbox[int] = Mailbox(1)
    box.send_nowait(0)
    async with anyio.create_task_group() as tg:
        for n in (1, 2, 3):
            tg.start_soon(box.send, n)
            await wait_until(lambda n=n: box.statistics().senders_waiting == n)  # type: ignore[misc]
        got = []
        for _ in range(4):
            got.append(box.receive_nowait())
            box_full = box.statistics().depth == 1 or not box.statistics().senders_waiting
            assert box_full
    assert got == [0, 1, 2, 3]
    holds(box)


async def test_a_send_handed_room_completes_even_if_close_follows() -> None:
    box: Mailbox[str] = Mailbox(1)
    box.send_nowait("a")
    outcome: list[str] = []

    async def sender() -> None:
        await box.send("b")
        outcome.append("sent")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await wait_until(lambda: box.statistics().senders_waiting == 1)
        assert box.receive_nowait() == "a"
        box.close()
    assert outcome == ["sent"]
    assert box.receive_nowait() == "b"
    with pytest.raises(anyio.EndOfStream):
        box.receive_nowait()
    holds(box)


async def test_close_fails_a_send_still_waiting() -> None:
    box: Mailbox[str] = Mailbox(1)
    box.send_nowait("a")
    errors: list[BaseException] = []

    async def sender() -> None:
        try:
            await box.send("b")
        except MailboxClosed as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await wait_until(lambda: box.statistics().senders_waiting == 1)
        box.close()
    assert len(errors) == 1
    assert isinstance(errors[0], anyio.ClosedResourceError)
    assert box.receive_nowait() == "a"
    holds(box)


async def test_priorities_still_order_buffered_items_and_waiting_senders_join_in_order() -> None:
    box: Mailbox[str] = Mailbox(2)
    box.send_nowait("low", 1)
    box.send_nowait("high", 200)
    async with anyio.create_task_group() as tg:
        tg.start_soon(box.send, "mid", 100)
        await wait_until(lambda: box.statistics().senders_waiting == 1)
        assert box.receive_nowait() == "high"  # makes room: "mid" moves in
    assert [box.receive_nowait(), box.receive_nowait()] == ["mid", "low"]
    holds(box)


async def test_a_cancelled_receiver_handed_an_item_loses_nothing() -> None:
    box: Mailbox[int] = Mailbox(4)
    got: list[Any] = []

    async def receiver(scope: anyio.CancelScope) -> None:
        with scope:
            got.append(await box.receive())

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver, scope)
        await wait_until(lambda: box.statistics().receivers_waiting == 1)
        box.send_nowait(7)
        scope.cancel()  # before the receiver runs: on asyncio its wake-up is pending
    if not got:
        assert box.receive_nowait() == 7  # put back, not lost
    holds(box)


# -- unbuffered mailboxes ----------------------------------------------------------------


async def test_unbuffered_send_waits_for_a_receiver() -> None:
    box: Mailbox[str] = Mailbox(0)
    assert box.capacity == 0
    with pytest.raises(MailboxFull):
        box.send_nowait("nobody waits")
    done: list[str] = []

    async def sender() -> None:
        await box.send("x")
        done.append("x")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await wait_until(lambda: box.statistics().senders_waiting == 1)
        assert not done
        assert box.statistics().depth == 0
        assert box.receive_nowait() == "x"
    assert done == ["x"]
    stats = box.statistics()
    assert (stats.sent, stats.received, stats.rejected, stats.depth) == (1, 1, 1, 0)
    assert stats.peak_depth == 0
    holds(box)


async def test_unbuffered_send_nowait_succeeds_when_a_receiver_waits() -> None:
    box: Mailbox[int] = Mailbox(0)
    got: list[Any] = []

    async def receiver() -> None:
        async for item in box:
            got.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        for n in range(5):
            await wait_until(lambda: box.statistics().receivers_waiting == 1)
            box.send_nowait(n)
        await wait_until(lambda: box.statistics().receivers_waiting == 1)
        box.close()
    assert got == [0, 1, 2, 3, 4]
    holds(box)


async def test_unbuffered_producers_and_consumer_in_order() -> None:
    box: Mailbox[int] = Mailbox(0)
    got: list[Any] = []

    async def producer(base: int) -> None:
        for n in range(base, base + 20):
            await box.send(n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(producer, 0)
        tg.start_soon(producer, 100)
        for _ in range(40):
            got.append(await box.receive())
    assert sorted(got) == [*range(20), *range(100, 120)]
    assert [n for n in got if n < 100] == list(range(20))
    holds(box)


async def test_unbuffered_policies() -> None:
    raising: Mailbox[int] = Mailbox(0, backpressure="raise")
    with pytest.raises(MailboxFull, match="'raise'"):
        await raising.send(1)
    dropping: Mailbox[int] = Mailbox(0, backpressure="drop_oldest")
    await dropping.send(1)  # nobody waits: the newcomer itself is dropped
    stats = dropping.statistics()
    assert (stats.sent, stats.dropped, stats.depth) == (1, 1, 0)
    got: list[Any] = []

    async def receiver() -> None:
        got.append(await dropping.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await wait_until(lambda: dropping.statistics().receivers_waiting == 1)
        await dropping.send(2)  # a receiver waits: it takes it
    assert got == [2]
    holds(dropping)
    holds(raising)


# -- the rest of the anyio surface -------------------------------------------------------


def test_mailbox_full_is_would_block_and_names_the_real_policy() -> None:
    box: Mailbox[int] = Mailbox(1)  # "block"
    box.send_nowait(1)
    with pytest.raises(anyio.WouldBlock) as caught:
        box.send_nowait(2)
    assert isinstance(caught.value, MailboxFull)
    assert "'block'" in str(caught.value)
    assert "'raise'" not in str(caught.value)


def test_sync_with_closes_the_mailbox() -> None:
    box: Mailbox[int] = Mailbox(1)
    with box as entered:
        assert entered is box
        box.send_nowait(1)
    assert box.closed
    assert box.receive_nowait() == 1


async def test_a_send_cancelled_after_its_item_moved_in_has_sent_it_once() -> None:
    box: Mailbox[str] = Mailbox(1)
    box.send_nowait("a")
    scope = anyio.CancelScope()

    async def sender() -> None:
        with scope:
            await box.send("b")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await wait_until(lambda: box.statistics().senders_waiting == 1)
        assert box.receive_nowait() == "a"  # moves "b" in: that send is done
        scope.cancel()  # before the sender runs again
    assert box.receive_nowait() == "b"
    with pytest.raises(anyio.WouldBlock):
        box.receive_nowait()
    stats = box.statistics()
    assert (stats.sent, stats.received) == (2, 2)
    holds(box)


async def test_a_cancelled_waiting_send_sends_nothing_and_leaves_the_line() -> None:
    box: Mailbox[str] = Mailbox(1)
    box.send_nowait("a")
    scope = anyio.CancelScope()

    async def sender() -> None:
        with scope:
            await box.send("b")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        tg.start_soon(box.send, "c")
        await wait_until(lambda: box.statistics().senders_waiting == 2)
        scope.cancel()
        await wait_until(lambda: box.statistics().senders_waiting == 1)
        assert box.receive_nowait() == "a"  # moves "c" in: "b" left the line
    assert box.receive_nowait() == "c"
    holds(box)
