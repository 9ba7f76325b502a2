"""Actors backed by persistent kernels.

A :class:`~pdc_core.PersistentKernel` runs in an actor nursery like any actor and is
addressed through the same kind of handle::

    async with pdc_core.open_nursery() as nursery:
        ref = await nursery.start_actor(double)             # a PersistentKernel
        reply = await ref.ask((1, 2.0))                      # one record in, one out
        replies = await ref.ask_batch(records)               # a batch, one ring write

For a backend or launch options, pass a :class:`PersistentKernelActor` instead::

    ref = await nursery.start_actor(PersistentKernelActor(double, backend="cpu"))

Guarantees (on top of :class:`~pdc_core.PersistentKernelSession`'s):

* **Start is a handshake**: ``start_actor`` returns once the kernel has signalled
  that it is resident. A kernel that fails to launch fails the start with
  :class:`~pdc_core.ActorCrashed` ("while starting") and leaves nothing running.
* ``pause``/``resume`` map to the pause control word and return once the kernel has
  acknowledged; ``stop(drain=..., timeout=...)`` maps to the stop word and waits at
  most ``timeout`` seconds (default: ``stop_timeout``) for the done word. A kernel
  that does not stop in time is a crash: the nursery raises
  :class:`~pdc_core.ActorCrashed` whose cause is a :class:`~pdc_core.KernelStopTimeout`.
* A kernel that reports an error (error word), or whose execution fails, crashes the
  actor: pending requests fail with :class:`~pdc_core.ActorCrashed` and the nursery
  raises ``ActorCrashed`` carrying the actor id and the
  :class:`~pdc_core.PersistentKernelError`.
* After the actor stops, every operation raises :class:`~pdc_core.ActorStopped`
  (``ActorCrashed`` after a crash).
* Cancelling the nursery stops the kernel (shielded, bounded by ``stop_timeout``) and
  releases its ring memory and, on the CPU backend, joins its worker thread.

Messages go through the ring in order: ``priority`` is validated but has no effect
(the ring is FIFO).
"""

# ruff: noqa: ASYNC109
# ``timeout`` parameters are the ActorRef API.

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, SupportsIndex, cast

import anyio
import numpy as np
import numpy.typing as npt

from .._actors import (
    ActorRef,
    ActorRunner,
    ActorState,
    ActorStatistics,
    StartOptions,
    cancellation_first,
    check_priority,
    runner_for,
)
from .._actors._refs import TIMED_OUT, cancel_called, raise_cancelled
from .._backend._persistent_kernel import PersistentKernelSpec, RepT, ReqT
from .._backend._ring import StopMode, coerce_record
from .._exceptions import ActorCrashed, ActorStopped
from .._loop import (
    Kit,
    check_duration,
    check_timeout,
    current_kit,
    full_checkpoint,
    seconds_or_inf,
)
from ._leader import DEFAULT_SPIN_LIMIT
from ._session import (
    PersistentKernelSession,
    RecordLike,
    SessionState,
    backend_for,
)
from ._session_types import _check_session_options

if TYPE_CHECKING:
    from .._backend._contract import Backend

__all__ = ["KernelActorRef", "PersistentKernelActor"]

_STATES = {state: ActorState(state.value) for state in SessionState}


class KernelActorRef(ActorRef[RecordLike, RepT], Generic[ReqT, RepT]):
    """The handle of a persistent-kernel actor (see the module documentation).

    Messages are records of the kernel's ``request_dtype`` (a tuple, a structured
    scalar or a one-record array); replies are records of its ``reply_dtype``.
    :meth:`tell_many`, :meth:`ask_batch` and :meth:`ask_many` publish a whole batch
    with as few ring writes as the free space allows.

    Types: ``KernelActorRef[ReqT, RepT]`` is an ``ActorRef[RecordLike, RepT]``: ``ask``
    returns a ``RepT`` (``numpy.void`` for a structured reply dtype), ``ask_batch`` an
    ``NDArray[RepT]`` (see :class:`~pdc_core.PersistentKernelSession`).
    """

    __slots__ = ("_cancel_called", "_runner")

    def __init__(self, runner: PersistentKernelActor) -> None:
        self._runner = runner
        # ActorRef's entry check: a slot that shadows the method, the kit's own check
        # once the actor runs on its loop (_bind_kit), the generic one before.
        self._cancel_called = super()._cancel_called  # type: ignore[method-assign]

    def _bind_kit(self, kit: Kit) -> None:
        """Check the caller's cancel scope through ``kit`` (the actor's loop's) from now
        on: one call per message where finding the running loop's kit costs several."""
        self._cancel_called = kit.cancel_called  # type: ignore[method-assign]

    @property
    def actor_id(self) -> str:
        return self._runner.actor_id

    @property
    def kernel(self) -> PersistentKernelSpec[ReqT, RepT]:
        """The kernel this actor runs."""
        return self._runner.kernel

    @property
    def session(self) -> PersistentKernelSession[ReqT, RepT] | None:
        """The host session of the current incarnation (``None`` before the start)."""
        return self._runner.session

    @property
    def state(self) -> ActorState:
        runner = self._runner
        if runner.final_state is not None:
            return runner.final_state
        if runner.restarting:
            return ActorState.RESTARTING
        if runner.session is None:
            return ActorState.STARTING
        if runner.stop_requested and runner.session.state is SessionState.RUNNING:
            return ActorState.STOPPING
        return _STATES[runner.session.state]

    def _open_session(self) -> PersistentKernelSession[ReqT, RepT]:
        runner = self._runner
        if runner.final_error is not None:
            raise runner.final_error()
        session = runner.session
        if session is None or runner.restarting:
            raise ActorStopped(f"actor {self.actor_id!r} is not running", actor_id=self.actor_id)
        if runner.stop_requested:
            raise ActorStopped(f"actor {self.actor_id!r} is stopping", actor_id=self.actor_id)
        return session

    async def _ready_session(
        self,
    ) -> tuple[PersistentKernelSession[ReqT, RepT], _RestartWait | None]:
        """The session to deliver to; while the actor is restarting (or its kernel has
        crashed and the nursery has not decided yet), wait for the next incarnation,
        as a message to a restarting mailbox actor waits in its mailbox.

        A caller that waited gets its :class:`_RestartWait` too: it stays counted (a
        draining nursery does not stop the actor) until it calls ``went_on()``, once
        its records are in the ring, where a draining stop answers them. Counted from
        its first wait to then, whatever wakes it meanwhile: the crash being decided
        wakes it too, and it must not look gone while it waits for the new kernel.
        """
        runner = self._runner
        wait: _RestartWait | None = None
        try:
            while True:
                session = runner.session
                if runner.final_error is not None or runner.stop_requested or session is None:
                    return self._open_session(), None  # raises what the actor's state says
                if not runner.restarting and session.state is not SessionState.CRASHED:
                    return session, wait
                if wait is None:
                    wait = _RestartWait(runner)
                await runner.changed.wait()
        except BaseException:
            if wait is not None:
                wait.went_on()
            raise

    def _stopped(self, exc: ActorStopped) -> ActorStopped:
        """The error to raise for ``exc``, naming this actor rather than the kernel (a
        caller being cancelled gets its cancellation instead: ActorRef's rule)."""
        if exc.actor_id == self.actor_id:
            return exc
        if isinstance(exc, ActorCrashed):
            return ActorCrashed(self.actor_id, exc.cause)
        return ActorStopped(str(exc), actor_id=self.actor_id)

    def _batch(self, messages: Iterable[RecordLike]) -> Any:
        """A batch is one record array of the kernel's ``request_dtype``."""
        return _records(messages, self.kernel)

    # -- delivery (the rules are ActorRef's) --------------------------------------------

    async def _deliver(self, message: RecordLike, priority: int) -> None:
        """Publish one request whose reply is discarded; waits while the ring is full."""
        try:
            session, wait = await self._ready_session()
            try:
                await session.send(message, reply=False)
            finally:
                if wait is not None:
                    wait.went_on()
        except ActorStopped as exc:
            raise self._stopped(exc) from exc.__cause__

    async def _deliver_many(self, messages: Any, priority: int | list[int]) -> None:
        """Publish a batch of requests whose replies are discarded."""
        try:
            session, wait = await self._ready_session()
            try:
                await session.send_batch(messages, reply=False)
            finally:
                if wait is not None:
                    wait.went_on()
        except ActorStopped as exc:
            raise self._stopped(exc) from exc.__cause__

    async def _request(self, message: RecordLike, priority: int, timeout: float | None) -> Any:
        """Send one request and return the kernel's reply record."""
        try:
            session, wait = await self._ready_session()
            if wait is not None:  # rare: the general path, which says when it has written
                return await self._request_after_wait(session, wait, message, timeout, one=True)
            if timeout is None:
                return await session.request(message)
            with anyio.move_on_after(timeout):
                return await session.request(message)
        except ActorStopped as exc:
            raise self._stopped(exc) from exc.__cause__
        return TIMED_OUT

    async def _request_many(
        self, messages: Any, priority: int | list[int], timeout: float | None
    ) -> Any:
        replies = await self._request_batch(messages, timeout)
        return replies if replies is TIMED_OUT else list(replies)

    async def _request_batch(self, records: npt.NDArray[Any], timeout: float | None) -> Any:
        try:
            session, wait = await self._ready_session()
            if wait is not None:
                return await self._request_after_wait(session, wait, records, timeout)
            if timeout is None:
                return await session.request_batch(records)
            with anyio.move_on_after(timeout):
                return await session.request_batch(records)
        except ActorStopped as exc:
            raise self._stopped(exc) from exc.__cause__
        return TIMED_OUT

    @staticmethod
    async def _request_after_wait(
        session: PersistentKernelSession[ReqT, RepT],
        wait: _RestartWait,
        records: Any,
        timeout: float | None,
        *,
        one: bool = False,
    ) -> Any:
        """Send ``records`` (one record with ``one``) to the new incarnation for a
        caller that waited for it: counted until they are written (or it gives up),
        then it waits for the replies as any caller does, so a draining stop (which
        answers what is written) cannot come between its wait and its write."""
        try:
            batch = coerce_record(records, session.kernel.request_dtype) if one else records
            with anyio.move_on_after(seconds_or_inf(timeout)):
                replies = await session._request(batch, published=wait.went_on)
                return replies[0] if one else replies
        finally:
            wait.went_on()
        return TIMED_OUT

    async def ask_batch(
        self,
        messages: npt.NDArray[ReqT] | Iterable[RecordLike],
        *,
        priority: SupportsIndex | None = None,
        timeout: float | None = None,
    ) -> npt.NDArray[RepT]:
        """Send a batch and return the replies, in order, as one record array (the
        rules of :meth:`ask_many` apply, cancellation included: a caller already
        cancelled on entry sends nothing; cancelled later, a prefix may have been sent
        and its replies are dropped)."""
        if cancel_called():
            await raise_cancelled()
        if timeout is not None:
            timeout = check_timeout(timeout)
        if priority is not None:
            check_priority(priority)
        records = self._batch(messages)
        if not len(records):
            return np.empty(0, self.kernel.reply_dtype)
        try:
            replies = await self._request_batch(records, timeout)
        except ActorStopped:
            await cancellation_first()
            raise
        if replies is TIMED_OUT:
            raise self._timeout_error(timeout, len(records))
        return cast("npt.NDArray[RepT]", replies)

    async def pause(self) -> None:
        """Park the kernel (pause word); returns once it has acknowledged.

        Raises :class:`~pdc_core.ActorStopped` if the actor is not running. A caller
        already cancelled on entry pauses nothing; cancelled while it waits for the
        acknowledgement, the pause stays requested and the kernel parks.
        """
        await full_checkpoint(current_kit())  # a checkpoint, as every lifecycle call
        try:
            session = self._open_session()
            await session.pause()
        except ActorStopped as exc:
            await cancellation_first()
            raise self._stopped(exc) from exc.__cause__

    async def resume(self) -> None:
        """Let a paused kernel go on; returns once it has left its pause.

        Raises :class:`~pdc_core.ActorStopped` if the actor is not running. A caller
        already cancelled on entry resumes nothing; cancelled while it waits, the
        resume stays requested and the kernel goes on.
        """
        await full_checkpoint(current_kit())
        try:
            session = self._open_session()
            await session.resume()
        except ActorStopped as exc:
            await cancellation_first()
            raise self._stopped(exc) from exc.__cause__

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        """Stop the kernel (stop word) and wait until the actor has stopped.

        ``timeout`` bounds the wait for the kernel's done word (default: the actor's
        ``stop_timeout``); a kernel that does not stop in time crashes the actor with
        :class:`~pdc_core.KernelStopTimeout`. Idempotent. A caller already cancelled on
        entry stops nothing; cancelled while it waits, the stop it requested goes on.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        await full_checkpoint(current_kit())  # a pending cancellation stops nothing
        self._runner.request_stop(drain=drain, timeout=timeout)
        await self._runner.finished.wait()

    async def wait(self) -> None:
        await full_checkpoint(current_kit())
        await self._runner.finished.wait()

    def statistics(self) -> ActorStatistics:
        runner = self._runner
        handled = runner.handled_before
        if runner.session is not None:
            handled += runner.session.statistics().replied
        return ActorStatistics(
            actor_id=self.actor_id,
            state=self.state,
            handled=handled,
            errors=runner.errors,
            restarts=runner.restarts,
            skipped=0,
            mailbox=None,
        )


def _records(
    messages: npt.NDArray[Any] | Iterable[RecordLike], kernel: PersistentKernelSpec
) -> npt.NDArray[Any]:
    """A batch the session can coerce: arrays pass through, iterables become lists."""
    if isinstance(messages, np.ndarray):
        return messages
    return np.array(list(messages), dtype=kernel.request_dtype)


class _RestartWait:
    """A caller waiting for the actor's next incarnation, counted in the runner's
    ``waiting`` until :meth:`went_on` (idempotent); the last one to go on tells a
    draining nursery (``on_idle``)."""

    __slots__ = ("_runner",)

    def __init__(self, runner: PersistentKernelActor) -> None:
        self._runner: PersistentKernelActor | None = runner
        runner.waiting += 1

    def went_on(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        runner.waiting -= 1
        if not runner.waiting and runner.on_idle is not None:
            runner.on_idle()


class PersistentKernelActor(ActorRunner, Generic[ReqT, RepT]):
    """Runs a :class:`~pdc_core.PersistentKernel` as an actor of an actor nursery.

    Pass it to :meth:`ActorNursery.start_actor`; ``start_actor(kernel)`` with a bare
    kernel is the same as ``start_actor(PersistentKernelActor(kernel))``. ``backend``
    is a :class:`~pdc_core.Backend` or a name (default: the best available), chosen
    and checked here: a backend without persistent kernels or a kernel without a body
    for it raises at once (``CapabilityError``, ``KernelBodyMissing``);
    ``name`` is the actor id (default: the kernel's name); ``launch_timeout`` bounds
    the start handshake and ``stop_timeout`` every stop; ``paused=True`` starts the
    kernel paused; ``options`` go to the backend's ``launch_persistent_kernel``.
    Under a :class:`~pdc_core.RestartPolicy` each incarnation launches a fresh kernel.

    Types: ``PersistentKernelActor(kernel)`` for a ``PersistentKernel[ReqT, RepT]`` is a
    ``PersistentKernelActor[ReqT, RepT]``, and ``start_actor`` returns its handle as a
    ``KernelActorRef[ReqT, RepT]``.
    """

    #: The handle class :attr:`ref` is made from (a subclass may extend the handle).
    ref_type: type[KernelActorRef[Any, Any]] = KernelActorRef

    def __init__(
        self,
        kernel: PersistentKernelSpec[ReqT, RepT],
        backend: Backend | str | None = None,
        *,
        name: str | None = None,
        launch_timeout: float = 10.0,
        stop_timeout: float = 5.0,
        receive_window: int | None = None,
        paused: bool = False,
        **options: Any,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"an actor name must be a non-empty str, not {name!r}")
        launch_timeout = seconds_or_inf(check_duration(launch_timeout, "launch_timeout"))
        # The session's options are refused here, not when the nursery starts the actor.
        receive_window, stop_timeout, _, _ = _check_session_options(
            receive_window,
            stop_timeout,
            options.get("wait", "sleep"),
            options.get("spin_limit", DEFAULT_SPIN_LIMIT),
        )
        self._backend = backend_for(kernel, backend)
        self.kernel = kernel
        self.actor_id = name if name is not None else kernel.name
        self._launch_timeout = launch_timeout
        self._stop_timeout = stop_timeout
        self._receive_window = receive_window
        self._paused = paused
        self._options = options
        self._ref: KernelActorRef[ReqT, RepT] = self.ref_type(self)
        self.session: PersistentKernelSession[Any, Any] | None = None
        self.stop_requested = False
        self._drain = False
        self.restarting = False
        self.finished = anyio.Event()
        #: Set (and replaced) whenever an incarnation starts or ends: what requests
        #: sent during a restart wait for. ``waiting``: how many wait.
        self.changed = anyio.Event()
        self.waiting = 0
        #: A draining nursery's callback, called when the last waiting request goes on.
        self.on_idle: Callable[[], None] | None = None
        self.final_state: ActorState | None = None
        self.final_error: Callable[[], ActorStopped] | None = None
        self.handled_before = 0
        self.errors = 0
        self.restarts = 0

    @property
    def ref(self) -> KernelActorRef[ReqT, RepT]:
        return self._ref

    def _changed(self) -> None:
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    def begin_drain(self, on_idle: Callable[[], None], is_member: Callable[[object], bool]) -> None:
        self.on_idle = on_idle

    @property
    def idle(self) -> bool:
        """Idle unless requests sent during a restart wait for the next incarnation."""
        return not self.waiting

    def unfinished(self) -> int:
        return self.waiting

    def request_stop(self, *, drain: bool, timeout: float | None) -> None:
        """Ask the running kernel to stop (the serving loop sends the stop word).

        A stop without ``drain`` after one with ``drain`` escalates: the kernel stops
        after the batch in hand instead of answering everything published. ``timeout``
        counts from when the serving loop begins the stop (a later value is ignored).
        """
        if timeout is not None:
            if timeout < 0:
                raise ValueError(f"timeout must be >= 0 seconds, not {timeout!r}")
            self._stop_timeout = timeout
        session = self.session
        if not self.stop_requested:
            self.stop_requested = True
            self._drain = drain
        elif self._drain and not drain:
            self._drain = False
            if session is not None:
                session.resident.request_stop(StopMode.NOW)  # NOW wins over DRAIN
        else:
            return
        if session is not None:
            session.notify_changed()  # wake the serving loop, which watches the ring

    async def start_session(self) -> PersistentKernelSession[Any, Any]:
        """Launch the kernel and return its session once it is resident (a subclass
        running something else as one kernel, such as a pipeline, overrides it).

        Raises and cancels as :meth:`PersistentKernelSession.start` does: cancelled
        while it waits for the kernel, it stops the kernel before the cancellation
        propagates.
        """
        return await PersistentKernelSession.start(
            self.kernel,
            self._backend,
            launch_timeout=self._launch_timeout,
            receive_window=self._receive_window,
            stop_timeout=self._stop_timeout,
            **self._options,
        )

    async def run(self, started: Callable[[], None]) -> None:
        self._ref._bind_kit(current_kit())
        session = await self.start_session()
        self.session = session
        self.restarting = False
        self._changed()  # requests sent during the restart go to this incarnation
        try:
            if self._paused:
                await session.pause()
            started()
            # Watch the ring (callers lead it), so a crash is seen without any request.
            await session.watch_until(lambda: self.stop_requested)
        finally:
            # Shielded and bounded by the timeout; raises KernelStopTimeout (a crash).
            await session._stop(self._stop_timeout, drain=self._drain)
        if session.error is not None:
            raise session.error

    def on_crash(self, error: Exception, *, restarting: bool) -> None:
        self.errors += 1
        if restarting:
            self.restarts += 1
            self.restarting = True
            if self.session is not None:
                self.handled_before += self.session.statistics().replied
        self._changed()

    def finalize(self, error: BaseException | None) -> None:
        self.stop_requested = True
        actor_id = self.actor_id
        if isinstance(error, ActorCrashed):
            crash = error
            self.final_state = ActorState.CRASHED

            def crashed() -> ActorStopped:
                return ActorCrashed(actor_id, crash.cause)

            self.final_error = crashed
        else:
            self.final_state = ActorState.STOPPED

            def stopped() -> ActorStopped:
                return ActorStopped(f"actor {actor_id!r} is stopped", actor_id=actor_id)

            self.final_error = stopped
        self._changed()
        self.finished.set()


@runner_for.register(PersistentKernelSpec)
def _kernel_runner(
    target: PersistentKernelSpec, /, args: tuple[Any, ...], options: StartOptions
) -> PersistentKernelActor:
    """``start_actor(kernel)``: the kernel on the best available backend."""
    if args:
        raise TypeError("positional arguments do not apply to a PersistentKernel")
    return PersistentKernelActor(target, name=options.name, paused=options.paused)
