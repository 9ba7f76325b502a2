"""The handle conformance kit against the persistent-kernel actor (CPU backend).

Messages are one-field records; the kernel body runs the kit's echo on its worker
thread. The ring is FIFO (priorities are checked, not ordered by), and a kernel actor
lets any task in while its nursery drains (it never sends to its siblings by itself).
"""

from __future__ import annotations

from typing import Any

from pdc_core import ActorNursery, ActorRef, KernelActorRef, PersistentKernelActor
from pdc_core.testing import ActorRefConformance, Echo


class TestKernelActorHandles(ActorRefConformance):
    orders_by_priority = False
    messages_carry_priority = False
    refuses_outsiders_while_draining = False

    async def start(self, nursery: ActorNursery, echo: Echo) -> ActorRef[Any, Any]:
        return await nursery.start_actor(PersistentKernelActor(echo.kernel(), "cpu"))

    def message(self, value: int, priority: int | None = None) -> Any:
        return (value,)

    def value(self, reply: Any) -> int:
        return int(reply["v"])

    def tracked(self, ref: ActorRef[Any, Any]) -> int | None:
        assert isinstance(ref, KernelActorRef)
        session = ref.session
        if session is None:
            return 0
        statistics = session.statistics()
        return statistics.sent - statistics.replied - statistics.unprocessed
