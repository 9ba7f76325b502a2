"""The ActorRunner extension point: another kind of actor in the same nursery.

``LoopbackKernel`` stands in for a persistent device kernel: ``run`` "launches" it
(allocates a ring), completes the start handshake once it is resident, serves the
ring until told to stop, and releases everything in a ``finally``. Its handle is an
``ActorRef``, so callers cannot tell it from a mailbox actor.
"""

# ruff: noqa: PT012, ASYNC109

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from pdc_core import (
    ActorCrashed,
    ActorRef,
    ActorState,
    ActorStatistics,
    ActorStopped,
    RestartPolicy,
    open_nursery,
)
from pdc_core.lowlevel import TIMED_OUT, ActorRunner, Placement, StartOptions

LIMIT = 10


class LoopbackRef(ActorRef[int, int]):
    def __init__(self, runner: LoopbackKernel) -> None:
        self._runner = runner

    @property
    def actor_id(self) -> str:
        return self._runner.name

    @property
    def state(self) -> ActorState:
        return self._runner.state

    async def _deliver(self, message: int, priority: int) -> None:
        self._runner.submit(message, None)

    async def _request(self, message: int, priority: int, timeout: float | None) -> Any:
        slot: dict[str, Any] = {"event": anyio.Event()}
        self._runner.submit(message, slot)
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            await slot["event"].wait()
        if not slot["event"].is_set():
            return TIMED_OUT
        if "error" in slot:
            raise slot["error"]
        return int(slot["value"])

    async def pause(self) -> None:
        self._runner.paused = True

    async def resume(self) -> None:
        self._runner.paused = False
        self._runner.doorbell.set()

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        self._runner.stop_requested = True
        self._runner.doorbell.set()
        await self.wait()

    async def wait(self) -> None:
        await self._runner.finished.wait()

    def statistics(self) -> ActorStatistics:
        return ActorStatistics(
            actor_id=self.actor_id,
            state=self.state,
            handled=self._runner.handled,
            errors=self._runner.errors,
            restarts=self._runner.restarts,
            skipped=0,
            mailbox=None,
        )


class LoopbackKernel(ActorRunner):
    """A fake resident kernel fed through a ring (here a deque and a doorbell)."""

    ids = itertools.count()

    def __init__(self, name: str = "") -> None:
        self.name = name or f"loopback-{next(self.ids)}"
        self.ring: deque[tuple[int, dict[str, Any] | None]] = deque()
        self.doorbell = anyio.Event()
        self.finished = anyio.Event()
        self.state = ActorState.STARTING
        self.paused = False
        self.stop_requested = False
        self.handled = self.errors = self.restarts = 0
        self.device_memory: list[str] = []  # what is "allocated on the device"
        self.launches = 0
        self._ref = LoopbackRef(self)

    @property
    def ref(self) -> LoopbackRef:
        return self._ref

    def submit(self, message: int, slot: dict[str, Any] | None) -> None:
        if self.finished.is_set() or self.stop_requested:
            raise ActorStopped(f"{self.name} is not running", actor_id=self.name)
        self.ring.append((message, slot))
        self.doorbell.set()

    async def run(self, started: Callable[[], None]) -> None:
        self.launches += 1
        self.device_memory.append(f"ring-{self.launches}")
        try:
            self.state = ActorState.RUNNING
            started()
            while not self.stop_requested:
                if not self.ring or self.paused:
                    self.doorbell = anyio.Event()
                    await self.doorbell.wait()
                    continue
                message, slot = self.ring.popleft()
                if message < 0:
                    if slot is not None:
                        slot["error"] = ActorCrashed(self.name, ValueError(message))
                        slot["event"].set()
                    raise ValueError(f"negative message {message}")
                await anyio.lowlevel.checkpoint()
                self.handled += 1
                if slot is not None:
                    slot["value"] = message * 10
                    slot["event"].set()
        finally:
            self.device_memory.pop()  # the kernel is torn down on every exit path

    def on_crash(self, error: Exception, *, restarting: bool) -> None:
        self.errors += 1
        if restarting:
            self.restarts += 1
            self.state = ActorState.RESTARTING

    def finalize(self, error: BaseException | None) -> None:
        self.state = ActorState.CRASHED if isinstance(error, ActorCrashed) else ActorState.STOPPED
        while self.ring:
            _, slot = self.ring.popleft()
            if slot is not None:
                slot["error"] = ActorStopped(f"{self.name} stopped", actor_id=self.name)
                slot["event"].set()
        self.finished.set()


async def test_runner_is_started_and_addressed_like_any_actor() -> None:
    kernel = LoopbackKernel("gpu-0")
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(kernel)
            assert ref is kernel.ref
            assert ref.state is ActorState.RUNNING
            assert kernel.device_memory == ["ring-1"]  # resident before start returns
            assert await ref.ask(4) == 40
            await ref.tell(5)
            assert await ref.ask_many([1, 2, 3]) == [10, 20, 30]  # ActorRef's default
            assert [r async for r in ref.ask_stream(range(3), window=2)] == [0, 10, 20]
            assert nursery.actors == {"gpu-0": ref}
    assert kernel.finished.is_set()
    assert kernel.device_memory == []
    assert kernel.state is ActorState.STOPPED


async def test_runner_crash_is_one_for_all() -> None:
    kernel = LoopbackKernel("gpu-1")
    with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed) as info:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(kernel)
            await ref.tell(-1)
            await anyio.sleep_forever()
    assert info.value.actor_id == "gpu-1"
    assert isinstance(info.value.cause, ValueError)
    assert kernel.device_memory == []
    assert kernel.state is ActorState.CRASHED


async def test_runner_is_restarted_with_the_same_ref() -> None:
    kernel = LoopbackKernel()
    policy = RestartPolicy(max_restarts=2, within=10, backoff=0)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(kernel, restart=policy)
            with pytest.raises(ActorCrashed):
                await ref.ask(-5)
            assert await ref.ask(7) == 70
            assert kernel.launches == 2
            assert ref.statistics().restarts == 1
    assert kernel.device_memory == []


async def test_runner_pending_requests_fail_when_cancelled() -> None:
    kernel = LoopbackKernel()
    results: list[BaseException] = []
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as outer:

            async def asker(ref: ActorRef[int, int]) -> None:
                try:
                    await ref.ask(1)
                except ActorStopped as exc:
                    results.append(exc)

            with anyio.move_on_after(0.05):
                async with open_nursery() as nursery:
                    ref = await nursery.start_actor(kernel)
                    await ref.pause()
                    outer.start_soon(asker, ref)
                    await anyio.sleep_forever()
    assert len(results) == 1
    assert kernel.device_memory == []
    assert kernel.state is ActorState.STOPPED


async def test_runner_failing_before_started_fails_the_start() -> None:
    class NoDevice(LoopbackKernel):
        async def run(self, started: Callable[[], None]) -> None:
            raise RuntimeError("no device")

    async with open_nursery() as nursery:
        with pytest.raises(ActorCrashed, match="while starting"):
            await nursery.start_actor(NoDevice("absent"))
        assert nursery.actors == {}


class LoopbackPlacement:
    """A placement that runs ``int -> int`` functions as loopback kernels."""

    def __init__(self) -> None:
        self.placed: list[tuple[object, tuple[Any, ...], StartOptions]] = []

    def runner_for(
        self, target: object, /, args: tuple[Any, ...], options: StartOptions
    ) -> ActorRunner:
        if not callable(target):
            raise TypeError(f"cannot place {target!r}")
        self.placed.append((target, args, options))
        return LoopbackKernel(options.name or "placed")


async def test_placement_makes_the_runner() -> None:
    placement = LoopbackPlacement()
    assert isinstance(placement, Placement)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(
                abs, "arg", name="far", capacity=7, placement=placement, paused=True
            )
            assert isinstance(ref, LoopbackRef)
            assert nursery.actors == {"far": ref}
            assert await ref.ask(2) == 20
    [(target, args, options)] = placement.placed
    assert target is abs
    assert args == ("arg",)
    assert options == StartOptions(name="far", capacity=7, paused=True)
    assert ref.state is ActorState.STOPPED


async def test_placement_is_checked() -> None:
    class MakesNoRunner:
        def runner_for(self, target: object, /, args: Any, options: Any) -> object:
            return "not a runner"

    async with open_nursery() as nursery:
        with pytest.raises(TypeError, match=r"placement must be a pdc_core\.lowlevel\.Placement"):
            await nursery.start_actor(abs, placement=42)  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="not an ActorRunner"):
            await nursery.start_actor(abs, placement=MakesNoRunner())  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="cannot place 3"):
            await nursery.start_actor(3, placement=LoopbackPlacement())
        assert nursery.actors == {}
