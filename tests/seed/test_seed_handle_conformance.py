"""The handle conformance kit against the seed facade's handles: a ring kernel (an
``async def f(ctx)`` kernel function, requests matched to replies by message id) and
a persistent kernel launched by the runtime. Both run in the runtime's own nursery."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pdc_core import ActorRef, Request, RingKernel, RingKernelRuntime
from pdc_core.testing import ActorRefConformance, Echo


class TestRingKernelHandles(ActorRefConformance):
    runs_in_nursery = False

    @asynccontextmanager
    async def actor(self, echo: Echo) -> AsyncIterator[ActorRef[Any, Any]]:
        async def kernel(ctx: Any) -> None:
            while not ctx.should_terminate:
                request = await ctx.receive()
                await ctx.send(request.respond(await echo.handle_async(request.data)))

        async with RingKernelRuntime() as runtime:
            ref = await runtime.launch(echo.key, kernel)
            await runtime.activate(echo.key)
            yield ref

    def message(self, value: int, priority: int | None = None) -> Any:
        if priority is None:
            return Request(data=value)
        return Request(data=value, priority=priority)

    def same_id(self, message: Any, value: int) -> Any:
        return Request(data=value, message_id=message.message_id)

    def value(self, reply: Any) -> int:
        return int(reply.result)

    def tracked(self, ref: ActorRef[Any, Any]) -> int | None:
        assert isinstance(ref, RingKernel)
        return len(ref._pending)


class TestPersistentRingKernelHandles(ActorRefConformance):
    runs_in_nursery = False
    orders_by_priority = False
    messages_carry_priority = False

    @asynccontextmanager
    async def actor(self, echo: Echo) -> AsyncIterator[ActorRef[Any, Any]]:
        async with RingKernelRuntime() as runtime:
            ref = await runtime.launch(echo.key, echo.kernel(), backend="cpu")
            await runtime.activate(echo.key)
            yield ref

    def message(self, value: int, priority: int | None = None) -> Any:
        return (value,)

    def value(self, reply: Any) -> int:
        return int(reply["v"])
