"""The broadcast stream, tested as anyio tests its memory object streams.

The first group follows anyio's ``tests/streams/test_memory.py`` case by case, with one
or more subscribers where anyio has one receive stream; where a broadcast differs (a
send with no subscriber is not an error; closing every subscriber does not break the
sender; a ``max_buffer_size=0`` subscriber receives only while it waits) the test says
so. The second group pins what a broadcast adds: every subscriber gets every message
sent after it subscribed, in order; the slow-subscriber policies; statistics.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import anyio
import pytest
from anyio import (
    BrokenResourceError,
    CancelScope,
    ClosedResourceError,
    EndOfStream,
    WouldBlock,
    create_task_group,
    fail_after,
    wait_all_tasks_blocked,
)
from anyio.abc import ObjectReceiveStream, ObjectSendStream, TaskStatus

from pdc_core import (
    BroadcastReceiveStream,
    BroadcastSendStream,
    BroadcastStreamStatistics,
    create_broadcast_stream,
)

LIMIT = 10  # seconds: no test may hang


# -- anyio's memory-stream tests, for a broadcast ---------------------------------------


def test_invalid_max_buffer() -> None:
    with pytest.raises(ValueError, match=r"max_buffer_size must be either an integer or math\.inf"):
        create_broadcast_stream(1.0)
    with pytest.raises(ValueError, match=r"integer or math\.inf"):
        create_broadcast_stream(True)


def test_negative_max_buffer() -> None:
    with pytest.raises(ValueError, match="max_buffer_size cannot be negative"):
        create_broadcast_stream(-1)


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="'wait' or 'drop_oldest'"):
        create_broadcast_stream(1, slow_subscriber="block")  # type: ignore[arg-type]


def test_streams_are_anyio_object_streams() -> None:
    send, subscribe = create_broadcast_stream[int](1)
    receive = subscribe()
    assert isinstance(send, ObjectSendStream)
    assert isinstance(receive, ObjectReceiveStream)
    send.close()
    receive.close()


async def test_receive_then_send() -> None:
    async def receiver() -> None:
        received_objects.append(await receive.receive())
        received_objects.append(await receive.receive())

    send, subscribe = create_broadcast_stream[str](0)
    receive = subscribe()
    received_objects: list[str] = []
    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(receiver)
            await wait_all_tasks_blocked()
            await send.send("hello")
            await send.send("anyio")

    assert received_objects == ["hello", "anyio"]
    send.close()
    receive.close()


async def test_receive_then_send_nowait() -> None:
    async def receiver() -> None:
        received_objects.append(await receive.receive())

    send, subscribe = create_broadcast_stream[str](0)
    receive = subscribe()
    received_objects: list[str] = []
    async with create_task_group() as tg:
        tg.start_soon(receiver)
        tg.start_soon(receiver)
        await wait_all_tasks_blocked()
        send.send_nowait("hello")
        send.send_nowait("anyio")

    assert sorted(received_objects, reverse=True) == ["hello", "anyio"]
    send.close()
    receive.close()


async def test_send_then_receive_nowait() -> None:
    # anyio hands a waiting sender's item to receive_nowait on an unbuffered stream; a
    # broadcast delivers to every subscriber at once, so it needs a buffer for that.
    send, subscribe = create_broadcast_stream[str](1)
    receive = subscribe()
    async with create_task_group() as tg:
        tg.start_soon(send.send, "hello")
        await wait_all_tasks_blocked()
        assert receive.receive_nowait() == "hello"

    send.close()
    receive.close()


async def test_unbuffered_receive_nowait_would_block() -> None:
    send, subscribe = create_broadcast_stream[str](0)
    receive = subscribe()
    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(send.send, "hello")
            await wait_all_tasks_blocked()
            with pytest.raises(WouldBlock):
                receive.receive_nowait()
            assert send.statistics().tasks_waiting_send == 1
            assert await receive.receive() == "hello"  # a waiting receiver is room

    send.close()
    receive.close()


async def test_send_is_unblocked_after_receive_nowait() -> None:
    send, subscribe = create_broadcast_stream[str](1)
    receive = subscribe()
    send.send_nowait("hello")

    with fail_after(1):
        async with create_task_group() as tg:
            tg.start_soon(send.send, "anyio")
            await wait_all_tasks_blocked()
            assert receive.receive_nowait() == "hello"

    assert receive.receive_nowait() == "anyio"
    send.close()
    receive.close()


async def test_send_nowait_then_receive_nowait() -> None:
    send, subscribe = create_broadcast_stream[str](2)
    first, second = subscribe(), subscribe()
    send.send_nowait("hello")
    send.send_nowait("anyio")
    for receive in (first, second):
        assert receive.receive_nowait() == "hello"
        assert receive.receive_nowait() == "anyio"
        receive.close()
    send.close()


async def test_iterate() -> None:
    async def receiver(receive: BroadcastReceiveStream[str], into: list[str]) -> None:
        async with receive:
            async for item in receive:
                into.append(item)

    send, subscribe = create_broadcast_stream[str]()
    received: list[list[str]] = [[], [], []]
    with fail_after(LIMIT):
        async with create_task_group() as tg:
            for into in received:
                tg.start_soon(receiver, subscribe(), into)
            await wait_all_tasks_blocked()
            await send.send("hello")
            await send.send("anyio")
            await send.aclose()

    assert received == [["hello", "anyio"]] * 3


async def test_receive_send_closed_send_stream() -> None:
    send, subscribe = create_broadcast_stream[None]()
    receive = subscribe()
    await send.aclose()
    with pytest.raises(EndOfStream):
        receive.receive_nowait()
    with pytest.raises(EndOfStream):
        await receive.receive()
    with pytest.raises(ClosedResourceError):
        await send.send(None)
    with pytest.raises(ClosedResourceError):
        send.send_nowait(None)
    late = subscribe()  # subscribing after the end: the end at once
    with pytest.raises(EndOfStream):
        await late.receive()
    receive.close()
    late.close()


async def test_receive_send_closed_receive_stream() -> None:
    send, subscribe = create_broadcast_stream[None]()
    receive = subscribe()
    await receive.aclose()
    with pytest.raises(ClosedResourceError):
        receive.receive_nowait()
    with pytest.raises(ClosedResourceError):
        await receive.receive()
    # Unlike a memory stream, a broadcast is not broken without subscribers: more may
    # come. The item goes to nobody.
    await send.send(None)
    send.send_nowait(None)
    assert send.statistics().subscribers == 0
    assert send.statistics().sent == 2
    send.close()


async def test_cancel_receive() -> None:
    send, subscribe = create_broadcast_stream[str]()
    receive = subscribe()
    async with create_task_group() as tg:
        tg.start_soon(receive.receive)
        await wait_all_tasks_blocked()
        tg.cancel_scope.cancel()

    with pytest.raises(WouldBlock):
        send.send_nowait("hello")  # the cancelled receive is no room
    assert receive.statistics().tasks_waiting_receive == 0
    send.close()
    receive.close()


async def test_cancel_send() -> None:
    send, subscribe = create_broadcast_stream[str](1)
    ready, slow = subscribe(), subscribe()
    slow_receive = slow.clone()
    send.send_nowait("first")
    assert ready.receive_nowait() == "first"
    async with create_task_group() as tg:
        tg.start_soon(send.send, "hello")  # ready has room, slow has not
        await wait_all_tasks_blocked()
        tg.cancel_scope.cancel()

    with pytest.raises(WouldBlock):
        ready.receive_nowait()  # a cancelled send delivers to nobody
    assert slow.receive_nowait() == "first"
    with pytest.raises(WouldBlock):
        slow_receive.receive_nowait()
    assert send.statistics().tasks_waiting_send == 0
    for stream in (send, ready, slow, slow_receive):
        stream.close()


async def test_clone() -> None:
    send1, subscribe = create_broadcast_stream[str](1)
    receive1 = subscribe()
    send2 = send1.clone()
    receive2 = receive1.clone()
    await send1.aclose()
    await receive1.aclose()
    send2.send_nowait("hello")
    assert receive2.receive_nowait() == "hello"
    assert send2.statistics().open_send_streams == 1
    assert receive2.statistics().open_receive_streams == 1
    send2.close()
    receive2.close()


async def test_clones_share_a_subscription() -> None:
    send, subscribe = create_broadcast_stream[int](4)
    receive = subscribe()
    clone = receive.clone()
    for i in range(4):
        send.send_nowait(i)
    got = [receive.receive_nowait(), clone.receive_nowait(), receive.receive_nowait()]
    assert got == [0, 1, 2]
    assert clone.receive_nowait() == 3
    receive.close()
    send.send_nowait(4)  # the subscription is open while a clone is
    assert clone.receive_nowait() == 4
    clone.close()
    assert send.statistics().subscribers == 0
    send.close()


async def test_clone_closed() -> None:
    send, subscribe = create_broadcast_stream[NoReturn](1)
    receive = subscribe()
    await send.aclose()
    await receive.aclose()
    with pytest.raises(ClosedResourceError):
        send.clone()
    with pytest.raises(ClosedResourceError):
        receive.clone()


async def test_close_send_while_receiving() -> None:
    send, subscribe = create_broadcast_stream[NoReturn](1)
    receive = subscribe()

    async def run() -> None:
        async with create_task_group() as tg:
            tg.start_soon(receive.receive)
            await wait_all_tasks_blocked()
            await send.aclose()

    with pytest.raises(ExceptionGroup) as exc, fail_after(LIMIT):
        await run()

    assert len(exc.value.exceptions) == 1
    assert isinstance(exc.value.exceptions[0], EndOfStream)
    receive.close()


async def test_close_receive_while_receiving() -> None:
    send, subscribe = create_broadcast_stream[str](1)
    receive = subscribe()
    other = receive.clone()

    async def run() -> None:
        async with create_task_group() as tg:
            tg.start_soon(receive.receive)
            await wait_all_tasks_blocked()
            await receive.aclose()

    with pytest.raises(ExceptionGroup) as exc, fail_after(LIMIT):
        await run()

    assert len(exc.value.exceptions) == 1
    assert isinstance(exc.value.exceptions[0], ClosedResourceError)
    send.send_nowait("still subscribed")  # through the clone
    assert other.receive_nowait() == "still subscribed"
    other.close()
    send.close()


async def test_close_receive_while_sending() -> None:
    # anyio's sender gets BrokenResourceError; a broadcast sender stops waiting for a
    # subscriber that leaves and delivers to the others.
    send, subscribe = create_broadcast_stream[str](0)
    leaving, staying = subscribe(), subscribe()
    received: list[str] = []

    async def receive_one() -> None:
        received.append(await staying.receive())

    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(receive_one)
            tg.start_soon(send.send, "x")
            await wait_all_tasks_blocked()
            assert received == []  # waits for `leaving`
            await leaving.aclose()

    assert received == ["x"]
    send.close()
    staying.close()


async def test_close_send_clone_while_sending() -> None:
    send, subscribe = create_broadcast_stream[str](0)
    receive = subscribe()
    clone = send.clone()

    async def run() -> None:
        async with create_task_group() as tg:
            tg.start_soon(send.send, "withdrawn")
            await wait_all_tasks_blocked()
            await send.aclose()

    with pytest.raises(ExceptionGroup) as exc, fail_after(LIMIT):
        await run()

    assert isinstance(exc.value.exceptions[0], ClosedResourceError)
    assert send.statistics().tasks_waiting_send == 0
    assert clone.statistics().open_send_streams == 1  # the clone is still open
    with pytest.raises(WouldBlock):
        receive.receive_nowait()  # nothing was delivered
    clone.close()
    receive.close()


async def test_receive_after_send_closed() -> None:
    send, subscribe = create_broadcast_stream[str](1)
    receive = subscribe()
    await send.send("hello")
    await send.aclose()
    assert await receive.receive() == "hello"
    with pytest.raises(EndOfStream):
        await receive.receive()
    receive.close()


async def test_receive_when_cancelled() -> None:
    """A receive in a cancelled scope does not go through with the operation."""
    send, subscribe = create_broadcast_stream[str](2)
    receive = subscribe()
    async with create_task_group() as tg:
        tg.start_soon(send.send, "hello")
        await wait_all_tasks_blocked()
        tg.start_soon(send.send, "world")
        await wait_all_tasks_blocked()

        with CancelScope() as scope:
            scope.cancel()
            await receive.receive()

        assert await receive.receive() == "hello"
        assert await receive.receive() == "world"

    send.close()
    receive.close()


async def test_send_when_cancelled() -> None:
    """A send in a cancelled scope does not go through with the operation."""

    async def receiver() -> None:
        received.append(await receive.receive())

    received: list[str] = []
    send, subscribe = create_broadcast_stream[str]()
    receive = subscribe()
    async with create_task_group() as tg:
        tg.start_soon(receiver)
        with CancelScope() as scope:
            scope.cancel()
            await send.send("hello")

        await send.send("world")

    assert received == ["world"]
    send.close()
    receive.close()


async def test_cancel_during_receive() -> None:
    """Cancelling a pending receive() does not lose an item handed to it."""

    async def scoped_receiver(task_status: TaskStatus[CancelScope]) -> None:
        with CancelScope() as cancel_scope:
            task_status.started(cancel_scope)
            received.append(await receive.receive())

        assert cancel_scope.cancel_called

    received: list[str] = []
    send, subscribe = create_broadcast_stream[str]()
    receive = subscribe()
    with send, receive:
        async with create_task_group() as tg:
            receiver_scope = await tg.start(scoped_receiver)
            await wait_all_tasks_blocked()
            send.send_nowait("hello")
            receiver_scope.cancel()

        if not received:  # the cancellation came first: the item went back
            assert receive.receive_nowait() == "hello"
        else:
            assert received == ["hello"]


async def test_cancel_during_receive_buffered() -> None:
    """An item sent when the receiver next in line was cancelled is not lost."""

    async def scoped_receiver(
        receive: BroadcastReceiveStream[str], task_status: TaskStatus[CancelScope]
    ) -> None:
        with CancelScope() as cancel_scope:
            task_status.started(cancel_scope)
            await receive.receive()

    send, subscribe = create_broadcast_stream[str](1)
    receive = subscribe()
    with send, receive:
        async with create_task_group() as tg:
            cancel_scope = await tg.start(scoped_receiver, receive)
            await wait_all_tasks_blocked()
            cancel_scope.cancel()
            send.send_nowait("item")

        assert receive.receive_nowait() == "item"


async def test_close_receive_after_send() -> None:
    async def sender() -> None:
        async with send_stream:
            await send_stream.send("test")

    async def receiver() -> None:
        async with receive_stream:
            assert await receive_stream.receive() == "test"

    send_stream, subscribe = create_broadcast_stream[str]()
    receive_stream = subscribe()
    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(receiver)
            await wait_all_tasks_blocked()
            tg.start_soon(sender)


async def test_statistics() -> None:
    send_stream, subscribe = create_broadcast_stream[None](1)
    receive_stream = subscribe()
    streams: list[BroadcastReceiveStream[None] | BroadcastSendStream[None]] = [
        send_stream,
        receive_stream,
    ]
    for stream in streams:
        statistics = stream.statistics()
        assert isinstance(statistics, BroadcastStreamStatistics)
        assert statistics.max_buffer_size == 1
        assert statistics.current_buffer_used == 0
        assert statistics.open_send_streams == 1
        assert statistics.open_receive_streams == 1
        assert statistics.tasks_waiting_send == 0
        assert statistics.tasks_waiting_receive == 0
        assert statistics.subscribers == 1

    for stream in streams:
        async with create_task_group() as tg:
            send_stream.send_nowait(None)
            assert stream.statistics().current_buffer_used == 1
            tg.start_soon(send_stream.send, None)
            await wait_all_tasks_blocked()
            assert stream.statistics().current_buffer_used == 1
            assert stream.statistics().tasks_waiting_send == 1
            receive_stream.receive_nowait()
            await wait_all_tasks_blocked()  # the woken sender delivers
            assert stream.statistics().current_buffer_used == 1
            assert stream.statistics().tasks_waiting_send == 0
            receive_stream.receive_nowait()
            assert stream.statistics().current_buffer_used == 0

            tg.start_soon(receive_stream.receive)
            await wait_all_tasks_blocked()
            assert stream.statistics().tasks_waiting_receive == 1
            send_stream.send_nowait(None)
            assert stream.statistics().tasks_waiting_receive == 0

        assert stream.statistics().current_buffer_used == 0
        assert stream.statistics().tasks_waiting_send == 0
        assert stream.statistics().tasks_waiting_receive == 0

    assert send_stream.statistics().sent == 6
    send_stream.close()
    receive_stream.close()


async def test_sync_close() -> None:
    send_stream, subscribe = create_broadcast_stream[None](1)
    receive_stream = subscribe()
    with send_stream, receive_stream:
        pass

    with pytest.raises(ClosedResourceError):
        send_stream.send_nowait(None)

    with pytest.raises(ClosedResourceError):
        receive_stream.receive_nowait()


async def test_type_variance() -> None:
    """Checked by mypy: the streams are co- and contravariant as anyio's."""
    send, subscribe = create_broadcast_stream[float]()
    receive = subscribe()
    receive1: BroadcastReceiveStream[complex] = receive  # noqa: F841
    receive2: ObjectReceiveStream[complex] = receive  # noqa: F841
    send1: BroadcastSendStream[int] = send  # noqa: F841
    send2: ObjectSendStream[int] = send  # noqa: F841
    send.close()
    receive.close()


# -- what a broadcast adds ---------------------------------------------------------------


async def test_every_subscriber_gets_every_message_sent_after_it_subscribed() -> None:
    send, subscribe = create_broadcast_stream[int](4)
    early = subscribe()
    got: dict[str, list[int]] = {"early": [], "late": []}

    async def consume(name: str, receive: BroadcastReceiveStream[int]) -> None:
        async with receive:
            async for item in receive:
                got[name].append(item)

    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(consume, "early", early)
            for i in range(50):
                await send.send(i)  # waits for the slowest subscriber
            tg.start_soon(consume, "late", subscribe())
            for i in range(50, 100):
                await send.send(i)
            await send.aclose()

    assert got["early"] == list(range(100))
    assert got["late"] == list(range(50, 100))


async def test_wait_policy_waits_for_the_slowest_and_bounds_every_buffer() -> None:
    send, subscribe = create_broadcast_stream[int](2)
    fast, slow = subscribe(), subscribe()
    fast_got: list[int] = []
    peak = 0

    async def drain_fast() -> None:
        async for item in fast:
            fast_got.append(item)

    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(drain_fast)
            await send.send(0)
            await send.send(1)
            await wait_all_tasks_blocked()
            tg.start_soon(send.send, 2)  # slow is full: waits, delivering to none
            await wait_all_tasks_blocked()
            assert sorted(fast_got) == [0, 1]
            assert send.statistics().tasks_waiting_send == 1
            slow_got: list[int] = []
            while len(slow_got) < 3:
                peak = max(peak, slow.statistics().current_buffer_used)
                slow_got.append(await slow.receive())
            assert slow_got == [0, 1, 2]
            await wait_all_tasks_blocked()
            assert sorted(fast_got) == [0, 1, 2]
            tg.cancel_scope.cancel()
    assert peak <= 2
    assert send.statistics().dropped == 0
    for stream in (send, fast, slow):
        stream.close()


async def test_drop_oldest_never_waits_and_counts_every_loss() -> None:
    send, subscribe = create_broadcast_stream[int](3, slow_subscriber="drop_oldest")
    fast, slow = subscribe(), subscribe()
    for i in range(10):
        await send.send(i)  # never waits
        assert fast.receive_nowait() == i
    assert [slow.receive_nowait() for _ in range(3)] == [7, 8, 9]
    assert slow.statistics().dropped == 7
    assert fast.statistics().dropped == 0
    slow.close()
    assert send.statistics().dropped == 7  # a closed subscription's drops still count
    fast.close()
    send.close()


async def test_drop_oldest_unbuffered_loses_what_nobody_waits_for() -> None:
    send, subscribe = create_broadcast_stream[str](0, slow_subscriber="drop_oldest")
    receive = subscribe()
    send.send_nowait("lost")
    got: list[str] = []

    async def one() -> None:
        got.append(await receive.receive())

    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(one)
            await wait_all_tasks_blocked()
            send.send_nowait("kept")
    assert got == ["kept"]
    assert receive.statistics().dropped == 1
    send.close()
    receive.close()


async def test_unbounded_buffers() -> None:
    send, subscribe = create_broadcast_stream[int](math.inf)
    receive = subscribe()
    for i in range(10_000):
        send.send_nowait(i)
    assert receive.statistics().current_buffer_used == 10_000
    assert receive.statistics().max_buffer_size == math.inf
    send.close()
    assert [item async for item in receive] == list(range(10_000))
    receive.close()


async def test_many_subscribers_in_order_under_backpressure() -> None:
    send, subscribe = create_broadcast_stream[int](1)
    receivers = [subscribe() for _ in range(20)]
    results: list[list[int]] = [[] for _ in receivers]

    async def consume(i: int) -> None:
        async with receivers[i]:
            async for item in receivers[i]:
                results[i].append(item)
                if item % (i + 1) == 0:
                    await anyio.lowlevel.checkpoint()  # some are slower than others

    with fail_after(LIMIT):
        async with create_task_group() as tg:
            for i in range(len(receivers)):
                tg.start_soon(consume, i)
            async with send:
                for item in range(200):
                    await send.send(item)
    assert results == [list(range(200))] * len(receivers)


async def test_several_senders_cancelled_and_not() -> None:
    """Senders waiting on a slow subscriber, some cancelled: each message is delivered
    to every subscriber exactly once or to none."""
    send, subscribe = create_broadcast_stream[int](1)
    receive = subscribe()
    other = subscribe()
    send.send_nowait(-1)
    scopes: dict[int, CancelScope] = {}

    async def sender(item: int) -> None:
        with CancelScope() as scope:
            scopes[item] = scope
            await send.send(item)

    with fail_after(LIMIT):
        async with create_task_group() as tg:
            for item in range(6):
                tg.start_soon(sender, item)
            await wait_all_tasks_blocked()
            for item in (0, 2, 4):
                scopes[item].cancel()
            await wait_all_tasks_blocked()
            got: list[int] = []
            other_got: list[int] = []
            while len(got) < 4:
                got.append(await receive.receive())
                other_got.append(await other.receive())
    assert got == other_got
    assert sorted(got) == [-1, 1, 3, 5]
    for stream in (send, receive, other):
        stream.close()


async def test_a_stream_belongs_to_one_event_loop() -> None:
    send, subscribe = create_broadcast_stream[int](0)
    receive = subscribe()
    with pytest.raises(WouldBlock):
        send.send_nowait(1)  # binds nothing
    errors: list[BaseException] = []

    def other_loop() -> None:
        async def wait() -> None:
            try:
                await receive.receive()
            except RuntimeError as error:
                errors.append(error)

        anyio.run(wait)

    async with create_task_group() as tg:
        tg.start_soon(send.send, 1)  # binds the stream to this loop
        await wait_all_tasks_blocked()
        await anyio.to_thread.run_sync(other_loop)
        tg.cancel_scope.cancel()
    assert errors
    assert "another event loop" in str(errors[0])
    send.close()
    receive.close()


def _memory_stream(size: int) -> tuple[Any, Any]:
    return anyio.create_memory_object_stream[int](size)


def _broadcast_stream(size: int) -> tuple[Any, Any]:
    send, subscribe = create_broadcast_stream[int](size)
    return send, subscribe()


@pytest.mark.parametrize("make", [_memory_stream, _broadcast_stream], ids=["anyio", "broadcast"])
async def test_a_waiting_send_is_served_before_a_later_send_nowait(make: Any) -> None:
    """Issue 35, item 2, side by side with anyio: the receive that makes room moves the
    waiting send's item in, so a send_nowait made before that send runs gets WouldBlock
    (it used to take the room, and could starve the waiting send forever)."""
    send, receive = make(1)
    send.send_nowait(0)
    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(send.send, 1)
            await wait_all_tasks_blocked()
            assert send.statistics().tasks_waiting_send == 1
            assert await receive.receive() == 0
            # no checkpoint since: the waiting send has not run, its item is in
            assert send.statistics().tasks_waiting_send == 0
            assert receive.statistics().current_buffer_used == 1
            with pytest.raises(WouldBlock):
                send.send_nowait(2)
            assert receive.receive_nowait() == 1
            send.send_nowait(3)
            assert receive.receive_nowait() == 3
    send.close()
    receive.close()


async def test_waiting_sends_are_served_in_the_order_they_began_to_wait() -> None:
    send, subscribe = create_broadcast_stream[int](1)
    fast = subscribe()
    slow = subscribe()
    send.send_nowait(0)
    with fail_after(LIMIT):
        async with create_task_group() as tg:
            for item in (1, 2, 3):
                tg.start_soon(send.send, item)
                await wait_all_tasks_blocked()  # each waits before the next starts
            assert send.statistics().tasks_waiting_send == 3
            assert fast.receive_nowait() == 0
            # every subscription must have room: the slow one is still full
            assert send.statistics().tasks_waiting_send == 3
            with pytest.raises(WouldBlock):
                send.send_nowait(99)
            fast_got: list[int] = []
            slow_got: list[int] = []
            for _ in range(3):
                slow_got.append(await slow.receive())
                fast_got.append(await fast.receive())
                if send.statistics().tasks_waiting_send:
                    with pytest.raises(WouldBlock):  # never ahead of a waiting send
                        send.send_nowait(99)
            slow_got.append(await slow.receive())
            assert send.statistics().tasks_waiting_send == 0
    assert slow_got == [0, 1, 2, 3]
    assert fast_got == [1, 2, 3]
    assert send.statistics().sent == 4
    for stream in (send, fast, slow):
        stream.close()


@pytest.mark.parametrize(
    ("first", "second"), [("asyncio", "asyncio"), ("asyncio", "trio"), ("trio", "asyncio")]
)
def test_an_idle_stream_works_in_a_later_event_loop(first: str, second: str) -> None:
    """Issue 35, item 11: as anyio's streams, a stream nobody waits on belongs to no
    event loop; one that a task waited on in an earlier ``anyio.run`` works in the next."""
    if "trio" in (first, second):
        pytest.importorskip("trio")
    send, subscribe = create_broadcast_stream[int](0)
    receive = subscribe()

    async def round_trip(item: int) -> int:
        got: list[int] = []

        async def receiver() -> None:
            got.append(await receive.receive())  # waits: the stream is this loop's now

        with fail_after(LIMIT):
            async with create_task_group() as tg:
                tg.start_soon(receiver)
                await wait_all_tasks_blocked()
                await send.send(item)
        return got[0]

    assert anyio.run(round_trip, 1, backend=first) == 1
    assert anyio.run(round_trip, 2, backend=second) == 2
    send.close()
    receive.close()


def test_repr() -> None:
    send, subscribe = create_broadcast_stream[Any](2)
    receive = subscribe()
    assert "1 subscriber" in repr(send)
    assert "buffering 0" in repr(receive)
    send.close()
    receive.close()
    assert "closed" in repr(send)
    assert "closed" in repr(receive)


def test_broken_resource_error_is_never_raised_by_a_send() -> None:
    # Documented difference from memory streams: pinned so that it stays a decision.
    send, _subscribe = create_broadcast_stream[int](0)
    try:
        send.send_nowait(1)
    except BrokenResourceError:  # pragma: no cover - the failure this test is for
        pytest.fail("a send with no subscriber raised BrokenResourceError")
    send.close()


async def test_a_send_woken_by_its_close_delivers_nothing_when_room_comes_before_it_runs() -> None:
    """A waiting send whose handle is closed raises ClosedResourceError having delivered
    nothing, even when a receive makes room before that send's task runs again (the
    receive used to deliver the closed send's item, which then raised all the same)."""
    send, subscribe = create_broadcast_stream[int](1)
    receive = subscribe()
    other = send.clone()  # the stream stays open: only the waiting send's handle closes
    send.send_nowait(0)
    outcome: list[BaseException] = []

    async def waiting_send() -> None:
        try:
            await send.send(1)
        except ClosedResourceError as exc:
            outcome.append(exc)

    with fail_after(LIMIT):
        async with create_task_group() as tg:
            tg.start_soon(waiting_send)
            await wait_all_tasks_blocked()
            send.close()  # wakes the waiting send; it has not run yet
            assert receive.receive_nowait() == 0  # room, before that send runs
            assert send.statistics().tasks_waiting_send == 0
    assert len(outcome) == 1
    with pytest.raises(WouldBlock):
        receive.receive_nowait()  # its item was never delivered
    other.send_nowait(2)  # and the room is still there
    assert receive.receive_nowait() == 2
    other.close()
    receive.close()
