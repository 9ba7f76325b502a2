"""The handle conformance kit against the mailbox actor: a handler, and a batch actor."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pdc_core
from pdc_core import Actor, ActorNursery, ActorRef, Control, open_nursery
from pdc_core._actors import MailboxActorRef
from pdc_core.testing import ActorRefConformance, Echo


class TestMailboxActorHandles(ActorRefConformance):
    async def start(self, nursery: ActorNursery, echo: Echo) -> ActorRef[Any, Any]:
        async def handler(message: Any) -> int:
            return await echo.handle_async(message.value)

        return await nursery.start_actor(handler)

    def tracked(self, ref: ActorRef[Any, Any]) -> int | None:
        assert isinstance(ref, MailboxActorRef)
        return len(ref.mailbox)  # every request still queued holds its caller's waiter


class _BatchEcho(Actor[Any, int]):
    def __init__(self, echo: Echo) -> None:
        self.echo = echo

    async def handle_batch(self, messages: list[Any]) -> list[int]:
        return [await self.echo.handle_async(message.value) for message in messages]


class TestBatchActorHandles(TestMailboxActorHandles):
    """A ``handle_batch`` actor: another serving loop behind the same handle."""

    async def start(self, nursery: ActorNursery, echo: Echo) -> ActorRef[Any, Any]:
        return await nursery.start_actor(_BatchEcho(echo))


def test_only_the_mailbox_module_touches_a_mailboxs_private_fields() -> None:
    """The mailbox actor (and every other user of a Mailbox) goes through the methods
    Mailbox documents; the mailbox's own floors alone read its fields."""
    root = Path(pdc_core.__file__).parent
    floors = {"_mailbox", "_mailbox_state", "_mailbox_policy", "_mailbox_stream", "_mailbox_lane"}
    wrong = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "_actors" and path.stem in floors:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id.lstrip("_").endswith(("mailbox", "inbox", "outbox"))
            ):
                wrong.append(f"{path.relative_to(root)}:{node.lineno} {node.value.id}.{node.attr}")
    assert wrong == []


async def test_told_messages_arrive_as_told_whatever_their_shape() -> None:
    """Tells carry no envelope; a message that could pass for one is wrapped and
    unwrapped again, for handle() and handle_batch() alike."""
    seen: list[Any] = []
    shapes: list[Any] = [(1, None, -1), ("a", "b"), None, _STOP_LIKE, [1, 2], 3]

    async def handler(message: Any) -> None:
        seen.append(message)

    class Batch(Actor[Any, None]):
        async def handle_batch(self, messages: list[Any]) -> list[None]:
            seen.extend(messages)
            return [None] * len(messages)

    for target in (handler, Batch()):
        seen.clear()
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(target)
            for shape in shapes:
                await ref.tell(shape)
            await ref.tell_many(shapes)
            await ref.ask_many([0])
        assert seen[: 2 * len(shapes)] == shapes + shapes


class _ControlLike(Control):
    __slots__ = ()


_STOP_LIKE = _ControlLike()


async def test_a_told_waiter_is_a_message_not_the_actors_own_wait() -> None:
    """The actor's loop parks on a waiter of the event loop's type; a told object of
    that type is wrapped on the way and arrives as told."""
    from pdc_core._loop import current_kit

    seen: list[Any] = []

    async def handler(message: Any) -> None:
        seen.append(message)

    told = current_kit().waiter()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(handler)
        await ref.tell(told)
        await ref.tell_many([told])
        await ref.ask_many([0])
    assert seen == [told, told, 0]
