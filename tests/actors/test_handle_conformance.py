"""The handle conformance kit against the mailbox actor: a handler, and a batch actor."""

from __future__ import annotations

from typing import Any

from pdc_core import Actor, ActorNursery, ActorRef
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
