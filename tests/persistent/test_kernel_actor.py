"""Persistent kernels as actors of an actor nursery (CPU backend: a worker thread)."""

# ruff: noqa: PT012

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest
from support.held_batch import HeldBatch

from pdc_core import (
    ActorCrashed,
    ActorRef,
    ActorState,
    ActorStopped,
    KernelActorRef,
    KernelBodyMissing,
    KernelStopTimeout,
    MessageTimeout,
    PersistentKernel,
    PersistentKernelActor,
    PersistentKernelError,
    RecordError,
    RestartPolicy,
    open_nursery,
)
from pdc_core.testing import settle_threads, thread_count

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)
LIMIT = 10


def double(requests: Any) -> Any:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    if (requests["x"] < 0).any():
        raise ValueError("negative input")
    return replies


def make_kernel(name: str = "double", body: Callable[[Any], Any] = double) -> PersistentKernel:
    return PersistentKernel(name, REQ, REP, capacity=16, bodies={"cpu": body})


def records(start: int, count: int) -> Any:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(start, start + count)
    out["x"] = np.arange(start, start + count) * 0.5
    return out


def state_of(ref: ActorRef[Any, Any]) -> ActorState:
    return ref.state


async def test_kernel_actor_tell_ask_batches_pause_and_stop() -> None:
    baseline = thread_count()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(make_kernel())
        assert isinstance(ref, KernelActorRef)
        assert ref.actor_id == "double"
        assert ref.state is ActorState.RUNNING  # resident: start was a handshake
        assert thread_count() == baseline + 1
        reply = await ref.ask((1, 2.0))
        assert (int(reply["id"]), float(reply["y"])) == (1, 4.0)
        await ref.tell((2, 1.0))
        await ref.tell_many(records(3, 40))  # larger than the ring: written in pieces
        replies = await ref.ask_batch(records(100, 50))
        assert list(replies["id"]) == list(range(100, 150))
        assert list(replies["y"]) == [x * 1.0 for x in range(100, 150)]
        many = await ref.ask_many([(7, 3.0), (8, 4.0)], timeout=5)
        assert [float(r["y"]) for r in many] == [6.0, 8.0]
        assert ref.statistics().handled == 1 + 1 + 40 + 50 + 2

        await ref.pause()
        assert state_of(ref) is ActorState.PAUSED
        with pytest.raises(MessageTimeout):
            await ref.ask((9, 1.0), timeout=0.05)  # parked: nothing is answered
        await ref.resume()
        assert state_of(ref) is ActorState.RUNNING
        assert float((await ref.ask((10, 5.0)))["y"]) == 10.0

        with pytest.raises(ValueError, match="priority"):
            await ref.tell((11, 1.0), priority=300)
        await ref.stop()
        assert state_of(ref) is ActorState.STOPPED
        assert not ref.alive
        for op in (
            ref.ask((1, 1.0)),
            ref.tell((1, 1.0)),
            ref.pause(),
            ref.ask_batch(records(0, 2)),
        ):
            with pytest.raises(ActorStopped, match="'double' is stopped"):
                await op
        await ref.stop()  # idempotent
    await settle_threads(baseline, within=2)


async def test_runner_with_backend_name_and_nursery_exit_stops_it() -> None:
    baseline = thread_count()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(
            PersistentKernelActor(make_kernel(), "cpu", name="k1", paused=True)
        )
        other = await nursery.start_actor(PersistentKernelActor(make_kernel(), name="k2"))
        assert state_of(ref) is ActorState.PAUSED
        await ref.resume()
        assert float((await ref.ask((1, 1.5)))["y"]) == 3.0
        assert float((await other.ask((1, 2.5)))["y"]) == 5.0
    assert ref.state is ActorState.STOPPED
    assert other.state is ActorState.STOPPED
    await settle_threads(baseline, within=2)


async def test_body_error_crashes_the_nursery() -> None:
    baseline = thread_count()
    caught: list[BaseException] = []
    with pytest.raises(ActorCrashed) as info:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(PersistentKernelActor(make_kernel(), name="neg"))
            try:
                await ref.ask((1, -1.0))
            except ActorCrashed as exc:
                caught.append(exc)
                raise
    assert info.value.actor_id == "neg"
    assert isinstance(info.value.cause, PersistentKernelError)
    assert "negative input" in str(info.value)
    (crash,) = caught
    assert isinstance(crash, ActorCrashed)
    assert crash.actor_id == "neg"
    assert ref.state is ActorState.CRASHED
    with pytest.raises(ActorCrashed):
        await ref.tell((1, 1.0))
    await settle_threads(baseline, within=2)


async def test_idle_kernel_crash_is_seen_without_a_request() -> None:
    # The body fails on a told message whose reply nobody waits for.
    with pytest.raises(ActorCrashed, match="negative input"):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(make_kernel())
            await ref.tell((1, -1.0))
            await anyio.sleep(5)  # cancelled by the crash


@pytest.mark.parametrize("restart", [None, RestartPolicy(max_restarts=3, backoff=0.0)])
async def test_an_interrupted_body_ends_the_nursery_with_the_interrupt(
    restart: RestartPolicy | None,
) -> None:
    """As a KeyboardInterrupt in a handler does: the nursery raises it (not an
    ActorCrashed), under a restart policy too, and the error word is the body's."""

    def interrupted(requests: Any) -> Any:
        if (requests["x"] < 0).any():
            raise KeyboardInterrupt
        return double(requests)

    baseline = thread_count()
    with pytest.raises(KeyboardInterrupt) as info:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(make_kernel(body=interrupted), restart=restart)
            assert float((await ref.ask((1, 1.0)))["y"]) == 2.0
            await ref.tell((2, -1.0))  # nobody waits for this reply: the watcher sees it
            await anyio.sleep(LIMIT)  # cancelled by the interrupt
    error = info.value.__cause__
    assert isinstance(error, PersistentKernelError)
    assert error.code == 1  # ErrorCode.BODY, not a device failure (4)
    assert isinstance(error.__cause__, KeyboardInterrupt)
    assert ref.statistics().restarts == 0
    await settle_threads(baseline, within=2)


async def test_stop_timeout_is_reported() -> None:
    baseline = thread_count()
    held = HeldBatch(double)
    try:
        with anyio.fail_after(3):
            with pytest.raises(ActorCrashed) as info:
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(make_kernel(body=held))
                    await ref.tell((1, 1000.0))  # the body holds it until after the crash
                    while not held.entered.is_set():  # noqa: ASYNC110 - set by the worker thread
                        await anyio.sleep(0.001)
                    await ref.stop(timeout=0.05)
        assert isinstance(info.value.cause, KernelStopTimeout)
    finally:
        held.release.set()
    await settle_threads(baseline, within=2)  # the worker exits once the body returns


async def test_cancelling_the_nursery_stops_the_kernel() -> None:
    baseline = thread_count()
    pending: list[BaseException] = []
    with anyio.fail_after(LIMIT), anyio.CancelScope() as scope:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(make_kernel())
            await ref.pause()

            async def ask() -> None:
                try:
                    await ref.ask((1, 1.0))
                except BaseException as exc:
                    pending.append(exc)
                    raise

            async def cancel_once_it_waits() -> None:
                # Once the ask waits for the parked kernel, not at a deadline that
                # could come before it is even sent.
                await anyio.wait_all_tasks_blocked()
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_it_waits)
                await ask()
    assert scope.cancelled_caught
    assert ref.state is ActorState.STOPPED
    assert len(pending) == 1
    await settle_threads(baseline, within=2)

    with anyio.CancelScope() as scope2:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(make_kernel())
            nursery.cancel()
    assert not scope2.cancelled_caught
    assert ref.state is ActorState.STOPPED
    await settle_threads(baseline, within=2)


async def test_start_failures() -> None:
    kernel = PersistentKernel("cudaonly", REQ, REP, bodies={"cuda": "void pdc_body() {}"})
    # Checked before anything starts: the error names the backends that have a body.
    with pytest.raises(KernelBodyMissing, match=r"no body for the cpu backend; .*: cuda"):
        PersistentKernelActor(kernel, "cpu")
    async with open_nursery() as nursery:
        with pytest.raises(KernelBodyMissing, match="no body for the cpu"):
            await nursery.start_actor(kernel)  # the best available backend: cpu
        with pytest.raises(TypeError, match="positional arguments"):
            await nursery.start_actor(make_kernel(), 1)
    with pytest.raises(TypeError, match="PersistentKernel"):
        PersistentKernelActor("nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stop_timeout"):
        PersistentKernelActor(make_kernel(), stop_timeout=0)


async def test_restart_policy_launches_a_fresh_kernel() -> None:
    baseline = thread_count()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(
            PersistentKernelActor(make_kernel(), name="phoenix"),
            restart=RestartPolicy(max_restarts=2, backoff=0.0),
        )
        with pytest.raises(ActorCrashed, match="negative input"):
            await ref.ask((1, -1.0))
        with anyio.fail_after(2):
            while True:
                try:
                    reply = await ref.ask((2, 1.0))
                except ActorStopped:  # restarting
                    await anyio.sleep(0.005)
                else:
                    break
        assert float(reply["y"]) == 2.0
        stats = ref.statistics()
        assert (stats.restarts, stats.errors) == (1, 1)
        assert stats.handled == 1
    await settle_threads(baseline, within=2)


async def test_asks_sent_during_a_restart_are_handled_by_the_new_incarnation() -> None:
    """As with a mailbox actor: the request in hand fails with ActorCrashed, and those
    sent while the kernel restarts wait for the new kernel (issue 26 item 3)."""
    baseline = thread_count()
    policy = RestartPolicy(max_restarts=2, backoff=1.0, max_backoff=1.0)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(make_kernel(name="phoenix"), restart=policy)
            with pytest.raises(ActorCrashed, match="negative input"):
                await ref.ask((1, -1.0))
            replies: list[float] = []
            sent_in: list[ActorState] = []

            async def ask_during_restart(x: float) -> None:
                sent_in.append(ref.state)
                replies.append(float((await ref.ask((2, x)))["y"]))

            async with anyio.create_task_group() as askers:
                for x in (1.0, 2.0, 3.0):
                    askers.start_soon(ask_during_restart, x)
                sent_in.append(ref.state)
                await ref.tell((3, 4.0))  # a tell waits for the new kernel too
            # Sent while the kernel had crashed or was restarting (a 1 s backoff), and
            # none failed: each waited for the new kernel.
            assert set(sent_in) <= {ActorState.CRASHED, ActorState.RESTARTING}
            assert sorted(replies) == [2.0, 4.0, 6.0]
            assert ref.state is ActorState.RUNNING
            assert float((await ref.ask((4, 5.0)))["y"]) == 10.0
            stats = ref.statistics()
            assert (stats.restarts, stats.errors) == (1, 1)
            assert stats.handled == 5  # three asks, the tell and the last ask
    await settle_threads(baseline, within=2)


class EndHeld(PersistentKernelActor[Any, Any]):
    """A kernel actor whose crashed incarnation ends (and the nursery decides on the
    restart) only once ``release`` is set: the crash is seen by its callers first."""

    def __init__(self, kernel: PersistentKernel) -> None:
        super().__init__(kernel)
        self.release = anyio.Event()

    async def run(self, started: Callable[[], None]) -> None:
        try:
            await super().run(started)
        except Exception:
            await self.release.wait()
            raise


async def test_the_nursery_exit_waits_for_asks_queued_during_a_restart() -> None:
    policy = RestartPolicy(max_restarts=2, backoff=1.0, max_backoff=1.0)
    replies: list[float] = []
    runner = EndHeld(make_kernel(name="late"))
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as outside:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(runner, restart=policy)
                with pytest.raises(ActorCrashed):
                    await ref.ask((1, -1.0))

                async def ask_late() -> None:
                    replies.append(float((await ref.ask((2, 8.0)))["y"]))

                outside.start_soon(ask_late)
                while not runner.waiting:  # noqa: ASYNC110 - until it waits for the restart
                    await anyio.sleep(0.001)
                runner.release.set()  # the crash is decided: the restart's backoff begins
                while not ref.statistics().restarts:  # noqa: ASYNC110 - until it is decided
                    await anyio.sleep(0.001)
            # The body ended during the backoff (or, on a machine stalled past it, once
            # the new kernel was up) with an ask waiting: the exit waited for the new
            # kernel, which answered it, and then stopped it.
            assert ref.state is ActorState.STOPPED
    assert replies == [16.0]


async def test_an_ask_waiting_while_the_crash_is_decided_is_not_lost_by_the_exit() -> None:
    """The body ends while the crashed kernel is still ending, with an ask waiting for
    the next one. The crash being decided wakes that ask, which waits on for the new
    kernel: the draining nursery must not see the actor idle in between (it stopped the
    actor in its backoff, and the ask failed with ActorStopped)."""
    policy = RestartPolicy(max_restarts=1, backoff=0.0)
    replies: list[float] = []
    runner = EndHeld(make_kernel(name="decided"))

    async def release_once_draining() -> None:
        while runner.on_idle is None:  # noqa: ASYNC110 - until the body has ended
            await anyio.sleep(0.001)
        runner.release.set()

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as outside:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(runner, restart=policy)
                with pytest.raises(ActorCrashed):
                    await ref.ask((1, -1.0))

                async def ask_late() -> None:
                    replies.append(float((await ref.ask((2, 8.0)))["y"]))

                outside.start_soon(ask_late)
                while not runner.waiting:  # noqa: ASYNC110 - until it waits for the restart
                    await anyio.sleep(0.001)
                outside.start_soon(release_once_draining)
            assert ref.state is ActorState.STOPPED
            assert ref.statistics().restarts == 1
    assert replies == [16.0]


async def test_what_waited_for_the_restart_and_then_failed_is_no_longer_counted() -> None:
    """A bad record and a cancelled ask that both waited for the new kernel end with
    their errors, and the draining nursery does not wait for them: nothing is left
    counted against the actor."""
    policy = RestartPolicy(max_restarts=1, backoff=0.0)
    runner = EndHeld(make_kernel(name="bad"))
    outcomes: list[str] = []
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as outside:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(runner, restart=policy)
                with pytest.raises(ActorCrashed):
                    await ref.ask((1, -1.0))

                async def ask_bad() -> None:
                    with pytest.raises(RecordError):
                        await ref.ask((1, 2.0, 3.0))  # one field too many
                    outcomes.append("bad record")

                async def ask_cancelled(scope: anyio.CancelScope) -> None:
                    with scope:
                        await ref.ask((2, 1.0))
                    outcomes.append("cancelled")

                scope = anyio.CancelScope()
                outside.start_soon(ask_bad)
                outside.start_soon(ask_cancelled, scope)
                while runner.waiting < 2:  # noqa: ASYNC110 - until both wait
                    await anyio.sleep(0.001)
                scope.cancel()
                runner.release.set()
                while len(outcomes) < 2:  # noqa: ASYNC110 - until both have ended
                    await anyio.sleep(0.001)
                assert runner.waiting == 0
            assert ref.state is ActorState.STOPPED
    assert sorted(outcomes) == ["bad record", "cancelled"]


async def test_without_a_policy_an_ask_after_the_crash_fails_with_it() -> None:
    with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(make_kernel(name="once"))
            with pytest.raises(ActorCrashed):
                await ref.ask((1, -1.0))
            with pytest.raises(ActorCrashed):
                await ref.ask((2, 1.0))


async def test_a_cancelled_caller_ends_cancelled_when_the_kernel_stopped_first() -> None:
    """Cancelling a nursery may stop the kernel before the cancellation reaches a task
    that calls it: that task must end by its cancellation, not by ActorStopped."""
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(make_kernel())
        await ref.stop()
        for call in (
            lambda: ref.ask((1, 1.0)),
            lambda: ref.tell((1, 1.0)),
            lambda: ref.ask_batch(records(0, 2)),
            lambda: ref.pause(),
        ):
            with anyio.CancelScope() as scope:
                scope.cancel()
                await call()
            assert scope.cancelled_caught
        with pytest.raises(ActorStopped):
            await ref.ask((1, 1.0))
