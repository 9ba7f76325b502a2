"""How a mesh reaches a mailbox actor: straight into its mailbox, no task per request.

A mesh's request to a mailbox member is the envelope of an ``ask`` whose reply target is
the mesh's reply slot (:class:`~._mesh._Slot`), so the actor answers, skips (the caller
gave up) or fails it exactly as a single request; one waiter gathers them all.
"""

from __future__ import annotations

from typing import Any

from .._exceptions import ActorStopped, MailboxClosed, MailboxFull
from ._mailbox import Backpressure
from ._mailbox_actor import Actor, MailboxActorRef, _told
from ._mesh import _LATER, _Port, _Slot, mesh_port, shared_target

__all__: list[str] = []


class _MailboxPort(_Port):
    __slots__ = ("mailbox",)

    direct = True

    def __init__(self, ref: MailboxActorRef[Any, Any]) -> None:
        super().__init__(ref)
        self.mailbox = ref.mailbox

    def post(self, message: Any, priority: int, slot: _Slot) -> bool:
        ref = self.ref
        assert isinstance(ref, MailboxActorRef)
        return ref.offer_request(message, priority, slot)

    async def send(self, message: Any, priority: int, slot: _Slot) -> None:
        ref = self.ref
        assert isinstance(ref, MailboxActorRef)
        try:
            await ref.enqueue_request(message, priority, slot)
        except (ActorStopped, MailboxFull) as error:  # the member's failure, in its slot
            if not slot.done():
                slot.set_exception(error)

    def tell_now(self, message: Any, priority: int) -> bool:
        ref = self.ref
        assert isinstance(ref, MailboxActorRef)
        return ref.offer_tell(message, priority)

    def needs_wait(self) -> bool:
        mailbox = self.mailbox
        return (
            len(mailbox) >= mailbox.capacity
            and not mailbox.closed
            and mailbox.backpressure is Backpressure.BLOCK
        )

    async def wait_room(self) -> None:
        await self.mailbox.wait_room()

    def tell_nowait(self, message: Any, priority: int) -> object:
        ref = self.ref
        assert isinstance(ref, MailboxActorRef)
        try:
            self.mailbox.send_nowait(_told(message, ref._wrapped), priority)
        except MailboxFull as error:  # "raise"
            return error
        except MailboxClosed:
            if ref._admits_caller():  # a draining nursery's actor: admit, waiting if full
                return _LATER
            return ref._stopped_error()
        return None

    def load(self) -> int:
        mailbox = self.mailbox
        return len(mailbox) + (not mailbox.starved())


@mesh_port.register(MailboxActorRef)
def _mailbox_port(ref: MailboxActorRef[Any, Any]) -> _Port:
    return _MailboxPort(ref)


@shared_target.register(Actor)
def _actor_instance(target: Actor[Any, Any]) -> bool:
    return True
