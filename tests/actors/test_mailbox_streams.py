"""Mailboxes are anyio object streams, and an actor ref hands out a send stream.

A :class:`~pdc_core.Mailbox` is both ends of a memory object stream in one object:
``close``/``aclose`` close its sending side, a receiver then drains it and meets
``EndOfStream``, a sender meets ``ClosedResourceError``, and once the receiving side is
gone (``discard`` on a closed mailbox, as a stopping actor does) ``BrokenResourceError``.
Every one of them is still a :class:`~pdc_core.MailboxClosed`.
"""

from __future__ import annotations

import pickle
from typing import Any

import anyio
import pytest
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from pdc_core import ActorStopped, Mailbox, MailboxClosed, open_nursery

LIMIT = 10  # seconds: no test may hang


async def echo(message: Any) -> Any:
    return message


# -- the mailbox is an object stream ---------------------------------------------------


def test_mailbox_is_both_object_streams() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    assert isinstance(mailbox, ObjectSendStream)
    assert isinstance(mailbox, ObjectReceiveStream)
    assert mailbox.extra_attributes == {}
    assert mailbox.extra(object(), "default") == "default"  # type: ignore[call-overload]


def test_mailbox_closed_is_every_anyio_closing_error_it_stands_for() -> None:
    assert issubclass(MailboxClosed, anyio.ClosedResourceError)
    assert issubclass(MailboxClosed, anyio.EndOfStream)
    assert issubclass(MailboxClosed, RuntimeError)


async def test_send_receive_and_async_with_closes_the_sending_side() -> None:
    mailbox: Mailbox[int] = Mailbox(8)
    async with mailbox:
        await mailbox.send(1)
        await mailbox.send(2, 200)  # the priority is an extra argument
    assert mailbox.closed
    assert await mailbox.receive() == 2
    assert await mailbox.receive() == 1
    with pytest.raises(anyio.EndOfStream):
        await mailbox.receive()
    with pytest.raises(anyio.EndOfStream):
        mailbox.receive_nowait()


async def test_async_for_ends_on_end_of_stream() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    received: list[int] = []
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:

            async def producer() -> None:
                async with mailbox:
                    for i in range(20):
                        await mailbox.send(i)  # waits whenever the mailbox is full

            tg.start_soon(producer)
            async for item in mailbox:
                assert isinstance(item, int)
                received.append(item)
    assert received == list(range(20))


async def test_aclose_is_close_and_is_idempotent() -> None:
    mailbox: Mailbox[str] = Mailbox(2)
    await mailbox.send("queued")
    await mailbox.aclose()
    await mailbox.aclose()
    assert mailbox.closed
    assert await mailbox.receive() == "queued"  # draining is allowed after a close


async def test_send_after_close_raises_closed_resource_error() -> None:
    mailbox: Mailbox[int] = Mailbox(2)
    await mailbox.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await mailbox.send(1)
    with pytest.raises(anyio.ClosedResourceError):
        mailbox.send_nowait(1)
    with pytest.raises(anyio.ClosedResourceError):
        await mailbox.send_many([1, 2])
    with pytest.raises(anyio.ClosedResourceError) as info:
        mailbox.send_many_nowait([1, 2])
    assert not isinstance(info.value, anyio.BrokenResourceError)


async def test_blocked_sender_meets_closed_resource_error() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    await mailbox.send(0)
    errors: list[BaseException] = []

    async def blocked() -> None:
        try:
            await mailbox.send(1)
        except anyio.ClosedResourceError as exc:
            errors.append(exc)

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked)
            await anyio.wait_all_tasks_blocked()
            mailbox.close()
    assert len(errors) == 1
    assert isinstance(errors[0], MailboxClosed)


async def test_blocked_receiver_meets_end_of_stream() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    errors: list[BaseException] = []

    async def blocked() -> None:
        try:
            await mailbox.receive()
        except anyio.EndOfStream as exc:
            errors.append(exc)

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked)
            await anyio.wait_all_tasks_blocked()
            await mailbox.aclose()
    assert len(errors) == 1
    assert isinstance(errors[0], MailboxClosed)


async def test_send_after_the_receiving_side_is_gone_raises_broken_resource_error() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    await mailbox.send(1)
    mailbox.close()
    assert mailbox.discard() == [1]  # closed and emptied for good: the receiver is gone
    with pytest.raises(anyio.BrokenResourceError) as info:
        await mailbox.send(2)
    assert isinstance(info.value, MailboxClosed)
    with pytest.raises(anyio.BrokenResourceError):
        mailbox.send_nowait(2)
    with pytest.raises(anyio.EndOfStream):  # its receivers still just see the end
        await mailbox.receive()
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is type(info.value)
    assert str(copy) == str(info.value)


async def test_discard_on_an_open_mailbox_breaks_nothing() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    await mailbox.send(1)
    assert mailbox.discard() == [1]
    await mailbox.send(2)
    mailbox.close()
    with pytest.raises(anyio.ClosedResourceError) as info:
        await mailbox.send(3)
    assert not isinstance(info.value, anyio.BrokenResourceError)


async def test_except_mailbox_closed_still_catches_every_case() -> None:
    mailbox: Mailbox[int] = Mailbox(2)
    mailbox.close()
    with pytest.raises(MailboxClosed):
        await mailbox.send(1)
    with pytest.raises(MailboxClosed):
        await mailbox.receive()
    with pytest.raises(MailboxClosed):
        mailbox.receive_nowait()
    mailbox.discard()
    with pytest.raises(MailboxClosed):
        await mailbox.send(1)


async def test_mailbox_works_as_a_stream_in_an_anyio_pipeline() -> None:
    async def produce(stream: ObjectSendStream[int]) -> None:
        async with stream:
            for i in range(50):
                await stream.send(i)

    async def consume(stream: ObjectReceiveStream[Any], out: list[Any]) -> None:
        async with stream:
            async for item in stream:
                out.append(item)

    mailbox: Mailbox[int] = Mailbox(3)
    out: list[Any] = []
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce, mailbox)
            tg.start_soon(consume, mailbox, out)
    assert out == list(range(50))


# -- an actor ref as a send stream ----------------------------------------------------


class Collector:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def handle(self, message: Any) -> int:
        self.seen.append(message)
        return len(self.seen)


async def test_send_stream_feeds_an_actor_from_an_anyio_pipeline() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            collector = Collector()
            ref = await nursery.start_actor(collector.handle)
            stream = ref.send_stream()
            assert isinstance(stream, ObjectSendStream)
            source_send, source_receive = anyio.create_memory_object_stream[int](4)

            async def copy() -> None:
                async with source_receive, stream:
                    async for item in source_receive:
                        await stream.send(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(copy)
                async with source_send:
                    for i in range(30):
                        await source_send.send(i)
            assert await ref.ask("last") == 31  # the stream's close left the actor running
            assert ref.alive
            assert collector.seen == [*range(30), "last"]


async def test_send_stream_closed_by_us_raises_closed_resource_error() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo)
            stream = ref.send_stream(priority=200)
            await stream.send("one")
            await stream.aclose()
            with pytest.raises(anyio.ClosedResourceError):
                await stream.send("two")
            assert ref.alive
            assert "closed" in repr(stream)
            another = ref.send_stream()
            await another.send("three")  # each stream closes on its own
            assert ref.statistics().mailbox is not None


async def test_send_stream_of_a_stopped_actor_raises_broken_resource_error() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo)
            stream = ref.send_stream()
            await stream.send("before")
            await ref.stop()
            with pytest.raises(anyio.BrokenResourceError) as info:
                await stream.send("after")
    assert isinstance(info.value, ActorStopped)  # what tell raised, as before
    assert isinstance(info.value.__cause__, ActorStopped)
    assert info.value.actor_id == ref.actor_id
