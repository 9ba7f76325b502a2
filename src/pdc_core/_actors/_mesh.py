"""Actor meshes: many actors, laid out on named dimensions, addressed as one handle.

The rules users rely on are documented at the public name, :class:`ActorMesh`.

The requests to mailbox actors are posted straight into their mailboxes with one reply
slot each, gathered by one waiter (see :mod:`._mesh_mailbox`); a handle that posts
requests itself (``_post_request``/``_send_request``: pdc-ray's remote actors and
kernels) gets them with the same slots, no task per request (see :class:`_HookPort`);
other kinds of member (persistent kernels) are asked through their handles, one task
per request, concurrently.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import functools
import itertools
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, SupportsIndex, TypeVar, cast

import anyio

from .._exceptions import (
    ActorStopped,
    LifecycleError,
    MailboxFull,
    MessageTimeout,
    PdcError,
)
from .._loop import TIMED_OUT, Kit, current_kit, full_checkpoint, strict_int, wake
from ._refs import (
    ActorRef,
    ActorState,
    Placement,
    cancel_called,
    check_timeout,
    message_priority,
    raise_cancelled,
    running_actor,
)

if TYPE_CHECKING:
    from ._nursery import ActorNursery, RestartPolicy

__all__ = [
    "ActorMesh",
    "Coordinates",
    "MeshError",
    "MeshReplies",
    "member_targets",
    "mesh_port",
    "shared_target",
    "start_mesh",
]

M = TypeVar("M")
R = TypeVar("R")

#: A member's place in a mesh: one index per dimension, in the order of ``mesh.shape``.
Coordinates = tuple[int, ...]


def _coordinate(value: object, dim: str, size: int, expected: str = "an int") -> int:
    """The one indexing rule of meshes (``mesh[...]`` and :meth:`ActorMesh.slice`): an
    int by the rule of priorities (NumPy integers too, never a bool), negative counting
    from the end as in NumPy; :class:`IndexError` outside the dimension."""
    index = strict_int(value, f"{dim}=", expected)
    if not -size <= index < size:
        raise IndexError(f"{dim}={value!r} is outside 0..{size - 1}")
    return index + size if index < 0 else index


def _rules(
    message: object, priority: SupportsIndex | None, timeout: float | None
) -> tuple[int, float | None]:
    """The argument rules of single handles (``pdc_core.lowlevel``'s
    :func:`message_priority` and :func:`check_timeout`), applied once for a whole mesh
    operation before anything is sent."""
    prio = message_priority(message, priority)
    if timeout is not None:
        timeout = check_timeout(timeout)
    return prio, timeout


class MeshError(ExceptionGroup[Exception], PdcError):
    """Some members of a mesh failed an operation; the others' replies are kept.

    An :class:`ExceptionGroup` of the failed members' errors (so ``except*
    ActorCrashed`` or ``except* TimeoutError`` pick them out), with:

    * ``failures``: coordinates -> that member's error (:class:`~pdc_core.ActorCrashed`,
      :class:`~pdc_core.ActorStopped`, :class:`~pdc_core.MessageTimeout`,
      :class:`~pdc_core.MessageDropped`, or what a remote member raised);
    * ``replies``: coordinates -> reply, for every member that answered (empty for
      ``broadcast``).

    Coordinates are those of the mesh (or sub-mesh) the operation was called on.
    """

    failures: dict[Coordinates, Exception]
    replies: dict[Coordinates, Any]

    def __new__(
        cls,
        message: str,
        exceptions: Sequence[Exception],
        failures: Mapping[Coordinates, Exception] | None = None,
        replies: Mapping[Coordinates, Any] | None = None,
    ) -> MeshError:
        self = super().__new__(cls, message, exceptions)
        self.failures = dict(failures or {})
        self.replies = dict(replies or {})
        return self

    def derive(self, excs: Sequence[Exception]) -> MeshError:  # type: ignore[override]
        """The same error over ``excs``, a subset of its exceptions (what
        ``ExceptionGroup.split`` and ``subgroup`` call): keeps the failures of those
        exceptions and every reply."""
        kept = {id(e) for e in excs}
        failures = {c: e for c, e in self.failures.items() if id(e) in kept}
        return MeshError(self.message, list(excs), failures, self.replies)

    def __reduce__(self) -> Any:
        return (MeshError, (self.message, list(self.exceptions), self.failures, self.replies))


# -- reply slots: one per member per operation, gathered by one waiter ------------------


class _Gather:
    """The replies of one mesh operation: one waiter for the caller, woken when all
    are in (``call``) or at each arrival (``stream``)."""

    __slots__ = (
        "arrived",
        "cancels",
        "closed",
        "errors",
        "remaining",
        "replies",
        "shared",
        "slots",
        "waiter",
    )

    def __init__(self, waiter: Any, n: int) -> None:
        self.waiter = waiter
        self.remaining = n
        self.replies: list[Any] = [None] * n
        self.errors: dict[int, Exception] = {}
        #: The caller gave up (cancelled, timed out, stream closed): slots are done.
        self.closed = False
        #: Arrival order, for ``stream`` (None for ``call``).
        self.arrived: deque[int] | None = None
        #: What to call when the caller gives up: the cancel scopes of the tasks asking
        #: members through their handles, and the abandon callbacks of requests posted
        #: through a handle's ``_post_request`` (see :class:`_Slot.on_abandon`).
        self.cancels: list[Callable[[], object]] | None = None
        self.slots: list[_Slot] = []
        #: See :meth:`_Slot.shared`.
        self.shared: dict[object, Any] | None = None

    def _arrive(self, index: int) -> None:
        self.remaining -= 1
        arrived = self.arrived
        if arrived is not None:
            arrived.append(index)
            waiter = self.waiter
            if waiter is not None:
                self.waiter = None
                wake(waiter)
        elif not self.remaining:
            wake(self.waiter)

    def close(self) -> None:
        """The caller is gone: skip what members have not handled; stop the asking tasks."""
        if self.closed:
            return
        self.closed = True
        for slot in self.slots:
            port = slot.port
            if port is not None:  # posted, never answered: no longer in flight
                slot.port = None
                port.inflight -= 1
        cancels, self.cancels = self.cancels, None
        for cancel in cancels or ():
            cancel()


class _Slot:
    """The reply target of one member's request: quacks like the waiter of an ``ask``
    (``done``, ``set_result``, ``set_exception``, ``exception``), so an actor answers,
    skips or fails it exactly as it does a single request."""

    __slots__ = ("error", "gather", "index", "port", "resolved")

    def __init__(self, gather: _Gather, index: int) -> None:
        self.gather = gather
        self.index = index
        self.resolved = False
        self.error: BaseException | None = None
        #: The port whose ``inflight`` counts this request until it resolves (hook ports).
        self.port: _Port | None = None

    def done(self) -> bool:
        return self.resolved or self.gather.closed

    def on_abandon(self, callback: Callable[[], object], /) -> None:
        """Call ``callback()`` when the caller gives up on this request (cancelled,
        timed out, stream closed), at once if it has: how a kind of handle that posts
        requests (``_post_request``) skips or cancels what its member has not handled."""
        gather = self.gather
        if gather.closed:
            callback()
        elif gather.cancels is None:
            gather.cancels = [callback]
        else:
            gather.cancels.append(callback)

    def shared(self) -> dict[object, Any] | None:
        """A dict shared by every slot of this operation, where a kind of handle that
        posts requests keeps what handles their answers together (pdc-ray wakes the
        event loop once for all of a ``call``'s remote replies); None for a ``stream``,
        whose replies are wanted as each arrives."""
        gather = self.gather
        if gather.arrived is not None:
            return None
        shared = gather.shared
        if shared is None:
            shared = gather.shared = {}
        return shared

    def _unport(self) -> None:
        port = self.port
        if port is not None:
            self.port = None
            port.inflight -= 1

    def set_result(self, value: Any, /) -> None:
        if self.resolved:
            raise RuntimeError("reply slot already resolved")
        self.resolved = True
        if self.port is not None:
            self._unport()
        gather = self.gather
        gather.replies[self.index] = value
        gather._arrive(self.index)

    def set_exception(self, error: BaseException, /) -> None:
        if self.resolved:
            raise RuntimeError("reply slot already resolved")
        self.resolved = True
        if self.port is not None:
            self._unport()
        self.error = error
        gather = self.gather
        if not isinstance(error, Exception):  # pragma: no cover - actors fail with errors
            error = ActorStopped(f"request failed: {error!r}")
        gather.errors[self.index] = error
        gather._arrive(self.index)

    def exception(self) -> BaseException | None:
        return self.error


# -- ports: how a mesh reaches one kind of member ----------------------------------------

#: What :meth:`_Port.tell_nowait` returns for a member only its handle's ``tell`` reaches.
_LATER: object = object()


class _Port:
    """How a mesh sends to one member. The default asks through the member's handle
    (one task per request, in the nursery's task host); a kind of actor registers a
    faster one with :func:`mesh_port`."""

    __slots__ = ("inflight", "ref")

    #: Whether :meth:`post` can take requests without a task per request.
    direct = False

    def __init__(self, ref: ActorRef[Any, Any]) -> None:
        self.ref = ref
        self.inflight = 0  # requests of this mesh not answered yet (for choose)

    def post(self, message: Any, priority: int, slot: _Slot) -> bool:
        """Enqueue a request without waiting; False if that needs a wait."""
        return False

    async def send(self, message: Any, priority: int, slot: _Slot) -> None:
        """Enqueue a request, waiting for room; fail ``slot`` if the member is gone."""
        raise NotImplementedError

    def tell_now(self, message: Any, priority: int) -> bool:
        """Tell without waiting; False if that needs a wait."""
        return False

    def needs_wait(self) -> bool:
        """Whether a tell would wait now (a full mailbox whose policy is ``"block"``);
        False when the port cannot tell (it is then told through its handle)."""
        return False

    async def wait_room(self) -> None:
        """Wait until a tell would not wait (see :meth:`Mailbox.wait_room`)."""

    def tell_nowait(self, message: Any, priority: int) -> object:
        """Tell at once, applying a full mailbox's policy (``"drop_oldest"`` evicts):
        None when told, the member's error when it refuses (stopped, ``MailboxFull``),
        or :data:`_LATER` when only its handle's ``tell`` can (it may wait)."""
        return _LATER

    def load(self) -> int:
        """Messages queued for the member or in hand (for :meth:`ActorMesh.choose`)."""
        stats = self.ref.statistics()
        if stats.mailbox is not None:
            return stats.mailbox.depth + self.inflight
        return self.inflight


class _HookPort(_Port):
    """A member whose handle posts requests itself: it has ``_post_request(message,
    priority, slot) -> bool`` (send without waiting, with ``slot`` as the reply
    target; False when that needs a wait) and ``async _send_request(message,
    priority, slot)`` (the same, waiting for room; a refusal goes to ``slot``). Both
    register, with ``slot.on_abandon``, what skips or cancels the request when the
    caller gives up. A plugin's kind of handle (pdc-ray's remote actors) offers them
    so that a mesh reaches its members with no task per request.

    For ``broadcast``, such a handle may also have ``_tell_would_wait() -> bool``,
    ``async _wait_room()`` and ``_tell_nowait(message, priority) -> bool | Exception``
    (as :meth:`_Port.needs_wait`, :meth:`_Port.wait_room` and :meth:`_Port.tell_nowait`:
    True when told, the member's error when refused, False when only its ``tell``
    can); without them it is told through its ``tell``."""

    __slots__ = ("_post", "_send")

    direct = True

    def __init__(self, ref: ActorRef[Any, Any]) -> None:
        super().__init__(ref)
        self._post: Callable[[Any, int, _Slot], bool] = ref._post_request  # type: ignore[attr-defined]
        self._send: Callable[[Any, int, _Slot], Any] = ref._send_request  # type: ignore[attr-defined]

    def post(self, message: Any, priority: int, slot: _Slot) -> bool:
        if not self._post(message, priority, slot):
            return False
        if not slot.resolved:
            self.inflight += 1
            slot.port = self
        return True

    async def send(self, message: Any, priority: int, slot: _Slot) -> None:
        await self._send(message, priority, slot)
        if not slot.done():
            self.inflight += 1
            slot.port = self

    def needs_wait(self) -> bool:
        would_wait = getattr(self.ref, "_tell_would_wait", None)
        return would_wait is not None and bool(would_wait())

    async def wait_room(self) -> None:
        wait = getattr(self.ref, "_wait_room", None)
        if wait is not None:
            await wait()

    def tell_nowait(self, message: Any, priority: int) -> object:
        tell = getattr(self.ref, "_tell_nowait", None)
        if tell is None:
            return _LATER
        told: bool | Exception = tell(message, priority)
        if told is True:
            return None
        return _LATER if told is False else told


@functools.singledispatch
def mesh_port(ref: ActorRef[Any, Any]) -> _Port:
    """The port a mesh uses to reach ``ref`` (dispatches on the handle's type): a
    handle with ``_post_request`` and ``_send_request`` is reached through them (see
    :class:`_HookPort`), any other through its ``ask``, one task per request."""
    if callable(getattr(ref, "_post_request", None)) and callable(
        getattr(ref, "_send_request", None)
    ):
        return _HookPort(ref)
    return _Port(ref)


@functools.singledispatch
def shared_target(target: object, /) -> bool:
    """Whether ``target`` is one object that every member would share (an ``Actor``
    instance), which a mesh refuses; a kind of actor registers its own."""
    return False


@functools.singledispatch
def member_targets(target: object, devices: object, /) -> list[tuple[str, Callable[[str], object]]]:
    """One ``start_actor`` target per device for ``start_mesh(target, devices=...)``:
    a list of ``(device name, make)`` where ``make(member_name)`` returns the target to
    start. Dispatches on ``target``'s type; a kind of actor that runs on devices (the
    persistent kernel) registers itself, so this layer knows no device."""
    raise TypeError(
        f"devices= applies to targets that run on a device (a PersistentKernel), "
        f"not to {target!r}: give shape= instead"
    )


async def _ask_into(port: _Port, message: Any, priority: int, timeout: Any, slot: _Slot) -> None:
    """Ask ``port``'s member through its handle and resolve ``slot``; the caller's
    gather cancels this task's scope when it gives up."""
    gather = slot.gather
    with anyio.CancelScope() as scope:
        if gather.closed:
            return
        slot.on_abandon(scope.cancel)
        port.inflight += 1
        try:
            reply = await port.ref.ask(message, priority=priority, timeout=timeout)
        except Exception as error:
            if not slot.done():
                slot.set_exception(error)
        else:
            if not slot.done():
                slot.set_result(reply)
        finally:
            port.inflight -= 1


async def _send_into(port: _Port, message: Any, priority: int, slot: _Slot) -> None:
    await port.send(message, priority, slot)


# -- the mesh ---------------------------------------------------------------------------


class _Members:
    """What a mesh and its slices share: the nursery, the ports, the rotation of choose."""

    __slots__ = ("name", "nursery", "turn")

    def __init__(self, nursery: ActorNursery, name: str) -> None:
        self.nursery = nursery
        self.name = name
        self.turn = 0


class ActorMesh(Generic[M, R]):
    """Many actors laid out on named dimensions, addressed as one handle.

    Made by :meth:`ActorNursery.start_mesh`; typed like :class:`~pdc_core.ActorRef`
    (``ActorMesh[M, R]``: ``call`` returns ``list[R]``, ``broadcast`` takes an ``M``).

    ``mesh = await nursery.start_mesh(Scorer, shape={"host": 2, "gpu": 4})`` starts one
    actor per point of the shape (8 here), each an ordinary actor of the nursery, and
    returns an :class:`ActorMesh` over them:

    * ``await mesh.call(message)`` asks every member and returns the replies in mesh
      order (row-major over the dimensions, last one fastest);
    * ``await mesh.scatter(messages)`` asks each member its own message (one per member,
      mesh order) and returns the replies the same way;
    * ``await mesh.broadcast(message)`` tells every member, all or nothing (it waits
      for room in every member before it tells any);
    * ``mesh.choose()`` is the least loaded member (fewest messages queued or in hand),
      ``await mesh.call_one(message)`` asks it;
    * ``mesh.stream(message)`` yields ``(coordinates, reply)`` as the replies arrive;
    * ``mesh.slice(gpu=slice(0, 2))`` is the sub-mesh of those members (an int picks one
      coordinate and drops the dimension, as NumPy indexing does), ``mesh.shape`` its
      dimensions and ``len(mesh)`` its size.

    Priorities and timeouts follow the rules of single handles (see
    :class:`~pdc_core.ActorRef`), checked once for the whole mesh before anything is
    sent; ``timeout`` bounds the whole operation. **When some members fail**, the others
    still answer and the operation raises :class:`MeshError`, an :class:`ExceptionGroup`
    of the members' errors that carries ``failures`` (coordinates -> error) and
    ``replies`` (coordinates -> reply of every member that answered): nothing is lost and
    nothing waits. A member that did not reply within ``timeout`` fails with
    :class:`~pdc_core.MessageTimeout`. A cancelled ``call`` leaves no waiter in any
    member: the requests not yet handled are skipped, as a cancelled ``ask``'s are; a
    member whose mailbox is full under ``backpressure="raise"`` fails with its
    :class:`~pdc_core.MailboxFull`. A member's handler that calls ``call``,
    ``scatter`` or ``stream`` on its own mesh (or broadcasts into its own full
    mailbox), itself or from a child task of its own task group, would wait for itself
    forever: it gets a :class:`~pdc_core.LifecycleError` naming it, before anything is
    sent; ``choose`` and ``call_one`` from a member pick another member.

    Coordinates follow one rule in ``mesh[...]`` and :meth:`slice`: an int or a NumPy
    integer (never a bool or a float), a negative one counting from the end of its
    dimension, as in NumPy (``mesh[-1]``, ``grid[0, -1]``).

    Members are supervised together by the nursery: with ``restart=RestartPolicy(...)``
    a crashed member is restarted in place (same handle, same coordinates); without one,
    or once the policy gives up, the crash fails the whole nursery (and so the mesh) with
    :class:`~pdc_core.ActorCrashed` naming the member. ``mesh.stop()`` stops every
    member; leaving the nursery stops them with the rest.
    """

    __slots__ = ("_coords", "_group", "_ports", "_shape")

    def __init__(
        self,
        group: _Members,
        shape: dict[str, int],
        ports: list[_Port],
        coords: list[Coordinates],
    ) -> None:
        self._group = group
        self._shape = shape
        self._ports = ports
        self._coords = coords

    # -- shape ------------------------------------------------------------------------

    @property
    def shape(self) -> dict[str, int]:
        """The dimensions, in order: name -> size (a copy)."""
        return dict(self._shape)

    def __len__(self) -> int:
        return len(self._ports)

    @property
    def name(self) -> str:
        """The mesh's name: its members are ``name[dim=i,...]``."""
        return self._group.name

    @property
    def members(self) -> list[ActorRef[M, R]]:
        """The members' handles, in mesh order (the same handles across restarts)."""
        return [cast("ActorRef[M, R]", port.ref) for port in self._ports]

    @property
    def coordinates(self) -> list[Coordinates]:
        """The members' coordinates, in mesh order."""
        return list(self._coords)

    def __getitem__(self, coordinates: Coordinates | SupportsIndex) -> ActorRef[M, R]:
        """The member at ``coordinates`` (an int for a one-dimensional mesh); a negative
        coordinate counts from the end of its dimension, as in :meth:`slice` and NumPy."""
        point = tuple(coordinates) if isinstance(coordinates, tuple | list) else (coordinates,)
        return cast("ActorRef[M, R]", self._ports[self._index(point)].ref)

    def _index(self, point: tuple[object, ...]) -> int:
        if len(point) != len(self._shape):
            raise IndexError(f"{point} has {len(point)} coordinates; the mesh has {self._shape}")
        index = 0
        for value, (dim, size) in zip(point, self._shape.items(), strict=True):
            index = index * size + _coordinate(value, dim, size)
        return index

    def slice(self, **dims: int | slice) -> ActorMesh[M, R]:
        """The sub-mesh of the members selected by dimension: ``slice(gpu=slice(0, 2))``
        keeps the dimension, ``slice(gpu=1)`` picks one coordinate and drops it. The
        sub-mesh's coordinates count from 0 in each kept dimension. Raises
        :class:`KeyError` for an unknown dimension, :class:`IndexError` for an int out
        of range and :class:`ValueError` for an empty selection."""
        for dim in dims:
            if dim not in self._shape:
                raise KeyError(f"the mesh has no dimension {dim!r}; it has {list(self._shape)}")
        picks: list[list[int]] = []
        shape: dict[str, int] = {}
        for dim, size in self._shape.items():
            sel = dims.get(dim, slice(None))
            if isinstance(sel, slice):
                chosen = list(range(size))[sel]
                if not chosen:
                    raise ValueError(f"{dim}={sel} selects no member")
                shape[dim] = len(chosen)
            else:
                chosen = [_coordinate(sel, dim, size, "an int or a slice")]
            picks.append(chosen)
        ports: list[_Port] = []
        for point in itertools.product(*picks):
            ports.append(self._ports[self._index(point)])
        coords = list(itertools.product(*(range(n) for n in shape.values())))
        return ActorMesh(self._group, shape, ports, coords)

    # -- messaging --------------------------------------------------------------------

    async def call(
        self, message: M, *, priority: SupportsIndex | None = None, timeout: float | None = None
    ) -> list[R]:
        """Ask every member ``message``; return the replies in mesh order.

        Raises :class:`MeshError` if any member failed (its coordinates and error in
        ``failures``, the others' replies in ``replies``); a member that did not reply
        within ``timeout`` seconds (the whole call's bound) fails with
        :class:`~pdc_core.MessageTimeout`. Cancelled, it leaves nothing behind: the
        requests no member has reached are skipped. Called from a member's own
        handler it would wait for that member forever: it raises
        :class:`~pdc_core.LifecycleError` naming the member, sending nothing (so do
        :meth:`scatter` and :meth:`stream`).
        """
        prio, timeout = _rules(message, priority, timeout)
        await _entry()
        gather = await self._gather(itertools.repeat(message), prio, timeout, stream=False)
        return cast("list[R]", gather.replies)

    async def scatter(
        self,
        messages: Iterable[M],
        *,
        priority: SupportsIndex | None = None,
        timeout: float | None = None,
    ) -> list[R]:
        """Ask each member its own message (one per member, in mesh order); return the
        replies in mesh order. Failures, timeouts and cancellation as :meth:`call`.
        Raises :class:`ValueError` unless there is exactly one message per member."""
        batch = list(messages)
        if len(batch) != len(self._ports):
            raise ValueError(
                f"scatter needs {len(self._ports)} messages, one per member, got {len(batch)}"
            )
        prio, timeout = _rules(batch[0] if batch else None, priority, timeout)
        await _entry()
        if priority is None:  # each message's own priority, checked before any is sent
            prios = [_rules(m, None, None)[0] for m in batch]
            if any(p != prio for p in prios):
                gather = await self._gather(
                    iter(batch), prios, timeout, stream=False, what="scatter"
                )
                return cast("list[R]", gather.replies)
        gather = await self._gather(iter(batch), prio, timeout, stream=False, what="scatter")
        return cast("list[R]", gather.replies)

    async def _gather(
        self,
        messages: Iterable[Any],
        priority: int | list[int],
        timeout: float | None,
        *,
        stream: bool,
        what: str = "call",
    ) -> _Gather:
        self._check_caller("stream" if stream else what)
        kit = current_kit()
        ports = self._ports
        gather = _Gather(kit.waiter(), len(ports))
        if stream:
            gather.arrived = deque()
            gather.waiter = None
        deadline = None if timeout is None else kit.now() + timeout
        prios = itertools.repeat(priority) if isinstance(priority, int) else iter(priority)
        slow: list[tuple[_Port, Any, int, _Slot]] = []
        indirect: list[tuple[_Port, Any, int, _Slot]] = []
        slots = gather.slots
        for i, (port, message, prio) in enumerate(zip(ports, messages, prios)):  # noqa: B905
            slot = _Slot(gather, i)
            slots.append(slot)
            if port.direct:
                if not port.post(message, prio, slot):
                    slow.append((port, message, prio, slot))
            else:
                indirect.append((port, message, prio, slot))
        try:
            if indirect:
                self._spawn_asks(indirect, timeout, kit)
            for port, message, prio, slot in slow:
                if deadline is None:
                    await port.send(message, prio, slot)
                else:
                    with anyio.move_on_after(deadline - kit.now()):
                        await port.send(message, prio, slot)
            if stream:
                return gather
            if gather.remaining:
                waiter = gather.waiter
                if deadline is not None:
                    kit.arm(waiter, deadline - kit.now())
                if await waiter is TIMED_OUT:
                    self._time_out(gather, timeout)
        except BaseException:
            gather.close()
            raise
        if gather.errors:
            gather.close()
            raise self._error(gather, what)
        return gather

    def _spawn_asks(
        self, asks: list[tuple[_Port, Any, int, _Slot]], timeout: float | None, kit: Kit
    ) -> None:
        host = self._group.nursery._host
        for port, message, prio, slot in asks:
            # Not ``ref.alive``: a kernel member whose crash the nursery has not yet
            # handed to its restart policy reads CRASHED, and its handle waits for the
            # next incarnation; the handle's own ask raises for a member that is gone.
            if host is None:
                slot.set_exception(
                    ActorStopped(
                        f"actor {port.ref.actor_id!r} is not running", actor_id=port.ref.actor_id
                    )
                )
                continue
            try:
                host.spawn(_ask_into, port, message, prio, timeout, slot, name="pdc-mesh-ask")
            except RuntimeError as error:  # the nursery's task host has closed
                slot.set_exception(
                    ActorStopped(
                        f"actor {port.ref.actor_id!r}: {error}", actor_id=port.ref.actor_id
                    )
                )

    def _time_out(self, gather: _Gather, timeout: float | None) -> None:
        gather.close()
        for i, port in enumerate(self._ports):
            if not gather.slots[i].resolved:
                gather.errors[i] = MessageTimeout(
                    f"actor {port.ref.actor_id!r} did not reply within {timeout:g} s"
                )

    def _error(
        self, gather: _Gather, what: str, errors: dict[int, Exception] | None = None
    ) -> MeshError:
        coords = self._coords
        if errors is None:
            errors = gather.errors
        failures = {coords[i]: error for i, error in sorted(errors.items())}
        replies = {coords[i]: gather.replies[i] for i in range(len(coords)) if _answered(gather, i)}
        first = next(iter(failures.items()))
        return MeshError(
            f"{len(failures)} of {len(coords)} members of mesh {self.name!r} failed {what} "
            f"(first: {first[0]}: {type(first[1]).__name__}: {first[1]})",
            list(failures.values()),
            failures,
            replies,
        )

    async def broadcast(self, message: M, *, priority: SupportsIndex | None = None) -> None:
        """Tell every member ``message``, in mesh order: all or nothing.

        First waits, sending nothing, until every member's mailbox can take the
        message without waiting (a full ``"block"`` mailbox has room; it waits for one
        member at a time and checks them all again after each wait); then tells them
        all with no wait in between. So a broadcast cancelled (or timed out by a
        surrounding scope) while it waits has reached no member, and one that returns
        or raises :class:`MeshError` has reached every member that takes messages.
        A full ``"drop_oldest"`` mailbox evicts as a ``tell`` does.

        Raises :class:`MeshError` (``replies`` empty) naming the members that did not
        take it (stopped or crashed: :class:`~pdc_core.ActorStopped`; full with the
        ``"raise"`` policy: :class:`~pdc_core.MailboxFull`), after telling all the
        others. Raises :class:`~pdc_core.LifecycleError`, telling nobody, when called
        from a member's own handler while that member's mailbox is full (it would wait
        for itself forever).

        The exception to all-or-nothing: members pdc reaches only through their
        handle's ``tell`` (local persistent kernels, whose ring is their mailbox), and
        members of a draining nursery told by one of its actors, are told after the
        others, in mesh order, and a cancellation while one of them waits leaves the
        later ones untold.
        """
        prio, _ = _rules(message, priority, None)
        await _entry()
        ports = self._ports
        while True:  # 1. room everywhere, nothing told yet
            for port in ports:
                if port.needs_wait():
                    self._check_caller("broadcast", port)
                    await port.wait_room()
                    break
            else:
                break
        failures: dict[Coordinates, Exception] = {}
        later: list[tuple[_Port, Coordinates]] = []
        for port, point in zip(ports, self._coords, strict=True):  # 2. no await here
            if port.tell_now(message, prio):
                continue
            refused = port.tell_nowait(message, prio)
            if refused is None:
                continue
            if refused is _LATER:
                later.append((port, point))
            else:
                failures[point] = cast(Exception, refused)
        for port, point in later:
            try:
                await port.ref.tell(message, priority=prio)
            except (ActorStopped, MailboxFull) as error:
                failures[point] = error
        if failures:
            raise MeshError(
                f"{len(failures)} of {len(self._ports)} members of mesh {self.name!r} did not "
                f"take a broadcast",
                list(failures.values()),
                failures,
            )

    def choose(self) -> ActorRef[M, R]:
        """The least loaded member: the fewest messages queued for it or in hand; ties
        go round-robin. Called from a member's own handler, never that member (asking
        it would wait forever for its own reply). Raises
        :class:`~pdc_core.ActorStopped` if no member is alive, and
        :class:`~pdc_core.LifecycleError` if the calling member is the only one."""
        ports = self._ports
        n = len(ports)
        group = self._group
        start = group.turn % n
        group.turn += 1
        caller = self._caller_port()
        best: _Port | None = None
        best_load = math.inf
        for k in range(n):
            port = ports[(start + k) % n]
            if port is caller or not port.ref.alive:
                continue
            load = port.load()
            if load < best_load:
                best, best_load = port, load
                if load == 0:
                    break
        if best is None:
            if caller is not None and caller.ref.alive:
                raise self._self_call("choose", caller)
            raise ActorStopped(f"no member of mesh {self.name!r} is running")
        return cast("ActorRef[M, R]", best.ref)

    def _caller_port(self) -> _Port | None:
        """The member whose handler is running this, in its own task or in a child task
        of it (see :data:`running_actor`): its handler uses its own mesh."""
        actor = running_actor.get()
        if actor is None:  # not in an actor
            return None
        for port in self._ports:
            if port.ref is actor:
                return port
        return None

    def _check_caller(self, operation: str, port: _Port | None = None) -> None:
        """Refuse an operation that would have a member wait for itself: from its own
        handler (or a child task of it), ``port``'s member (default: any member of
        this mesh)."""
        if port is None:
            caller = self._caller_port()
            if caller is not None:
                raise self._self_call(operation, caller)
        elif port.ref is running_actor.get():
            raise self._self_call(operation, port)

    def _self_call(self, operation: str, port: _Port) -> LifecycleError:
        if operation == "broadcast":
            why = "its own mailbox is full, and it would wait forever for room in it"
        else:
            why = "it would wait forever for its own reply"
        return LifecycleError(
            f"member {port.ref.actor_id!r} of mesh {self.name!r} called mesh.{operation}() "
            f"from its own handler (or a child task of it): {why} (ask the others through "
            "a slice without it, or tell)"
        )

    async def call_one(
        self, message: M, *, priority: SupportsIndex | None = None, timeout: float | None = None
    ) -> R:
        """Ask the least loaded member (:meth:`choose`) and return its reply; raises
        what its ``ask`` raises. Cancelling it cancels that ``ask``, which leaves
        nothing behind; a caller already cancelled on entry sends nothing."""
        prio, timeout = _rules(message, priority, timeout)
        await _entry()
        return await self.choose().ask(message, priority=prio, timeout=timeout)

    def stream(
        self, message: M, *, priority: SupportsIndex | None = None, timeout: float | None = None
    ) -> MeshReplies[R]:
        """Ask every member ``message`` and yield ``(coordinates, reply)`` as the replies
        arrive (``async for point, reply in mesh.stream(x)``).

        The arguments are checked here, the requests sent at the first iteration.
        After the last reply, raises :class:`MeshError` if any member failed
        (``replies`` then holds what was yielded); ``timeout`` bounds the whole stream.
        Leaving the loop early (``break``), closing the iterator (``aclose``, or
        ``async with mesh.stream(x) as replies``) or cancelling it skips what the
        members have not handled yet.
        """
        prio, timeout = _rules(message, priority, timeout)
        return MeshReplies(self, message, prio, timeout)

    # -- lifecycle --------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether every member is alive (none stopped or crashed for good)."""
        return all(port.ref.alive for port in self._ports)

    @property
    def states(self) -> dict[Coordinates, ActorState]:
        """Each member's lifecycle state, by coordinates."""
        return {c: p.ref.state for c, p in zip(self._coords, self._ports, strict=True)}

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        """Stop every member (concurrently) and wait until all have stopped; options as
        :meth:`ActorRef.stop`. Leaves no member, kernel or remote actor running. A
        caller already cancelled on entry stops nothing; cancelled while it waits, it
        cancels the members' ``stop`` calls (members already told to stop still stop:
        call it again to stop the rest)."""
        timeout = check_timeout(timeout)
        await full_checkpoint(current_kit())  # a pending cancellation stops nothing
        async with anyio.create_task_group() as tg:
            for port in self._ports:
                tg.start_soon(functools.partial(port.ref.stop, drain=drain, timeout=timeout))

    async def wait(self) -> None:
        """Wait until every member has stopped (a checkpoint, as every lifecycle call).

        Cancelling it ends the wait only: the members are not affected.
        """
        await full_checkpoint(current_kit())
        for port in self._ports:
            await port.ref.wait()

    def __repr__(self) -> str:
        dims = ", ".join(f"{k}={v}" for k, v in self._shape.items())
        return f"<ActorMesh {self.name!r} ({dims})>"


class MeshReplies(AsyncIterator[tuple[Coordinates, R]]):
    """What :meth:`ActorMesh.stream` returns: an async iterator of ``(coordinates,
    reply)`` in arrival order, and an async context manager that closes it."""

    __slots__ = (
        "_deadline",
        "_done",
        "_gather",
        "_kit",
        "_mesh",
        "_message",
        "_priority",
        "_running",
        "_timeout",
    )

    def __init__(
        self, mesh: ActorMesh[Any, R], message: Any, priority: int, timeout: float | None
    ) -> None:
        self._mesh = mesh
        self._message = message
        self._priority = priority
        self._timeout = timeout
        self._gather: _Gather | None = None
        self._kit: Kit | None = None
        self._deadline: float | None = None
        #: Ended (the last reply, an error, a cancellation, aclose): nothing more comes.
        self._done = False
        #: A task is in __anext__ (a second one is refused, as by an async generator).
        self._running = False

    async def __anext__(self) -> tuple[Coordinates, R]:
        """The next reply to arrive, waiting for it; ``StopAsyncIteration`` after the last,
        or :class:`MeshError` then if a member failed, and at every call once the stream
        has ended or been closed (as an async generator). Cancelled, it closes the
        stream (the requests not yet handled are skipped). A second task calling it
        while one waits gets a :class:`RuntimeError` at once."""
        if self._done:
            raise StopAsyncIteration
        if self._running:
            raise RuntimeError("anext(): this mesh stream is already being iterated by a task")
        self._running = True
        try:
            return await self._next()
        except BaseException:
            self._done = True  # the last reply, an error, a cancellation: ended
            raise
        finally:
            self._running = False

    async def _next(self) -> tuple[Coordinates, R]:
        mesh = self._mesh
        gather = self._gather
        if gather is None:
            await _entry()
            self._kit = current_kit()
            if self._timeout is not None:
                self._deadline = self._kit.now() + self._timeout
            gather = self._gather = await mesh._gather(
                itertools.repeat(self._message), self._priority, self._timeout, stream=True
            )
        kit = self._kit
        assert kit is not None
        arrived = gather.arrived
        assert arrived is not None
        try:
            while True:
                if arrived:
                    index = arrived.popleft()
                    if index not in gather.errors:
                        return mesh._coords[index], cast(R, gather.replies[index])
                    continue
                if not gather.remaining or gather.closed or self._done:
                    break
                waiter = gather.waiter = kit.waiter()
                if self._deadline is not None:
                    kit.arm(waiter, self._deadline - kit.now())
                if await waiter is TIMED_OUT:
                    mesh._time_out(gather, self._timeout)
                    break
        except BaseException:
            gather.close()
            raise
        gather.close()
        if gather.errors and not self._done:  # closed by another task: it ends quietly
            errors = gather.errors
            gather.errors = {}
            raise mesh._error(gather, "stream", errors)
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop: the requests the members have not handled are skipped, and the stream
        yields nothing more (``StopAsyncIteration``); never waits."""
        self._done = True
        gather = self._gather
        if gather is not None:
            gather.close()
            if gather.waiter is not None:  # a task waits in __anext__: it ends now
                wake(gather.waiter)

    async def __aenter__(self) -> MeshReplies[R]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        gather = self._gather
        if gather is not None:
            gather.close()


async def _entry() -> None:
    """The rule of single handles on entry (``pdc_core.lowlevel``'s
    :func:`cancel_called`): a caller whose cancel scope is already cancelled gets its
    cancellation before anything is sent."""
    if cancel_called():
        await raise_cancelled()


def _answered(gather: _Gather, index: int) -> bool:
    """Whether member ``index`` of ``gather`` replied (its reply may be None)."""
    slot = gather.slots[index]
    return slot.resolved and slot.error is None


# -- starting a mesh -------------------------------------------------------------------


def _check_shape(shape: Mapping[str, int] | None, n: int | None) -> dict[str, int]:
    if shape is None:
        if n is None:
            raise TypeError("start_mesh needs shape= (e.g. {'gpu': 4}) or devices=")
        return {"device": n}
    if not isinstance(shape, Mapping) or not shape:
        raise TypeError(
            f"shape must be a non-empty mapping of dimension name to size, not {shape!r}"
        )
    out: dict[str, int] = {}
    for dim, size in shape.items():
        if not isinstance(dim, str) or not dim.isidentifier():
            raise ValueError(f"dimension names must be identifiers, not {dim!r}")
        try:
            count = strict_int(size, f"dimension {dim!r}'s size")  # NumPy integers too
        except TypeError:
            count = 0
        if count < 1:
            raise ValueError(f"dimension {dim!r} must have an int size >= 1, not {size!r}")
        out[dim] = count
    if n is not None and math.prod(out.values()) != n:
        raise ValueError(f"shape {out} has {math.prod(out.values())} members; devices= gives {n}")
    return out


async def start_mesh(
    nursery: ActorNursery,
    target: object,
    args: tuple[Any, ...],
    *,
    shape: Mapping[str, int] | None,
    devices: object,
    placement: Placement | Sequence[Placement] | None,
    name: str | None,
    restart: RestartPolicy | None,
    options: dict[str, Any],
) -> ActorMesh[Any, Any]:
    """:meth:`ActorNursery.start_mesh` (see there)."""
    if shared_target(target):
        raise TypeError(
            "a mesh needs one actor per member: pass the Actor class or a factory, "
            "not an instance (which all members would share)"
        )
    makers: list[Callable[[str], object]] | None = None
    labels: list[str] | None = None
    if devices is not None:
        pairs = member_targets(target, devices)
        labels = [label for label, _ in pairs]
        makers = [make for _, make in pairs]
    dims = _check_shape(shape, None if makers is None else len(makers))
    n = math.prod(dims.values())
    places: list[Placement | None]
    if placement is None or isinstance(placement, Placement):
        places = [placement] * n
    elif isinstance(placement, Sequence) and not isinstance(placement, str):
        places = list(placement)
        if len(places) != n:
            raise ValueError(f"placement= gives {len(places)} placements for {n} members")
    else:
        raise TypeError(f"placement must be a Placement or a sequence of them, not {placement!r}")
    base = name if name is not None else _label(target)
    coords = list(itertools.product(*(range(size) for size in dims.values())))
    names = [
        f"{base}[{','.join(f'{d}={v}' for d, v in zip(dims, point, strict=True))}]"
        for point in coords
    ]
    for member in names:
        if member in nursery._actors:
            raise LifecycleError(f"an actor named {member!r} is already running: name the mesh")
    refs: list[ActorRef[Any, Any] | None] = [None] * n

    async def start(i: int) -> None:
        member_target = makers[i](names[i]) if makers is not None else target
        refs[i] = await nursery.start_actor(
            member_target,
            *args,
            name=names[i],
            restart=restart,
            placement=places[i],
            **options,
        )

    try:
        if makers is None and all(p is None for p in places):
            for i in range(n):  # local actors: start_actor returns at once for most
                await start(i)
        else:
            async with anyio.create_task_group() as tg:  # kernels, remote actors: at once
                for i in range(n):
                    tg.start_soon(start, i)
    except BaseException:
        with anyio.CancelScope(shield=True):
            for ref in refs:
                if ref is not None:
                    await ref.stop()
        raise
    ports = [mesh_port(cast("ActorRef[Any, Any]", ref)) for ref in refs]
    del labels
    return ActorMesh(_Members(nursery, base), dims, ports, coords)


def _label(target: object) -> str:
    label = getattr(target, "name", None)
    if isinstance(label, str) and label:
        return label
    return str(getattr(target, "__name__", None) or type(target).__name__)
