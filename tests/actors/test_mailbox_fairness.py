"""Fair turns: a task whose sends, receives and tells never wait still lets other tasks
(and cancellation) in, however it spreads them over mailboxes and actors.

Each test runs a task that does only operations completing without waiting, bounded so
that a broken build fails instead of hanging, and checks a condition: another task got
to run (or cancelled it) before the bound was reached. The bounds stay under 64
operations per mailbox, the case a count kept per mailbox never yielded in. Async tests
run under asyncio and trio (see tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import anyio.lowlevel

from pdc_core import ActorRef, Mailbox, RingKernelContext, RingKernelRuntime, open_nursery

T = TypeVar("T")

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


async def round_robin(
    targets: Sequence[T], operation: Callable[[T, int], Awaitable[object]], stop: Witness
) -> int:
    """``await operation(target, round)`` over ``targets`` in turn, ``PER_MAILBOX``
    rounds, until ``stop.ran``; returns how many operations ran. It never waits by
    itself: only the operations can let another task in."""
    done = 0
    for round_index in range(PER_MAILBOX):
        for target in targets:
            await operation(target, round_index)
            done += 1
            if stop.ran:
                return done
    return done


async def test_sends_spread_over_many_mailboxes_let_another_task_run() -> None:
    mailboxes: list[Mailbox[int]] = [Mailbox(PER_MAILBOX) for _ in range(SPREAD)]
    witness = Witness()
    async with anyio.create_task_group() as tg:
        tg.start_soon(witness.run)
        sent = await round_robin(mailboxes, Mailbox.send, witness)
    assert witness.ran, f"{sent} sends over {SPREAD} mailboxes never yielded"
    assert sent < SPREAD * PER_MAILBOX
    assert sum(len(mailbox) for mailbox in mailboxes) == sent


async def test_receives_spread_over_many_mailboxes_let_another_task_run() -> None:
    mailboxes: list[Mailbox[int]] = [Mailbox(PER_MAILBOX) for _ in range(SPREAD)]
    for mailbox in mailboxes:
        mailbox.send_many_nowait(range(PER_MAILBOX))

    async def receive(mailbox: Mailbox[int], round_index: int) -> None:
        assert await mailbox.receive() == round_index

    witness = Witness()
    async with anyio.create_task_group() as tg:
        tg.start_soon(witness.run)
        received = await round_robin(mailboxes, receive, witness)
    assert witness.ran, f"{received} receives over {SPREAD} mailboxes never yielded"
    assert received < SPREAD * PER_MAILBOX


async def tell(ref: ActorRef[int, None], message: int) -> None:
    await ref.tell(message)


async def test_tells_spread_over_many_actors_let_another_task_run() -> None:
    handled = 0

    async def count(message: int) -> None:
        nonlocal handled
        handled += 1

    witness = Witness()
    async with open_nursery() as nursery:
        refs = [await nursery.start_actor(count, capacity=PER_MAILBOX) for _ in range(SPREAD)]
        await anyio.wait_all_tasks_blocked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(witness.run)
            told = await round_robin(refs, tell, witness)
        assert witness.ran, f"{told} tells over {SPREAD} actors never yielded"
        assert told < SPREAD * PER_MAILBOX
    assert handled == told  # the nursery drained every mailbox on leaving


async def test_a_task_telling_many_actors_can_be_cancelled_by_another() -> None:
    """Cancellation from another task reaches a task that only tells (under trio, at
    the tell's checkpoint; under asyncio, at the yield)."""

    async def ignore(message: int) -> None:
        pass

    told: list[int] = []
    never = Witness()  # nothing stops the teller but the cancellation

    async def tell_counted(ref: ActorRef[int, None], message: int) -> None:
        await ref.tell(message)
        told.append(message)

    async with open_nursery() as nursery:
        refs = [await nursery.start_actor(ignore, capacity=PER_MAILBOX) for _ in range(SPREAD)]
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:

            async def cancel_the_teller() -> None:
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_the_teller)
                await round_robin(refs, tell_counted, never)
        assert scope.cancelled_caught, f"{len(told)} tells over {SPREAD} actors went uncancelled"
        assert len(told) < SPREAD * PER_MAILBOX
        sent = 0
        for ref in refs:
            stats = ref.statistics().mailbox
            assert stats is not None
            sent += stats.sent
        assert sent == len(told)  # the cancelled tell sent nothing


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


async def test_seed_facade_sends_spread_over_many_kernels_let_another_task_run() -> None:
    """The seed facade's ``runtime.send`` takes the same turns as a mailbox's send."""

    async def sink(ctx: RingKernelContext) -> None:
        while True:
            await ctx.receive()

    kernel_ids = [f"fair_{index}" for index in range(SPREAD // 4)]
    witness = Witness()
    async with RingKernelRuntime() as runtime:
        for kernel_id in kernel_ids:
            await runtime.launch(kernel_id, sink, queue_size=PER_MAILBOX)
        async with anyio.create_task_group() as tg:
            tg.start_soon(witness.run)
            sent = await round_robin(kernel_ids, runtime.send, witness)
        assert witness.ran, f"{sent} sends over {len(kernel_ids)} kernels never yielded"
        assert sent < len(kernel_ids) * PER_MAILBOX
