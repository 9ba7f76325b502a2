"""Actor meshes at their edges (issue 35): a full ``"raise"`` member is a failure in its
slot, never a bare ``MailboxFull``; one indexing rule (negative and NumPy coordinates);
a member's child task asking its own mesh gets a LifecycleError; a mesh stream ends
for good once closed, and refuses a second iterating task at once."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest
from anyio import wait_all_tasks_blocked

from pdc_core import Actor, ActorMesh, LifecycleError, MailboxFull, MeshError, open_nursery

LIMIT = 10  # seconds: no test may hang


class Gate(Actor[Any, Any]):
    """Replies with its message; ``"hold"`` waits until the shared event is set."""

    def __init__(self, box: dict[str, anyio.Event]) -> None:
        self.box = box

    async def handle(self, message: Any) -> Any:
        if message == "hold":
            self.box["holding"].set()
            await self.box["release"].wait()
        return message


async def _full_last_member(nursery: Any) -> tuple[ActorMesh[Any, Any], dict[str, anyio.Event]]:
    """A mesh of 3 ``"raise"`` members of capacity 1 whose member w=2 is busy and full."""
    box = {"holding": anyio.Event(), "release": anyio.Event()}
    mesh = await nursery.start_mesh(Gate, box, shape={"w": 3}, capacity=1, backpressure="raise")
    await mesh[2].tell("hold")
    await box["holding"].wait()
    await mesh[2].tell("queued")  # its mailbox is full now
    return mesh, box


def _assert_full_member_failed(error: MeshError, replies: dict[tuple[int, ...], Any]) -> None:
    assert set(error.failures) == {(2,)}
    assert isinstance(error.failures[(2,)], MailboxFull)
    assert error.replies == replies
    assert error.subgroup(MailboxFull) is not None


# -- 1. backpressure="raise": the full member's slot holds its MailboxFull ----------------


@pytest.mark.parametrize("operation", ["call", "scatter", "stream"])
async def test_a_full_raise_member_fails_in_its_slot(operation: str) -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh, box = await _full_last_member(nursery)
            streamed: list[tuple[tuple[int, ...], Any]] = []

            async def run() -> None:
                if operation == "call":
                    await mesh.call(1)
                elif operation == "scatter":
                    await mesh.scatter([10, 11, 12])
                else:
                    async with mesh.stream(1) as replies:
                        async for item in replies:
                            streamed.append(item)

            with pytest.raises(MeshError) as caught:
                await run()
            if operation == "scatter":
                _assert_full_member_failed(caught.value, {(0,): 10, (1,): 11})
            else:
                _assert_full_member_failed(caught.value, {(0,): 1, (1,): 1})
            if operation == "stream":
                assert sorted(streamed) == [((0,), 1), ((1,), 1)]
            # nothing was abandoned: the others answered, the full one keeps its queue
            assert [m.statistics().handled for m in mesh.members[:2]] == [1, 1]
            box["release"].set()
            await wait_all_tasks_blocked()  # w=2 has handled what it held and queued
            assert await mesh.call("after") == ["after"] * 3


# -- 7, 8. one indexing rule -------------------------------------------------------------


async def test_negative_and_numpy_coordinates_index_as_numpy_does() -> None:
    async with open_nursery() as nursery:
        line = await nursery.start_mesh(Gate, {}, shape={"w": 3}, name="line")
        grid = await nursery.start_mesh(Gate, {}, shape={"g": 2, "w": 3}, name="grid")
        assert line[-1].actor_id == "line[w=2]"
        assert line[-3].actor_id == "line[w=0]"
        assert grid[0, -1].actor_id == "grid[g=0,w=2]"
        assert grid[-1, -3].actor_id == "grid[g=1,w=0]"
        assert line[np.int64(1)].actor_id == "line[w=1]"
        assert grid[np.int32(1), np.int8(-1)].actor_id == "grid[g=1,w=2]"
        assert grid[-1, 2] is grid.slice(g=-1)[2] is grid.slice(w=-1)[1]
        # NumPy integers as coordinates of slice(), as in mesh[...] and as priorities
        assert grid.slice(g=np.int64(1)).members == grid.members[3:]
        assert grid.slice(w=np.uint8(0), g=np.int16(-1)).members == [grid[1, 0]]
        for bad in (3, -4):
            with pytest.raises(IndexError, match=r"outside 0\.\.2"):
                line[bad]
            with pytest.raises(IndexError, match=r"outside 0\.\.2"):
                grid[0, bad]
            with pytest.raises(IndexError, match=r"outside 0\.\.2"):
                grid.slice(w=bad)
        for bad in (True, 1.0, np.float64(1.0), "1"):
            with pytest.raises(TypeError, match="must be an int"):
                line[bad]  # type: ignore[index]
            with pytest.raises(TypeError, match="int or a slice"):
                grid.slice(w=bad)  # type: ignore[arg-type]
        with pytest.raises(IndexError, match="coordinates"):
            grid[0]
        sized = await nursery.start_mesh(Gate, {}, shape={"w": np.int64(2)}, name="sized")
        assert sized.shape == {"w": 2}
        assert type(sized.shape["w"]) is int


# -- 9. a member's child task asking its own mesh -------------------------------------------


class Spawner(Actor[Any, Any]):
    """Asks its own mesh from a child task of its own task group."""

    def __init__(self, box: dict[str, Any]) -> None:
        self.box = box

    async def handle(self, message: Any) -> Any:
        if message == "seen?":
            return "here"
        mesh: ActorMesh[Any, Any] = self.box["mesh"]
        outcome: list[Any] = []

        async def child() -> None:
            try:
                if message == "call":
                    outcome.append(await mesh.call("seen?"))
                elif message == "scatter":
                    outcome.append(await mesh.scatter(["seen?"] * len(mesh)))
                elif message == "stream":
                    outcome.append([reply async for reply in mesh.stream("seen?")])
                else:
                    outcome.append(await mesh.slice(w=slice(1, None)).call("seen?"))
            except LifecycleError as error:
                outcome.append(error)

        async with anyio.create_task_group() as tg:
            tg.start_soon(child)
        return outcome[0]


@pytest.mark.parametrize("operation", ["call", "scatter", "stream"])
async def test_a_child_task_of_a_member_asking_its_own_mesh_gets_a_lifecycle_error(
    operation: str,
) -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            box: dict[str, Any] = {}
            mesh = await nursery.start_mesh(Spawner, box, shape={"w": 2})
            box["mesh"] = mesh
            error = await mesh[0].ask(operation)
            assert isinstance(error, LifecycleError)
            assert f"member 'Spawner[w=0]' of mesh 'Spawner' called mesh.{operation}()" in str(
                error
            )
            # a slice without the member is fine from its child task too
            assert await mesh[0].ask("slice") == ["here"]
            # and another actor's (not a member's) child task asks the whole mesh
            assert await mesh.call("seen?") == ["here", "here"]


# -- 6, 10. a mesh stream: closed is closed; one iterating task at a time ------------------


async def test_a_closed_mesh_stream_yields_nothing_more() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Gate, {}, shape={"w": 3})
            replies = mesh.stream("x")
            first = await replies.__anext__()
            assert first[1] == "x"
            await wait_all_tasks_blocked()  # the other replies are in now
            await replies.aclose()
            for _ in range(2):
                with pytest.raises(StopAsyncIteration):
                    await replies.__anext__()
            # closed before its first iteration: sends nothing, yields nothing
            unused = mesh.stream("never")
            await unused.aclose()
            with pytest.raises(StopAsyncIteration):
                await unused.__anext__()
            assert [m.statistics().handled for m in mesh.members] == [1, 1, 1]
            # after the last reply, as an async generator: ended for good
            done = mesh.stream("y")
            assert len([item async for item in done]) == 3
            with pytest.raises(StopAsyncIteration):
                await done.__anext__()


@pytest.mark.parametrize("second", ["iterates", "closes"])
async def test_a_second_task_on_a_mesh_stream_never_leaves_a_task_stuck(second: str) -> None:
    """Item 10: a second task iterating it gets a RuntimeError at once (the first goes
    on); one closing it ends the task waiting in it."""
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            box = {"holding": anyio.Event(), "release": anyio.Event()}
            mesh = await nursery.start_mesh(Gate, box, shape={"w": 2})
            replies = mesh.stream("hold")
            got: list[Any] = []

            async def iterate() -> None:
                got.extend([item async for item in replies])
                got.append("ended")

            async with anyio.create_task_group() as tg:
                tg.start_soon(iterate)
                await box["holding"].wait()
                await wait_all_tasks_blocked()  # the first task waits in __anext__
                if second == "iterates":
                    with pytest.raises(RuntimeError, match="already being iterated"):
                        await replies.__anext__()
                else:
                    await replies.aclose()
                box["release"].set()
            if second == "iterates":
                assert sorted(got[:2]) == [((0,), "hold"), ((1,), "hold")]
                assert got[2:] == ["ended"]
            else:
                assert got == ["ended"]
