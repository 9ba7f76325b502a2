"""The keeper's side of a remote actor: the tasks each incarnation runs.

One of the two sides of :class:`pdc_ray.RemoteRunner`, over the fields
:class:`~pdc_ray._runner_state.RunnerState` declares. While an incarnation runs,
``window`` shipper tasks each take what waits in the local mailbox, in priority order
(FIFO within a priority), give it the next sequence number and ship it as one engine
call; the host hands batches to the actor in sequence order, so the order decided
here holds across a wire that reorders calls. A shipper takes from the mailbox only
when it has no call in flight, and at most ``window`` calls are on the wire at once,
so everything else waits here, in priority order. Beside them: the watch (the host's
end), the heartbeat, the cancellations of requests whose callers gave up, the
adopter of direct calls whose callers stopped waiting, the stopper, and the closer,
which ends the incarnation once it is over and the replies on their way are in.
"""

from __future__ import annotations

import anyio

from pdc_core import ActorCrashed, ActorStopped, MailboxClosed

from ._errors import RemoteActorLost
from ._runner_state import RunnerState, _Request
from ._wire import CRASHED

__all__ = ["KeeperSide"]

#: The slices a heartbeat's wait is made of (see :meth:`KeeperSide._beat`): a stall of
#: this process ends one slice, not the whole wait.
_BEAT_SLICES = 4


class KeeperSide(RunnerState):
    """The tasks of each incarnation (see the module's docstring); the runner's
    ``run`` starts them."""

    async def _closer(self, scope: anyio.CancelScope) -> None:
        """Once the incarnation is over, let the replies already on their way arrive
        (the host answered every batch before it reported the end), then stop."""
        await self._ending.wait()
        with anyio.move_on_after(self._heartbeat):
            await self._quiet.wait()
        scope.cancel()

    async def _watch(self, actor: object) -> None:
        try:
            code, failure = await self._engine.watch(actor)
        except RemoteActorLost as exc:
            self._end(exc, lost=True)
            return
        except Exception as exc:  # the engine failed: treat as lost
            self._end(RemoteActorLost(f"watching remote actor {self.actor_id!r} failed: {exc}"))
            return
        if code == CRASHED:
            assert failure is not None
            self._end(self._unpack(failure))
        else:
            self._end(None)

    async def _beat(self, actor: object) -> None:
        """The heartbeat: a control call every third of ``heartbeat`` that must be
        answered within ``heartbeat`` seconds, else the actor is lost.

        The wait is ``_BEAT_SLICES`` fresh deadlines of ``heartbeat / _BEAT_SLICES``
        each, one after another on the same call. A stall of this process (its event
        loop not running: load, a blocking call) that outlasts a deadline ends only
        that slice: the next one starts once the loop runs again, and takes the answer
        that came meanwhile or comes once the loop has turned. So the worker is lost
        only when its answer is missing through ``heartbeat`` seconds of deadlines this
        loop kept, never for this process's own stall; a healthy loop still declares a
        silent worker lost ``heartbeat`` seconds after the ping.
        """
        interval = self._heartbeat / 3
        step = self._heartbeat / _BEAT_SLICES
        while True:
            await anyio.sleep(interval)
            try:
                ping = self._engine.submit(actor, "ping", control=True)
                for _ in range(_BEAT_SLICES):
                    with anyio.move_on_after(step):
                        await ping.result()  # a cancelled wait may be taken up again
                        break
                else:
                    self._end(
                        RemoteActorLost(
                            f"remote actor {self.actor_id!r} missed its heartbeat "
                            f"({self._heartbeat:g} s without an answer)"
                        ),
                        lost=True,
                    )
                    return
            except RemoteActorLost as exc:
                self._end(exc, lost=True)
                return

    async def _cancels(self, actor: object) -> None:
        """Ship the cancellations of requests whose callers gave up."""
        while True:
            await self._cancel_wake.wait()
            self._cancel_wake = anyio.Event()
            ids, self._to_cancel = self._to_cancel, []
            if ids:
                try:
                    await self._engine.call(actor, "cancel", ids, control=True)
                except RemoteActorLost:
                    return  # the watch reports it

    async def _adopt(self) -> None:
        """Collect the answers to direct calls whose callers stopped waiting."""
        while True:
            await self._orphan_wake.wait()
            self._orphan_wake = anyio.Event()
            orphan, self._orphan = self._orphan, None
            if orphan is not None:
                await self._collect(*orphan)

    async def _stopper(self, actor: object) -> None:
        """Carry a stop request to the host: a draining one once everything queued
        here has been shipped and answered."""
        while self._stop is None:
            self._stop_wake = anyio.Event()
            await self._stop_wake.wait()
        try:
            if self._stop:
                await self._engine.call(actor, "resume", control=True)  # draining resumes
                await self._shipped_all.wait()
                await self._wait_for_room(1)  # and the answers to direct calls are in
            await self._engine.call(actor, "stop", bool(self._stop), control=True)
        except RemoteActorLost:
            return  # the watch reports it

    async def _ship(self, actor: object) -> None:
        """One of ``window`` shippers: take what waits (by priority), ship, repeat."""
        mailbox = self._mailbox
        try:
            while True:
                # One shipper at a time waits on the mailbox and numbers what it took:
                # the mailbox hands an item to the receiver waiting for it (anyio's
                # hand-off), so two waiting shippers would split the ordered stream
                # between them before _sequence numbers it.
                async with self._taking:
                    self._parked = True
                    try:
                        taken = await mailbox.receive_many(self._max_batch)
                    except MailboxClosed:
                        return
                    finally:
                        self._parked = False
                    requests = [request for request in taken if isinstance(request, _Request)]
                    if self._ending.is_set():
                        # This incarnation is over: what was taken goes back, in order,
                        # for the next one (or for finalize to fail).
                        for request in reversed(requests):
                            mailbox.requeue(request, request.priority)
                        return
                    batch: list[_Request] = []
                    for request in requests:
                        reply = request.reply
                        if reply is not None and reply.abandoned:
                            self.skipped += 1
                        else:
                            batch.append(request)
                    if not batch:
                        continue
                    seq = self._sequence(batch)
                await self._wait_for_room(self._window)  # a caller's direct call holds one
                sent = self._submit(actor, seq, batch)
                if sent is None:
                    return
                await self._collect(seq, *sent)
        finally:
            self._shippers -= 1
            if not self._shippers:
                self._shipped_all.set()

    def _fail_inflight(self) -> None:
        inflight, self._inflight = self._inflight, {}
        if not inflight:
            return
        cause = self._cause
        for batch in inflight.values():
            for request in batch:
                if request.reply is None:
                    continue
                if cause is not None:
                    request.reply.fail(ActorCrashed(self.actor_id, cause))
                else:
                    request.reply.fail(
                        ActorStopped(
                            f"actor {self.actor_id!r} stopped before replying",
                            actor_id=self.actor_id,
                        )
                    )
