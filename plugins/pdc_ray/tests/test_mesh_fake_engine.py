"""Meshes of remote actors and remote kernels through pdc-ray, over the fake engine:
the mesh's operations, a lost worker as a MeshError and as a restart in place, and no
worker left behind by mesh.stop or the nursery's exit."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pdc_ray
import pytest
from pdc_ray.testing import FakeEngine

from pdc_core import (
    Actor,
    ActorState,
    MeshError,
    MessageTimeout,
    PersistentKernel,
    RestartPolicy,
    open_nursery,
)

LIMIT = 20  # seconds: no test may hang


class Scale(Actor[int, int]):
    def __init__(self, factor: int = 1) -> None:
        self.factor = factor

    async def handle(self, message: int) -> int:
        return message * self.factor


async def test_a_mesh_of_remote_actors() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=3) as engine, open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Scale, 3, shape={"node": 2, "gpu": 2}, placement=pdc_ray.on(engine=engine)
            )
            assert len(engine.alive()) == 4
            assert all(isinstance(m, pdc_ray.RemoteActorRef) for m in mesh.members)
            assert await mesh.call(2) == [6] * 4
            assert await mesh.scatter([1, 2, 3, 4]) == [3, 6, 9, 12]
            got = sorted([pair async for pair in mesh.stream(5)])
            assert got == [((0, 0), 15), ((0, 1), 15), ((1, 0), 15), ((1, 1), 15)]
            await mesh.broadcast(1)
            assert await mesh.call_one(7) == 21
            assert await mesh.slice(node=1).call(1) == [3, 3]
            await mesh.stop()
            assert engine.alive() == []
            assert set(mesh.states.values()) == {ActorState.STOPPED}
        assert engine.alive() == []


async def test_a_lost_worker_restarts_in_place_or_fails_its_members_calls() -> None:
    # The loss is the engine's report (the lost process's calls fail), not a missed
    # heartbeat: the default heartbeat, since 0.05 s is within the stalls of a loaded
    # machine, where live workers looked lost.
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Scale,
                2,
                shape={"w": 3},
                placement=pdc_ray.on(engine=engine),
                restart=RestartPolicy(max_restarts=1, backoff=0),
            )
            refs = mesh.members
            assert await mesh.call(1) == [2, 2, 2]
            engine.hold("deliver")  # the next call reaches every worker and waits there
            async with anyio.create_task_group() as tg:
                errors: list[MeshError] = []

                async def call() -> None:
                    try:
                        await mesh.call(5)
                    except MeshError as error:
                        errors.append(error)

                tg.start_soon(call)
                await anyio.wait_all_tasks_blocked()
                lost = [p for p in engine.alive() if p.spec.actor_id == "Scale[w=1]"]
                engine.lose(lost[0])  # a worker dies in the middle of the call
                engine.release("deliver")
            [error] = errors
            assert list(error.failures) == [(1,)]
            assert set(error.replies) == {(0,), (2,)}
            assert set(error.replies.values()) == {10}
            # queued while the worker restarts: same handles, a fresh worker
            assert await mesh.call(3) == [6, 6, 6]
            assert refs[1].statistics().restarts == 1
            assert mesh.members == refs
        assert engine.alive() == []


REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def _double(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


DOUBLE = PersistentKernel("mesh_double", REQ, REP, capacity=16, bodies={"cpu": _double})


async def test_a_mesh_of_remote_kernels_one_per_bundle() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine() as engine, open_nursery() as nursery:
            group = object()  # the fake engine takes any placement group
            placements = pdc_ray.bundles(group, 3, engine=engine, backend="cpu")
            assert [p.spec.bundle_index for p in placements] == [0, 1, 2]
            mesh = await nursery.start_mesh(DOUBLE, shape={"node": 3}, placement=placements)
            assert all(isinstance(m, pdc_ray.RemoteKernelRef) for m in mesh.members)
            replies = await mesh.call((1, 2.5))
            assert [float(r["y"]) for r in replies] == [5.0] * 3
            assert len(engine.alive()) == 3
        assert engine.alive() == []


def test_bundles_refuses_what_it_sets_and_unknown_counts() -> None:
    with pytest.raises(TypeError, match="count="):
        pdc_ray.bundles(object())
    with pytest.raises(ValueError, match="count"):
        pdc_ray.bundles(object(), 0)
    with pytest.raises(TypeError, match="bundle_index"):
        pdc_ray.bundles(object(), 2, bundle_index=1)


class Log(Actor[Any, Any]):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def handle(self, message: Any) -> Any:
        if message == "seen?":
            return list(self.seen)
        self.seen.append(message)
        return message


@pytest.mark.parametrize("call_back", [True, False], ids=["callbacks", "no-callbacks"])
async def test_remote_members_are_posted_to_without_a_task_each(call_back: bool) -> None:
    """A mesh call posts one request per remote member (the next batch when the member
    is idle, its answer handed out by the engine's done callback, or by the runner's
    adopter for an engine that cannot call back); a concurrent call queues behind it in
    each member's mailbox and keeps its order."""
    with anyio.fail_after(LIMIT):
        async with FakeEngine(seed=5, call_back=call_back) as engine, open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Log, shape={"w": 3}, placement=pdc_ray.on(engine=engine, window=1)
            )
            assert await mesh.call("a") == ["a"] * 3
            assert engine.calls["deliver"] == 3  # one batch per member
            engine.hold("deliver")
            async with anyio.create_task_group() as tg:
                replies: dict[str, list[Any]] = {}

                async def call(message: str) -> None:
                    replies[message] = await mesh.call(message)

                tg.start_soon(call, "b")  # posted: each member's next batch
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(call, "c")  # members busy: queued in their mailboxes
                await anyio.wait_all_tasks_blocked()
                assert engine.calls["deliver"] == 6  # "c" waits here, in order
                engine.release("deliver")
            assert replies == {"b": ["b"] * 3, "c": ["c"] * 3}
            assert await mesh.call("seen?") == [["a", "b", "c"]] * 3
            got = sorted([pair async for pair in mesh.stream("d")])
            assert got == [((0,), "d"), ((1,), "d"), ((2,), "d")]


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_a_remote_call_given_up_is_cancelled_remotely(how: str) -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(reorder=0) as engine, open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Log, shape={"w": 2}, placement=pdc_ray.on(engine=engine, window=1)
            )
            engine.hold("deliver")  # the requests are shipped and wait on the wire
            if how == "timeout":
                with pytest.raises(MeshError) as caught:
                    await mesh.call("late", timeout=0.05)
                assert set(caught.value.failures) == {(0,), (1,)}
                assert all(isinstance(e, MessageTimeout) for e in caught.value.failures.values())
            else:
                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(mesh.call, "late")
                        await anyio.wait_all_tasks_blocked()
                        scope.cancel()
                assert scope.cancelled_caught
            while engine.calls["cancel"] < 2:  # one remote cancellation per member
                await anyio.wait_all_tasks_blocked()
            engine.release("deliver")
            assert await mesh.call("seen?") == [[], []]  # skipped remotely, not handled


async def test_a_broadcast_waits_for_room_in_every_remote_member_first() -> None:
    with anyio.fail_after(LIMIT):
        async with FakeEngine(reorder=0) as engine, open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Log,
                shape={"w": 2},
                placement=pdc_ray.on(engine=engine, window=1),
                capacity=1,
            )
            engine.hold("deliver")
            await mesh.members[1].tell("on the wire")  # handed to the waiting shipper
            await anyio.wait_all_tasks_blocked()  # shipped alone, and held
            await mesh.members[1].tell("queued")  # member 1's local mailbox is full
            while mesh.members[1].statistics().mailbox.depth != 1:  # type: ignore[union-attr]
                await anyio.wait_all_tasks_blocked()
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(mesh.broadcast, "b")
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()
            assert scope.cancelled_caught
            assert mesh.members[0].statistics().mailbox.sent == 0  # type: ignore[union-attr]
            async with anyio.create_task_group() as tg:
                tg.start_soon(mesh.broadcast, "b2")
                await anyio.wait_all_tasks_blocked()
                engine.release("deliver")  # room: the broadcast goes to both
            assert await mesh.call("seen?") == [["b2"], ["on the wire", "queued", "b2"]]


async def test_a_posted_answer_that_lets_a_draining_nursery_stop() -> None:
    """The answer to a posted request is handed out outside any task (the engine's
    callback re-enters the loop); when it is the last thing a draining nursery waits
    for, the nursery stops its actors from there."""
    with anyio.fail_after(LIMIT):
        async with FakeEngine(reorder=0) as engine, anyio.create_task_group() as tg:
            replies: list[Any] = []
            async with open_nursery() as nursery:
                mesh = await nursery.start_mesh(
                    Log, shape={"w": 2}, placement=pdc_ray.on(engine=engine, window=1)
                )
                engine.hold("deliver")

                async def call() -> None:
                    replies.append(await mesh.call("last"))

                async def release() -> None:
                    await anyio.wait_all_tasks_blocked()  # the nursery's exit drains
                    engine.release("deliver")

                tg.start_soon(call)
                await anyio.wait_all_tasks_blocked()  # posted, held on the wire
                tg.start_soon(release)
            assert replies == [["last", "last"]]
            assert set(mesh.states.values()) == {ActorState.STOPPED}
            assert engine.alive() == []
