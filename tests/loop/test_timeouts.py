"""Every timeout of the public API is checked in one place (``pdc_core._loop``).

NaN used to reach the shared timer heap: under trio the program died with
TrioInternalError, under asyncio every later timeout of the loop stopped firing.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import (
    Mailbox,
    MessageTimeout,
    PersistentKernel,
    PersistentKernelActor,
    Request,
    RingKernelRuntime,
    open_nursery,
    open_persistent_kernel,
)

NAN = math.nan
LIMIT = 10


async def echo(message: Any) -> Any:
    return message


async def _still_times_out() -> None:
    """Timeouts of the loop still fire after a refused NaN."""
    with pytest.raises(MessageTimeout):
        await Mailbox().receive(timeout=0.01)


async def test_nan_timeouts_are_refused_by_name_and_later_timeouts_fire() -> None:
    async def kernel(ctx: Any) -> None:
        with pytest.raises(ValueError, match="timeout is NaN"):
            await ctx.receive(timeout=NAN)
        with pytest.raises(ValueError, match="timeout is NaN"):
            await ctx.receive_batch(2, timeout=NAN)
        while not ctx.should_terminate:
            message = await ctx.receive()
            await ctx.send(message.respond(message.data))

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo)
            with pytest.raises(ValueError, match="timeout is NaN"):
                await ref.ask(1, timeout=NAN)
            with pytest.raises(ValueError, match="timeout is NaN"):
                await ref.ask_many([1, 2], timeout=NAN)
            with pytest.raises(ValueError, match="timeout is NaN"):
                await ref.stop(timeout=NAN)
            assert await ref.ask(3) == 3  # nothing was sent by the refused calls
        mailbox: Mailbox[int] = Mailbox()
        with pytest.raises(ValueError, match="timeout is NaN"):
            await mailbox.receive(timeout=NAN)
        with pytest.raises(ValueError, match="timeout is NaN"):
            await mailbox.receive_many(4, timeout=NAN)
        async with RingKernelRuntime() as runtime:
            await runtime.launch("nan_echo", kernel)
            await runtime.activate("nan_echo")
            with pytest.raises(ValueError, match="timeout is NaN"):
                await runtime.receive("nan_echo", timeout=NAN)
            with pytest.raises(ValueError, match="timeout is NaN"):
                await runtime.ask("nan_echo", Request(data=1), timeout=NAN)
            with pytest.raises(ValueError, match="timeout is NaN"):
                await runtime.terminate("nan_echo", timeout=NAN)
            assert (await runtime.ask("nan_echo", Request(data=2), timeout=LIMIT)).result == 2
        await _still_times_out()


async def test_inf_means_no_timeout_and_zero_means_now() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo)
            assert await ref.ask(1, timeout=math.inf) == 1
            assert await ref.ask_many([1, 2], timeout=math.inf) == [1, 2]
        mailbox: Mailbox[int] = Mailbox()
        await mailbox.send(5)
        assert await mailbox.receive(timeout=math.inf) == 5
        for now in (0, -1):
            with pytest.raises(MessageTimeout):
                await mailbox.receive(timeout=now)
        with pytest.raises(TypeError, match="timeout must be a number of seconds"):
            await mailbox.receive(timeout="1")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [NAN, 0, -1.0])
async def test_configured_bounds_refuse_nan_zero_and_negative(bad: float) -> None:
    with pytest.raises(ValueError, match="shutdown_timeout"):
        open_nursery(shutdown_timeout=bad)
    with pytest.raises(ValueError, match="shutdown_timeout"):
        RingKernelRuntime(shutdown_timeout=bad)
    dtype = np.dtype([("x", "<f8")])
    kernel = PersistentKernel("bounds", dtype, dtype, bodies={"cpu": lambda r: r})
    for name in ("stop_timeout", "launch_timeout"):
        with pytest.raises(ValueError, match=name):
            PersistentKernelActor(kernel, "cpu", **{name: bad})
        with pytest.raises(ValueError, match=name):
            async with open_persistent_kernel(kernel, "cpu", **{name: bad}):
                pass


async def test_configured_bounds_take_inf_for_none() -> None:
    async with open_nursery(shutdown_timeout=math.inf) as nursery:
        ref = await nursery.start_actor(echo)
        assert await ref.ask(1) == 1


async def test_an_integer_timeout_too_large_for_a_float_means_no_bound() -> None:
    """Issue 35, item 12: ``10**400`` cannot be a float (``OverflowError``); it is more
    than ``inf`` could say, so it means no bound, as ``inf`` does; ``-10**400`` is now."""
    huge = 10**400
    with anyio.fail_after(LIMIT):
        async with open_nursery(shutdown_timeout=huge) as nursery:
            ref = await nursery.start_actor(echo)
            assert await ref.ask(1, timeout=huge) == 1
            assert await ref.ask_many([1, 2], timeout=huge) == [1, 2]
            mesh = await nursery.start_mesh(echo, shape={"w": 2})
            assert await mesh.call(3, timeout=huge) == [3, 3]
            assert [reply async for reply in ref.ask_stream([4, 5], timeout=huge)] == [4, 5]
            await ref.stop(timeout=huge)
        mailbox: Mailbox[int] = Mailbox()
        await mailbox.send(5)
        assert await mailbox.receive(timeout=huge) == 5
        with pytest.raises(MessageTimeout):
            await mailbox.receive(timeout=-huge)
        with pytest.raises(ValueError, match="shutdown_timeout"):
            open_nursery(shutdown_timeout=-huge)


async def test_bounds_of_kernels_too_large_for_a_float_mean_no_bound() -> None:
    huge = 10**400
    dtype = np.dtype([("x", "<f8")])
    kernel = PersistentKernel("huge", dtype, dtype, bodies={"cpu": lambda r: r.copy()})
    with anyio.fail_after(LIMIT):
        async with open_persistent_kernel(
            kernel, "cpu", launch_timeout=huge, stop_timeout=huge, spin_limit=huge
        ) as session:
            assert session.stop_timeout == math.inf
            assert float((await session.request((1.5,)))["x"]) == 1.5
            await session.stop(timeout=huge)
        actor = PersistentKernelActor(kernel, "cpu", launch_timeout=huge, stop_timeout=huge)
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(actor)
            assert float((await ref.ask((2.5,)))["x"]) == 2.5
            await ref.stop(timeout=huge)
        async with RingKernelRuntime(shutdown_timeout=huge) as runtime:
            await runtime.launch("huge_echo", _echo_kernel)
            await runtime.activate("huge_echo")
            assert (await runtime.ask("huge_echo", Request(data=1), timeout=huge)).result == 1
            await runtime.terminate("huge_echo", timeout=huge)


async def _echo_kernel(ctx: Any) -> None:
    while not ctx.should_terminate:
        message = await ctx.receive()
        await ctx.send(message.respond(message.data))
