"""Mailboxes: priorities, backpressure policies, the control lane, pausing, closing.

Async tests run under asyncio and trio (see tests/conftest.py).
"""

from __future__ import annotations

import gc
import tracemalloc

import anyio
import anyio.lowlevel
import pytest

from pdc_core import (
    Backpressure,
    Control,
    Mailbox,
    MailboxClosed,
    MailboxFull,
    MessageTimeout,
)
from pdc_core._actors import check_priority


class Stop(Control):
    __slots__ = ()


def drain_nowait(mailbox: Mailbox[object]) -> list[object]:
    out = []
    while True:
        try:
            out.append(mailbox.receive_nowait())
        except anyio.WouldBlock:
            return out


def test_priority_order_and_fifo_within_priority() -> None:
    mailbox: Mailbox[str] = Mailbox(16)
    for name, priority in [("a", 1), ("b", 200), ("c", 1), ("d", 255), ("e", 200), ("f", 0)]:
        mailbox.send_nowait(name, priority)
    assert drain_nowait(mailbox) == ["d", "b", "e", "a", "c", "f"]


@pytest.mark.parametrize("bad", [-1, 256, 1000])
def test_priority_out_of_range_is_a_value_error_naming_it(bad: int) -> None:
    mailbox: Mailbox[str] = Mailbox(4)
    with pytest.raises(ValueError, match=str(bad)):
        mailbox.send_nowait("x", bad)
    with pytest.raises(ValueError, match=str(bad)):
        check_priority(bad)
    assert mailbox.statistics().sent == 0


@pytest.mark.parametrize("bad", [1.5, "high", None, True])
def test_priority_of_the_wrong_type_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="priority"):
        Mailbox[str](4).send_nowait("x", bad)  # type: ignore[arg-type]


def test_priority_accepts_integer_like_values() -> None:
    import numpy as np

    assert check_priority(np.uint8(7)) == 7


@pytest.mark.parametrize("capacity", [-1, -3])
def test_capacity_must_not_be_negative(capacity: int) -> None:
    with pytest.raises(ValueError, match="capacity must be at least 0"):
        Mailbox(capacity)


def test_unknown_policy_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="drop_oldest"):
        Mailbox(4, backpressure="sometimes")


def test_policy_aliases() -> None:
    assert Mailbox(1, backpressure="reject").backpressure is Backpressure.RAISE
    assert Mailbox(1, backpressure="drop").backpressure is Backpressure.DROP_OLDEST
    assert Mailbox(1).backpressure is Backpressure.BLOCK


def test_raise_policy_rejects_and_counts() -> None:
    mailbox: Mailbox[int] = Mailbox(2, backpressure="raise")
    mailbox.send_nowait(1)
    mailbox.send_nowait(2)
    with pytest.raises(MailboxFull) as info:
        mailbox.send_nowait(3)
    assert info.value.capacity == 2
    assert isinstance(info.value, RuntimeError)
    stats = mailbox.statistics()
    assert (stats.sent, stats.rejected, stats.dropped, stats.depth) == (2, 1, 0, 2)
    assert drain_nowait(mailbox) == [1, 2]


def test_block_policy_send_nowait_on_full_raises_mailbox_full() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    mailbox.send_nowait(1)
    with pytest.raises(MailboxFull):
        mailbox.send_nowait(2)


def test_drop_oldest_evicts_the_oldest_of_the_lowest_priority() -> None:
    dropped: list[str] = []
    mailbox: Mailbox[str] = Mailbox(3, backpressure="drop_oldest", on_drop=dropped.append)
    mailbox.send_nowait("low-1", 10)
    mailbox.send_nowait("high", 200)
    mailbox.send_nowait("low-2", 10)
    mailbox.send_nowait("mid", 100)  # evicts low-1: oldest of the lowest priority
    assert dropped == ["low-1"]
    mailbox.send_nowait("mid-2", 100)  # evicts low-2
    assert dropped == ["low-1", "low-2"]
    mailbox.send_nowait("lowest", 5)  # lower than everything queued: dropped itself
    assert dropped == ["low-1", "low-2", "lowest"]
    stats = mailbox.statistics()
    assert stats.dropped == 3
    assert dict(stats.dropped_by_priority) == {10: 2, 5: 1}
    assert stats.sent == stats.received + stats.dropped + stats.discarded + stats.depth
    assert drain_nowait(mailbox) == ["high", "mid", "mid-2"]


def test_drop_oldest_never_drops_below_capacity() -> None:
    mailbox: Mailbox[int] = Mailbox(5, backpressure="drop_oldest")
    for i in range(5):
        mailbox.send_nowait(i)
    assert mailbox.statistics().dropped == 0


def test_control_lane_is_never_blocked_nor_dropped_and_comes_first() -> None:
    mailbox: Mailbox[object] = Mailbox(1, backpressure="drop_oldest")
    mailbox.send_nowait("data", 255)
    stop = Stop()
    for _ in range(3):
        mailbox.send_control(stop)
    mailbox.send_nowait("newer", 255)  # drops "data", never a control message
    assert drain_nowait(mailbox) == [stop, stop, stop, "newer"]
    stats = mailbox.statistics()
    assert stats.control_sent == 3
    assert stats.dropped == 1


def test_control_messages_must_be_control_instances() -> None:
    with pytest.raises(TypeError):
        Mailbox[object](1).send_control("stop")  # type: ignore[arg-type]


def test_pause_keeps_data_but_delivers_control() -> None:
    mailbox: Mailbox[object] = Mailbox(4)
    mailbox.send_nowait("a")
    mailbox.pause()
    stop = Stop()
    mailbox.send_control(stop)
    assert drain_nowait(mailbox) == [stop]
    assert mailbox.statistics().paused
    mailbox.resume()
    assert drain_nowait(mailbox) == ["a"]


def test_close_refuses_data_then_drains() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    mailbox.send_nowait(1)
    mailbox.close()
    with pytest.raises(MailboxClosed):
        mailbox.send_nowait(2)
    assert mailbox.receive_nowait() == 1
    with pytest.raises(MailboxClosed):
        mailbox.receive_nowait()


def test_discard_counts_and_returns_in_delivery_order() -> None:
    mailbox: Mailbox[str] = Mailbox(8)
    mailbox.send_nowait("a", 1)
    mailbox.send_nowait("b", 9)
    assert mailbox.discard() == ["b", "a"]
    stats = mailbox.statistics()
    assert (stats.discarded, stats.depth) == (2, 0)
    assert stats.sent == stats.received + stats.dropped + stats.discarded + stats.depth


def test_send_many_nowait_partial_accept_under_raise() -> None:
    mailbox: Mailbox[int] = Mailbox(3, backpressure="raise")
    with pytest.raises(MailboxFull) as info:
        mailbox.send_many_nowait(range(5))
    assert info.value.accepted == 3
    assert mailbox.statistics().rejected == 2
    assert drain_nowait(mailbox) == [0, 1, 2]


def test_receive_many_nowait_respects_priority_and_limit() -> None:
    mailbox: Mailbox[int] = Mailbox(10)
    mailbox.send_many_nowait([1, 2, 3], priority=5)
    mailbox.send_many_nowait([7, 8], priority=9)
    assert mailbox.receive_many_nowait(3) == [7, 8, 1]
    assert mailbox.receive_many_nowait(10) == [2, 3]


@pytest.mark.parametrize("max_items", [0, -3])
async def test_receive_many_and_receive_many_nowait_refuse_fewer_than_one_item(
    max_items: int,
) -> None:
    mailbox: Mailbox[int] = Mailbox(10)
    mailbox.send_many_nowait([1, 2])
    with pytest.raises(ValueError, match=f"max_items must be at least 1, got {max_items}"):
        mailbox.receive_many_nowait(max_items)
    with pytest.raises(ValueError, match=f"max_items must be at least 1, got {max_items}"):
        await mailbox.receive_many(max_items)
    assert mailbox.receive_many_nowait(5) == [1, 2]  # nothing was taken


def test_repr_and_len() -> None:
    mailbox: Mailbox[int] = Mailbox(2, name="inbox")
    mailbox.send_nowait(1)
    assert len(mailbox) == 1
    assert "inbox" in repr(mailbox)
    assert "1/2" in repr(mailbox)


def test_drop_policy_flood_keeps_memory_bounded() -> None:
    mailbox: Mailbox[bytes] = Mailbox(100, backpressure="drop_oldest")
    payload = b"x" * 100
    for _ in range(2000):  # warm up allocator and the lanes
        mailbox.send_nowait(payload, 1)
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for i in range(200_000):
            mailbox.send_nowait(payload, i % 3)
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stats = mailbox.statistics()
    assert stats.depth == 100
    assert stats.peak_depth == 100
    assert stats.dropped == 2000 + 200_000 - 100
    assert current - base < 64 * 1024, "memory grew with the number of messages"


# --- async -----------------------------------------------------------------------------


async def test_receive_waits_for_a_sender() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    got: list[int] = []

    async def consumer() -> None:
        got.append(await mailbox.receive())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()  # the consumer waits in receive()
            assert mailbox.statistics().receivers_waiting == 1
            await mailbox.send(42)
    assert got == [42]


async def test_block_policy_waits_for_room_and_bounds_depth() -> None:
    mailbox: Mailbox[int] = Mailbox(3)
    received: list[int] = []

    async def producer() -> None:
        for i in range(50):
            await mailbox.send(i)
        mailbox.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(producer)
        async for item in mailbox:
            assert len(mailbox) <= 3
            received.append(item)  # type: ignore[arg-type]
            await anyio.lowlevel.checkpoint()
    assert received == list(range(50))
    stats = mailbox.statistics()
    assert stats.peak_depth <= 3
    assert (stats.sent, stats.received, stats.dropped, stats.rejected) == (50, 50, 0, 0)


async def test_receive_timeout_is_a_timeout_error() -> None:
    import asyncio

    mailbox: Mailbox[int] = Mailbox(1)
    with pytest.raises(MessageTimeout):
        await mailbox.receive(timeout=0.01)
    with pytest.raises(asyncio.TimeoutError):  # the seeds' except clause, on any loop
        await mailbox.receive(timeout=0)
    assert mailbox.statistics().receivers_waiting == 0


async def test_timeouts_expire_in_order_and_late_messages_are_kept() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    results: dict[str, object] = {}

    async def wait(name: str, timeout: float) -> None:  # noqa: ASYNC109
        try:
            results[name] = await mailbox.receive(timeout=timeout)
        except MessageTimeout:
            results[name] = "timeout"

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, "short", 0.02)
            tg.start_soon(wait, "long", 5)
            while "short" not in results:  # noqa: ASYNC110 - the short receive's timeout
                await anyio.sleep(0.001)
            assert mailbox.statistics().receivers_waiting == 1  # "long" still waits
            await mailbox.send(7)
    assert results == {"short": "timeout", "long": 7}
    assert len(mailbox) == 0


async def test_cancelled_receive_takes_nothing() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    with anyio.move_on_after(0.01):
        await mailbox.receive()
    await mailbox.send(1)
    assert mailbox.receive_nowait() == 1
    assert mailbox.statistics().receivers_waiting == 0


async def test_cancelled_blocked_send_sends_nothing() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    await mailbox.send(1)
    with anyio.move_on_after(0.01):
        await mailbox.send(2)
    assert mailbox.statistics().senders_waiting == 0
    assert drain_nowait(mailbox) == [1]
    assert mailbox.statistics().sent == 1


async def test_close_wakes_blocked_senders_and_receivers() -> None:
    full: Mailbox[int] = Mailbox(1)
    await full.send(1)
    empty: Mailbox[int] = Mailbox(1)
    errors: list[type[BaseException]] = []

    async def blocked_send() -> None:
        try:
            await full.send(2)
        except MailboxClosed as exc:
            errors.append(type(exc))

    async def blocked_receive() -> None:
        try:
            await empty.receive()
        except MailboxClosed as exc:
            errors.append(type(exc))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_send)
            tg.start_soon(blocked_receive)
            await anyio.wait_all_tasks_blocked()  # both wait: one in send, one in receive
            assert full.statistics().senders_waiting == 1
            assert empty.statistics().receivers_waiting == 1
            full.close()
            empty.close()
    assert errors == [MailboxClosed, MailboxClosed]


async def test_pause_blocks_receivers_until_resume() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    mailbox.pause()
    await mailbox.send(1)
    with pytest.raises(MessageTimeout):
        await mailbox.receive(timeout=0.02)
    async with anyio.create_task_group() as tg:

        async def later() -> None:
            await anyio.wait_all_tasks_blocked()  # the receive below waits, paused
            mailbox.resume()

        tg.start_soon(later)
        with anyio.fail_after(5):
            assert await mailbox.receive() == 1


async def test_control_reaches_a_receiver_of_a_full_paused_mailbox() -> None:
    mailbox: Mailbox[object] = Mailbox(2)
    await mailbox.send_many([1, 2])
    mailbox.pause()
    stop = Stop()

    async def later() -> None:
        await anyio.wait_all_tasks_blocked()  # the receive below waits, paused
        mailbox.send_control(stop)

    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        with anyio.fail_after(5):
            assert await mailbox.receive() is stop


async def test_send_many_blocks_in_chunks_and_keeps_order() -> None:
    mailbox: Mailbox[int] = Mailbox(7)
    out: list[int] = []

    async def consumer() -> None:
        while len(out) < 100:
            out.extend(await mailbox.receive_many(5))  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        assert await mailbox.send_many(range(100)) == 100
    assert out == list(range(100))
    assert mailbox.statistics().peak_depth <= 7


async def test_many_receivers_each_message_once() -> None:
    mailbox: Mailbox[int] = Mailbox(8)
    seen: list[int] = []

    async def consumer() -> None:
        async for item in mailbox:
            seen.append(item)  # type: ignore[arg-type]
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(consumer)
        for i in range(500):
            await mailbox.send(i, i % 3)
        mailbox.close()
    assert sorted(seen) == list(range(500))


async def test_closing_with_queued_items_releases_every_receiver() -> None:
    """Regression: receivers still waiting when the last item goes must be told."""
    mailbox: Mailbox[int] = Mailbox(4)
    finished: list[int] = []

    async def consumer(i: int) -> None:
        async for _ in mailbox:
            await anyio.lowlevel.checkpoint()
        finished.append(i)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(consumer, i)
            await anyio.wait_all_tasks_blocked()  # every consumer waits for an item
            assert mailbox.statistics().receivers_waiting == 3
            mailbox.send_nowait(1)
            mailbox.send_nowait(2)
            mailbox.close()
    assert sorted(finished) == [0, 1, 2]


async def test_send_many_of_a_large_batch_is_linear() -> None:
    """Regression: refilling from the middle of a batch must not rescan its start."""
    import time

    mailbox: Mailbox[int] = Mailbox(64)
    n = 200_000
    got = 0

    async def consumer() -> None:
        nonlocal got
        while got < n:
            got += len(await mailbox.receive_many(64))

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        await mailbox.send_many(range(n))
    assert got == n
    assert time.monotonic() - start < 3
