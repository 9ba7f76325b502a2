"""Actor meshes: many actors as one handle (call, scatter, broadcast, choose, call_one,
stream, slice), the rules of single handles applied once, partial failure as a
MeshError, cancellation that leaves no waiter, supervision, and nothing left behind.
Members here are mailbox actors and persistent kernels on a simulated several-device
cpu backend; remote members are tested in plugins/pdc_ray/tests/test_mesh_fake_engine.py
and test_mesh_ray.py."""

from __future__ import annotations

import functools
import pickle
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest
from anyio import wait_all_tasks_blocked

import pdc_core
from pdc_core import (
    Actor,
    ActorCrashed,
    ActorMesh,
    ActorState,
    ActorStopped,
    DeviceInfo,
    KernelActorRef,
    MeshError,
    MessageTimeout,
    PersistentKernel,
    Request,
    RestartPolicy,
    open_nursery,
)

LIMIT = 10  # seconds: no test may hang


class Square(Actor[int, int]):
    def __init__(self) -> None:
        self.seen: list[int] = []

    async def handle(self, message: int) -> int:
        if message < 0:
            raise ValueError(f"negative: {message}")
        self.seen.append(message)
        return message * message


class Recorder(Actor[Any, Any]):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def handle(self, message: Any) -> Any:
        if message == "seen?":
            return list(self.seen)
        self.seen.append(message.data if isinstance(message, Request) else message)
        return message


async def echo(message: Any) -> Any:
    return message


def handled(mesh: ActorMesh[Any, Any]) -> list[int]:
    return [member.statistics().handled for member in mesh.members]


# -- the API -----------------------------------------------------------------------------


async def test_call_scatter_broadcast_and_the_shape() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Square, shape={"host": 2, "gpu": 3})
            assert len(mesh) == 6
            assert mesh.shape == {"host": 2, "gpu": 3}
            assert mesh.coordinates == [(h, g) for h in range(2) for g in range(3)]
            assert [m.actor_id for m in mesh.members][:2] == [
                "Square[host=0,gpu=0]",
                "Square[host=0,gpu=1]",
            ]
            assert mesh[1, 2].actor_id == "Square[host=1,gpu=2]"
            assert set(nursery.actors) == {m.actor_id for m in mesh.members}
            assert await mesh.call(3) == [9] * 6
            assert await mesh.scatter(range(6)) == [0, 1, 4, 9, 16, 25]
            await mesh.broadcast(2)
            assert await mesh.call(0) == [0] * 6  # after the broadcast: FIFO
            assert handled(mesh) == [4] * 6
            assert mesh.alive
            assert set(mesh.states.values()) == {ActorState.RUNNING}
            assert "host=2, gpu=3" in repr(mesh)


async def test_slices_by_named_dimension() -> None:
    async with open_nursery() as nursery:
        mesh = await nursery.start_mesh(echo, shape={"host": 2, "gpu": 4}, name="m")
        sub = mesh.slice(gpu=slice(0, 2))
        assert sub.shape == {"host": 2, "gpu": 2}
        assert len(sub) == 4
        assert sub.coordinates == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert [m.actor_id for m in sub.members] == [
            "m[host=0,gpu=0]",
            "m[host=0,gpu=1]",
            "m[host=1,gpu=0]",
            "m[host=1,gpu=1]",
        ]
        row = mesh.slice(host=1)  # an int picks one coordinate and drops the dimension
        assert row.shape == {"gpu": 4}
        assert row[3].actor_id == "m[host=1,gpu=3]"
        one = row.slice(gpu=-1)
        assert one.shape == {}
        assert len(one) == 1
        assert await one.call("x") == ["x"]
        assert await sub.slice(host=0).call(1) == [1, 1]
        assert mesh.slice(gpu=slice(None, None, 2)).members[1].actor_id == "m[host=0,gpu=2]"
        with pytest.raises(KeyError, match="no dimension 'cpu'"):
            mesh.slice(cpu=0)
        with pytest.raises(IndexError, match="gpu=4 is outside"):
            mesh.slice(gpu=4)
        with pytest.raises(ValueError, match="selects no member"):
            mesh.slice(gpu=slice(3, 1))
        with pytest.raises(TypeError, match="int or a slice"):
            mesh.slice(gpu="0")  # type: ignore[arg-type]
        with pytest.raises(IndexError):
            mesh[2, 0]


async def test_stream_yields_replies_as_they_arrive() -> None:
    order: list[int] = []

    class Delayed(Actor[int, int]):
        def __init__(self) -> None:
            self.go = anyio.Event()

        async def handle(self, message: int) -> int:
            await self.go.wait()
            order.append(message)
            return message

    instances: list[Delayed] = []

    def make() -> Delayed:
        instances.append(Delayed())
        return instances[-1]

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(make, shape={"gpu": 3})
            got: list[tuple[tuple[int, ...], int]] = []
            async with anyio.create_task_group() as tg:

                async def consume() -> None:
                    async for point, reply in mesh.stream(7):
                        got.append((point, reply))

                tg.start_soon(consume)
                await wait_all_tasks_blocked()
                for count, index in enumerate((2, 0, 1), 1):  # members answer in this order
                    instances[index].go.set()
                    while len(got) < count:
                        await wait_all_tasks_blocked()
            assert [point for point, _ in got] == [(2,), (0,), (1,)]
            assert {reply for _, reply in got} == {7}


async def test_choose_and_call_one_pick_the_least_loaded() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"w": 3}, paused=True)
            await mesh.members[0].tell_many(["a", "b"])
            await mesh.members[2].tell("c")
            assert mesh.choose() is mesh.members[1]
            await mesh.members[1].tell_many(["d", "e", "f"])
            assert mesh.choose() is mesh.members[2]
            for member in mesh.members:
                await member.resume()
            assert await mesh.call_one("g") == "g"
            seen = await mesh.call("seen?", priority=0)  # after everything queued
            assert sorted(x for s in seen for x in s) == ["a", "b", "c", "d", "e", "f", "g"]
            # Idle members are chosen in turn, not always the first.
            chosen = {mesh.choose().actor_id for _ in range(3)}
            assert len(chosen) == 3


# -- the rules of single handles, once --------------------------------------------------


async def test_priorities_as_on_single_handles() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"w": 2}, paused=True)
            await mesh.broadcast("low", priority=1)
            await mesh.broadcast(Request(data="own", priority=200))  # the message's own
            await mesh.broadcast("default")  # 128
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(mesh.call, "urgent", priority=255))
                await wait_all_tasks_blocked()
                for member in mesh.members:
                    await member.resume()
            seen = await mesh.call("seen?", priority=0)
            assert seen == [["urgent", "own", "default", "low"]] * 2


async def test_bad_arguments_are_refused_before_anything_is_sent() -> None:
    async with open_nursery() as nursery:
        mesh = await nursery.start_mesh(Recorder, shape={"w": 3})
        for bad in (256, -1):
            with pytest.raises(ValueError, match=str(bad)):
                await mesh.call("x", priority=bad)
            with pytest.raises(ValueError, match=str(bad)):
                await mesh.broadcast("x", priority=bad)
            with pytest.raises(ValueError, match=str(bad)):
                await mesh.scatter(["a", "b", "c"], priority=bad)
        with pytest.raises(TypeError):
            await mesh.call("x", priority="high")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="NaN"):
            await mesh.call("x", timeout=float("nan"))
        with pytest.raises(TypeError):
            await mesh.call("x", timeout="soon")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="priority"):
            await mesh.scatter(["a", "b", Request(data="c", priority=300)])
        with pytest.raises(ValueError, match="3 messages, one per member, got 2"):
            await mesh.scatter(["a", "b"])
        assert handled(mesh) == [0, 0, 0]
        five: Any = np.int64(5)
        assert await mesh.call("x", priority=five) == ["x"] * 3  # NumPy ints too
        assert await mesh.call("y", timeout=float("inf")) == ["y"] * 3


async def test_timeout_fails_the_late_members_and_keeps_the_replies() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"w": 3}, paused=True)
            await mesh.members[1].resume()
            with pytest.raises(MeshError) as caught:
                await mesh.call("q", timeout=0.05)
            error = caught.value
            assert set(error.failures) == {(0,), (2,)}
            assert all(isinstance(e, MessageTimeout) for e in error.failures.values())
            assert error.replies == {(1,): "q"}
            assert "did not reply within 0.05 s" in str(error.failures[(0,)])
            for member in mesh.members:
                await member.resume()
            assert await mesh.call("seen?", priority=0) == [[], ["q"], []]
            skipped = [m.statistics().skipped for m in mesh.members]
            assert skipped == [1, 0, 1]  # the timed-out requests were skipped, not handled
            with pytest.raises(MeshError) as now:
                await mesh.call("now", timeout=0)  # zero means now: nobody has replied
            assert len(now.value.failures) == 3


async def test_cancelled_call_leaves_no_waiter_in_any_member() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"w": 4}, paused=True)
            await mesh.members[0].resume()
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(mesh.call, "cancelled")
                    await wait_all_tasks_blocked()
                    scope.cancel()
            assert handled(mesh) == [1, 0, 0, 0]
            for member in mesh.members:
                await member.resume()
            assert await mesh.call("seen?", priority=0) == [["cancelled"], [], [], []]
            assert [m.statistics().skipped for m in mesh.members] == [0, 1, 1, 1]
            assert [len(m.mailbox) for m in mesh.members] == [0] * 4  # type: ignore[attr-defined]
            # a stream closed early skips the rest too
            for member in mesh.members[1:]:
                await member.pause()
            async for point, reply in mesh.stream("streamed"):
                assert (point, reply) == ((0,), "streamed")
                break
            for member in mesh.members:
                await member.resume()
            seen = await mesh.call("seen?", priority=0)
            assert [s.count("streamed") for s in seen] == [1, 0, 0, 0]


async def test_a_call_already_cancelled_sends_nothing() -> None:
    async with open_nursery() as nursery:
        mesh = await nursery.start_mesh(Recorder, shape={"w": 2})
        with anyio.CancelScope() as scope:
            scope.cancel()
            await mesh.call("never")
        assert await mesh.call("seen?") == [[], []]


# -- partial failure, supervision, lifetime ----------------------------------------------


async def test_a_member_crash_in_the_middle_of_a_call_under_restart() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Square, shape={"gpu": 4}, restart=RestartPolicy(max_restarts=2, backoff=0)
            )
            refs = mesh.members
            with pytest.raises(MeshError) as caught:
                await mesh.scatter([1, 2, -3, 4])
            error = caught.value
            assert list(error.failures) == [(2,)]
            crash = error.failures[(2,)]
            assert isinstance(crash, ActorCrashed)
            assert crash.actor_id == "Square[gpu=2]"
            assert isinstance(crash.cause, ValueError)
            assert error.replies == {(0,): 1, (1,): 4, (3,): 16}
            assert isinstance(error, ExceptionGroup)
            assert error.exceptions == (crash,)
            # restarted in place: same handles, same coordinates, same shape
            assert await mesh.call(5) == [25] * 4
            assert mesh.members == refs
            assert refs[2].statistics().restarts == 1


async def test_a_member_crash_without_a_policy_fails_the_whole_mesh() -> None:
    refs: list[Any] = []

    async def run() -> None:
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Square, shape={"gpu": 4})
            refs.extend(mesh.members)
            await mesh.scatter([1, 2, -3, 4])  # cancelled by the crash

    with pytest.raises(ActorCrashed) as caught, anyio.fail_after(LIMIT):
        await run()
    assert caught.value.actor_id == "Square[gpu=2]"
    assert [ref.state for ref in refs] == [
        ActorState.STOPPED,
        ActorState.STOPPED,
        ActorState.CRASHED,
        ActorState.STOPPED,
    ]


async def test_stop_and_nursery_exit_leave_no_member() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"a": 2, "b": 2})
            other = await nursery.start_mesh(echo, shape={"w": 3})
            await mesh.broadcast("x")
            await mesh.stop(drain=True)
            assert set(mesh.states.values()) == {ActorState.STOPPED}
            assert not mesh.alive
            assert set(nursery.actors) == {m.actor_id for m in other.members}
            with pytest.raises(MeshError) as caught:
                await mesh.call("after stop")
            assert all(isinstance(e, ActorStopped) for e in caught.value.failures.values())
            with pytest.raises(ActorStopped):
                mesh.choose()
        assert not other.alive
        assert nursery.actors == {}


async def test_cancelling_the_nursery_cancels_every_member() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(Recorder, shape={"w": 3})
            nursery.cancel()
    assert set(mesh.states.values()) == {ActorState.STOPPED}


async def test_start_errors() -> None:
    async with open_nursery() as nursery:
        with pytest.raises(TypeError, match="not an instance"):
            await nursery.start_mesh(Square(), shape={"w": 2})
        with pytest.raises(TypeError, match="shape="):
            await nursery.start_mesh(Square)
        with pytest.raises(ValueError, match="int size >= 1"):
            await nursery.start_mesh(Square, shape={"w": 0})
        with pytest.raises(ValueError, match="identifiers"):
            await nursery.start_mesh(Square, shape={"a b": 2})
        with pytest.raises(TypeError, match="devices= applies"):
            await nursery.start_mesh(Square, devices="all")
        with pytest.raises(ValueError, match="2 placements for 3 members"):
            await nursery.start_mesh(Square, shape={"w": 3}, placement=[None, None])  # type: ignore[list-item]
        await nursery.start_mesh(Square, shape={"w": 1}, name="taken")
        with pytest.raises(pdc_core.LifecycleError, match="already running"):
            await nursery.start_mesh(echo, shape={"w": 2}, name="taken")
        assert set(nursery.actors) == {"taken[w=0]"}


async def test_a_member_that_fails_to_start_stops_the_others() -> None:
    starts = 0

    class Fragile(Actor[int, int]):
        async def on_start(self) -> None:
            nonlocal starts
            starts += 1
            if starts == 3:
                raise RuntimeError("no device")

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            with pytest.raises(ActorCrashed, match="while starting"):
                await nursery.start_mesh(Fragile, shape={"w": 4})
            assert nursery.actors == {}


async def test_mesh_error_splits_and_pickles() -> None:
    crash = ActorCrashed("m[w=0]", ValueError("x"))
    late = MessageTimeout("late")
    error = MeshError("2 failed", [crash, late], {(0,): crash, (1,): late}, {(2,): 4})
    assert isinstance(error, pdc_core.PdcError)
    match, rest = error.split(MessageTimeout)
    assert isinstance(match, MeshError)
    assert isinstance(rest, MeshError)
    assert match.failures == {(1,): late}
    assert rest.failures == {(0,): crash}
    assert match.replies == {(2,): 4}
    copy = pickle.loads(pickle.dumps(error))
    assert list(copy.failures) == [(0,), (1,)]
    assert copy.replies == {(2,): 4}
    caught: list[tuple[BaseException, ...]] = []
    try:
        raise error
    except* TimeoutError as timeouts:
        caught.append(timeouts.exceptions)
    except* ActorCrashed as crashes:
        caught.append(crashes.exceptions)
    assert caught == [(late,), (crash,)]


async def test_a_thousand_members() -> None:
    with anyio.fail_after(LIMIT * 3):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(echo, shape={"node": 10, "gpu": 100})
            assert await mesh.call(1) == [1] * 1000
            assert await mesh.scatter(range(1000)) == list(range(1000))
            assert len(mesh.slice(node=3)) == 100


# -- one persistent kernel per device ----------------------------------------------------

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def _double(requests: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


DOUBLE = PersistentKernel("mesh_double", REQ, REP, capacity=64, bodies={"cpu": _double})


@pytest.fixture
def four_cpu_devices(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The cpu backend with four simulated devices (each a cpu backend instance)."""
    cpu = type(pdc_core.get_backend("cpu"))
    one = cpu.devices()[0]
    devices = [
        DeviceInfo(
            backend=one.backend,
            index=i,
            name=f"{one.name} #{i}",
            kind=one.kind,
            total_memory=one.total_memory,
            properties=dict(one.properties),
        )
        for i in range(4)
    ]
    monkeypatch.setattr(cpu, "devices", classmethod(lambda cls: devices))
    pdc_core.reload_plugins()
    yield cpu
    monkeypatch.undo()
    pdc_core.reload_plugins()


async def test_one_kernel_per_device(four_cpu_devices: Any) -> None:
    with anyio.fail_after(LIMIT * 3):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(DOUBLE, devices="cpu", name="dbl")
            assert mesh.shape == {"device": 4}
            kernels = [m for m in mesh.members if isinstance(m, KernelActorRef)]
            assert len(kernels) == 4
            sessions = [k.session for k in kernels]
            assert [s.backend.qualified_name for s in sessions if s is not None] == [
                f"cpu:{i}" for i in range(4)
            ]
            replies = await mesh.call((1, 1.5))
            assert [float(r["y"]) for r in replies] == [3.0] * 4
            scattered = await mesh.scatter([(i, float(i)) for i in range(4)])
            assert [float(r["y"]) for r in scattered] == [0.0, 2.0, 4.0, 6.0]
            streamed = sorted(point for point, _ in [x async for x in mesh.stream((2, 1.0))])
            assert streamed == [(0,), (1,), (2,), (3,)]
            assert float((await mesh.call_one((3, 4.0)))["y"]) == 8.0
            two = await nursery.start_mesh(DOUBLE, devices=["cpu:1", "cpu:3"], shape={"gpu": 2})
            assert [float(r["y"]) for r in await two.call((0, 5.0))] == [10.0, 10.0]
            await two.stop()
            assert not two.alive
        assert set(mesh.states.values()) == {ActorState.STOPPED}
        assert all(s is not None and s.state.value == "stopped" for s in sessions)


async def test_devices_all_is_the_default_backend(
    four_cpu_devices: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PDC_BACKEND", "cpu")
    async with open_nursery() as nursery:
        mesh = await nursery.start_mesh(DOUBLE, devices="all", shape={"host": 2, "gpu": 2})
        assert mesh.shape == {"host": 2, "gpu": 2}
        assert len(await mesh.call((0, 1.0))) == 4
        with pytest.raises(ValueError, match="shape"):
            await nursery.start_mesh(DOUBLE, devices="all", shape={"gpu": 3}, name="x")
        with pytest.raises(ValueError, match="twice"):
            await nursery.start_mesh(DOUBLE, devices=["cpu:0", "cpu:0"], name="y")
