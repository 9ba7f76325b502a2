"""The remote side: a pdc nursery around the user's actor, fed in sequence order.

A :class:`Host` lives in the engine's process (a Ray worker). It starts the user's
actor in its own :func:`pdc_core.open_nursery`, so the remote side runs the very same
actor code as a local actor, and feeds it the batches the runner ships. Engines may
deliver those calls in any order (Ray's async actors do); the host hands the batches
to the actor strictly in the order of their sequence numbers, one batch at a time, so
the order the runner's prioritised mailbox decided is the order of handling.

A :class:`KernelHost` does the same for a :class:`~pdc_core.PersistentKernel`: it
runs the kernel resident here as a :class:`~pdc_core.PersistentKernelActor` (on the
backend the spec names, else this process's best available one), and a batch arrives
as one structured array that goes into the kernel's ring with one
``request_batch`` (one ring write when the ring has room for it); the replies go back
as one structured array.

Its methods never raise for the actor's sake: failures travel back as values (see
:mod:`pdc_ray._wire`), and the host's ``watch`` reports how the actor ended.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

from pdc_core import (
    ActorCrashed,
    ActorNursery,
    ActorRef,
    ActorStatistics,
    ActorStopped,
    KernelActorRef,
    PersistentKernel,
    PersistentKernelActor,
    open_nursery,
)

from ._wire import (
    CRASHED,
    OK,
    STOPPED,
    Failure,
    HostSpec,
    Location,
    pack_error,
    portable_statistics,
)

__all__ = ["Host", "Item", "KernelHost", "Outcome", "Spawn", "host_for"]

#: One message of a batch: (request id, message, whether a reply is wanted). For a
#: persistent kernel the message is the number of records the request holds; the
#: records of a whole batch travel beside the items as one structured array.
Item = tuple[int, Any, bool]
#: How a batch or the actor ended: (OK, replies), (CRASHED, Failure) or (STOPPED, None).
Outcome = tuple[int, Any]
#: Runs a coroutine function in the background of the host's process.
Spawn = Callable[[Callable[[], Awaitable[None]]], None]

#: The one priority batches are handed over with: the runner already ordered them.
_IN_ORDER = 128


class _Slot:
    """A delivered batch waiting for its turn, then for its replies."""

    __slots__ = ("cancelled", "done", "items", "records", "result", "scope", "seq")

    def __init__(self, seq: int, items: Sequence[Item], records: Any) -> None:
        self.seq = seq
        self.items = items
        self.records = records
        self.cancelled: set[int] = set()
        self.done = anyio.Event()
        self.result: Outcome = (STOPPED, None)
        self.scope: anyio.CancelScope | None = None

    def finish(self, result: Outcome) -> None:
        if not self.done.is_set():
            self.result = result
            self.done.set()


class Host:
    """Hosts one actor in a nursery of its own (see the module documentation).

    Create it inside the host's event loop. ``locate`` says where this process runs.
    """

    def __init__(self, spec: HostSpec, locate: Callable[[], Location]) -> None:
        self._spec = spec
        self._locate = locate
        self._ref: ActorRef[Any, Any] | None = None
        self._ready = anyio.Event()
        self._ended = anyio.Event()
        self._outcome: Outcome = (STOPPED, None)
        self._start_failure: Failure | None = None
        self._pending: dict[int, _Slot] = {}
        #: Cancellations that arrived before their batch: seq -> request ids.
        self._early: dict[int, set[int]] = {}
        self._current: _Slot | None = None
        self._next = 0
        self._wake = anyio.Event()
        self._stopping = False
        self._spawned = False
        #: A failure of a hand-over made by a ``deliver`` call, for the feeder to raise.
        self._failure: Exception | None = None

    # -- data calls ---------------------------------------------------------------------

    async def start(self, spawn: Spawn) -> tuple[int, Location | Failure]:
        """Start the actor (once) and return ``(OK, location)`` once its ``on_start``
        has run, or ``(CRASHED, failure)`` with the reason it failed to start."""
        if not self._spawned:
            self._spawned = True
            spawn(self._serve)
        await self._ready.wait()
        if self._start_failure is not None:
            return CRASHED, self._start_failure
        return OK, self._locate()

    async def deliver(self, seq: int, items: Sequence[Item], records: Any = None) -> Outcome:
        """Hand batch number ``seq`` to the actor after every batch before it; return
        ``(OK, replies)``, ``(CRASHED, failure)`` or ``(STOPPED, None)``.

        The replies are aligned with ``items`` (``None`` for tells and cancelled
        requests); a :class:`KernelHost` takes the batch's ``records`` too and answers
        as :meth:`KernelHost.replies` says.
        """
        if self._ended.is_set() or seq < self._next:
            return self._outcome if self._outcome[0] == CRASHED else (STOPPED, None)
        slot = _Slot(seq, items, records)
        slot.cancelled = self._early.pop(seq, set())
        ref = self._ref
        if (
            seq == self._next
            and self._current is None
            and ref is not None
            and ref.alive
            and self._failure is None
        ):
            # Next in sequence and the feeder idle: this call hands it over itself,
            # without waking the feeder (a lone ask crosses one task switch less).
            try:
                await self._take_turn(ref, slot)
            except ActorCrashed:
                pass  # the nursery reports the crash; _serve fails the slot with it
            except Exception as exc:
                self._failure = exc  # the feeder raises it: the host ends with it
            if self._pending or self._stopping or self._failure or not ref.alive:
                self._wake.set()  # the feeder's turn
        else:
            self._pending[seq] = slot
            self._wake.set()
        if not slot.done.is_set():
            await slot.done.wait()
        return slot.result

    # -- control calls ------------------------------------------------------------------

    async def cancel(self, requests: Sequence[tuple[int, int]]) -> None:
        """The callers of ``requests`` (``(seq, request id)`` pairs) gave up: skip those
        not handed over yet; a batch whose every request gave up is withdrawn from the
        actor. A cancellation may overtake its batch on the wire: it is kept until the
        batch arrives (only for batches not handed over yet, so this stays bounded)."""
        for seq, rid in requests:
            if seq < self._next and (self._current is None or self._current.seq != seq):
                continue  # handled already: too late
            slot = self._pending.get(seq)
            if slot is None and self._current is not None and self._current.seq == seq:
                slot = self._current
            if slot is None:
                self._early.setdefault(seq, set()).add(rid)
                continue
            slot.cancelled.add(rid)
            if (
                slot is self._current
                and slot.scope is not None
                and all(item[0] in slot.cancelled for item in slot.items)
            ):
                slot.scope.cancel()

    async def stop(self, drain: bool) -> None:
        """Stop the actor: with ``drain`` after the batches delivered so far, else after
        the message in hand (the rest fail with ``STOPPED``). Returns once requested;
        ``watch`` reports the end."""
        self._stopping = True
        self._wake.set()
        ref = self._ref
        if not drain and ref is not None and ref.alive:
            await ref.stop()

    async def pause(self) -> None:
        """Pause delivery to the actor (what it holds stays queued)."""
        if self._ref is not None and self._ref.alive:
            await self._ref.pause()

    async def resume(self) -> None:
        """Resume delivery after :meth:`pause`."""
        if self._ref is not None and self._ref.alive:
            await self._ref.resume()

    async def statistics(self) -> ActorStatistics | None:
        """The hosted actor's own statistics (``None`` before it started)."""
        if self._ref is None:
            return None
        return portable_statistics(self._ref.statistics())

    async def ping(self) -> None:
        """The heartbeat: returns at once while the host's event loop is alive."""

    async def watch(self) -> Outcome:
        """Return once the actor has ended: ``(STOPPED, None)`` or ``(CRASHED, failure)``."""
        await self._ended.wait()
        return self._outcome

    async def locate(self) -> Location:
        """Where this host runs."""
        return self._locate()

    # -- the actor's life ---------------------------------------------------------------

    async def _serve(self) -> None:
        spec = self._spec
        outcome: Outcome = (STOPPED, None)
        try:
            async with open_nursery() as nursery:
                try:
                    self._ref = await self._open(nursery, spec)
                except ActorCrashed as exc:
                    self._start_failure = pack_error(exc.cause)
                    outcome = (CRASHED, self._start_failure)
                    return
                except Exception as exc:  # bad target or options: refused by start_actor
                    self._start_failure = pack_error(exc)
                    outcome = (CRASHED, self._start_failure)
                    return
                self._ready.set()
                await self._feed(self._ref)
        except ActorCrashed as exc:
            outcome = (CRASHED, pack_error(exc.cause))
        except Exception as exc:
            outcome = (CRASHED, pack_error(exc))
        finally:
            self._outcome = outcome
            for slot in [*self._pending.values(), *([self._current] if self._current else [])]:
                slot.finish(outcome if outcome[0] == CRASHED else (STOPPED, None))
            self._pending.clear()
            self._ready.set()
            self._ended.set()

    async def _feed(self, ref: ActorRef[Any, Any]) -> None:
        """Hand the batches to the actor in sequence order until stopped (a batch that
        arrives next in sequence while the feeder is idle is handed over by its own
        ``deliver`` call instead: one at a time either way)."""
        while True:
            if self._failure is not None:
                raise self._failure
            slot = None if self._current else self._pending.pop(self._next, None)
            if slot is None:
                if not self._current and (self._stopping or not ref.alive):
                    return
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            await self._take_turn(ref, slot)
            if not ref.alive:  # it stopped itself, or was stopped
                return

    async def _take_turn(self, ref: ActorRef[Any, Any], slot: _Slot) -> None:
        """Hand ``slot``, next in sequence, to the actor. If this raises, the slot stays
        the current one, and _serve fails it with the host's outcome."""
        self._next += 1
        self._current = slot
        await self._hand_over(ref, slot)
        self._current = None

    async def _open(self, nursery: ActorNursery, spec: HostSpec) -> ActorRef[Any, Any]:
        """Start the hosted actor in ``nursery``."""
        return await nursery.start_actor(
            spec.target,
            *spec.args,
            name=spec.actor_id,
            capacity=max(spec.capacity, spec.max_batch),
            max_batch=spec.max_batch,
            paused=spec.paused,
        )

    async def _hand_over(self, ref: ActorRef[Any, Any], slot: _Slot) -> None:
        live = [item for item in slot.items if item[0] not in slot.cancelled]
        answer: Any = None
        if live:
            with anyio.CancelScope() as scope:
                slot.scope = scope
                try:
                    answer = await self._ask(ref, slot, live)
                except ActorCrashed:
                    raise  # the nursery reports the crash; _serve fails the slot with it
                except ActorStopped:
                    slot.finish((STOPPED, None))
                    return
            slot.scope = None
            if scope.cancelled_caught:  # every request of the batch was cancelled
                live, answer = [], None
        slot.finish((OK, self.replies(slot.items, live, answer)))

    async def _ask(self, ref: ActorRef[Any, Any], slot: _Slot, live: list[Item]) -> Any:
        """Hand the ``live`` requests of ``slot`` to the actor; return its answer."""
        if len(live) == 1:
            return [await ref.ask(live[0][1], priority=_IN_ORDER)]
        return await ref.ask_many([item[1] for item in live], priority=_IN_ORDER)

    def replies(self, items: Sequence[Item], live: list[Item], answer: Any) -> Any:
        """What a delivered batch returns: one reply per item, ``None`` for tells and
        for requests not handed over (``live`` are those handed over, ``answer`` the
        actor's replies to them)."""
        answered = dict(zip((item[0] for item in live), answer or (), strict=False))
        return [answered.get(item[0]) if item[2] else None for item in items]


class KernelHost(Host):
    """Hosts a :class:`~pdc_core.PersistentKernel` resident in this process (see the
    module documentation)."""

    async def _open(self, nursery: ActorNursery, spec: HostSpec) -> ActorRef[Any, Any]:
        kernel = spec.target
        assert isinstance(kernel, PersistentKernel)
        runner = PersistentKernelActor(kernel, spec.backend, name=spec.actor_id, paused=spec.paused)
        return await nursery.start_actor(runner)

    async def _ask(self, ref: ActorRef[Any, Any], slot: _Slot, live: list[Item]) -> Any:
        assert isinstance(ref, KernelActorRef)
        records: npt.NDArray[Any] = slot.records
        if len(live) < len(slot.items):
            handed = {item[0] for item in live}
            records = np.concatenate(
                [records[start:end] for item, start, end in _spans(slot.items) if item[0] in handed]
            )
        return await ref.ask_batch(records, priority=_IN_ORDER)

    def replies(self, items: Sequence[Item], live: list[Item], answer: Any) -> Any:
        """``(replies, skipped)``: one structured array holding, in order, the replies
        of every request handed over that wants its replies, and the ids of the
        requests not handed over (their callers gave up)."""
        kernel = self._spec.target
        assert isinstance(kernel, PersistentKernel)
        handed = {item[0] for item in live}
        skipped = [item[0] for item in items if item[0] not in handed]
        if answer is None:
            return np.empty(0, kernel.reply_dtype), skipped
        wanted = [answer[start:end] for item, start, end in _spans(live) if item[2]]
        if len(wanted) == len(live):
            return answer, skipped
        if not wanted:
            return np.empty(0, kernel.reply_dtype), skipped
        return np.concatenate(wanted), skipped


def _spans(items: Sequence[Item]) -> list[tuple[Item, int, int]]:
    """Each kernel item with the range its records take in the batch's array."""
    ends = list(itertools.accumulate(item[1] for item in items))
    return [(item, end - item[1], end) for item, end in zip(items, ends, strict=True)]


def host_for(spec: HostSpec, locate: Callable[[], Location]) -> Host:
    """The host for ``spec``: a :class:`KernelHost` for a persistent kernel."""
    if isinstance(spec.target, PersistentKernel):
        return KernelHost(spec, locate)
    return Host(spec, locate)
