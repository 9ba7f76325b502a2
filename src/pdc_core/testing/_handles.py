"""The conformance kit for actor handles: every kind of :class:`~pdc_core.ActorRef`
keeps the same rules.

Subclass :class:`ActorRefConformance` in a test module and say how to start a handle of
your kind whose actor runs an :class:`Echo` (it replies to each message with the
message's value)::

    from pdc_core.testing import ActorRefConformance, Echo

    class TestMyHandles(ActorRefConformance):
        async def start(self, nursery, echo):
            return await nursery.start_actor(MyTarget(echo.key))

        # messages are the kit's Message objects by default (``.value``, and
        # ``.priority`` when given); override message() and value() for others.

pytest then runs every check below, each under asyncio and trio (mark your module or
give it an ``anyio_backend`` fixture as for any anyio test), each within
:attr:`ActorRefConformance.limit` seconds:

* **priority**: higher first, FIFO within a priority, the default taken from the
  message's ``priority`` attribute and overridden by ``priority=`` (a FIFO kind says
  ``orders_by_priority = False`` and is checked for FIFO order instead); NumPy integer
  priorities work; out of 0..255 is a ``ValueError`` with pdc's text, a non-integer a
  ``TypeError``, for every method, and nothing is sent;
* **timeouts**: ``None``, ``inf`` and NumPy scalars wait; zero and negative mean now
  (:class:`~pdc_core.MessageTimeout`, a ``TimeoutError``, with pdc's text); a short
  timeout expires; NaN is a ``ValueError`` and a string a ``TypeError``;
* **cancellation**: each method in an already-cancelled scope raises the cancellation
  and sends nothing; a cancelled ``ask`` leaves nothing behind (no waiter the kind
  still tracks, no live timer entry, and no late reply for the next request, even one
  that reuses the message's id);
* **stop while asking**: a request waiting when the actor stops fails with
  :class:`~pdc_core.ActorStopped`; every method of a stopped actor raises it, unless
  the caller is being cancelled, which then gets its cancellation;
* **drain admission**: once the nursery's body has ended, the nursery's own actors
  can still ask the actor (and, unless ``refuses_outsiders_while_draining = False``,
  other tasks are refused);
* **batches**: ``tell_many([])``/``ask_many([])`` send nothing and return at once
  (their arguments still checked), on a running or a stopped actor; ``ask_many`` and
  ``ask_stream`` return replies in the order of the messages.

A kind reports what it still tracks for abandoned requests by overriding
:meth:`ActorRefConformance.tracked` (the default: nothing to report, and that part of
the cancellation check is skipped).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import anyio
import numpy as np
import pytest

from pdc_core import (
    ActorNursery,
    ActorRef,
    ActorStopped,
    MessageTimeout,
    PersistentKernel,
    open_nursery,
)

__all__ = ["HOLD", "ActorRefConformance", "Echo", "Message"]

_keys = itertools.count(1)

#: A message value the echo holds on (does not answer) until released.
HOLD = 1_000_000


class Message:
    """The kit's default message: a ``value``, and a ``priority`` attribute when one
    is given (a message without one has none, so the default applies)."""

    __slots__ = ("__dict__", "value")

    def __init__(self, value: int, priority: Any = None) -> None:
        self.value = value
        if priority is not None:
            self.priority = priority

    def __reduce__(self) -> tuple[Any, ...]:
        return (Message, (self.value, self.__dict__.get("priority")))

    def __repr__(self) -> str:
        priority = self.__dict__.get("priority")
        return f"Message({self.value!r}" + (f", priority={priority!r})" if priority else ")")


#: The records of :meth:`Echo.kernel`: one integer, the echoed value.
_ECHO_RECORD = np.dtype([("v", "<i8")])


class _EchoBody:
    """The body of :meth:`Echo.kernel`: replies to each record with its value, through
    the echo named ``key`` (found again after pickling, in the same interpreter)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, requests: Any) -> Any:
        echo = Echo.named(self.key)
        replies = np.empty(len(requests), _ECHO_RECORD)
        replies["v"] = [echo.handle(int(v)) for v in requests["v"]]
        return replies


class Echo:
    """The actor behaviour under test: reply with the message's value, log the values
    in the order handled, and hold on :data:`HOLD` until :meth:`release`.

    ``handle`` is for actors that run on a worker thread (a kernel body), and
    ``handle_async`` for actors on the event loop. Actors that are copied (pickled to
    another "process" in the same interpreter) find the echo again with
    ``Echo.named(key)``.
    """

    _live: ClassVar[dict[str, Echo]] = {}

    def __init__(self) -> None:
        self.key = f"echo-{next(_keys)}"
        self.handled: list[int] = []
        self.holding = threading.Event()
        self._released = threading.Event()
        self._released_async = anyio.Event()
        Echo._live[self.key] = self

    @classmethod
    def named(cls, key: str) -> Echo:
        """The live echo called ``key``."""
        return cls._live[key]

    def forget(self) -> None:
        """Unregister the echo, so :meth:`named` no longer finds it (idempotent)."""
        Echo._live.pop(self.key, None)

    def handle(self, value: int) -> int:
        """Handle ``value`` on a worker thread (blocks on :data:`HOLD`)."""
        if value == HOLD:
            self.holding.set()
            self._released.wait(60)
        self.handled.append(value)
        return value

    def kernel(self) -> PersistentKernel:
        """A cpu persistent kernel running this echo on its worker thread: requests and
        replies are one-field records (``v``, an int64); each reply carries the value
        :meth:`handle` returns. For kits of kinds of actor that run kernels."""
        name = f"echo_{self.key.replace('-', '_')}"
        return PersistentKernel(
            name, _ECHO_RECORD, _ECHO_RECORD, bodies={"cpu": _EchoBody(self.key)}
        )

    async def handle_async(self, value: int) -> int:
        """Handle ``value`` on the event loop (waits on :data:`HOLD`). Cancelled while
        it holds, it logs nothing."""
        if value == HOLD:
            self.holding.set()
            await self._released_async.wait()
        self.handled.append(value)
        return value

    def release(self) -> None:
        """Let the held message (and every later one) through. From the event loop."""
        self._released.set()
        self._released_async.set()


async def _until(condition: Callable[[], bool], what: str, limit: float) -> None:
    """Wait until ``condition()`` holds, looking every millisecond."""
    with anyio.move_on_after(limit):
        while not condition():  # noqa: ASYNC110 - a condition of another object's state
            await anyio.sleep(0.001)
        return
    pytest.fail(f"{what}: not within {limit:g} s")


@pytest.mark.anyio
class ActorRefConformance:
    """The handle conformance kit (see the module documentation)."""

    #: Seconds any one check may take.
    limit: ClassVar[float] = 20.0
    #: Whether the kind serves higher priorities first (False: FIFO, such as a ring).
    orders_by_priority: ClassVar[bool] = True
    #: Whether messages may carry their own ``priority`` attribute.
    messages_carry_priority: ClassVar[bool] = True
    #: Whether the actor refuses messages from outside its nursery once it drains.
    refuses_outsiders_while_draining: ClassVar[bool] = True
    #: Whether :meth:`start` runs the actor in the nursery it is given (False: the kind
    #: has a nursery of its own, and the drain check is skipped).
    runs_in_nursery: ClassVar[bool] = True

    # -- what a kind's suite supplies ------------------------------------------------

    async def start(self, nursery: ActorNursery, echo: Echo) -> ActorRef[Any, Any]:
        """Start, in ``nursery``, an actor of the kind under test running ``echo``.

        Override it (the default raises :class:`NotImplementedError`). Cancelled, it
        must start nothing that outlives ``nursery``.
        """
        raise NotImplementedError("ActorRefConformance.start: start an actor of your kind")

    @asynccontextmanager
    async def around(self) -> AsyncIterator[None]:
        """Entered around each check, outside its nursery (an engine, a cluster, a
        device the kind needs). The default does nothing."""
        yield

    @asynccontextmanager
    async def actor(self, echo: Echo) -> AsyncIterator[ActorRef[Any, Any]]:
        """A running actor for ``echo``, stopped on leaving. The default opens a nursery
        and calls :meth:`start`; a kind with a nursery of its own overrides this."""
        async with open_nursery() as nursery:
            yield await self.start(nursery, echo)
            nursery.cancel()

    def message(self, value: int, priority: int | None = None) -> Any:
        """A message whose handling replies ``value``, carrying ``priority`` if given."""
        return Message(value, priority)

    def same_id(self, message: Any, value: int) -> Any:
        """A message for ``value`` that reuses ``message``'s id, where messages have one
        (the default: a new message)."""
        return self.message(value)

    def value(self, reply: Any) -> int:
        """The value of a reply."""
        return int(reply)

    def tracked(self, ref: ActorRef[Any, Any]) -> int | None:
        """How many requests the handle still tracks (waiters, pending ids, requests in
        flight); ``None``: the kind does not say."""
        return None

    # -- helpers ------------------------------------------------------------------------

    @asynccontextmanager
    async def _held(self, ref: ActorRef[Any, Any], echo: Echo) -> AsyncIterator[None]:
        """The actor busy with a held message; released on leaving."""
        await ref.tell(self.message(HOLD))
        try:
            await _until(echo.holding.is_set, "the actor took the held message", self.limit)
            yield
        finally:
            echo.release()

    async def _sent_nothing(self, ref: ActorRef[Any, Any], echo: Echo) -> None:
        """Nothing was handled before: the next ask is the first message handled."""
        assert self.value(await ref.ask(self.message(7))) == 7
        assert echo.handled == [7], f"refused calls sent something: {echo.handled}"

    def _calls(self, ref: ActorRef[Any, Any]) -> dict[str, Callable[..., Awaitable[Any]]]:
        def stream(messages: list[Any], **kw: Any) -> Awaitable[list[Any]]:
            async def collect() -> list[Any]:
                return [reply async for reply in ref.ask_stream(messages, **kw)]

            return collect()

        return {
            "tell": lambda m, **kw: ref.tell(m, **kw),
            "ask": lambda m, **kw: ref.ask(m, **kw),
            "tell_many": lambda m, **kw: ref.tell_many([m], **kw),
            "ask_many": lambda m, **kw: ref.ask_many([m], **kw),
            "ask_stream": lambda m, **kw: stream([m], **kw),
        }

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[tuple[ActorRef[Any, Any], Echo]]:
        echo = Echo()
        try:
            with anyio.fail_after(self.limit):
                async with self.around(), self.actor(echo) as ref:
                    yield ref, echo
        finally:
            echo.release()
            echo.forget()

    # -- priority -----------------------------------------------------------------------

    async def test_priority_order_and_default_from_the_message(self) -> None:
        """Higher priorities are served first (where the kind orders by priority), an
        explicit priority beats the message's own, and 128 is the default. Cancelled,
        it leaves no actor running."""
        async with self._running() as (ref, echo):
            async with self._held(ref, echo):
                if self.messages_carry_priority:
                    await ref.tell(self.message(1, 10))
                    await ref.tell(self.message(2, 200))
                    await ref.tell(self.message(3, 10), priority=250)  # explicit wins
                    await ref.tell(self.message(4))  # the default, 128
                    await ref.tell_many([self.message(5, 200), self.message(6, 10)])
                else:
                    await ref.tell(self.message(1), priority=10)
                    await ref.tell(self.message(2), priority=200)
                    await ref.tell(self.message(3), priority=250)
                    await ref.tell(self.message(4))
                    await ref.tell_many([self.message(5), self.message(6)], priority=200)
            await _until(lambda: len(echo.handled) == 7, "every message handled", self.limit)
            expected = [HOLD, 3, 2, 5, 4, 1, 6] if self.orders_by_priority else [HOLD, *range(1, 7)]
            if not self.messages_carry_priority and self.orders_by_priority:
                expected = [HOLD, 3, 2, 5, 6, 4, 1]
            assert echo.handled == expected

    async def test_numpy_integer_priorities_are_priorities(self) -> None:
        """NumPy integer scalars are priorities, given as ``priority`` or carried by
        the message. Cancelled, it leaves no actor running."""
        async with self._running() as (ref, _echo):
            priorities: tuple[Any, ...] = (np.int64(5), np.uint8(200), np.int32(0))
            for priority in priorities:
                assert self.value(await ref.ask(self.message(3), priority=priority)) == 3
                await ref.tell(self.message(4), priority=priority)
                replies = await ref.ask_many([self.message(5)], priority=priority)
                assert [self.value(r) for r in replies] == [5]
            if self.messages_carry_priority:
                nine: Any = np.int64(9)
                assert self.value(await ref.ask(self.message(6, nine))) == 6

    @pytest.mark.parametrize("method", ["tell", "ask", "tell_many", "ask_many", "ask_stream"])
    async def test_priority_out_of_range_or_not_an_int_is_refused(self, method: str) -> None:
        """A priority outside 0..255 is a ``ValueError`` and a non-integer a
        ``TypeError``, with the documented text, before anything is sent. Cancelled, it
        leaves no actor running."""
        async with self._running() as (ref, echo):
            call = self._calls(ref)[method]
            for bad in (256, -1):
                text = f"priority must be in 0..255 (higher is served first), got {bad}"
                with pytest.raises(ValueError, match=rf"^{_escape(text)}$"):
                    await call(self.message(1), priority=bad)
                if self.messages_carry_priority and method != "ask_stream":
                    with pytest.raises(ValueError, match=rf"^{_escape(text)}$"):
                        await call(self.message(1, bad))
            for bad_type in ("5", 1.5, True):
                with pytest.raises(TypeError, match=r"priority must be an int in 0\.\.255"):
                    await call(self.message(1), priority=bad_type)
            await self._sent_nothing(ref, echo)

    # -- timeouts -----------------------------------------------------------------------

    async def test_none_inf_and_numpy_timeouts_wait(self) -> None:
        """``None``, infinity and NumPy scalar timeouts wait for the reply. Cancelled,
        it leaves no actor running."""
        async with self._running() as (ref, _echo):
            timeouts: tuple[Any, ...] = (None, math.inf, np.float64(math.inf), np.float32(30))
            for timeout in (*timeouts, np.int64(30), 30):
                assert self.value(await ref.ask(self.message(2), timeout=timeout)) == 2
                replies = await ref.ask_many([self.message(3), self.message(4)], timeout=timeout)
                assert [self.value(r) for r in replies] == [3, 4]

    async def test_zero_and_negative_timeouts_mean_now(self) -> None:
        """Zero and negative timeouts time out at once with the documented message, a
        short timeout waits that long, and the actor keeps serving. Cancelled, it
        leaves no actor running."""
        async with self._running() as (ref, echo):
            async with self._held(ref, echo):
                for now in (0, -1, 0.0, np.float64(-0.5)):
                    with pytest.raises(MessageTimeout) as info:
                        await ref.ask(self.message(1), timeout=now)
                    assert isinstance(info.value, TimeoutError)
                    text = f"actor {ref.actor_id!r} did not reply within {float(now):g} s"
                    assert str(info.value) == text
                    with pytest.raises(MessageTimeout) as info:
                        await ref.ask_many([self.message(1), self.message(2)], timeout=now)
                    text = (
                        f"actor {ref.actor_id!r} did not reply to a batch of 2 within "
                        f"{float(now):g} s"
                    )
                    assert str(info.value) == text
                started = anyio.current_time()
                with pytest.raises(MessageTimeout):
                    await ref.ask(self.message(1), timeout=0.05)
                assert anyio.current_time() - started >= 0.04
            assert self.value(await ref.ask(self.message(9))) == 9  # still serving

    @pytest.mark.parametrize("method", ["ask", "ask_many", "ask_stream"])
    async def test_nan_and_non_number_timeouts_are_refused(self, method: str) -> None:
        """A NaN timeout is a ``ValueError`` and a non-number a ``TypeError``, before
        anything is sent. Cancelled, it leaves no actor running."""
        async with self._running() as (ref, echo):
            call = self._calls(ref)[method]
            with pytest.raises(ValueError, match="timeout is NaN"):
                await call(self.message(1), timeout=math.nan)
            for bad in ("1", True):
                with pytest.raises(TypeError, match="timeout must be a number of seconds"):
                    await call(self.message(1), timeout=bad)
            await self._sent_nothing(ref, echo)

    # -- cancellation -------------------------------------------------------------------

    @pytest.mark.parametrize("method", ["tell", "ask", "tell_many", "ask_many", "ask_stream"])
    async def test_an_already_cancelled_caller_sends_nothing(self, method: str) -> None:
        """Each messaging method called in an already-cancelled scope raises the
        cancellation and sends nothing. Cancelled, it leaves no actor running."""
        async with self._running() as (ref, echo):
            call = self._calls(ref)[method]
            with anyio.CancelScope() as scope:
                scope.cancel()
                await call(self.message(1))
                pytest.fail(f"{method} completed in a cancelled scope")
            assert scope.cancelled_caught
            await self._sent_nothing(ref, echo)

    async def test_a_cancelled_ask_leaves_nothing_behind(self) -> None:
        """An ``ask`` cancelled while it waits (with and without a timeout) leaves no
        request tracked and no timer armed, and a late reply answers no later ask.
        Cancelled itself, it leaves no actor running (the nursery ends with it)."""
        async with self._running() as (ref, echo):
            first = self.message(1)
            armed: set[int] = set()
            async with self._held(ref, echo):
                for timeout in (None, 30):
                    before = _live_timers(beyond=20)
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:

                            async def ask(message: Any = first, t: float | None = timeout) -> None:
                                await ref.ask(message, timeout=t)

                            tg.start_soon(ask)
                            await anyio.wait_all_tasks_blocked()
                            armed |= _live_timers(beyond=20) - before  # this ask's 30 s
                            scope.cancel()
                    assert scope.cancelled_caught
            # The held message went through; the abandoned request, if handled, is not
            # the answer to the next one, even when it reuses its id.
            assert self.value(await ref.ask(self.same_id(first, 2))) == 2
            assert self.value(await ref.ask(self.message(3))) == 3
            tracked = self.tracked(ref)
            if tracked is not None:
                assert tracked == 0, f"{tracked} request(s) still tracked after they ended"
            assert not armed & _live_timers(), "a timer is still armed for an ask that ended"

    # -- stop while asking --------------------------------------------------------------

    async def test_stop_while_asking_fails_the_request_with_actor_stopped(self) -> None:
        """A stop while a request waits fails it with ``ActorStopped``; after the stop
        every method raises ``ActorStopped``, or the cancellation first in a cancelled
        scope. Cancelled, it leaves no actor running."""
        async with self._running() as (ref, echo):
            outcome: list[BaseException | Any] = []
            async with anyio.create_task_group() as tg, self._held(ref, echo):

                async def ask() -> None:
                    try:
                        outcome.append(await ref.ask(self.message(1)))
                    except ActorStopped as exc:
                        outcome.append(exc)

                tg.start_soon(ask)
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(ref.stop)
                await _until(lambda: not ref.alive, "the actor stopping", self.limit)
            assert len(outcome) == 1, outcome
            assert isinstance(outcome[0], ActorStopped), outcome
            for method, call in self._calls(ref).items():
                with pytest.raises(ActorStopped):
                    await call(self.message(2))
                with anyio.CancelScope() as scope:
                    scope.cancel()
                    await call(self.message(2))  # the cancellation first
                assert scope.cancelled_caught, method

    # -- the nursery's drain ------------------------------------------------------------

    async def test_a_draining_nursery_admits_its_own_actors(self) -> None:
        """While the nursery drains after its body, its own actors can still ask this
        kind of actor and an outsider is refused; skipped for a kind that runs in a
        nursery of its own. Cancelled, it leaves no actor running."""
        if not self.runs_in_nursery:
            pytest.skip("this kind runs in a nursery of its own")
        echo = Echo()
        relayed: list[int] = []
        refused: list[BaseException] = []
        draining = anyio.Event()
        try:
            with anyio.fail_after(self.limit):
                async with (
                    self.around(),
                    anyio.create_task_group() as tg,
                    open_nursery() as nursery,
                ):
                    ref = await self.start(nursery, echo)

                    async def relay(message: Any) -> None:
                        await draining.wait()  # ask only once the body has ended
                        relayed.append(self.value(await ref.ask(message)))

                    relay_ref = await nursery.start_actor(relay)

                    def sealed() -> bool:
                        mailbox = relay_ref.statistics().mailbox
                        return mailbox is not None and mailbox.closed

                    async def outsider() -> None:
                        await _until(sealed, "the nursery draining", self.limit)
                        try:
                            await ref.tell(self.message(8))
                        except ActorStopped as exc:
                            refused.append(exc)
                        draining.set()

                    tg.start_soon(outsider)
                    await relay_ref.tell(self.message(5))
        finally:
            echo.release()
            echo.forget()
        assert relayed == [5], "a nursery member was refused while the nursery drained"
        if self.refuses_outsiders_while_draining:
            assert refused, "a task outside the nursery was let in while it drained"

    # -- batches ------------------------------------------------------------------------

    async def test_empty_batches_send_nothing_and_return_at_once(self) -> None:
        """``tell_many([])``, ``ask_many([])`` and ``ask_stream([])`` send nothing and
        return at once, still check their arguments, and do so after a stop too.
        Cancelled, it leaves no actor running."""
        async with self._running() as (ref, echo):
            await ref.tell_many([])  # returns None (typed so)
            assert list(await ref.ask_many([])) == []
            assert list(await ref.ask_many(iter([]), timeout=0)) == []
            assert [r async for r in ref.ask_stream([])] == []
            with pytest.raises(ValueError, match="priority"):
                await ref.tell_many([], priority=300)
            with pytest.raises(ValueError, match="timeout is NaN"):
                await ref.ask_many([], timeout=math.nan)
            await self._sent_nothing(ref, echo)
            await ref.stop()
            await ref.tell_many([])
            assert list(await ref.ask_many([])) == []

    async def test_ask_many_and_ask_stream_keep_the_order_of_the_messages(self) -> None:
        """``ask_many`` and ``ask_stream`` return the replies in the order of the
        messages, whatever their priorities. Cancelled, it leaves no actor running."""
        async with self._running() as (ref, echo):
            n = 40
            if self.messages_carry_priority:
                messages = [self.message(i, (i * 37) % 256) for i in range(n)]
            else:
                messages = [self.message(i) for i in range(n)]
            async with anyio.create_task_group() as tg:
                replies: list[Any] = []

                async def ask_many() -> None:
                    replies.extend(await ref.ask_many(messages))

                async with self._held(ref, echo):
                    tg.start_soon(ask_many)
                    await anyio.wait_all_tasks_blocked()
            assert [self.value(r) for r in replies] == list(range(n))
            streamed = [self.value(r) async for r in ref.ask_stream(messages[:9], window=4)]
            assert streamed == list(range(9))


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def _live_timers(beyond: float = 0.0) -> set[int]:
    """The waiters (by id) of pdc's shared timer (this event loop's) still waiting,
    whose deadline is more than ``beyond`` seconds away (a kind's own short polls are
    not a request's timeout)."""
    from .._loop import current_kit

    kit: Any = current_kit()
    timer = kit._timer() if callable(kit._timer) else kit._timer
    horizon = kit.now() + beyond
    return {id(entry[2]) for entry in timer._heap if not entry[2].done() and entry[0] > horizon}
