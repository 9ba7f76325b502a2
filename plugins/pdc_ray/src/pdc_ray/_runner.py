"""A remote actor's runner: the caller's side and the keeper's side, started and ended.

:class:`RemoteRunner` is the :class:`~pdc_core.lowlevel.ActorRunner` a placement such
as :func:`pdc_ray.on` makes, and :class:`RemoteActorRef` the handle users hold. The
caller's nursery supervises the runner like any other actor; each incarnation of it is
one host process created through an :class:`~pdc_ray.Engine` (a Ray actor).

The runner is split by role, as mixins over one state (every field an attribute of
the runner: no extra hop per message):

* :mod:`pdc_ray._runner_state` declares the fields and holds the wire both sides use
  (sequence numbers, the ``deliver`` calls, handing out answers, the end of an
  incarnation);
* :mod:`pdc_ray._runner_caller`, the caller's side: the local mailbox's entry points,
  a lone ``ask`` shipped by its caller, replies, giving up, control calls;
* :mod:`pdc_ray._runner_keeper`, the keeper's side: the tasks each incarnation runs
  (shippers, watch, heartbeat, cancellations, stop);
* this module starts and ends each incarnation (the handshake, the kill, the
  nursery's ``on_crash`` and ``finalize``).

The guarantees are documented at the public name, :class:`pdc_ray.RemoteRunner`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from pdc_core import ActorCrashed, ActorState, ActorStopped

from ._bridge import loop_inbox
from ._errors import PlacementTimeout
from ._runner_caller import CallerSide, RemoteActorRef
from ._runner_keeper import KeeperSide
from ._runner_state import _log
from ._wire import OK

__all__ = ["RemoteActorRef", "RemoteRunner"]


class RemoteRunner(CallerSide, KeeperSide):
    """Runs one remote actor for its nursery: the caller's side of it.

    Guarantees:

    * **Start is a handshake.** ``start_actor`` returns once the remote ``on_start`` has
      run. A failure raises ``ActorCrashed(... while starting)`` with the original
      cause; a placement not satisfied within ``start_timeout`` fails with a
      :class:`~pdc_ray.PlacementTimeout` cause. Either way the host process is killed
      and confirmed dead before ``start_actor`` raises.
    * **The remote actor lives no longer than its nursery.** On a normal exit it drains
      and stops; on every exit (clean, crash, cancellation) the host process is killed
      and the runner waits until the engine reports it dead, at most ``kill_timeout``
      seconds (then it logs a warning and gives up waiting).
    * **Crashes and losses surface.** A remote exception is the ``cause`` of the
      nursery's :class:`~pdc_core.ActorCrashed`, with its original type and the remote
      traceback in its notes (:class:`~pdc_ray.RemoteError` when it cannot be rebuilt
      here). A dead process, or one that misses its heartbeat (``heartbeat`` seconds,
      3 by default), is a crash caused by :class:`~pdc_ray.RemoteActorLost`.
    * **No request is left hanging.** Every ``ask`` ends with its reply,
      :class:`~pdc_core.MessageTimeout`, or an error: ``ActorCrashed`` for requests in
      flight when the actor crashed or was lost (they may or may not have been handled:
      delivery is at most once), ``ActorStopped`` when it stopped first,
      :class:`~pdc_core.MessageDropped` when a ``"drop_oldest"`` mailbox evicted it.
      Under a :class:`~pdc_core.RestartPolicy` the requests still queued here are handled
      by the next incarnation.
    * **Cancellation leaves nothing behind.** A cancelled (or timed-out) ``ask`` whose
      request was shipped is cancelled remotely: the host skips it if the actor has not
      got it yet. No task or callback outlives the runner.
    """

    def __repr__(self) -> str:
        return f"<RemoteRunner {self.actor_id!r} on {self._engine!r} {self.state.value}>"

    # -- the nursery's side: start and end each incarnation ------------------------------

    async def run(self, started: Callable[[], None]) -> None:
        self._reset()
        try:
            await self._start()
            if self.state is not ActorState.STOPPING:
                self.state = ActorState.PAUSED if self._mailbox.paused else ActorState.RUNNING
            started()
            actor = self._actor
            assert actor is not None
            self._inbox = loop_inbox()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._watch, actor)
                tg.start_soon(self._closer, tg.cancel_scope)
                tg.start_soon(self._beat, actor)
                tg.start_soon(self._cancels, actor)
                tg.start_soon(self._stopper, actor)
                tg.start_soon(self._adopt)
                self._shippers = self._window
                for _ in range(self._window):
                    tg.start_soon(self._ship, actor)
            if self._cause is not None:
                raise self._cause
        finally:
            self._tg = None
            self.location = None
            self._fail_inflight()
            if self._actor is not None:
                await self._kill(self._actor)
                self._actor = None

    async def _start(self) -> None:
        """Create the host and complete the handshake, within ``start_timeout``."""
        engine = self._engine
        outcome: tuple[int, Any] | None = None
        with anyio.move_on_after(self._start_timeout) as scope:
            self._actor = await engine.create(self._spec, self._placement)
            outcome = await engine.call(self._actor, "start")
        if outcome is None:
            assert scope.cancelled_caught
            raise PlacementTimeout(
                f"remote actor {self.actor_id!r} was not started within {self._start_timeout:g} s"
                f" (start_timeout) on {self._engine!r}; can the cluster satisfy "
                f"{self._placement!r}?"
            )
        code, payload = outcome
        if code != OK:
            raise self._unpack(payload)
        self.location = payload

    async def _kill(self, actor: object) -> None:
        """Kill the host process and wait until the engine reports it dead (bounded)."""
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self._kill_timeout) as scope:
                await self._engine.kill(actor)
            if scope.cancelled_caught:
                _log.warning(
                    "remote actor %r: %r did not report its process dead within %g s "
                    "(kill_timeout); no longer waiting",
                    self.actor_id,
                    self._engine,
                    self._kill_timeout,
                )

    def on_crash(self, error: Exception, *, restarting: bool) -> None:
        self.errors += 1
        if restarting:
            self.restarts += 1
            self.state = ActorState.RESTARTING

    def finalize(self, error: BaseException | None) -> None:
        if isinstance(error, ActorCrashed):
            self.state = ActorState.CRASHED
            self._crash = error
            crash = error

            def failure() -> ActorStopped:
                return ActorCrashed(self.actor_id, crash.cause)

        else:
            self.state = ActorState.STOPPED
            reason = "was cancelled" if error is not None else "stopped"

            def failure() -> ActorStopped:
                return ActorStopped(
                    f"actor {self.actor_id!r} {reason} before replying", actor_id=self.actor_id
                )

        mailbox = self._mailbox
        mailbox.close()
        for request in mailbox.discard():
            if request.reply is not None:
                request.reply.fail(failure())
        self.finished.set()
