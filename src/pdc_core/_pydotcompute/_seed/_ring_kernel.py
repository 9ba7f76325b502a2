"""The seed API: ``@ring_kernel``, ``RingKernelRuntime`` and the kernel context.

A faithful facade, with PyDotCompute's names, over mailboxes and actor nurseries::

    @ring_kernel(kernel_id="worker", queue_size=1000)
    async def worker(ctx):
        while not ctx.should_terminate:
            if not ctx.is_active:
                await ctx.wait_active()
                continue
            try:
                msg = await ctx.receive(timeout=0.1)
            except asyncio.TimeoutError:
                continue
            await ctx.send(Response(result=msg.data * 2, correlation_id=msg.message_id))

    async with RingKernelRuntime(enable_telemetry=True) as runtime:
        await runtime.launch("worker")
        await runtime.activate("worker")
        await runtime.send("worker", Request(data=21))
        response = await runtime.receive("worker")

Each launched kernel is an actor of the runtime's :class:`~pdc_core.ActorNursery`
(plugged in through :class:`~pdc_core.lowlevel.ActorRunner`), with a bounded,
prioritised input :class:`~pdc_core.Mailbox` and a bounded output mailbox.

Lifecycle (``runtime.get_kernel_state(id)``)::

    launch -> LAUNCHED -activate-> ACTIVE <-deactivate/reactivate-> DEACTIVATED
    any live state -terminate-> TERMINATING -> TERMINATED     (crash: FAILED)

* ``launch`` creates the queues and starts the kernel's task (a handshake: it returns
  once the task runs); the kernel function is called when the kernel is activated
  (or terminated before that, to drain what was sent meanwhile), as in PyDotCompute.
* ``activate``/``reactivate`` deliver messages; ``deactivate`` really pauses
  delivery: queued and new messages wait, ``ctx.receive`` waits (or times out).
* ``terminate(timeout)`` refuses new messages, lets the kernel drain what is queued
  (``ctx.should_terminate`` turns True once the queue is empty, and a waiting
  ``ctx.receive`` raises :class:`~pdc_core.KernelTerminated`, which ends the kernel
  cleanly), and after ``timeout`` seconds discards the rest (counted) and cancels it.
* ``send`` is allowed in LAUNCHED, ACTIVE and DEACTIVATED (messages queue until
  delivered); ``receive`` in every state but TERMINATED/FAILED, where it still returns
  replies already queued. Anything else raises :class:`~pdc_core.KernelStateError`
  naming the state.
* An exception escaping a kernel function is never swallowed: it is counted in the
  telemetry and, unless the kernel was launched with a ``restart`` policy, the
  runtime's ``async with`` raises :class:`~pdc_core.ActorCrashed` (the other kernels
  are cancelled and every pending request fails).

``ctx.receive(timeout=...)`` raises :class:`~pdc_core.MessageTimeout`, a
:class:`TimeoutError`, which is ``asyncio.TimeoutError`` on Python 3.11+: the seeds'
``except asyncio.TimeoutError`` catches it under asyncio and under trio.
"""

# Timeouts are parameters here, as in the seed API (see _mailbox for why not scopes).
# ruff: noqa: ASYNC109

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final, overload

import anyio

from ..._actors import CATCH_UP_AT, EMPTY, Backpressure, BatchReply, Mailbox
from ..._exceptions import (
    ActorCrashed,
    ActorStopped,
    KernelNotFoundError,
    KernelStateError,
    KernelTerminated,
    MailboxClosed,
    MessageDropped,
    MessageTimeout,
)
from ..._loop import TURN_CHECK_EVERY
from ...lowlevel import (
    TIMED_OUT,
    ActorRef,
    ActorRunner,
    ActorState,
    ActorStatistics,
    Kit,
    cancellation_first,
    check_count,
    check_timeout,
    current_kit,
    fail,
    full_checkpoint,
    message_priority,
    raise_cancelled,
    seconds_or_inf,
    wake,
)
from ._lifecycle import AS_ACTOR_STATE, RECEIVE_STATES, KernelState, terminate_within
from ._messages import Message
from ._telemetry import KernelTelemetry, Telemetry

__all__ = [
    "KernelFunction",
    "RingKernel",
    "RingKernelContext",
    "RingKernelDefinition",
    "check_queue_size",
    "get_ring_kernel",
    "registered_ring_kernels",
    "ring_kernel",
]

_perf_counter_ns = time.perf_counter_ns
#: One message in this many is timed for the latency percentiles (counts are exact).
_SAMPLE_EVERY: Final = 8


def _priority_of(message: Any) -> int:
    """The priority an accepted reply went into the output queue with."""
    return message_priority(message)


KernelFunction = Callable[["RingKernelContext"], Awaitable[Any]]


# --------------------------------------------------------------------------------------
# Definitions and the decorator
# --------------------------------------------------------------------------------------


def check_queue_size(size: object, what: str) -> int:
    """``size`` as an int if it is a positive int by pdc's one integer rule (NumPy's
    integers too; never a bool or a float); else a ``ValueError`` (PyDotCompute's
    class for it) naming ``what`` and it."""
    try:
        return check_count(size, what)
    except TypeError as error:
        raise ValueError(str(error)) from None


class RingKernelDefinition:
    """A kernel function with its configuration, as made by :func:`ring_kernel`.

    Calling it calls the function (useful in tests); ``RingKernelRuntime.launch(id)``
    runs it as a kernel.
    """

    __slots__ = (
        "__dict__",
        "backpressure",
        "block_size",
        "func",
        "grid_size",
        "input_queue_size",
        "input_type",
        "kernel_id",
        "output_queue_size",
        "output_type",
    )

    def __init__(
        self,
        func: KernelFunction,
        *,
        kernel_id: str,
        input_type: type | None = None,
        output_type: type | None = None,
        input_queue_size: int = 4096,
        output_queue_size: int = 4096,
        backpressure: Backpressure | str = Backpressure.BLOCK,
        grid_size: int = 1,
        block_size: int = 256,
    ) -> None:
        if not callable(func):
            raise TypeError(f"a ring kernel must be an async function, got {func!r}")
        if not isinstance(kernel_id, str) or not kernel_id:
            raise ValueError(f"kernel_id must be a non-empty string, got {kernel_id!r}")
        input_queue_size = check_queue_size(input_queue_size, "input_queue_size")
        output_queue_size = check_queue_size(output_queue_size, "output_queue_size")
        grid_size = check_count(grid_size, "grid_size")
        block_size = check_count(block_size, "block_size")
        for label, kind in (("input_type", input_type), ("output_type", output_type)):
            if kind is not None and not isinstance(kind, type):
                raise TypeError(f"{label} must be a class, got {kind!r}")
        self.func = func
        self.kernel_id = kernel_id
        self.input_type = input_type
        self.output_type = output_type
        self.input_queue_size = input_queue_size
        self.output_queue_size = output_queue_size
        self.backpressure = Backpressure.coerce(backpressure)
        self.grid_size = grid_size
        self.block_size = block_size
        functools.update_wrapper(self, func)

    def __call__(self, ctx: RingKernelContext) -> Awaitable[Any]:
        return self.func(ctx)

    def _renamed(self, kernel_id: str) -> RingKernelDefinition:
        """This definition under another id: how one kernel function is launched under
        many ids (a copy, without checking again what was checked when it was made)."""
        if not isinstance(kernel_id, str) or not kernel_id:
            raise ValueError(f"kernel_id must be a non-empty string, got {kernel_id!r}")
        clone = object.__new__(RingKernelDefinition)
        clone.__dict__.update(self.__dict__)  # what functools.update_wrapper copied
        clone.func = self.func
        clone.kernel_id = kernel_id
        clone.input_type = self.input_type
        clone.output_type = self.output_type
        clone.input_queue_size = self.input_queue_size
        clone.output_queue_size = self.output_queue_size
        clone.backpressure = self.backpressure
        clone.grid_size = self.grid_size
        clone.block_size = self.block_size
        return clone

    def __repr__(self) -> str:
        return f"<RingKernelDefinition {self.kernel_id!r} queue={self.input_queue_size}>"


_registry: dict[str, RingKernelDefinition] = {}


def get_ring_kernel(kernel_id: str) -> RingKernelDefinition:
    """Return the kernel registered under ``kernel_id`` by :func:`ring_kernel`.

    Raises :class:`~pdc_core.KernelNotFoundError` listing the registered ids.
    """
    try:
        return _registry[kernel_id]
    except KeyError:
        raise KernelNotFoundError(kernel_id, list(_registry)) from None


def registered_ring_kernels() -> dict[str, RingKernelDefinition]:
    """The kernels registered by :func:`ring_kernel`, by id (a copy)."""
    return dict(_registry)


@overload
def ring_kernel(func: KernelFunction, /) -> RingKernelDefinition: ...


@overload
def ring_kernel(
    func: None = None,
    /,
    *,
    kernel_id: str | None = None,
    input_type: type | None = None,
    output_type: type | None = None,
    queue_size: int = 4096,
    input_queue_size: int | None = None,
    output_queue_size: int | None = None,
    backpressure: Backpressure | str = Backpressure.BLOCK,
    grid_size: int = 1,
    block_size: int = 256,
    auto_register: bool = True,
) -> Callable[[KernelFunction], RingKernelDefinition]: ...


def ring_kernel(
    func: KernelFunction | None = None,
    /,
    *,
    kernel_id: str | None = None,
    input_type: type | None = None,
    output_type: type | None = None,
    queue_size: int = 4096,
    input_queue_size: int | None = None,
    output_queue_size: int | None = None,
    backpressure: Backpressure | str = Backpressure.BLOCK,
    grid_size: int = 1,
    block_size: int = 256,
    auto_register: bool = True,
) -> RingKernelDefinition | Callable[[KernelFunction], RingKernelDefinition]:
    """Declare ``async def f(ctx)`` a ring kernel (PyDotCompute's decorator).

    ``kernel_id`` defaults to the function's name. ``queue_size`` sizes both queues
    unless ``input_queue_size``/``output_queue_size`` say otherwise. With
    ``input_type``, ``runtime.send`` raises :class:`TypeError` for other messages; with
    ``output_type``, so does ``ctx.send``. ``backpressure`` is the input queue's policy
    (``"block"``, ``"raise"``/``"reject"``, ``"drop_oldest"``). ``grid_size`` and
    ``block_size`` are recorded for device backends. The kernel is registered under
    its id (replacing an earlier one) unless ``auto_register=False``.
    """

    size = check_queue_size(queue_size, "queue_size")  # the caller's name for it

    def decorate(fn: KernelFunction) -> RingKernelDefinition:
        definition = RingKernelDefinition(
            fn,
            kernel_id=kernel_id or str(getattr(fn, "__name__", "")),
            input_type=input_type,
            output_type=output_type,
            # ``is None``, not ``or``: a bad size given (0) is refused, never replaced.
            input_queue_size=size if input_queue_size is None else input_queue_size,
            output_queue_size=size if output_queue_size is None else output_queue_size,
            backpressure=backpressure,
            grid_size=grid_size,
            block_size=block_size,
        )
        if auto_register:
            _registry[definition.kernel_id] = definition
        return definition

    if func is not None:
        return decorate(func)
    return decorate


# --------------------------------------------------------------------------------------
# The context given to the kernel function
# --------------------------------------------------------------------------------------


class RingKernelContext:
    """What a kernel function receives as ``ctx``."""

    __slots__ = ("_inbox", "_kernel", "_kit", "_outbox", "_record", "_telemetry")

    def __init__(self, kernel: RingKernel) -> None:
        self._kernel = kernel
        self._inbox = kernel._inbox
        self._outbox = kernel._outbox
        self._kit = kernel._kit
        self._telemetry = kernel._telemetry
        self._record = kernel._telemetry.enabled

    @property
    def kernel_id(self) -> str:
        """The kernel's id."""
        return self._kernel._kernel_id

    @property
    def should_terminate(self) -> bool:
        """True once the kernel is told to end: terminate drained its queue, or it was
        cancelled. A loop ``while not ctx.should_terminate`` then exits."""
        kernel = self._kernel
        return kernel._interrupted or self._inbox.exhausted

    @property
    def is_active(self) -> bool:
        """True while messages are delivered (ACTIVE, and TERMINATING while draining)."""
        state = self._kernel._state
        return state is KernelState.ACTIVE or state is KernelState.TERMINATING

    async def wait_active(self) -> None:
        """Wait until the kernel is activated (or is terminating).

        A checkpoint; cancelling it ends the wait only.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        kernel = self._kernel
        while kernel._state is KernelState.LAUNCHED or kernel._state is KernelState.DEACTIVATED:
            waiter = self._kit.waiter()
            if kernel._active_waiters is None:
                kernel._active_waiters = []
            kernel._active_waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                kernel._interrupted = True
                raise

    async def receive(self, timeout: float | None = None) -> Any:
        """Return the next message (highest priority first, FIFO within a priority).

        Waits while the queue is empty or the kernel is deactivated. Raises
        :class:`~pdc_core.MessageTimeout` (a ``TimeoutError``) after ``timeout``
        seconds, and :class:`~pdc_core.KernelTerminated` when the kernel is
        terminating and its queue is drained. A kernel already cancelled on entry
        takes nothing; cancelled while it waits, it takes nothing, except a message
        handed to it in that instant, which is counted as undelivered (an ``ask`` of
        it fails with :class:`~pdc_core.ActorStopped`).
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        inbox = self._inbox
        kit = self._kit
        if kit.cancel_called():  # a kernel in a cancelled scope takes nothing
            await self._raise_cancelled()
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and kit.turn_is_over():
            await self._checkpoint()
        item: Any = inbox.poll()  # the input mailbox carries no control: data or nothing
        if item is EMPTY:
            # The common wait, timed or not, without a coroutine frame of its own: park
            # as the inbox's taker (an idle kernel's timed receive in the seeds' loop
            # costs one such wake-up per timeout).
            waiter = inbox.park_taker()
            if waiter is None:
                item = await self._wait(timeout, timeout)
            else:
                deadline = 0.0
                if timeout is not None:
                    deadline = kit.now() + timeout
                    kit.arm(waiter, timeout)
                try:
                    item = await waiter
                except BaseException as exc:
                    self._abandon(inbox.release_taker(waiter), exc)
                    raise
                if item is TIMED_OUT:
                    inbox.release_taker(waiter)
                    raise self._timed_out(timeout)
                if item is None:  # woken to look again (resumed, closed)
                    item = inbox.poll()
                    if item is EMPTY:  # closed, or taken by another: wait on
                        remaining = None if timeout is None else max(0.0, deadline - kit.now())
                        item = await self._wait(remaining, timeout)
        message, enqueued_ns = item
        telemetry = self._telemetry
        telemetry.messages_processed += 1
        if enqueued_ns:
            telemetry.delivered(message, enqueued_ns)
        return message

    async def _checkpoint(self) -> None:
        try:
            await self._kit.checkpoint()
        except BaseException:
            self._kernel._interrupted = True
            raise

    async def _raise_cancelled(self) -> None:
        try:
            await raise_cancelled()
        except BaseException:
            self._kernel._interrupted = True
            raise

    def _terminated(self) -> KernelTerminated:
        kernel_id = self._kernel._kernel_id
        return KernelTerminated(
            f"kernel {kernel_id!r} is terminating and its queue is drained", actor_id=kernel_id
        )

    def _abandon(self, handed: Any, exc: BaseException) -> None:
        """The taker's wait ended with ``exc``: account for the message handed meanwhile."""
        if handed is not None:
            self._kernel._lost(handed)
        if not isinstance(exc, Exception):
            self._kernel._interrupted = True

    def _timed_out(self, timeout: float | None) -> MessageTimeout:
        return MessageTimeout(
            f"kernel {self._kernel._kernel_id!r} received nothing within {timeout} s"
        )

    async def _wait(self, timeout: float | None, given: float | None) -> Any:
        """Wait up to ``timeout`` for the next item as the inbox's taker (or in line
        behind it); ``given`` is the timeout the caller gave, for the error."""
        item = await self._inbox.take(timeout, self._abandon)
        if item is EMPTY:
            raise self._terminated()
        if item is TIMED_OUT:
            raise self._timed_out(given)
        return item

    def receive_nowait(self) -> Any:
        """Return the next message without waiting; raise ``anyio.WouldBlock`` if none."""
        item = self._inbox.poll()
        if item is EMPTY:
            raise anyio.WouldBlock
        message, enqueued_ns = item
        self._telemetry.messages_processed += 1
        if enqueued_ns:
            self._telemetry.delivered(message, enqueued_ns)
        return message

    async def receive_batch(self, max_count: int, timeout: float | None = None) -> list[Any]:
        """Wait for at least one message, then return up to ``max_count`` of them.

        Waits, raises and cancels as :meth:`receive` does; ``max_count`` below 1 is a
        :class:`ValueError`.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        if max_count < 1:
            raise ValueError(f"max_count must be at least 1, got {max_count}")
        batch = [await self.receive(timeout)]
        poll = self._inbox.poll
        telemetry = self._telemetry
        while len(batch) < max_count:
            item = poll()
            if item is EMPTY:
                break
            message, enqueued_ns = item
            telemetry.messages_processed += 1
            if enqueued_ns:
                telemetry.delivered(message, enqueued_ns)
            batch.append(message)
        return batch

    async def send(self, message: Any) -> None:
        """Emit ``message``.

        A message whose ``correlation_id`` answers a pending ``ask`` resolves it
        directly, and so does the asked request itself sent back (an echo: no
        ``correlation_id``, the request's ``message_id``); any other goes to the output
        queue (read with ``runtime.receive``), waiting while that queue is full. A
        kernel already cancelled on entry sends nothing, and cancelling the wait for
        room leaves the message unsent.
        """
        kernel = self._kernel
        outbox = self._outbox
        kit = self._kit
        if kit.cancel_called():  # a kernel in a cancelled scope sends nothing
            await self._raise_cancelled()
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and (len(outbox) >= CATCH_UP_AT or kit.turn_is_over()):
            await self._checkpoint()  # before sending: a cancelled send sends nothing
        output_type = kernel._output_type
        if output_type is not None and not isinstance(message, output_type):
            raise TypeError(
                f"kernel {kernel._kernel_id!r} declares output_type="
                f"{output_type.__name__}, but sent a {type(message).__name__}"
            )
        telemetry = self._telemetry
        telemetry.messages_sent += 1
        correlation_id = getattr(message, "correlation_id", None)
        if correlation_id is None and (kernel._pending or kernel._stale):
            # An uncorrelated message that is a request sent back (an echo, as
            # PyDotCompute's send_and_receive tests do) answers that request's ask.
            correlation_id = getattr(message, "message_id", None)
            if correlation_id not in kernel._pending and correlation_id not in kernel._stale:
                correlation_id = None
        if correlation_id is not None:
            if telemetry._inflight:
                telemetry.replied(correlation_id)
            stale = kernel._stale
            if stale and correlation_id in stale:
                # The reply to an ask whose caller gave up (cancelled, timed out): it
                # answers nobody, not even a later ask that reuses the message's id.
                if stale[correlation_id] == 1:
                    del stale[correlation_id]
                else:
                    stale[correlation_id] -= 1
                return
            pending = kernel._pending
            if pending:
                entry = pending.pop(correlation_id, None)
                if entry is not None:
                    kernel._resolve(entry, message)
                    return
        # A pdc Message's priority was checked when it was made (Message.__post_init__);
        # offer() refuses a bad one anyway, and send() below says why.
        priority = message.priority if isinstance(message, Message) else message_priority(message)
        if outbox.offer(message, priority):
            return
        try:
            await outbox.send(message, priority)
        except MailboxClosed:
            raise KernelTerminated(
                f"kernel {kernel._kernel_id!r} has stopped", actor_id=kernel._kernel_id
            ) from None
        except Exception:
            raise
        except BaseException:
            kernel._interrupted = True
            raise

    def __repr__(self) -> str:
        return f"<RingKernelContext {self.kernel_id!r} {self._kernel._state.name}>"


# --------------------------------------------------------------------------------------
# A launched kernel: handle (ActorRef) and runner (ActorRunner)
# --------------------------------------------------------------------------------------


class RingKernel(ActorRef[Any, Any]):
    """A launched ring kernel: its state, queues, telemetry, and an actor handle.
    (PyDotCompute's free-standing ``RingKernel(kernel_id, func)``, on the path
    ``pdc_core.ring_kernels``, is another class, of which this one is a virtual
    subclass.)

    ``runtime.launch`` returns it. Besides the runtime's methods (which take the
    kernel id) it is an :class:`~pdc_core.ActorRef`: ``ask(request)`` sends the
    request and returns the reply the kernel sends with
    ``correlation_id=request.message_id``; ``pause``/``resume`` deactivate and
    reactivate; ``stop`` terminates.
    """

    __slots__ = (
        "_active_waiters",
        "_cancel_called",
        "_definition",
        "_finished",
        "_inbox",
        "_input_type",
        "_interrupted",
        "_kernel_id",
        "_kit",
        "_outbox",
        "_output_type",
        "_pending",
        "_record",
        "_runner",
        "_sends",
        "_stale",
        "_state",
        "_stop_waiters",
        "_task",
        "_telemetry",
        "ctx",
    )

    def __init__(
        self,
        definition: RingKernelDefinition,
        kit: Kit,
        *,
        telemetry: bool,
    ) -> None:
        self._definition = definition
        self._kernel_id = definition.kernel_id
        self._kit = kit
        # ActorRef's entry check, bound once: a slot that shadows the method.
        self._cancel_called = kit.cancel_called  # type: ignore[method-assign]
        self._input_type = definition.input_type
        self._output_type = definition.output_type
        self._inbox: Mailbox[tuple[Any, int]] = Mailbox(
            definition.input_queue_size,
            backpressure=definition.backpressure,
            name=f"{definition.kernel_id} input",
            on_drop=self._on_drop,
        )
        self._outbox: Mailbox[Any] = Mailbox(
            definition.output_queue_size, name=f"{definition.kernel_id} output"
        )
        self._inbox.pause()
        self._state = KernelState.LAUNCHED
        self._telemetry = KernelTelemetry(definition.kernel_id, enabled=telemetry)
        self._record = telemetry
        self._sends = 0
        self._pending: dict[Any, Any] = {}
        #: Ids of requests sent for asks that ended without their reply: how many
        #: replies with that correlation id to drop (see RingKernelContext.send).
        self._stale: dict[Any, int] = {}
        self._active_waiters: list[Any] | None = None
        self._stop_waiters: list[Any] | None = None
        self._finished = False
        self._interrupted = False
        self._task: object = None
        self.ctx = RingKernelContext(self)
        self._runner = _RingKernelRunner(self)

    # -- introspection ------------------------------------------------------------------

    @property
    def kernel_id(self) -> str:
        """The kernel's id."""
        return self._kernel_id

    @property
    def actor_id(self) -> str:
        return self._kernel_id

    @property
    def kernel_state(self) -> KernelState:
        """The ring-kernel lifecycle state."""
        return self._state

    @property
    def state(self) -> ActorState:
        """The lifecycle state in actor terms (see :attr:`kernel_state`)."""
        return AS_ACTOR_STATE[self._state]

    @property
    def definition(self) -> RingKernelDefinition:
        """The definition this kernel was launched from."""
        return self._definition

    def telemetry(self) -> Telemetry:
        """A snapshot of the kernel's telemetry (counts are kept even when disabled)."""
        t = self._telemetry
        inbox = self._inbox.statistics()
        return t.snapshot(
            self._state.name,
            received=inbox.sent,
            processed=t.messages_processed,
            sent=t.messages_sent,
            dropped=inbox.dropped,
            rejected=inbox.rejected,
            discarded=inbox.discarded,
            queue_depth=inbox.depth,
            output_depth=len(self._outbox),
            error_count=t.error_count,
        )

    def statistics(self) -> ActorStatistics:
        t = self._telemetry
        return ActorStatistics(
            actor_id=self._kernel_id,
            state=self.state,
            handled=t.messages_processed,
            errors=t.error_count,
            restarts=self._runner.restarts,
            skipped=0,
            mailbox=self._inbox.statistics(),
        )

    # -- lifecycle ----------------------------------------------------------------------

    def _state_error(self, operation: str, allowed: str) -> KernelStateError:
        return KernelStateError(self._kernel_id, self._state.name, operation, allowed=allowed)

    def _set_state(self, state: KernelState) -> None:
        self._state = state
        self._telemetry.set_active(state is KernelState.ACTIVE or state is KernelState.TERMINATING)
        if state is not KernelState.LAUNCHED and state is not KernelState.DEACTIVATED:
            waiters, self._active_waiters = self._active_waiters, None
            for waiter in waiters or ():
                wake(waiter)

    async def activate(self) -> None:
        """LAUNCHED -> ACTIVE: start delivering messages.

        Raises :class:`~pdc_core.KernelStateError` in any other state. Never waits, but
        is a checkpoint: a caller already cancelled on entry changes nothing.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if self._state is not KernelState.LAUNCHED:
            raise self._state_error("activate", "LAUNCHED")
        self._set_state(KernelState.ACTIVE)
        self._inbox.resume()

    async def deactivate(self) -> None:
        """ACTIVE -> DEACTIVATED: pause delivery; messages keep queueing.

        Raises :class:`~pdc_core.KernelStateError` in any other state. Never waits, but
        is a checkpoint: a caller already cancelled on entry changes nothing.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if self._state is not KernelState.ACTIVE:
            raise self._state_error("deactivate", "ACTIVE")
        self._inbox.pause()
        self._set_state(KernelState.DEACTIVATED)

    async def reactivate(self) -> None:
        """DEACTIVATED -> ACTIVE: resume delivery.

        Raises :class:`~pdc_core.KernelStateError` in any other state. Never waits, but
        is a checkpoint: a caller already cancelled on entry changes nothing.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if self._state is not KernelState.DEACTIVATED:
            raise self._state_error("reactivate", "DEACTIVATED")
        self._set_state(KernelState.ACTIVE)
        self._inbox.resume()

    def _request_terminate(self, timeout: float = 0.0) -> None:
        # ``timeout`` is for persistent kernels (their drain deadline); this kernel is
        # cancelled by _force_terminate when its drain takes too long.
        if self._finished or self._state is KernelState.TERMINATING:
            return
        self._set_state(KernelState.TERMINATING)
        self._inbox.close()
        self._inbox.resume()

    def _force_terminate(self) -> None:
        self._interrupted = True
        self._inbox.discard()
        scope = self._runner.cancel_scope
        if scope is not None:
            scope.cancel()

    async def terminate(self, timeout: float = 5.0) -> None:
        """Drain the queue (up to ``timeout`` seconds), then stop the kernel.

        Returns once the kernel has stopped. Messages still queued after the timeout
        are discarded (counted in the telemetry) and the kernel is cancelled.
        Idempotent. Called from inside the kernel, it requests termination and
        returns at once.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        timeout = seconds_or_inf(check_timeout(timeout))  # 10**400: inf
        if self._finished:
            return
        if self._task is not None and self._task is self._kit.current_task():
            self._request_terminate()
            return
        await terminate_within(self, timeout)

    async def wait(self) -> None:
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if self._finished:
            return
        waiter = self._kit.waiter()
        if self._stop_waiters is None:
            self._stop_waiters = []
        self._stop_waiters.append(waiter)
        await waiter

    # -- messages -----------------------------------------------------------------------

    def send(
        self, message: Any, *, timeout: float | None = None, priority: int | None = None
    ) -> Coroutine[Any, Any, None]:
        """Put ``message`` in the kernel's input queue (see ``RingKernelRuntime.send``;
        ``await kernel.send(...)``).

        The rules of :class:`~pdc_core.ActorRef` apply: the priority's default and
        range, the timeout's meanings, and the cancellation of an already-cancelled
        scope raised on entry. Bad arguments raise at the call. (A plain method that
        returns the coroutine doing the work: one coroutine per message.)"""
        if self._cancel_called():
            return self._send_when_uncancelled(message, timeout, priority)
        if timeout is not None:
            timeout = check_timeout(timeout)
        if priority is None and isinstance(message, Message):
            priority = message.priority  # checked when the message was made
        if priority is None or type(priority) is not int or not 0 <= priority <= 255:
            priority = message_priority(message, priority)
        return self._send(message, priority, timeout)

    async def _send_when_uncancelled(
        self, message: Any, timeout: float | None, priority: int | None
    ) -> None:
        await raise_cancelled()  # returns only if the scope was uncancelled meanwhile
        await self.send(message, timeout=timeout, priority=priority)

    def _deliver(self, message: Any, priority: int) -> Awaitable[None]:
        self._check_running()
        return self._send(message, priority, None)

    def _check_running(self) -> None:
        """The handle's methods (tell, ask...) on a kernel that is terminating or has
        stopped raise ActorStopped, as for every actor (``send`` raises the seed API's
        KernelStateError)."""
        state = self._state
        if state is KernelState.TERMINATING or state is KernelState.TERMINATED:
            raise ActorStopped(
                f"actor {self._kernel_id!r} is not running (kernel {state.name})",
                actor_id=self._kernel_id,
            )
        if state is KernelState.FAILED:
            raise ActorStopped(
                f"actor {self._kernel_id!r} is not running (kernel FAILED)",
                actor_id=self._kernel_id,
            )

    async def _send(self, message: Any, priority: int, timeout: float | None) -> None:
        state = self._state
        if (
            state is not KernelState.ACTIVE
            and state is not KernelState.LAUNCHED
            and state is not KernelState.DEACTIVATED
        ):
            await cancellation_first()
            raise self._state_error("send to", "LAUNCHED, ACTIVE, DEACTIVATED")
        input_type = self._input_type
        if input_type is not None and not isinstance(message, input_type):
            raise TypeError(
                f"kernel {self._kernel_id!r} accepts {input_type.__name__} messages, "
                f"got {type(message).__name__}"
            )
        inbox = self._inbox
        kit = self._kit
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and (len(inbox) >= CATCH_UP_AT or kit.turn_is_over()):
            await kit.checkpoint()  # before sending: a cancelled send sends nothing
        # Latency is sampled: one message in _SAMPLE_EVERY carries its enqueue time.
        sends = self._sends = self._sends + 1
        sampled = self._record and not sends % _SAMPLE_EVERY
        item = (message, _perf_counter_ns() if sampled else 0)
        if inbox.offer(item, priority):
            return
        try:
            if timeout is None:
                await inbox.send(item, priority)
                return
            with anyio.move_on_after(timeout) as scope:
                await inbox.send(item, priority)
            if scope.cancelled_caught:
                raise MessageTimeout(
                    f"kernel {self._kernel_id!r}: input queue still full after {timeout} s"
                )
        except MailboxClosed:
            await cancellation_first()
            raise self._state_error("send to", "LAUNCHED, ACTIVE, DEACTIVATED") from None

    async def receive(self, timeout: float | None = None) -> Any:
        """Return the next message from the kernel's output queue (a cancellation of an
        already-cancelled scope is raised on entry)."""
        if self._cancel_called():
            await raise_cancelled()
        if timeout is not None:
            timeout = check_timeout(timeout)
        outbox = self._outbox
        kit = self._kit
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and kit.turn_is_over():
            await kit.checkpoint()
        item = outbox.poll()  # the output mailbox is never paused and carries no control
        if item is not EMPTY:
            return item
        if self._finished:
            await cancellation_first()
            raise self._state_error("receive from", RECEIVE_STATES)
        item = await outbox.take(timeout, self._requeue_reply)
        if item is TIMED_OUT:
            raise MessageTimeout(
                f"nothing received from kernel {self._kernel_id!r} within {timeout} s"
            )
        if item is EMPTY:
            await cancellation_first()
            raise self._state_error("receive from", RECEIVE_STATES)
        return item

    def _requeue_reply(self, handed: Any, exc: BaseException) -> None:
        """A receive ended with ``exc``: a reply handed to it meanwhile goes back in front."""
        if handed is not None:
            self._outbox.requeue(handed, _priority_of(handed))

    def _resolve(self, entry: Any, reply: Any) -> None:
        if entry.__class__ is tuple:
            cell, index = entry
            if cell.waiter.done():
                return
            cell.results[index] = reply
            cell.remaining -= 1
            if not cell.remaining:
                cell.waiter.set_result(cell.results)
        elif not entry.done():
            entry.set_result(reply)

    async def _request(self, message: Any, priority: int, timeout: float | None) -> Any:
        """Send ``message`` and return the kernel's reply correlated with it (by its
        ``message_id``)."""
        message_id = _message_id(message)
        self._check_running()
        pending = self._pending
        if message_id in pending:
            raise _already_pending(self._kernel_id, message_id)
        waiter = self._kit.waiter()
        pending[message_id] = waiter
        sent = False
        try:
            await self._send(message, priority, None)
            sent = True
            if timeout is not None:
                self._kit.arm(waiter, timeout)
            return await waiter
        finally:
            if pending.get(message_id) is waiter:  # ended without its reply
                del pending[message_id]
                if sent:
                    self._stale[message_id] = self._stale.get(message_id, 0) + 1

    async def _request_many(
        self, messages: Sequence[Any], priority: int | list[int], timeout: float | None
    ) -> Any:
        ids = [_message_id(message) for message in messages]
        self._check_running()
        pending = self._pending
        seen: set[Any] = set()
        for message_id in ids:
            if message_id in pending or message_id in seen:
                raise _already_pending(self._kernel_id, message_id)
            seen.add(message_id)
        cell = BatchReply(self._kit.waiter(), len(messages))
        for index, message_id in enumerate(ids):
            pending[message_id] = (cell, index)
        priorities = [priority] * len(messages) if isinstance(priority, int) else priority
        sent = 0
        try:
            for message, one in zip(messages, priorities, strict=True):
                await self._send(message, one, None)
                sent += 1
            if timeout is not None:
                self._kit.arm(cell.waiter, timeout)
            result = await cell.waiter
        finally:
            stale = self._stale
            for index, message_id in enumerate(ids):
                entry = pending.get(message_id)
                if entry is not None and entry.__class__ is tuple and entry[0] is cell:
                    del pending[message_id]  # ended without its reply
                    if index < sent:
                        stale[message_id] = stale.get(message_id, 0) + 1
        return result if result is TIMED_OUT else list(result)

    async def pause(self) -> None:
        """:meth:`deactivate` (the :class:`~pdc_core.ActorRef` name): raises and
        cancels as it does."""
        await full_checkpoint(current_kit())  # a checkpoint on every path
        await self.deactivate()

    async def resume(self) -> None:
        """:meth:`activate` a LAUNCHED kernel, else :meth:`reactivate` it (the
        :class:`~pdc_core.ActorRef` name): raises and cancels as they do."""
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if self._state is KernelState.LAUNCHED:
            await self.activate()
        else:
            await self.reactivate()

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if timeout is not None:
            timeout = check_timeout(timeout)
        if not drain and not self._finished:
            self._request_terminate()
            self._force_terminate()
        await self.terminate(timeout=5.0 if timeout is None else timeout)

    def _lost(self, item: tuple[Any, int]) -> None:
        """A message handed to the kernel was never received (the kernel was cancelled)."""
        self._inbox.count_undelivered()
        message_id = getattr(item[0], "message_id", None)
        entry = self._pending.pop(message_id, None) if message_id is not None else None
        if entry is not None:
            error = ActorStopped(
                f"kernel {self._kernel_id!r} was cancelled before receiving the request",
                actor_id=self._kernel_id,
            )
            fail(entry[0].waiter if entry.__class__ is tuple else entry, error)

    def _on_drop(self, item: tuple[Any, int]) -> None:
        message_id = getattr(item[0], "message_id", None)
        entry = self._pending.pop(message_id, None) if message_id is not None else None
        if entry is not None:
            error = MessageDropped(
                f"request to kernel {self._kernel_id!r} was dropped by its full input queue"
            )
            fail(entry[0].waiter if entry.__class__ is tuple else entry, error)

    def _finalize(self, error: BaseException | None) -> None:
        self._finished = True
        failure: Callable[[], ActorStopped]
        if isinstance(error, ActorCrashed):
            self._set_state(KernelState.FAILED)
            crash = error

            def failure() -> ActorStopped:
                return ActorCrashed(self._kernel_id, crash.cause)

        else:
            self._set_state(KernelState.TERMINATED)

            def failure() -> ActorStopped:
                return ActorStopped(
                    f"kernel {self._kernel_id!r} terminated before replying",
                    actor_id=self._kernel_id,
                )

        self._inbox.close()
        self._inbox.discard()
        self._outbox.close()
        self._stale.clear()
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            fail(entry[0].waiter if entry.__class__ is tuple else entry, failure())
        waiters, self._stop_waiters = self._stop_waiters, None
        for waiter in waiters or ():
            wake(waiter)

    def __repr__(self) -> str:
        return f"<RingKernel {self._kernel_id!r} {self._state.name}>"


class _RingKernelRunner(ActorRunner):
    """Runs a ring kernel's function as an actor of the runtime's nursery.

    It is ready once its task exists (until activated it only waits for that), and its
    cancel scope is engaged when the kernel function is called.
    """

    _engages_cancel_scope = True

    def _ready_at_once(self) -> bool:
        return True

    def __init__(self, kernel: RingKernel) -> None:
        self._kernel = kernel
        self.restarts = 0

    @property
    def ref(self) -> RingKernel:
        return self._kernel

    async def run(self, started: Callable[[], None]) -> None:
        kernel = self._kernel
        kernel._task = kernel._kit.current_task()
        kernel._interrupted = False
        started()
        if kernel._state is KernelState.LAUNCHED:
            # As in PyDotCompute, the function is called on activation (or on
            # terminate, to drain what was queued), not at launch.
            await kernel.ctx.wait_active()
        scope = self.cancel_scope
        assert scope is not None
        try:
            scope.engage()
            await kernel._definition.func(kernel.ctx)
        except KernelTerminated:
            if kernel._state is not KernelState.TERMINATING:
                raise
        except Exception as exc:
            kernel._telemetry.error(exc)
            raise

    def on_crash(self, error: Exception, *, restarting: bool) -> None:
        if restarting:
            self.restarts += 1

    def finalize(self, error: BaseException | None) -> None:
        self._kernel._finalize(error)


def _message_id(message: Any) -> Any:
    """The id an ask's reply is matched by (PyDotCompute's ``message_id``)."""
    message_id = getattr(message, "message_id", None)
    if message_id is None:
        raise TypeError(
            "ask needs a message with a message_id (a pdc Message such as Request), "
            f"got {type(message).__name__}"
        )
    return message_id


def _already_pending(kernel_id: str, message_id: Any) -> ValueError:
    return ValueError(
        f"request {message_id} is already pending on kernel {kernel_id!r}: "
        "its reply could answer only one caller. Ask with a message of its own "
        "(each new Request has a new message_id)"
    )
