"""Persistent kernels in the seed facade: ``runtime.launch(kernel_id, persistent_kernel)``.

:meth:`RingKernelRuntime.launch <pdc_core.RingKernelRuntime.launch>` given a
:class:`~pdc_core.PersistentKernel` (instead of an ``async def f(ctx)`` function)
launches it on a backend as an actor of the runtime's nursery and returns a
:class:`PersistentRingKernel`, which the runtime drives by id like any ring kernel::

    async with RingKernelRuntime() as runtime:
        await runtime.launch("double", double, backend="cpu")   # resident, paused
        await runtime.activate("double")
        await runtime.send("double", (1, 2.0))                   # a request record
        reply = await runtime.receive("double")                  # its reply record
        reply = await runtime.ask("double", (2, 3.0))            # matched by ring order

How the lifecycle maps onto the ring's control words:

* ``launch`` returns once the kernel is resident and parked (pause word): state
  LAUNCHED. Requests sent now wait in the ring (and sends wait when it is full).
* ``activate``/``reactivate`` clear the pause word and ``deactivate`` sets it; each
  returns once the kernel has acknowledged.
* ``terminate(timeout)`` asks the kernel to drain (stop word ``DRAIN``; a drain overrides
  a pause), waits up to ``timeout`` seconds, then stops it after the batch in hand
  (``NOW``): requests it never consumed fail their callers with
  :class:`~pdc_core.ActorStopped` and are counted as ``messages_discarded``. A kernel
  that has not stopped ``stop_timeout`` seconds after that crashes with
  :class:`~pdc_core.KernelStopTimeout`; nothing hangs.
* A kernel that reports an error (error word) is a crash: the runtime's ``async with``
  raises :class:`~pdc_core.ActorCrashed`, as for a kernel function that raises.

Messages are records of the kernel's ``request_dtype`` (tuples, structured scalars or
one-record arrays); a wrong record raises :class:`~pdc_core.RecordError` before
anything is written. Replies are records of its ``reply_dtype``: ``receive`` returns
replies to ``send`` in order, ``ask`` returns the reply to its own request (matched by
ring order, so records need no id). ``priority`` is validated but the ring is FIFO.
"""

# ruff: noqa: ASYNC109
# ``timeout`` parameters are the seed API.

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio

from ..._exceptions import ActorStopped, KernelStateError, MessageTimeout
from ..._persistent import KernelActorRef, PersistentKernelActor
from ...lowlevel import (
    TIMED_OUT,
    ActorRunner,
    ActorState,
    cancel_called,
    cancellation_first,
    check_priority,
    check_timeout,
    current_kit,
    full_checkpoint,
    raise_cancelled,
    seconds_or_inf,
)
from ._lifecycle import RECEIVE_STATES, KernelState, terminate_within
from ._telemetry import KernelTelemetry, Telemetry

if TYPE_CHECKING:
    from ...backend import Backend, PersistentKernelSpec

__all__ = ["PersistentRingKernel", "launch_persistent"]

_SEND_STATES = (KernelState.LAUNCHED, KernelState.ACTIVE, KernelState.DEACTIVATED)
_SEND_ALLOWED = ", ".join(state.name for state in _SEND_STATES)


class PersistentRingKernel(KernelActorRef):
    """A persistent kernel launched by :class:`~pdc_core.RingKernelRuntime`.

    The seed facade's view of a persistent-kernel actor: besides the
    :class:`~pdc_core.KernelActorRef` API (``ask``, ``ask_batch``, ``tell_many``...)
    it has the ring-kernel lifecycle (:attr:`kernel_state`, ``activate``...),
    ``send``/``receive`` with timeouts, and :meth:`telemetry`. See the module
    documentation for how the lifecycle maps onto the control words.
    """

    __slots__ = ()

    _runner: _RuntimeKernelActor

    # -- introspection ------------------------------------------------------------------

    @property
    def kernel_id(self) -> str:
        """The id it was launched under."""
        return self.actor_id

    @property
    def kernel_state(self) -> KernelState:
        """The ring-kernel lifecycle state, derived from the actor's and the ring's."""
        runner = self._runner
        if runner.final_state is not None:
            return (
                KernelState.FAILED
                if runner.final_state is ActorState.CRASHED
                else KernelState.TERMINATED
            )
        if runner.stop_requested:
            return KernelState.TERMINATING
        state = self.state
        if state is ActorState.RUNNING:
            return KernelState.ACTIVE
        return KernelState.DEACTIVATED if runner.activated else KernelState.LAUNCHED

    @property
    def _finished(self) -> bool:
        return self._runner.final_state is not None

    def telemetry(self) -> Telemetry:
        """A snapshot of the kernel's counters, from its session's statistics.

        ``latency_*`` time ``ask`` round trips (every one); ``queue_wait_*`` are not
        measured (0). ``queue_depth`` counts requests in the ring not yet answered,
        ``output_depth`` replies to ``send`` not yet received.
        """
        runner = self._runner
        recorder = runner.recorder
        session = runner.session
        sent = replied = discarded = unreceived = 0
        if session is not None:
            statistics = session.statistics()
            sent, replied = statistics.sent, statistics.replied
            discarded = statistics.unprocessed
            unreceived = session.collected_replies
        return recorder.snapshot(
            self.kernel_state.name,
            received=runner.handled_before + sent,
            processed=runner.handled_before + replied,
            sent=runner.handled_before + replied,
            dropped=0,
            rejected=0,
            discarded=discarded,
            queue_depth=sent - replied - discarded,
            output_depth=unreceived,
            error_count=runner.errors,
        )

    # -- lifecycle ----------------------------------------------------------------------

    def _state_error(self, operation: str, allowed: str) -> KernelStateError:
        return KernelStateError(self.kernel_id, self.kernel_state.name, operation, allowed=allowed)

    def _require(self, operation: str, *allowed: KernelState) -> None:
        if self.kernel_state not in allowed:
            raise self._state_error(operation, ", ".join(state.name for state in allowed))

    async def activate(self) -> None:
        """LAUNCHED -> ACTIVE: clear the pause word; returns once the kernel runs.

        Raises :class:`~pdc_core.KernelStateError` in any other state. A caller
        already cancelled on entry changes nothing; cancelled while it waits, the
        resume stays requested and the kernel goes on.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        self._require("activate", KernelState.LAUNCHED)
        await self.resume()

    async def deactivate(self) -> None:
        """ACTIVE -> DEACTIVATED: park the kernel; requests wait in the ring.

        Raises :class:`~pdc_core.KernelStateError` in any other state. A caller
        already cancelled on entry changes nothing; cancelled while it waits for the
        kernel to park, the pause stays requested and the kernel parks.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        self._require("deactivate", KernelState.ACTIVE)
        await self.pause()

    async def reactivate(self) -> None:
        """DEACTIVATED -> ACTIVE: let the parked kernel go on.

        Errors and cancellation as for :meth:`activate`.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        self._require("reactivate", KernelState.DEACTIVATED)
        await self.resume()

    async def pause(self) -> None:
        """Park the kernel, whatever its lifecycle state (:meth:`deactivate` checks
        it); raises and cancels as :meth:`KernelActorRef.pause
        <pdc_core.KernelActorRef.pause>` does, and marks the telemetry inactive."""
        await full_checkpoint(current_kit())  # a checkpoint on every path
        await super().pause()
        self._runner.recorder.set_active(False)

    async def resume(self) -> None:
        """Let the kernel go on, whatever its lifecycle state (:meth:`activate` and
        :meth:`reactivate` check it); raises and cancels as
        :meth:`KernelActorRef.resume <pdc_core.KernelActorRef.resume>` does, and marks
        the telemetry active."""
        await full_checkpoint(current_kit())  # a checkpoint on every path
        await super().resume()
        self._runner.activated = True
        self._runner.recorder.set_active(True)

    def _request_terminate(self, timeout: float) -> None:
        # Drain now; _force_terminate escalates after ``timeout``, and the stop then
        # has ``stop_timeout`` seconds more before it is a KernelStopTimeout crash.
        self._runner.request_stop(drain=True, timeout=timeout + self._runner.stop_timeout)

    def _force_terminate(self) -> None:
        self._runner.request_stop(drain=False, timeout=None)

    async def terminate(self, timeout: float = 5.0) -> None:
        """Drain for up to ``timeout`` seconds, then stop; returns once it has stopped.

        Idempotent. See the module documentation for what happens to requests. A
        caller already cancelled on entry terminates nothing; cancelled while it
        waits, the stop it requested goes on.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        timeout = seconds_or_inf(check_timeout(timeout))  # 10**400: inf
        await terminate_within(self, timeout)

    # -- messages -----------------------------------------------------------------------

    async def send(
        self, message: Any, *, timeout: float | None = None, priority: int | None = None
    ) -> None:
        """Publish one request record; its reply is returned by :meth:`receive`.

        Waits while the ring is full, at most ``timeout`` seconds
        (:class:`~pdc_core.MessageTimeout`). Raises
        :class:`~pdc_core.KernelStateError` unless LAUNCHED, ACTIVE or DEACTIVATED. A
        caller already cancelled on entry sends nothing, and cancelling the wait for
        room leaves the record unsent.
        """
        if cancel_called():
            await raise_cancelled()
        if timeout is not None:
            timeout = check_timeout(timeout)
        if priority is not None:
            check_priority(priority)
        if self.kernel_state not in _SEND_STATES:
            await cancellation_first()  # a cancelled sender ends cancelled
            self._require("send to", *_SEND_STATES)
        try:
            session = self._open_session()
            if timeout is None:
                await session.send(message)
                return
            with anyio.move_on_after(timeout):
                await session.send(message)
                return
        except ActorStopped:
            await cancellation_first()
            raise self._state_error("send to", _SEND_ALLOWED) from None
        raise MessageTimeout(f"kernel {self.kernel_id!r}: input ring still full after {timeout} s")

    async def receive(self, timeout: float | None = None) -> Any:
        """The next reply to :meth:`send`, in order.

        Raises :class:`~pdc_core.MessageTimeout` after ``timeout`` seconds, and
        :class:`~pdc_core.KernelStateError` once the kernel has stopped and every
        reply it published has been received. A caller already cancelled on entry
        takes nothing, and a cancelled wait takes nothing: the reply stays for the
        next receive.
        """
        if cancel_called():
            await raise_cancelled()
        if timeout is not None:
            timeout = check_timeout(timeout)
        session = self._runner.session
        assert session is not None  # the runtime returns the handle once it has started
        try:
            if timeout is None:
                return await session.receive()
            with anyio.move_on_after(timeout):
                return await session.receive()
        except ActorStopped:
            await cancellation_first()
            raise self._state_error("receive from", RECEIVE_STATES) from None
        raise MessageTimeout(f"nothing received from kernel {self.kernel_id!r} within {timeout} s")

    async def _request(self, message: Any, priority: int, timeout: float | None) -> Any:
        """Send one request and return its reply (every round trip is timed)."""
        started = time.perf_counter_ns()
        reply = await super()._request(message, priority, timeout)
        if reply is not TIMED_OUT:
            self._runner.recorder.latency.record(time.perf_counter_ns() - started)
        return reply

    def __repr__(self) -> str:
        return f"<PersistentRingKernel {self.kernel_id!r} {self.kernel_state.name}>"


class _RuntimeKernelActor(PersistentKernelActor):
    """A persistent-kernel actor launched paused, as the runtime's kernels are."""

    ref_type = PersistentRingKernel

    def __init__(self, kernel_id: str, *args: Any, telemetry: bool, **kwargs: Any) -> None:
        super().__init__(*args, name=kernel_id, paused=True, **kwargs)
        self.activated = False
        self.recorder = KernelTelemetry(kernel_id, enabled=telemetry)

    @property
    def ref(self) -> PersistentRingKernel:
        assert isinstance(self._ref, PersistentRingKernel)
        return self._ref

    @property
    def stop_timeout(self) -> float:
        return self._stop_timeout

    def on_crash(self, error: Exception, *, restarting: bool) -> None:
        super().on_crash(error, restarting=restarting)
        self.recorder.error(error)
        if restarting:
            self.activated = False  # the next incarnation starts parked again

    def finalize(self, error: BaseException | None) -> None:
        self.recorder.set_active(False)
        super().finalize(error)


def launch_persistent(
    kernel_id: str,
    kernel: PersistentKernelSpec,
    backend: Backend | str | None,
    *,
    telemetry: bool,
    **options: Any,
) -> tuple[PersistentRingKernel, ActorRunner]:
    """The handle and runner ``RingKernelRuntime.launch`` starts for a persistent kernel."""
    runner = _RuntimeKernelActor(kernel_id, kernel, backend, telemetry=telemetry, **options)
    return runner.ref, runner
