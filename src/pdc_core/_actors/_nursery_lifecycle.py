"""The actor nursery's lifecycle: its state, entering, draining and ending.

:class:`NurseryLifecycle` is the half of :class:`~pdc_core.ActorNursery` that opens
the task group and its keeper task, ends the nursery (draining the actors until every
one is idle at once when the body ends; cancelling them when it raises or is
cancelled), bounds the drain by ``shutdown_timeout``, and raises what escaped the
actors. The other half, starting and supervising actors
(:mod:`pdc_core._actors._nursery`), is a subclass over the same attributes, so the
start path reads them directly: no object in between.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any, NoReturn, Self

import anyio
import anyio.abc

from .._exceptions import ActorCrashed, LifecycleError, ShutdownTimeout
from .._loop import Kit, TaskHost, Waiter, check_duration, current_kit, full_checkpoint, wake
from ._refs import ActorRef, ActorRunner

__all__ = ["NurseryLifecycle"]

_log = logging.getLogger("pdc.actors")


def _raise_errors(
    exceptions: list[BaseException], group: BaseExceptionGroup[BaseException] | None
) -> NoReturn:
    """Raise what an actor nursery ends with: its one error, bare; several as a group;
    or, when there are only cancellations, the cancellation (``group`` if given, so that
    it is re-raised as itself)."""
    whole = BaseExceptionGroup("errors in an actor nursery", exceptions)
    errors = _errors(whole)
    if len(errors) == 1:
        raise errors[0] from errors[0].__cause__
    if errors:
        raise BaseExceptionGroup("several errors in an actor nursery", errors) from None
    leaves = _flatten(whole)  # only cancellations: they belong to the scope
    if len(leaves) == 1:
        raise leaves[0] from leaves[0].__cause__
    if group is not None:
        raise group
    raise whole


def _errors(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The distinct errors in ``group``: its leaves but cancellations.

    Two ``ActorCrashed`` for the same crash (the actor's own, and the one a pending
    request of the body failed with) count as one. A cancellation is how an error (or
    an enclosing scope) stopped the rest, not an error of its own, and trio and
    asyncio differ in whether it shows up here at all.
    """
    cancelled = anyio.get_cancelled_exc_class()
    return [leaf for leaf in _flatten(group) if not isinstance(leaf, cancelled)]


def _flatten(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The distinct leaves of ``group`` (see :func:`_errors`)."""
    leaves: list[BaseException] = []
    seen: set[object] = set()
    for exc in group.exceptions:
        for leaf in _flatten(exc) if isinstance(exc, BaseExceptionGroup) else [exc]:
            key: object = id(leaf)
            if isinstance(leaf, ActorCrashed):
                key = ("crash", leaf.actor_id, id(leaf.cause))
            if key not in seen:
                seen.add(key)
                leaves.append(leaf)
    return leaves


class NurseryLifecycle:
    """The nursery's state and lifecycle (see the module docstring)."""

    def __init__(self, *, shutdown_timeout: float | None = None) -> None:
        shutdown_timeout = check_duration(shutdown_timeout, "shutdown_timeout")
        #: The task group of the keeper task (and the watchdog), from __aenter__ on.
        self._tg: anyio.abc.TaskGroup | None = None
        #: The event loop's kit (asyncio or trio), from __aenter__ on.
        self._kit: Kit | None = None
        #: Where the actors' tasks run, held by the keeper task (see _keep).
        self._host: TaskHost | None = None
        #: Resolved when the nursery closes: the keeper then waits for every actor.
        self._closing: Waiter | None = None
        #: Every actor is being cancelled (the nursery is); later incarnations too.
        self._cancelling = False
        #: What escaped the actors (crashes that escalated), raised by __aexit__.
        self._errors: list[BaseException] = []
        #: The live actors' handles and runners, by actor id.
        self._actors: dict[str, ActorRef[Any, Any]] = {}
        self._runners: dict[str, ActorRunner] = {}
        #: Seconds the drain may take before what is left is cancelled (None: no bound).
        self._shutdown_timeout = shutdown_timeout
        #: Inside the ``async with`` body: actors may be started.
        self._open = False
        #: The tasks running this nursery's actors: their sends go on while it drains.
        self._tasks: set[object] = set()
        #: The body has ended: messages from outside are refused (see _drain).
        self._draining = False
        #: Every actor was idle at once: each has been asked to stop.
        self._stopping = False
        #: Actors waiting out a restart backoff: idle while nothing is queued for them.
        self._backing_off: set[ActorRunner] = set()
        #: Messages left per actor when ``shutdown_timeout`` passed (then raised).
        self._left: dict[str, int] | None = None

    # -- context manager ----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise LifecycleError("an ActorNursery can be entered only once")
        kit = self._kit = current_kit()
        await full_checkpoint(kit)  # a pending cancellation opens nothing
        self._closing = kit.waiter()
        tg = self._tg = anyio.create_task_group()
        await tg.__aenter__()
        try:
            await tg.start(self._keep, name="pdc-nursery")
        except BaseException as exc:
            await tg.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._open = True
        return self

    async def _keep(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The task of the task group that holds the actors' tasks.

        Actors run in a :class:`~pdc_core._loop.TaskHost` rather than as tasks of the
        anyio task group, whose per-task bookkeeping would cost several times the
        actor itself. This task stands for all of them in the group: it leaves the
        host (waiting for every actor) once the nursery closes, and when the group is
        cancelled it is too, and the host cancels every actor.
        """
        assert self._kit is not None
        assert self._closing is not None
        async with self._kit.task_host(self._cancel_actors) as host:
            self._host = host
            task_status.started()
            await self._closing

    def _escalate(self, error: BaseException) -> None:
        """An error ends the nursery: record it for ``__aexit__`` and cancel the actors
        and the body now, before the requests pending on the failed actor are failed,
        so that a caller of this nursery ends by its cancellation, not by them."""
        self._errors.append(error)
        self._cancel_actors()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    def _cancel_actors(self) -> None:
        """Cancel every actor, through the cancel scope of its incarnation."""
        self._cancelling = True
        for runner in list(self._runners.values()):
            if runner.cancel_scope is not None:
                runner.cancel_scope.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._tg is not None
        assert self._closing is not None
        self._open = False
        if exc is None:
            self._drain()
            if self._shutdown_timeout is not None and self._actors:
                self._tg.start_soon(self._watchdog, self._shutdown_timeout)
        wake(self._closing)
        crashes = self._errors
        try:
            suppressed = bool(await self._tg.__aexit__(exc_type, exc, tb))
        except BaseExceptionGroup as group:
            _raise_errors([*crashes, *group.exceptions], group)
        except BaseException as error:
            if crashes:
                _raise_errors([*crashes, error], None)
            raise
        if crashes:
            _raise_errors(list(crashes), None)
        if self._left is not None:
            raise ShutdownTimeout(self._shutdown_timeout or 0.0, self._left)
        if exc is None:
            assert self._kit is not None
            await full_checkpoint(self._kit)  # the exit drained: still a checkpoint
        return suppressed

    # -- draining: the body has ended ---------------------------------------------------

    def _drain(self) -> None:
        """Refuse messages from outside; let the actors work until all are idle at once."""
        self._draining = True
        _log.debug("nursery draining %d actor(s)", len(self._runners))
        for runner in list(self._runners.values()):
            runner.begin_drain(self._check_quiescent, self._tasks.__contains__)
        self._check_quiescent()

    def _check_quiescent(self) -> None:
        """Once every actor is idle (all mailboxes empty, no handler running), stop all."""
        if not self._draining or self._stopping:
            return
        runners = list(self._runners.values())
        backing_off = self._backing_off
        if all(
            runner.unfinished() == 0 if runner in backing_off else runner.idle for runner in runners
        ):
            self._stopping = True
            _log.debug("nursery quiescent: stopping %d actor(s)", len(runners))
            assert self._tg is not None
            for runner in runners:
                if runner in backing_off:
                    # Idle until its restart: it stops now, without waiting out the backoff.
                    if runner.cancel_scope is not None:
                        runner.cancel_scope.cancel()
                else:
                    runner.request_drain(self._tg.start_soon)

    async def _watchdog(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            for ref in list(self._actors.values()):
                await ref.wait()
            return
        self._left = {actor_id: runner.unfinished() for actor_id, runner in self._runners.items()}
        _log.warning(
            "shutdown_timeout (%g s) passed; cancelling what is left: %s", timeout, self._left
        )
        for runner in list(self._runners.values()):
            if runner.cancel_scope is not None:
                runner.cancel_scope.cancel()

    # -- properties ---------------------------------------------------------------------

    @property
    def actors(self) -> dict[str, ActorRef[Any, Any]]:
        """The live actors, by id (a copy)."""
        return dict(self._actors)

    @property
    def cancel_scope(self) -> anyio.CancelScope:
        """The nursery's cancel scope: cancelling it cancels every actor and the body."""
        if self._tg is None:
            raise LifecycleError("the nursery has not been entered")
        return self._tg.cancel_scope

    def cancel(self) -> None:
        """Cancel every actor and the body of the ``async with`` block."""
        self.cancel_scope.cancel()
