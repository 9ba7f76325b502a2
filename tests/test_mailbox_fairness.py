"""Fair turns: a task whose sends, receives and tells never wait still lets other tasks
(and cancellation) in, however it spreads them over mailboxes and actors.

Each test runs a task that does only operations completing without waiting, bounded so
that a broken build fails instead of hanging, and checks a condition: another task got
to run (or cancelled it) before the bound was reached. The bounds stay under 64
operations per mailbox, the case a count kept per mailbox never yielded in. Async tests
run under asyncio and trio (see tests/conftest.py).
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel

from pdc_core import Mailbox, open_nursery

#: Mailboxes (or actors) a busy task spreads its operations over, and operations per
#: mailbox: 120,000 operations, far more than a millisecond's worth on any machine.
SPREAD = 2_000
PER_MAILBOX = 60


class Witness:
    """A task that records that it ran: started before the busy task begins."""

    def __init__(self) -> None:
        self.ran = False

    async def run(self) -> None:
        self.ran = True


async def test_sends_spread_over_many_mailboxes_let_another_task_run() -> None:
    mailboxes: list[Mailbox[int]] = [Mailbox(PER_MAILBOX) for _ in range(SPREAD)]
    witness = Witness()
    sent = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(witness.run)
        for round_index in range(PER_MAILBOX):
            for mailbox in mailboxes:
                await mailbox.send(round_index)
                sent += 1
                if witness.ran:
                    break
            if witness.ran:
                break
    assert witness.ran, f"{sent} sends over {SPREAD} mailboxes never yielded"
    assert sent < SPREAD * PER_MAILBOX
    assert sum(len(mailbox) for mailbox in mailboxes) == sent


async def test_receives_spread_over_many_mailboxes_let_another_task_run() -> None:
    mailboxes: list[Mailbox[int]] = [Mailbox(PER_MAILBOX) for _ in range(SPREAD)]
    for mailbox in mailboxes:
        mailbox.send_many_nowait(range(PER_MAILBOX))
    witness = Witness()
    received = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(witness.run)
        for round_index in range(PER_MAILBOX):
            for mailbox in mailboxes:
                assert await mailbox.receive() == round_index
                received += 1
                if witness.ran:
                    break
            if witness.ran:
                break
    assert witness.ran, f"{received} receives over {SPREAD} mailboxes never yielded"
    assert received < SPREAD * PER_MAILBOX


async def test_tells_spread_over_many_actors_let_another_task_run() -> None:
    handled = 0

    async def count(message: Any) -> None:
        nonlocal handled
        handled += 1

    witness = Witness()
    told = 0
    async with open_nursery() as nursery:
        refs = [await nursery.start_actor(count, capacity=PER_MAILBOX) for _ in range(SPREAD)]
        await anyio.wait_all_tasks_blocked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(witness.run)
            for round_index in range(PER_MAILBOX):
                for ref in refs:
                    await ref.tell(round_index)
                    told += 1
                    if witness.ran:
                        break
                if witness.ran:
                    break
        assert witness.ran, f"{told} tells over {SPREAD} actors never yielded"
        assert told < SPREAD * PER_MAILBOX
    assert handled == told  # the nursery drained every mailbox on leaving


async def test_a_task_telling_many_actors_can_be_cancelled_by_another() -> None:
    """Cancellation from another task reaches a task that only tells (under trio, at
    the tell's checkpoint; under asyncio, at the yield)."""

    async def ignore(message: Any) -> None:
        pass

    told = 0
    async with open_nursery() as nursery:
        refs = [await nursery.start_actor(ignore, capacity=PER_MAILBOX) for _ in range(SPREAD)]
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:

            async def cancel_the_teller() -> None:
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_the_teller)
                for round_index in range(PER_MAILBOX):
                    for ref in refs:
                        await ref.tell(round_index)
                        told += 1
        assert scope.cancelled_caught, f"{told} tells over {SPREAD} actors were never cancelled"
        assert told < SPREAD * PER_MAILBOX
        sent = sum(ref.statistics().mailbox.sent for ref in refs)
        assert sent == told  # the cancelled tell sent nothing


async def test_a_busy_producer_of_one_mailbox_lets_another_task_run_again_and_again() -> None:
    """A send that never waits (drop_oldest: the mailbox never blocks) lets other tasks
    in repeatedly, not only once."""
    mailbox: Mailbox[int] = Mailbox(10, backpressure="drop_oldest")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.lowlevel.checkpoint()

    sent = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        while ticks < 5 and sent < 10_000_000:
            await mailbox.send(sent)
            sent += 1
        tg.cancel_scope.cancel()
    assert ticks >= 5, f"{sent} sends let the other task run {ticks} times"
    stats = mailbox.statistics()
    assert stats.sent == stats.dropped + stats.depth == sent
