"""Actors, actor handles and actor nurseries.

An *actor* processes the messages sent to it one at a time, in priority order, and
replies to requests. It runs as one task inside an :class:`ActorNursery`::

    async with pdc_core.open_nursery() as nursery:
        ref = await nursery.start_actor(Doubler)
        assert await ref.ask(21) == 42

Guarantees:

* **Start is a handshake.** :meth:`ActorNursery.start_actor` returns once the actor
  has run its ``on_start`` and is receiving. If it fails to start, ``start_actor``
  raises :class:`~pdc_core.ActorCrashed` and nothing is left running. An actor with
  nothing to do first (an async handler, an :class:`Actor` instance without
  ``on_start``) cannot fail to start: it is running, and receiving into its mailbox,
  as soon as it exists, so ``start_actor`` returns at once, and its task first runs at
  the event loop's next turn, with what was sent meanwhile queued in order.
* **An actor lives no longer than its nursery.** When the ``async with`` body ends,
  every actor still running is stopped after it has handled the messages already in
  its mailbox (optionally bounded by ``shutdown_timeout``); when the body raises or
  the nursery is cancelled, actors are cancelled.
* **Crashes are never silent and never hang.** An exception escaping an actor's
  handler cancels the other actors and the body, and the nursery raises
  :class:`~pdc_core.ActorCrashed` carrying the actor id and the original exception
  (as ``cause`` and ``__cause__``). With a :class:`RestartPolicy` the actor is
  restarted instead (fresh instance, same mailbox and handle) until it crashes more
  than ``max_restarts`` times within ``within`` seconds.
* **No request is left hanging.** Every ``ask`` completes with the reply, its
  timeout (:class:`~pdc_core.MessageTimeout`, a :class:`TimeoutError`), or an error:
  :class:`~pdc_core.ActorStopped` when the actor stops before replying,
  :class:`~pdc_core.ActorCrashed` when handling it (or the actor) crashed,
  :class:`~pdc_core.MessageDropped` when a ``"drop_oldest"`` mailbox evicted it. A
  request whose caller was cancelled or timed out before the actor got to it is
  skipped, not handled.
* **Cancellation leaves nothing behind.** Actors use no thread and no task per
  message; a cancelled ``ask`` or ``tell`` leaves no waiter or timer behind, and
  stopping an actor fails every request still queued.

Handles are :class:`ActorRef` objects: an abstract interface (``tell``, ``ask``,
``tell_many``, ``ask_many``, ``ask_stream``, ``pause``, ``resume``, ``stop``,
``wait``, ``statistics``) with one implementation per kind of actor. Mailbox actors
(this module) are one kind; ring kernels and persistent device kernels are others.
They all plug into the nursery through :class:`ActorRunner`, the internal extension
point documented there.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar, Unpack, overload

import anyio
import anyio.abc
import anyio.lowlevel

from .._exceptions import ActorCrashed, ActorStopped, DuplicateActorError, LifecycleError
from .._loop import IncarnationScope, TaskHost, Waiter, check_count, full_checkpoint, wake
from ._mailbox import DEFAULT_CAPACITY, Backpressure
from ._mesh import ActorMesh, start_mesh
from ._nursery_lifecycle import NurseryLifecycle
from ._refs import (
    ActorLike,
    ActorRef,
    ActorRunner,
    Placement,
    RunsAs,
    StartOptions,
    StartsAs,
    runner_for,
)
from ._restart import RestartPolicy

__all__ = ["ActorNursery", "RestartPolicy", "open_nursery"]

M = TypeVar("M")
R = TypeVar("R")
_RefT = TypeVar("_RefT", bound=ActorRef[Any, Any])


class _LocalStartKeywords(TypedDict, total=False):
    """The keywords of :meth:`ActorNursery.start_actor` for actors of this process."""

    name: str | None
    capacity: int
    backpressure: Backpressure | str
    restart: RestartPolicy | None
    max_batch: int
    paused: bool


class _StartKeywords(_LocalStartKeywords, total=False):
    """Every keyword of :meth:`ActorNursery.start_actor`."""

    placement: Placement | None


class _MeshKeywords(_LocalStartKeywords, total=False):
    """The keywords of :meth:`ActorNursery.start_mesh` besides the target."""

    shape: Mapping[str, int] | None
    devices: object
    placement: Placement | Sequence[Placement] | None


_log = logging.getLogger("pdc.actors")


class _Start:
    """The start handshake of one actor, between ``start_actor`` and the actor's task.

    The task calls it (it is the runner's ``started()``) or :meth:`fail`;
    ``start_actor`` returns or raises accordingly. ``abandoned`` is set
    when ``start_actor`` was cancelled first: the actor is then cancelled too.
    """

    __slots__ = ("abandoned", "done", "error", "waiter")

    def __init__(self) -> None:
        self.done = False
        self.abandoned = False
        self.error: BaseException | None = None
        self.waiter: Waiter | None = None

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            if self.waiter is not None:
                wake(self.waiter)

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.error = error
            self()


#: The start of every actor that is ready at once (shared: it never changes).
_READY = _Start()
_READY.done = True


# By role: entering, draining and ending are NurseryLifecycle's (_nursery_lifecycle);
# starting and supervising actors are here, over the same attributes (no hop).
class ActorNursery(NurseryLifecycle):
    """Starts actors and bounds their lifetime. Create one with :func:`open_nursery`."""

    # -- starting actors ----------------------------------------------------------------

    # Overloads, tried in order: the first that matches gives the handle's type. They
    # name no kind of actor, only what a target says of itself (the protocols of
    # ._refs): an ActorLike class or instance (a mailbox actor's Actor) keeps its types
    # wherever it is placed; a StartsAs target (a persistent kernel) or a RunsAs runner
    # returns the handle it declares; async handlers come before factories, and
    # anything else gets an untyped handle, as does a kernel placed elsewhere.
    @overload
    async def start_actor(
        self, target: type[ActorLike[M, R]], /, *args: Any, **options: Unpack[_StartKeywords]
    ) -> ActorRef[M, R]: ...

    @overload
    async def start_actor(
        self, target: ActorLike[M, R], /, **options: Unpack[_StartKeywords]
    ) -> ActorRef[M, R]: ...

    @overload
    async def start_actor(
        self, target: StartsAs[_RefT], /, **options: Unpack[_LocalStartKeywords]
    ) -> _RefT: ...

    @overload
    async def start_actor(
        self, target: RunsAs[_RefT], /, **options: Unpack[_LocalStartKeywords]
    ) -> _RefT: ...

    @overload
    async def start_actor(
        self, target: Callable[[M], Awaitable[R]], /, **options: Unpack[_StartKeywords]
    ) -> ActorRef[M, R]: ...

    @overload
    async def start_actor(
        self,
        target: Callable[..., ActorLike[M, R]],
        /,
        *args: Any,
        **options: Unpack[_StartKeywords],
    ) -> ActorRef[M, R]: ...

    @overload
    async def start_actor(
        self, target: object, /, *args: Any, **options: Unpack[_StartKeywords]
    ) -> ActorRef[Any, Any]: ...

    async def start_actor(
        self,
        target: object,
        /,
        *args: Any,
        name: str | None = None,
        capacity: int = DEFAULT_CAPACITY,
        backpressure: Backpressure | str = Backpressure.BLOCK,
        restart: RestartPolicy | None = None,
        max_batch: int = 1024,
        paused: bool = False,
        placement: Placement | None = None,
    ) -> ActorRef[Any, Any]:
        """Start an actor and return its handle once it is running (a handshake).

        ``target`` is one of:

        * an :class:`Actor` subclass, or a callable returning an :class:`Actor`
          (called with ``*args``; called again for each restart);
        * an :class:`Actor` instance (reused across restarts);
        * an ``async def handler(message)`` whose return value is the reply;
        * a :class:`~pdc_core.PersistentKernel`: launched on the best available
          backend and run as an actor (``name`` and ``paused`` apply; for a backend
          or launch options pass a :class:`~pdc_core.PersistentKernelActor`);
        * an :class:`~pdc_core.lowlevel.ActorRunner`, or any target a kind of actor
          registered with :func:`pdc_core.lowlevel.runner_for` (the mailbox options
          apply as that kind documents).

        ``capacity`` and ``backpressure`` configure the mailbox, ``restart`` opts
        into supervision, ``max_batch`` caps the messages given to one
        ``handle_batch`` call, and ``paused=True`` starts the actor with delivery
        paused. ``placement`` runs the actor elsewhere (another process, node or
        GPU): a :class:`~pdc_core.lowlevel.Placement` such as ``pdc_ray.on(...)``
        turns the target into the runner that runs it there; supervision and the
        nursery's lifetime rules apply unchanged. ``name`` must be unique among the
        nursery's live actors (:class:`~pdc_core.DuplicateActorError` otherwise); by
        default one is made up.

        For type checkers the handle is an ``ActorRef[M, R]`` for an ``Actor[M, R]``
        subclass, instance or factory and for an ``async def handler(message: M) -> R``
        (``ask`` returns ``R``, ``tell`` takes ``M``), a
        :class:`~pdc_core.KernelActorRef` for a kernel, else ``ActorRef[Any, Any]``.

        It is a checkpoint on every path, as every async call of trio's API: a pending
        cancellation is raised (nothing is started) and other tasks run, also when the
        actor is ready at once.
        """
        if self._kit is not None:
            await full_checkpoint(self._kit)
        else:
            await anyio.lowlevel.checkpoint()
        if not self._open or self._tg is None:
            raise LifecycleError("cannot start an actor: the nursery is not open")
        if self._cancelling:  # a task shielded from the nursery's cancellation
            raise LifecycleError("cannot start an actor: the nursery is being cancelled")
        max_batch = check_count(max_batch, "max_batch")
        if restart is not None and not isinstance(restart, RestartPolicy):
            raise TypeError(f"restart must be a RestartPolicy or None, not {restart!r}")
        options = StartOptions(name, capacity, backpressure, max_batch, paused)
        if placement is None:
            runner = runner_for(target, args, options)
        elif isinstance(placement, Placement):
            runner = placement.runner_for(target, args, options)
            if not isinstance(runner, ActorRunner):
                raise TypeError(
                    f"placement {placement!r} made {runner!r} for {target!r}, not an ActorRunner"
                )
        else:
            raise TypeError(
                f"placement must be a pdc_core.lowlevel.Placement (with a runner_for method)"
                f" or None, not {placement!r}"
            )
        if runner._ran_in_nursery:
            raise LifecycleError(
                f"{runner!r} has already run in a nursery; make a new one to start again"
            )
        ref = runner.ref
        actor_id = ref.actor_id
        if actor_id in self._actors:
            raise DuplicateActorError(f"an actor named {actor_id!r} is already running")
        assert self._host is not None
        assert self._kit is not None
        self._actors[actor_id] = ref
        self._runners[actor_id] = runner
        runner._ran_in_nursery = True
        ready = runner._ready_at_once()  # then there is nothing to wait for
        start = _READY if ready else _Start()
        self._host.spawn(self._supervise, runner, restart, start, name=f"pdc-actor-{actor_id}")
        if ready:
            return ref
        kit = self._kit
        try:
            await kit.checkpoint()  # the actor's task runs, usually as far as started()
            if not start.done:
                start.waiter = kit.waiter()
                await start.waiter
        except BaseException:
            await self._abandon(runner, start)
            raise
        if start.error is not None:
            raise start.error
        return ref

    # -- starting meshes ------------------------------------------------------------

    @overload
    async def start_mesh(
        self, target: type[ActorLike[M, R]], /, *args: Any, **options: Unpack[_MeshKeywords]
    ) -> ActorMesh[M, R]: ...

    @overload
    async def start_mesh(
        self, target: StartsAs[ActorRef[M, R]], /, **options: Unpack[_MeshKeywords]
    ) -> ActorMesh[M, R]: ...

    @overload
    async def start_mesh(
        self, target: Callable[[M], Awaitable[R]], /, **options: Unpack[_MeshKeywords]
    ) -> ActorMesh[M, R]: ...

    @overload
    async def start_mesh(
        self,
        target: Callable[..., ActorLike[M, R]],
        /,
        *args: Any,
        **options: Unpack[_MeshKeywords],
    ) -> ActorMesh[M, R]: ...

    @overload
    async def start_mesh(
        self, target: object, /, *args: Any, **options: Unpack[_MeshKeywords]
    ) -> ActorMesh[Any, Any]: ...

    async def start_mesh(
        self,
        target: object,
        /,
        *args: Any,
        shape: Mapping[str, int] | None = None,
        devices: object = None,
        placement: Placement | Sequence[Placement] | None = None,
        name: str | None = None,
        restart: RestartPolicy | None = None,
        **options: Any,
    ) -> ActorMesh[Any, Any]:
        """Start one actor per point of ``shape`` and return them as one
        :class:`~pdc_core.ActorMesh`, once every member is running (a handshake each).

        ``shape`` names the dimensions and their sizes (``{"host": 2, "gpu": 4}``: 8
        members, in row-major order). ``target`` and ``*args`` are as for
        :meth:`start_actor`, started once per member (an ``Actor`` class or factory, an
        async handler, a :class:`~pdc_core.PersistentKernel`; an ``Actor`` *instance*
        is refused, as all members would share it). ``devices`` places one member per
        device instead: ``"all"`` (every device of the best available backend), a
        backend name (``"cuda"``: all its devices) or a list of backend names or
        instances (``["cuda:0", "cuda:2"]``); the shape is then ``{"device": n}`` unless
        given. ``placement`` runs the members elsewhere: one
        :class:`~pdc_core.lowlevel.Placement` for all (``pdc_ray.on(num_gpus=1)``) or
        one per member in mesh order. ``name`` names the mesh (members are
        ``name[gpu=0]``, ...); ``restart`` supervises each member (a crashed member is
        restarted in place, keeping its coordinates; without it a crash fails the
        nursery); the mailbox options (``capacity``, ``backpressure``, ``max_batch``,
        ``paused``) apply to each member as in :meth:`start_actor`.

        Raises :class:`TypeError`/:class:`ValueError` for a bad shape, placement or
        target, :class:`~pdc_core.LifecycleError` if a member's name is taken or the
        nursery is not open, and :class:`~pdc_core.ActorCrashed` if a member fails to
        start: the members already started are then stopped. Cancelled, it stops the
        members it started.
        """
        if not self._open:
            raise LifecycleError("cannot start a mesh: the nursery is not open")
        return await start_mesh(
            _MeshSupport(self),
            target,
            args,
            shape=shape,
            devices=devices,
            placement=placement,
            name=name,
            restart=restart,
            options=options,
        )

    @staticmethod
    async def _abandon(runner: ActorRunner, start: _Start) -> None:
        """``start_actor`` was cancelled: cancel the actor and wait until it is gone."""
        start.abandoned = True
        if runner.cancel_scope is not None:
            runner.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await runner.ref.wait()

    def _forget(self, actor_id: str, runner: ActorRunner) -> None:
        if self._runners.get(actor_id) is runner:
            del self._runners[actor_id]
            del self._actors[actor_id]
            self._check_quiescent()  # the others may have been waiting for this one

    def _incarnation_scope(self, runner: ActorRunner, start: _Start) -> IncarnationScope:
        """A new cancel scope for ``runner``, already cancelled if the actor must not go on."""
        assert self._kit is not None
        scope = runner.cancel_scope = self._kit.cancel_scope()
        if self._cancelling or start.abandoned:
            scope.cancel()
        return scope

    async def _supervise(
        self, runner: ActorRunner, restart: RestartPolicy | None, start: _Start
    ) -> None:
        """The actor's task: run its incarnations, restart or escalate crashes, and
        finalize it once it is done for good. Nothing escapes but cancellation: a crash
        that escalates is recorded for ``__aexit__`` and cancels the nursery."""
        ref = runner.ref
        actor_id = ref.actor_id
        _log.debug("starting actor %r (%s)", actor_id, type(runner).__name__)
        assert self._kit is not None
        task = self._kit.current_task()
        self._tasks.add(task)
        history: deque[float] | None = None
        error: BaseException | None = None
        try:
            while True:
                scope = self._incarnation_scope(runner, start)
                try:
                    with scope:
                        if not runner._engages_cancel_scope:
                            scope.engage()
                        await runner.run(start)
                except Exception as exc:
                    if not start.done:
                        crashed = ActorCrashed(actor_id, exc, note=" while starting")
                        runner.on_crash(exc, restarting=False)
                        error = crashed
                        _log.warning("%s", crashed)
                        start.fail(crashed)
                        return
                    now = anyio.current_time()
                    if restart is not None:
                        if history is None:
                            history = deque()
                        while history and history[0] <= now - restart.within:
                            history.popleft()
                        if len(history) < restart.max_restarts:
                            history.append(now)
                            runner.on_crash(exc, restarting=True)
                            delay = restart.delay(len(history))
                            _log.warning(
                                "actor %r crashed (%s: %s); restart %d of %d within %g s, in %g s",
                                actor_id,
                                type(exc).__name__,
                                exc,
                                len(history),
                                restart.max_restarts,
                                restart.within,
                                delay,
                            )
                            # Under the runner's scope too: stop(timeout=...) and the
                            # nursery's shutdown_timeout hold while it waits out the backoff,
                            # and a draining nursery stops it at once if nothing is queued.
                            with self._incarnation_scope(runner, start) as backoff:
                                self._backing_off.add(runner)
                                try:
                                    self._check_quiescent()
                                    await anyio.sleep(delay)  # nothing shielded: not engaged
                                finally:
                                    self._backing_off.discard(runner)
                            if backoff.cancelled_caught:
                                return  # stopped while waiting to restart
                            continue
                    runner.on_crash(exc, restarting=False)
                    crashed = error = ActorCrashed(actor_id, exc)
                    _log.warning("%s; cancelling the rest of its nursery", crashed)
                    self._escalate(crashed)
                    return
                else:
                    if scope.cancelled_caught and not start.done:
                        error = ActorStopped(
                            f"actor {actor_id!r} was stopped while starting", actor_id=actor_id
                        )
                        start.fail(error)
                        return
                    start()
                    _log.debug("actor %r stopped", actor_id)
                    return
        except BaseException as exc:
            if error is None:
                error = exc
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            self._escalate(exc)  # KeyboardInterrupt, SystemExit: the nursery raises it
        finally:
            self._tasks.discard(task)
            runner.cancel_scope = None
            self._forget(actor_id, runner)
            runner.finalize(error)
            if not start.done:  # cancelled before it started
                start.fail(
                    ActorStopped(
                        f"actor {actor_id!r} was cancelled while starting", actor_id=actor_id
                    )
                )


def open_nursery(*, shutdown_timeout: float | None = None) -> ActorNursery:
    """Open an actor nursery: ``async with open_nursery() as nursery: ...``.

    When the body completes, running actors are stopped after draining their
    mailboxes; with ``shutdown_timeout``, any still running after that many seconds
    are cancelled. See :class:`ActorNursery` and the module documentation for the
    guarantees.
    """
    return ActorNursery(shutdown_timeout=shutdown_timeout)


class _MeshSupport:
    """What a mesh needs of its nursery (:class:`~pdc_core._actors._mesh.MeshNursery`),
    read here, where the nursery's state is known: the mesh reads none of it."""

    __slots__ = ("_nursery",)

    def __init__(self, nursery: ActorNursery) -> None:
        self._nursery = nursery

    @property
    def task_host(self) -> TaskHost | None:
        return self._nursery._host

    def has_actor(self, name: str) -> bool:
        return name in self._nursery._actors

    async def start_actor(self, target: Any, *args: Any, **options: Any) -> ActorRef[Any, Any]:
        return await self._nursery.start_actor(target, *args, **options)
