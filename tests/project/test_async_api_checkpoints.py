"""Every public async call of pdc_core keeps the checkpoint rules (issue 26 item 2).

The public async API is enumerated at run time from ``pdc_core.__all__`` (each
exported async function, and each async method of an exported class), so a new async
call fails :func:`test_every_public_async_call_has_a_rule_and_a_scenario` until it is
given a rule and a scenario here. The rules:

* **checkpoint** (starting, opening, stopping, draining, launching, activating, and
  every other call that is not a per-message path): trio's rule, on every path. In an
  already-cancelled scope the call raises the cancellation; otherwise it lets the
  other tasks run before it returns, also when it has nothing to wait for.
* **per message** (``tell``, ``ask``, ``send``, ``receive`` and their batch forms):
  they keep their fair turns (a task yields within about a millisecond), but in an
  already-cancelled scope each raises the cancellation on entry instead of completing.

Whether a call yielded is read without timing: under trio, from the task's count of
schedule points; under asyncio, from a callback queued on the loop before the call
(the loop runs it before the task resumes only if the task yielded to the loop).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, aclosing
from typing import Any

import anyio
import numpy as np
import pytest

import pdc_core
from pdc_core import (
    Mailbox,
    PersistentKernel,
    PersistentPipeline,
    Request,
    RingKernelRuntime,
    UnifiedBuffer,
    create_broadcast_stream,
    kernel,
    open_nursery,
    open_persistent_kernel,
    open_persistent_pipeline,
)

LIMIT = 20
REC = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)

#: Hooks that pdc calls on user code or on a runner, never a user on pdc.
EXEMPT = {
    "Actor.handle": "a user's handler, called by pdc",
    "Actor.handle_batch": "a user's handler, called by pdc",
    "Actor.on_start": "a user's hook, called by pdc",
    "Actor.on_stop": "a user's hook, called by pdc",
    "PersistentKernelActor.run": "a runner's hook, called by the nursery",
    "PersistentKernelActor.start_session": "a runner's hook, called by run()",
    "PersistentPipelineActor.run": "a runner's hook, called by the nursery",
    "PersistentPipelineActor.start_session": "a runner's hook, called by run()",
    # The waits a session's own calls and a kernel actor's serving loop are built on
    # (also inside a zero-timeout scope, where they must look at the ring once): they
    # raise a cancellation whenever they wait, and return at once when the condition
    # holds.
    "PersistentKernelSession.wait_until": "the session's own wait primitive",
    "PersistentKernelSession.watch_until": "the session's own wait primitive",
    "PipelineSession.wait_until": "the session's own wait primitive",
    "PipelineSession.watch_until": "the session's own wait primitive",
}

PER_MESSAGE = {
    *(
        f"{cls}.{name}"
        for cls in ("ActorRef", "KernelActorRef", "RingKernel", "PersistentRingKernel")
        for name in ("tell", "ask", "tell_many", "ask_many", "ask_stream")
    ),
    "KernelActorRef.ask_batch",
    "PersistentRingKernel.ask_batch",
    *(
        f"{cls}.{name}"
        for cls in ("RingKernel", "PersistentRingKernel")
        for name in ("send", "receive")
    ),
    *(
        f"Mailbox.{name}"
        for name in (
            "send",
            "send_many",
            "receive",
            "receive_many",
            "take",
            "admit",
            "wait_room",
            "__anext__",
        )
    ),
    *(f"ActorMesh.{name}" for name in ("call", "scatter", "broadcast", "call_one")),
    "BroadcastSendStream.send",
    "BroadcastReceiveStream.receive",
    "BroadcastReceiveStream.__anext__",
    *(
        f"{cls}.{name}"
        for cls in ("PersistentKernelSession", "PipelineSession")
        for name in (
            "send",
            "send_batch",
            "request",
            "request_batch",
            "receive",
            "receive_batch",
        )
    ),
    "RingKernelRuntime.ask",
    "RingKernelRuntime.send_and_receive",
    "RingKernelRuntime.send",
    "RingKernelRuntime.receive",
    "RingKernelContext.send",
    "RingKernelContext.receive",
    "RingKernelContext.receive_batch",
}


def public_async_api() -> set[str]:
    """``Class.method`` (or ``function``) for every async call pdc_core exports."""
    found: set[str] = set()
    for name in pdc_core.__all__:
        obj = getattr(pdc_core, name)
        if inspect.isclass(obj):
            for attr, member in inspect.getmembers(obj):
                if attr.startswith("_") and attr not in ("__aenter__", "__aexit__", "__anext__"):
                    continue
                function = inspect.unwrap(member) if callable(member) else None
                if function is not None and _is_async(function):
                    found.add(f"{name}.{attr}")
        elif callable(obj) and _is_async(inspect.unwrap(obj)):
            found.add(name)
    return found


def _is_async(function: Any) -> bool:
    """An ``async def`` (or async generator), or a plain method that returns its
    coroutine (annotated ``Coroutine``/``Awaitable``: a fast path that skips a frame)."""
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        return True
    returns = getattr(function, "__annotations__", {}).get("return")
    return isinstance(returns, str) and returns.startswith(("Coroutine", "Awaitable"))


# -- what each call is made on ------------------------------------------------------------


async def echo(message: Any) -> Any:
    return message


def _double(requests: Any) -> Any:
    replies = np.empty(len(requests), REC)
    replies["id"] = requests["id"]
    replies["x"] = requests["x"] * 2
    return replies


def _kernel(name: str = "doubler") -> PersistentKernel:
    return PersistentKernel(name, REC, REC, capacity=16, bodies={"cpu": _double})


def _pipeline() -> PersistentPipeline:
    return PersistentPipeline(_kernel("first"), _kernel("second"))


def _record(i: int = 1) -> Any:
    return (i, 1.0)


async def _ring_function(ctx: Any) -> None:
    while not ctx.should_terminate:
        request = await ctx.receive()
        await ctx.send(request.respond(request.data))


@kernel
def _scale(x: Any, out: Any) -> None:
    i = pdc_core.cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * 2


#: A scenario: given an exit stack (for what must be closed), make what the call is
#: made on and return the call, not yet awaited (one call per scenario).
Scenario = Callable[[AsyncExitStack], Awaitable[Callable[[], Awaitable[Any]]]]


async def _nursery(stack: AsyncExitStack) -> Any:
    return await stack.enter_async_context(open_nursery())


async def _ref(stack: AsyncExitStack) -> Any:
    return await (await _nursery(stack)).start_actor(echo)


async def _kernel_ref(stack: AsyncExitStack) -> Any:
    return await (await _nursery(stack)).start_actor(_kernel())


async def _session(stack: AsyncExitStack) -> Any:
    return await stack.enter_async_context(open_persistent_kernel(_kernel(), "cpu"))


async def _pipeline_session(stack: AsyncExitStack) -> Any:
    return await stack.enter_async_context(open_persistent_pipeline(_pipeline(), "cpu"))


async def _runtime(stack: AsyncExitStack) -> Any:
    return await stack.enter_async_context(RingKernelRuntime())


async def _ring(stack: AsyncExitStack, persistent: bool = False, active: bool = True) -> Any:
    runtime = await _runtime(stack)
    target = _kernel("ring") if persistent else _ring_function
    ring = await runtime.launch("ring", target, **({"backend": "cpu"} if persistent else {}))
    if active:
        await runtime.activate("ring")
    return ring


async def _mesh(stack: AsyncExitStack) -> Any:
    return await (await _nursery(stack)).start_mesh(echo, shape={"x": 2})


def _ring_message(persistent: bool) -> Any:
    return _record() if persistent else Request(data=1)


def _handle_calls(
    name: str, make: Callable[[AsyncExitStack], Awaitable[Any]], message: Any, batch: bool = False
) -> dict[str, Scenario]:
    """The scenarios of a handle's methods (``ActorRef``'s and its kinds')."""

    on = functools.partial(_on, make)

    async def first_of_stream(ref: Any) -> Any:
        async with aclosing(ref.ask_stream([message])) as replies:
            async for reply in replies:
                return reply
        return None

    scenarios: dict[str, Scenario] = {
        f"{name}.tell": on(lambda ref: ref.tell(message)),
        f"{name}.ask": on(lambda ref: ref.ask(message)),
        f"{name}.tell_many": on(lambda ref: ref.tell_many([message])),
        f"{name}.ask_many": on(lambda ref: ref.ask_many([message])),
        f"{name}.ask_stream": on(first_of_stream),
        f"{name}.pause": on(lambda ref: ref.pause()),
        f"{name}.resume": on(lambda ref: ref.resume(), prepare=lambda ref: ref.pause()),
        f"{name}.stop": on(lambda ref: ref.stop()),
        # wait on a stopped actor: nothing to wait for, and still a checkpoint
        f"{name}.wait": on(lambda ref: ref.wait(), prepare=lambda ref: ref.stop()),
    }
    if batch:
        scenarios[f"{name}.ask_batch"] = on(lambda ref: ref.ask_batch([message]))
    return scenarios


def _on(
    make: Callable[[AsyncExitStack], Awaitable[Any]],
    call: Callable[[Any], Awaitable[Any]],
    prepare: Callable[[Any], Awaitable[Any]] | None = None,
) -> Scenario:
    """The scenario of ``call`` on an object ``make`` opens (its clean-up on the stack),
    after ``prepare`` when given."""

    async def scenario(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        target = await make(stack)
        if prepare is not None:
            await prepare(target)
        return lambda: call(target)

    return scenario


def _session_calls(
    name: str,
    make: Callable[[AsyncExitStack], Awaitable[Any]],
    start: Callable[[], Awaitable[Any]],
    opener: Callable[[], Any],
    opener_name: str,
) -> dict[str, Scenario]:
    on = functools.partial(_on, make)

    async def receive_after_send(session: Any, batch: bool) -> Any:
        await session.send(_record())
        return await (session.receive_batch() if batch else session.receive())

    async def started(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        async def call() -> None:
            session = await start()
            stack.push_async_callback(session.aclose)

        return call

    async def opened(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        async def call() -> None:
            async with opener():
                pass

        return call

    async def entered(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        session = await start()
        stack.push_async_callback(session.aclose)
        return session.__aenter__

    async def exited(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        session = await start()
        stack.push_async_callback(session.aclose)
        return lambda: session.__aexit__(None, None, None)

    return {
        f"{name}.start": started,
        f"{name}.__aenter__": entered,
        f"{name}.__aexit__": exited,
        f"{name}.aclose": on(lambda s: s.aclose()),
        f"{name}.stop": on(lambda s: s.stop()),
        f"{name}.pause": on(lambda s: s.pause()),
        f"{name}.resume": on(lambda s: s.resume(), prepare=lambda s: s.pause()),
        f"{name}.send": on(lambda s: s.send(_record())),
        f"{name}.send_batch": on(lambda s: s.send_batch([_record()])),
        f"{name}.request": on(lambda s: s.request(_record())),
        f"{name}.request_batch": on(lambda s: s.request_batch([_record()])),
        f"{name}.receive": on(lambda s: receive_after_send(s, batch=False)),
        f"{name}.receive_batch": on(lambda s: receive_after_send(s, batch=True)),
        opener_name: opened,
    }


def _scenarios() -> dict[str, Scenario]:
    scenarios: dict[str, Scenario] = {}
    scenarios.update(_handle_calls("ActorRef", _ref, 1))
    scenarios.update(_handle_calls("KernelActorRef", _kernel_ref, _record(), batch=True))
    scenarios.update(_handle_calls("RingKernel", _ring, Request(data=1)))
    scenarios.update(
        _handle_calls(
            "PersistentRingKernel", lambda s: _ring(s, persistent=True), _record(), batch=True
        )
    )
    scenarios.update(
        _session_calls(
            "PersistentKernelSession",
            _session,
            lambda: pdc_core.PersistentKernelSession.start(_kernel(), "cpu"),
            lambda: open_persistent_kernel(_kernel(), "cpu"),
            "open_persistent_kernel",
        )
    )
    scenarios.update(
        _session_calls(
            "PipelineSession",
            _pipeline_session,
            lambda: pdc_core.PipelineSession.start(_pipeline(), "cpu"),
            lambda: open_persistent_pipeline(_pipeline(), "cpu"),
            "open_persistent_pipeline",
        )
    )

    # The seed facade's ring-kernel handles: its lifecycle calls, and send/receive.
    for persistent, cls in ((False, "RingKernel"), (True, "PersistentRingKernel")):

        def on_ring(
            call: Callable[[Any], Awaitable[Any]],
            prepare: Callable[[Any], Awaitable[Any]] | None = None,
            persistent: bool = persistent,
            active: bool = True,
        ) -> Scenario:
            return _on(lambda stack: _ring(stack, persistent, active), call, prepare)

        message = _ring_message(persistent)

        async def send_receive(ring: Any, message: Any = message) -> Any:
            await ring.send(message)
            return await ring.receive()

        scenarios.update(
            {
                f"{cls}.activate": on_ring(lambda ring: ring.activate(), active=False),
                f"{cls}.deactivate": on_ring(lambda ring: ring.deactivate()),
                f"{cls}.reactivate": on_ring(
                    lambda ring: ring.reactivate(), prepare=lambda ring: ring.deactivate()
                ),
                f"{cls}.terminate": on_ring(lambda ring: ring.terminate()),
                f"{cls}.send": on_ring(lambda ring, message=message: ring.send(message)),
                f"{cls}.receive": on_ring(send_receive),
            }
        )

    # The runtime itself.
    def on_runtime(
        call: Callable[[Any], Awaitable[Any]],
        launched: bool = True,
        active: bool = True,
        prepare: Callable[[Any], Awaitable[Any]] | None = None,
    ) -> Scenario:
        async def scenario(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
            runtime = await _runtime(stack)
            if launched:
                await runtime.launch("ring", _ring_function)
                if active:
                    await runtime.activate("ring")
            if prepare is not None:
                await prepare(runtime)
            return lambda: call(runtime)

        return scenario

    async def runtime_entered(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        runtime = RingKernelRuntime()

        async def enter() -> None:
            await runtime.__aenter__()  # left by the stack once entered
            stack.push_async_callback(runtime.__aexit__, None, None, None)

        return enter

    async def runtime_exited(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        return lambda: _exit_checks(RingKernelRuntime)

    async def runtime_started(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        runtime = RingKernelRuntime()

        async def start() -> None:
            await runtime.start()  # stopped by the stack once started
            stack.push_async_callback(runtime.shutdown)

        return start

    async def kernel_scope_entered(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        runtime = await _runtime(stack)
        return lambda: stack.enter_async_context(runtime.kernel_scope("scoped", _ring_function))

    scenarios.update(
        {
            "RingKernelRuntime.__aenter__": runtime_entered,
            "RingKernelRuntime.__aexit__": runtime_exited,
            "RingKernelRuntime.start": runtime_started,
            "RingKernelRuntime.kernel_scope": kernel_scope_entered,
            "RingKernelRuntime.launch": on_runtime(
                lambda runtime: runtime.launch("other", _ring_function)
            ),
            "RingKernelRuntime.activate": on_runtime(
                lambda runtime: runtime.activate("ring"), active=False
            ),
            "RingKernelRuntime.deactivate": on_runtime(lambda runtime: runtime.deactivate("ring")),
            "RingKernelRuntime.reactivate": on_runtime(
                lambda runtime: runtime.reactivate("ring"),
                prepare=lambda runtime: runtime.deactivate("ring"),
            ),
            "RingKernelRuntime.terminate": on_runtime(lambda runtime: runtime.terminate("ring")),
            "RingKernelRuntime.shutdown": on_runtime(lambda runtime: runtime.shutdown()),
            "RingKernelRuntime.ask": on_runtime(
                lambda runtime: runtime.ask("ring", Request(data=1))
            ),
            "RingKernelRuntime.send_and_receive": on_runtime(
                lambda runtime: runtime.send_and_receive("ring", Request(data=1))
            ),
            "RingKernelRuntime.send": on_runtime(
                lambda runtime: runtime.send("ring", Request(data=1))
            ),
            "RingKernelRuntime.receive": on_runtime(
                lambda runtime: runtime.receive("ring"),
                prepare=lambda runtime: runtime.send("ring", Request(data=1)),
            ),
        }
    )

    # The nursery.
    async def nursery_entered(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        nursery = pdc_core.ActorNursery()

        async def enter() -> None:
            await nursery.__aenter__()  # left by the stack once entered
            stack.push_async_callback(nursery.__aexit__, None, None, None)

        return enter

    async def nursery_exited(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        return lambda: _exit_checks(pdc_core.ActorNursery)

    async def starting(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        nursery = await _nursery(stack)
        return lambda: nursery.start_actor(echo)

    async def starting_mesh(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        nursery = await _nursery(stack)
        return lambda: nursery.start_mesh(echo, shape={"x": 2})

    scenarios.update(
        {
            "ActorNursery.__aenter__": nursery_entered,
            "ActorNursery.__aexit__": nursery_exited,
            "ActorNursery.start_actor": starting,
            "ActorNursery.start_mesh": starting_mesh,
        }
    )

    # Meshes.
    on_mesh = functools.partial(_on, _mesh)

    scenarios.update(
        {
            "ActorMesh.call": on_mesh(lambda mesh: mesh.call(1)),
            "ActorMesh.scatter": on_mesh(lambda mesh: mesh.scatter([1, 2])),
            "ActorMesh.broadcast": on_mesh(lambda mesh: mesh.broadcast(1)),
            "ActorMesh.call_one": on_mesh(lambda mesh: mesh.call_one(1)),
            "ActorMesh.stop": on_mesh(lambda mesh: mesh.stop()),
            "ActorMesh.wait": on_mesh(lambda mesh: mesh.wait(), prepare=lambda mesh: mesh.stop()),
        }
    )

    # Mailboxes.
    def on_mailbox(
        call: Callable[[Mailbox[Any]], Awaitable[Any]], filled: bool = False
    ) -> Scenario:
        async def scenario(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
            mailbox: Mailbox[Any] = Mailbox(8)
            if filled:
                mailbox.send_nowait(1)
            return lambda: call(mailbox)

        return scenario

    scenarios.update(
        {
            "Mailbox.send": on_mailbox(lambda box: box.send(1)),
            "Mailbox.send_many": on_mailbox(lambda box: box.send_many([1, 2])),
            "Mailbox.admit": on_mailbox(lambda box: box.admit(1)),
            "Mailbox.wait_room": on_mailbox(lambda box: box.wait_room()),
            "Mailbox.receive": on_mailbox(lambda box: box.receive(), filled=True),
            "Mailbox.receive_many": on_mailbox(lambda box: box.receive_many(2), filled=True),
            "Mailbox.take": on_mailbox(lambda box: box.take(None, lambda *_: None), filled=True),
            "Mailbox.__anext__": on_mailbox(lambda box: box.__anext__(), filled=True),
            "Mailbox.aclose": on_mailbox(lambda box: box.aclose()),
            "Mailbox.__aenter__": on_mailbox(lambda box: box.__aenter__()),
            "Mailbox.__aexit__": on_mailbox(lambda box: box.__aexit__(None, None, None)),
        }
    )

    # Broadcast streams.
    def on_stream(call: Callable[[Any, Any], Awaitable[Any]], filled: bool = False) -> Scenario:
        async def scenario(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
            send, subscribe = create_broadcast_stream(4)
            receive = subscribe()
            if filled:
                send.send_nowait(1)
            return lambda: call(send, receive)

        return scenario

    scenarios.update(
        {
            "BroadcastSendStream.send": on_stream(lambda send, receive: send.send(1)),
            "BroadcastSendStream.aclose": on_stream(lambda send, receive: send.aclose()),
            "BroadcastSendStream.__aenter__": on_stream(lambda send, receive: send.__aenter__()),
            "BroadcastSendStream.__aexit__": on_stream(
                lambda send, receive: send.__aexit__(None, None, None)
            ),
            "BroadcastReceiveStream.receive": on_stream(
                lambda send, receive: receive.receive(), filled=True
            ),
            "BroadcastReceiveStream.__anext__": on_stream(
                lambda send, receive: receive.__anext__(), filled=True
            ),
            "BroadcastReceiveStream.aclose": on_stream(lambda send, receive: receive.aclose()),
            "BroadcastReceiveStream.__aenter__": on_stream(
                lambda send, receive: receive.__aenter__()
            ),
            "BroadcastReceiveStream.__aexit__": on_stream(
                lambda send, receive: receive.__aexit__(None, None, None)
            ),
        }
    )

    # Kernels and buffers.
    async def launching(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        x = np.arange(8, dtype=np.float32)
        out = np.zeros_like(x)
        return lambda: _scale.launch_async(x, out, backend="cpu")

    async def syncing(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        buffer = UnifiedBuffer((4,), np.float32, backend="cpu")
        return buffer.sync_to_host_async

    scenarios["Kernel.launch_async"] = launching
    scenarios["UnifiedBuffer.sync_to_host_async"] = syncing

    async def ensuring(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        return UnifiedBuffer((4,), np.float32, backend="cpu").ensure_on_host

    async def ensuring_device(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        return UnifiedBuffer((4,), np.float32, backend="cpu").ensure_on_device

    scenarios["UnifiedBuffer.ensure_on_host"] = ensuring
    scenarios["UnifiedBuffer.ensure_on_device"] = ensuring_device

    # The kernel function's context: made inside a ring kernel, so these run there.
    for method in ("send", "receive", "receive_batch", "wait_active"):
        scenarios[f"RingKernelContext.{method}"] = _context_scenario(method)
    return scenarios


async def _exit_checks(make: Callable[[], Any]) -> None:
    """Both rules for the ``__aexit__`` of something that holds a task group, which can
    only be left in the cancel scope it was entered in: entered, then its scope
    cancelled, leaving raises the cancellation; entered and left in a scope that is not
    cancelled, leaving lets other tasks run. (Run inside the tests' own scope, the first
    part raises first, and the tests see that cancellation.)"""
    with anyio.CancelScope() as scope:
        entered = make()
        await entered.__aenter__()
        scope.cancel()
        await entered.__aexit__(None, None, None)
    assert scope.cancelled_caught, "__aexit__ completed in a cancelled scope"
    entered = make()
    await entered.__aenter__()
    yielded = _yield_probe()
    await entered.__aexit__(None, None, None)
    assert yielded(), "__aexit__ returned without a checkpoint"


def _context_scenario(method: str) -> Scenario:
    async def scenario(stack: AsyncExitStack) -> Callable[[], Awaitable[Any]]:
        runtime = await _runtime(stack)
        contexts: list[Any] = []
        got = anyio.Event()
        release = anyio.Event()
        # Ends the kernel before the runtime drains it (LIFO), not after its 5 s drain.
        stack.callback(release.set)

        async def keep_context(ctx: Any) -> None:
            contexts.append(ctx)
            got.set()
            await release.wait()

        await runtime.launch("context", keep_context)
        await runtime.activate("context")
        await got.wait()
        ctx = contexts[0]
        if method == "send":
            return lambda: ctx.send(Request(data=1).respond(1))
        if method in ("receive", "receive_batch"):
            await runtime.send("context", Request(data=1))
            return (
                (lambda: ctx.receive()) if method == "receive" else (lambda: ctx.receive_batch(1))
            )
        return ctx.wait_active

    return scenario


SCENARIOS = _scenarios()


def test_every_public_async_call_has_a_rule_and_a_scenario() -> None:
    api = public_async_api()
    assert api - set(EXEMPT) - set(SCENARIOS) == set(), "calls without a scenario"
    assert set(SCENARIOS) - api == set()
    assert set(SCENARIOS) >= PER_MESSAGE


# -- the checks ---------------------------------------------------------------------------


def _yield_probe() -> Callable[[], bool]:
    """Before a call: returns ``yielded()``, true once the calling task has let the
    event loop run other work since the probe was made."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        import trio

        task = trio.lowlevel.current_task()
        before = task._schedule_points
        return lambda: task._schedule_points > before
    ran: list[bool] = []
    loop.call_soon(ran.append, True)  # runs before this task resumes, if it yields
    return lambda: bool(ran)


@pytest.mark.parametrize("call", sorted(SCENARIOS))
async def test_in_a_cancelled_scope_the_call_raises_the_cancellation(call: str) -> None:
    with anyio.fail_after(LIMIT):
        async with AsyncExitStack() as stack:
            make = await SCENARIOS[call](stack)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await make()
            assert scope.cancelled_caught, f"{call} completed in a cancelled scope"


@pytest.mark.parametrize("call", sorted(set(SCENARIOS) - PER_MESSAGE))
async def test_a_call_that_is_no_per_message_path_lets_other_tasks_run(call: str) -> None:
    with anyio.fail_after(LIMIT):
        async with AsyncExitStack() as stack:
            make = await SCENARIOS[call](stack)
            yielded = _yield_probe()
            await make()
            assert yielded(), f"{call} returned without a checkpoint"
