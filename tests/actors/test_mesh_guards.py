"""Actor meshes: ``broadcast`` is all or nothing (it waits for room in every member
before it tells any, through ``Mailbox.wait_room``), and a member's handler that uses its
own mesh in a way that would wait for itself gets a LifecycleError naming it instead of
a deadlock (``call``, ``scatter``, ``stream``, ``broadcast`` into its own full mailbox;
``choose``/``call_one`` pick another member)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from pdc_core import (
    Actor,
    ActorMesh,
    LifecycleError,
    Mailbox,
    MailboxFull,
    MeshError,
    open_nursery,
)

LIMIT = 10  # seconds: no test may hang


class Recorder(Actor[Any, Any]):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def handle(self, message: Any) -> Any:
        if message == "seen?":
            return list(self.seen)
        self.seen.append(message)
        return message


def depths(mesh: ActorMesh[Any, Any]) -> list[int]:
    return [len(member.mailbox) for member in mesh.members]  # type: ignore[attr-defined]


# -- broadcast: all or nothing -------------------------------------------------------------


async def test_a_broadcast_cancelled_while_a_member_is_full_reaches_no_member() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"w": 3}, capacity=1, paused=True)
            await mesh.members[1].tell("filler")  # member 1's mailbox is full
            assert depths(mesh) == [0, 1, 0]
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(mesh.broadcast, "b")
                    await wait_all_tasks_blocked()  # waiting for room in member 1
                    assert depths(mesh) == [0, 1, 0]  # nobody has it yet
                    scope.cancel()
            assert scope.cancelled_caught
            assert depths(mesh) == [0, 1, 0]
            for member in mesh.members:
                await member.resume()
            assert await mesh.call("seen?") == [[], ["filler"], []]


async def test_a_broadcast_that_waited_for_room_reaches_every_member() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"w": 3}, capacity=1, paused=True)
            await mesh.members[0].tell("a")
            await mesh.members[2].tell("c")  # two members full
            async with anyio.create_task_group() as tg:
                tg.start_soon(mesh.broadcast, "b")
                await wait_all_tasks_blocked()
                assert depths(mesh) == [1, 0, 1]
                await mesh.members[0].resume()  # room in member 0: still waits for 2
                await wait_all_tasks_blocked()
                assert mesh.members[1].statistics().mailbox.sent == 0  # type: ignore[union-attr]
                await mesh.members[2].resume()
            for member in mesh.members:
                await member.resume()
            assert await mesh.call("seen?") == [["a", "b"], ["b"], ["c", "b"]]


async def test_a_broadcast_into_full_mailboxes_that_do_not_wait() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            dropping = await nursery.start_mesh(
                Recorder, shape={"w": 2}, capacity=1, backpressure="drop_oldest", paused=True
            )
            await dropping.members[0].tell("old")
            await dropping.broadcast("new")  # evicts "old", as a tell does
            assert depths(dropping) == [1, 1]
            for member in dropping.members:
                await member.resume()
            await wait_all_tasks_blocked()  # both handled what they hold
            assert await dropping.call("seen?") == [["new"], ["new"]]
            assert dropping.members[0].statistics().mailbox.dropped == 1  # type: ignore[union-attr]

            raising = await nursery.start_mesh(
                Recorder,
                shape={"w": 3},
                capacity=1,
                backpressure="raise",
                paused=True,
                name="raising",
            )
            await raising.members[1].tell("full")
            with pytest.raises(MeshError) as caught:
                await raising.broadcast("b")
            assert list(caught.value.failures) == [(1,)]
            assert isinstance(caught.value.failures[(1,)], MailboxFull)
            assert caught.value.replies == {}
            assert depths(raising) == [1, 1, 1]
            for member in raising.members:
                await member.resume()
            await wait_all_tasks_blocked()
            assert await raising.call("seen?") == [["b"], ["full"], ["b"]]


# -- Mailbox.wait_room ---------------------------------------------------------------------


async def test_mailbox_wait_room_waits_without_taking_the_room() -> None:
    with anyio.fail_after(LIMIT):
        mailbox: Mailbox[str] = Mailbox(1)
        await mailbox.wait_room()  # room: at once
        mailbox.send_nowait("x")
        async with anyio.create_task_group() as tg:
            done = anyio.Event()

            async def wait() -> None:
                await mailbox.wait_room()
                done.set()

            tg.start_soon(wait)
            await wait_all_tasks_blocked()
            assert not done.is_set()
            assert await mailbox.receive() == "x"
            await done.wait()
        assert len(mailbox) == 0  # it took nothing
        assert mailbox.statistics().sent == 1
        mailbox.send_nowait("y")
        for policy in ("raise", "drop_oldest"):  # a send would not wait: at once
            other: Mailbox[str] = Mailbox(1, backpressure=policy)
            other.send_nowait("z")
            await other.wait_room()
        mailbox.close()
        await mailbox.wait_room()  # closed: a send raises at once


async def test_mailbox_wait_room_cancelled_takes_nothing() -> None:
    with anyio.fail_after(LIMIT):
        mailbox: Mailbox[str] = Mailbox(1)
        mailbox.send_nowait("x")
        with anyio.CancelScope() as scope:
            scope.cancel()
            await mailbox.wait_room()  # cancelled on entry
        assert scope.cancelled_caught
        async with anyio.create_task_group() as tg:
            waiting = anyio.CancelScope()
            sent = anyio.Event()

            async def wait() -> None:
                with waiting:
                    await mailbox.wait_room()

            async def send() -> None:
                await mailbox.send("y")
                sent.set()

            tg.start_soon(wait)  # first in line for room
            await wait_all_tasks_blocked()
            tg.start_soon(send)  # second in line
            await wait_all_tasks_blocked()
            waiting.cancel()  # the first in line gives up...
            await wait_all_tasks_blocked()
            assert mailbox.receive_nowait() == "x"
            await sent.wait()  # ...so the room goes to the sender
        assert waiting.cancelled_caught
        assert len(mailbox) == 1


async def test_a_woken_wait_room_that_sends_nothing_does_not_strand_a_sender() -> None:
    with anyio.fail_after(LIMIT):
        mailbox: Mailbox[str] = Mailbox(1)
        mailbox.send_nowait("x")
        async with anyio.create_task_group() as tg:
            room = anyio.Event()

            async def wait() -> None:
                await mailbox.wait_room()
                room.set()  # and sends nothing

            tg.start_soon(wait)  # first in line
            await wait_all_tasks_blocked()
            tg.start_soon(mailbox.send, "y")  # second in line
            await wait_all_tasks_blocked()
            assert await mailbox.receive() == "x"
            await room.wait()
        assert await mailbox.receive() == "y"


# -- a member that uses its own mesh -------------------------------------------------------


class Peer(Actor[Any, Any]):
    """Uses the mesh it is a member of (``box["mesh"]``) from its handler."""

    def __init__(self, box: dict[str, Any]) -> None:
        self.box = box
        self.seen: list[Any] = []

    async def handle(self, message: Any) -> Any:
        mesh: ActorMesh[Any, Any] = self.box["mesh"]
        if message == "me":
            return id(self)
        if message == "seen?":
            return list(self.seen)
        if not isinstance(message, tuple):
            self.seen.append(message)
            return message
        try:
            match message[0]:
                case "call":
                    return await mesh.call("inner")
                case "scatter":
                    return await mesh.scatter(["inner"] * len(mesh))
                case "stream":
                    return [pair async for pair in mesh.stream("inner")]
                case "slice":
                    return await mesh.slice(w=slice(1, None)).call("inner")
                case "call_one":
                    return await mesh.call_one("me"), id(self)
                case "broadcast":
                    await self.box["go"].wait()
                    await mesh.broadcast("told")
                    return "told"
        except LifecycleError as error:
            return error
        raise AssertionError(message)


@pytest.mark.parametrize("operation", ["call", "scatter", "stream"])
async def test_a_member_asking_its_own_mesh_gets_a_lifecycle_error(operation: str) -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            box: dict[str, Any] = {}
            mesh = await nursery.start_mesh(Peer, box, shape={"w": 3})
            box["mesh"] = mesh
            error = await mesh.members[0].ask((operation,))
            assert isinstance(error, LifecycleError)
            assert f"member 'Peer[w=0]' of mesh 'Peer' called mesh.{operation}()" in str(error)
            assert "wait forever for its own reply" in str(error)
            # refused before anything was sent: no member got the request
            assert await mesh.call("seen?") == [[], [], []]
            assert [m.statistics().skipped for m in mesh.members] == [0, 0, 0]
            # a slice without the caller is fine
            assert await mesh.members[0].ask(("slice",)) == ["inner", "inner"]


async def test_call_one_from_a_member_picks_another_member() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            box: dict[str, Any] = {}
            mesh = await nursery.start_mesh(Peer, box, shape={"w": 2})
            box["mesh"] = mesh
            for _ in range(4):  # whatever the round-robin turn
                other, me = await mesh.members[0].ask(("call_one",))
                assert other != me
            alone = await nursery.start_mesh(Peer, box, shape={"w": 1}, name="alone")
            box["mesh"] = alone
            error = await alone.members[0].ask(("call_one",))
            assert isinstance(error, LifecycleError)
            assert "member 'alone[w=0]' of mesh 'alone' called mesh.choose()" in str(error)


async def test_a_member_broadcasting_into_its_own_full_mailbox() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            box: dict[str, Any] = {"go": anyio.Event()}
            mesh = await nursery.start_mesh(Peer, box, shape={"w": 2}, capacity=1)
            box["mesh"] = mesh
            box["go"].set()  # room everywhere: a member may tell itself
            assert await mesh.members[0].ask(("broadcast",)) == "told"
            assert await mesh.call("seen?") == [["told"], ["told"]]

            box["go"] = anyio.Event()
            async with anyio.create_task_group() as tg:
                replies: list[Any] = []

                async def ask() -> None:
                    replies.append(await mesh.members[0].ask(("broadcast",)))

                tg.start_soon(ask)
                await wait_all_tasks_blocked()  # member 0 in its handler
                await mesh.members[0].tell("filler")  # and its own mailbox full
                box["go"].set()
            [error] = replies
            assert isinstance(error, LifecycleError)
            assert "member 'Peer[w=0]' of mesh 'Peer' called mesh.broadcast()" in str(error)
            assert "its own mailbox is full" in str(error)
            assert await mesh.call("seen?") == [["told", "filler"], ["told"]]  # told nobody
