"""The metal backend's persistent kernel: the ring protocol emulated on MLX.

Runs on MLX's CPU device on Linux (``mlx[cpu]``); every test runs under asyncio and
trio through the pdc pytest plugin.
"""

# ruff: noqa: PT012

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metal_support import metal_backend, needs_mlx

from pdc_core import (
    ActorCrashed,
    ActorState,
    ActorStopped,
    Capability,
    KernelActorRef,
    KernelBodyMissing,
    MessageTimeout,
    PersistentKernel,
    PersistentKernelActor,
    PersistentKernelError,
    PersistentKernelSession,
    SessionState,
    open_nursery,
    open_persistent_kernel,
)
from pdc_core.backend import ErrorCode, HostWorkerKernel, RingMemory
from pdc_core.testing import settle_threads, thread_count

pytestmark = needs_mlx

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def double(requests: Any) -> Any:
    return {"id": requests["id"], "y": requests["x"] * 2}


def make(capacity: int = 8, body: Any = double, **kwargs: Any) -> PersistentKernel:
    return PersistentKernel("mdouble", REQ, REP, capacity=capacity, **kwargs).add_body(
        "metal", body
    )


def records(start: int, count: int) -> Any:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(start, start + count)
    out["x"] = np.arange(start, start + count) * 0.25
    return out


def kernel_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pdc-metal-kernel-")]


def test_metal_backend_declares_persistent_kernels() -> None:
    backend = metal_backend()
    assert backend.has(Capability.PERSISTENT_KERNELS)


async def test_round_trips_batches_and_mlx_inputs() -> None:
    import mlx.core as mx

    seen: list[Any] = []

    def probe(requests: Any) -> Any:
        seen.append({name: (type(a), a.dtype, tuple(a.shape)) for name, a in requests.items()})
        return double(requests)

    backend = metal_backend()
    async with open_persistent_kernel(make(4, probe), backend) as session:
        assert isinstance(session.resident, HostWorkerKernel)
        reply = await session.request((3, 1.5))
        assert (int(reply["id"]), float(reply["y"])) == (3, 3.0)
        replies = await session.request_batch(records(0, 1000))  # 250 ring-fulls
        assert replies["id"].tolist() == list(range(1000))
        assert np.array_equal(replies["y"], np.arange(1000) * 0.5)
        await session.send_batch(records(5000, 6))
        got: list[int] = []
        while len(got) < 6:
            got.extend((await session.receive_batch())["id"].tolist())
        assert got == list(range(5000, 5006))
    assert session.state is SessionState.STOPPED
    first = seen[0]
    assert set(first) == {"id", "x"}
    assert first["id"][:2] == (mx.array, mx.uint64)
    assert first["x"][1] == mx.float64  # the field's exact dtype, not MLX's float32 default
    assert first["x"][2] == (1,)
    assert max(shape[2][0] for entry in seen for shape in entry.values()) <= 4
    assert not kernel_threads()


async def test_the_body_runs_on_a_dedicated_mlx_stream_in_the_worker() -> None:
    import mlx.core as mx

    where: list[tuple[str, Any]] = []

    def probe(requests: Any) -> Any:
        where.append((threading.current_thread().name, mx.default_stream(mx.default_device())))
        return double(requests)

    async with open_persistent_kernel(make(body=probe), metal_backend()) as session:
        await session.request((1, 1.0))
        await session.request((2, 1.0))
    (name, stream), (name2, stream2) = where
    assert name == name2 == "pdc-metal-kernel-mdouble"
    assert stream == stream2
    assert stream != mx.default_stream(mx.default_device())  # not this thread's stream


@settings(max_examples=15, deadline=None)
@given(
    capacity=st.sampled_from([1, 2, 3, 5]),
    jobs=st.lists(st.integers(1, 9), min_size=1, max_size=6),
)
async def test_exactly_once_in_order_with_concurrent_callers(
    capacity: int, jobs: list[int]
) -> None:
    results: dict[int, list[int]] = {}
    async with open_persistent_kernel(make(capacity), metal_backend()) as session:

        async def job(index: int, size: int) -> None:
            start = index * 1000
            replies = await session.request_batch(records(start, size))
            results[index] = replies["id"].tolist()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for index, size in enumerate(jobs):
                    tg.start_soon(job, index, size)
        stats = session.statistics()
    for index, size in enumerate(jobs):
        assert results[index] == list(range(index * 1000, index * 1000 + size))
    assert stats.sent == stats.replied == sum(jobs)


async def test_kernel_actor_on_metal_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    metal_backend()
    monkeypatch.setenv("PDC_BACKEND", "metal")  # start_actor(kernel): the default backend
    baseline = thread_count()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(make(16))
        assert isinstance(ref, KernelActorRef)
        assert ref.state is ActorState.RUNNING
        assert len(kernel_threads()) == 1
        reply = await ref.ask((1, 2.0))
        assert (int(reply["id"]), float(reply["y"])) == (1, 4.0)
        await ref.tell((2, 1.0))
        await ref.tell_many(records(3, 40))  # larger than the ring: written in pieces
        replies = await ref.ask_batch(records(100, 50))
        assert replies["id"].tolist() == list(range(100, 150))
        assert replies["y"].tolist() == [x * 0.5 for x in range(100, 150)]
        assert ref.statistics().handled == 1 + 1 + 40 + 50

        await ref.pause()
        assert ref.state is ActorState.PAUSED  # type: ignore[comparison-overlap]
        with pytest.raises(MessageTimeout):
            await ref.ask((9, 1.0), timeout=0.05)  # parked: nothing is answered
        await ref.resume()
        assert float((await ref.ask((10, 5.0)))["y"]) == 10.0

        await ref.stop()
        assert ref.state is ActorState.STOPPED
        with pytest.raises(ActorStopped):
            await ref.ask((1, 1.0))
    await settle_threads(baseline, within=3)


async def test_device_resident_state_in_place_and_replaced() -> None:
    import mlx.core as mx

    def counting(requests: Any, state: Any) -> Any:
        assert isinstance(state, mx.array)
        state[0] += requests["x"].shape[0]  # MLX applies it to the same array object
        return double(requests)

    def replacing(requests: Any, state: Any) -> Any:
        return double(requests), mx.maximum(state, mx.max(requests["x"]))

    backend = metal_backend()
    for body, expected in ((counting, [20.0, 0.0]), (replacing, [19 * 0.25, 19 * 0.25])):
        kernel = make(body=body, state=np.zeros(2))
        async with open_persistent_kernel(kernel, backend) as session:
            await session.request_batch(records(0, 20))
            await session.pause()
            state = session.read_state()
            assert state is not None
            assert state.dtype == np.float64
            assert state.tolist() == expected
            await session.resume()
        assert kernel.state is not None
        assert kernel.state.tolist() == [0.0, 0.0]  # the kernel's initial value is untouched


async def test_body_that_raises_crashes_the_nursery() -> None:
    def fragile(requests: Any) -> Any:
        if 13 in np.asarray(requests["id"]).tolist():
            raise ZeroDivisionError("unlucky record")
        return double(requests)

    baseline = thread_count()
    with pytest.raises(ActorCrashed, match="unlucky record") as info:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(
                PersistentKernelActor(make(body=fragile), "metal", name="fragile")
            )
            assert int((await ref.ask((1, 0.0)))["id"]) == 1
            await ref.ask((13, 0.0))
    error = info.value.cause
    assert info.value.actor_id == "fragile"
    assert isinstance(error, PersistentKernelError)
    assert error.code == ErrorCode.BODY
    assert isinstance(error.__cause__, ZeroDivisionError)
    await settle_threads(baseline, within=3)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (lambda r: {"id": r["id"]}, "missing field.s. y"),
        (lambda r: {"id": r["id"], "y": r["x"], "z": r["x"]}, "unknown field.s. z"),
        (lambda r: {"id": r["id"], "y": r["x"][1:]}, "shape"),
        (lambda r: {"id": r["id"], "y": r["x"].reshape(-1, 1)}, "shape"),
        (lambda r: (r["id"], r["x"]), "must return a mapping"),
        (lambda r: None, "must return a mapping"),
        (lambda r: {"id": r["x"], "y": r["x"]}, "reply field 'id' has dtype float64"),
    ],
)
async def test_bad_replies_are_reported(body: Any, match: str) -> None:
    with pytest.raises(ActorCrashed, match=match) as info:
        async with open_persistent_kernel(make(body=body), metal_backend()) as session:
            await session.request_batch(records(0, 3))
    assert isinstance(info.value.cause, PersistentKernelError)
    assert info.value.cause.code == ErrorCode.BAD_REPLY
    assert not kernel_threads()


async def test_fieldless_records_and_subarray_fields() -> None:
    import mlx.core as mx

    plain = PersistentKernel("square", np.float32, np.float32, capacity=4)
    plain.add_body("metal", lambda x: mx.square(x))
    vec_req = np.dtype([("v", "<f4", (3,))])
    vec_rep = np.dtype([("norm", "<f4"), ("v", "<f4", (3,))])
    vectors = PersistentKernel("norms", vec_req, vec_rep, capacity=4)
    vectors.add_body(
        "metal",
        lambda r: {"norm": mx.sqrt(mx.sum(r["v"] * r["v"], axis=1)), "v": r["v"] * 2},
    )
    backend = metal_backend()
    async with open_persistent_kernel(plain, backend) as session:
        got = await session.request_batch(np.arange(6, dtype=np.float32))
        assert got.tolist() == [0.0, 1.0, 4.0, 9.0, 16.0, 25.0]
    batch = np.zeros(2, vec_req)
    batch["v"] = [[3, 4, 0], [0, 0, 2]]
    async with open_persistent_kernel(vectors, backend) as session:
        got = await session.request_batch(batch)
        assert got["norm"].tolist() == [5.0, 2.0]
        assert got["v"].tolist() == [[6, 8, 0], [0, 0, 4]]


async def test_stop_and_cancellation_leave_nothing_running() -> None:
    def slow(requests: Any) -> Any:
        time.sleep(0.2)
        return double(requests)

    baseline = thread_count()
    backend = metal_backend()
    with anyio.move_on_after(0.05) as scope:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(PersistentKernelActor(make(body=slow), backend))
            await ref.ask((1, 0.0))
    assert scope.cancelled_caught
    assert ref.state is ActorState.STOPPED
    await settle_threads(baseline, within=3)

    session = await PersistentKernelSession.start(make(), backend)
    assert int((await session.request((5, 1.0)))["id"]) == 5
    await session.stop(drain=True)
    assert session.state is SessionState.STOPPED
    await settle_threads(baseline, within=3)


async def test_bad_launches() -> None:
    backend = metal_backend()
    kernel = make()
    memory = RingMemory.allocate(backend, kernel.layout)
    with pytest.raises(TypeError, match=r"unknown launch option.*metal backend"):
        backend.launch_persistent_kernel(kernel, memory, bogus=1)
    with pytest.raises(ValueError, match="worker_wait"):
        backend.launch_persistent_kernel(kernel, memory, worker_wait="nap")
    with pytest.raises(KernelBodyMissing, match=r"no body for the metal backend.*bodies for: cpu"):
        await PersistentKernelSession.start(
            PersistentKernel("cpu-only", REQ, REP, bodies={"cpu": double}), backend
        )
    with pytest.raises(TypeError, match=r"metal body .* must be a callable over MLX arrays"):
        PersistentKernel("src", REQ, REP).add_body("metal", 42)
    nested = np.dtype([("inner", [("a", "<f4")])])
    with pytest.raises(TypeError, match="field 'inner' of the request dtype"):
        await PersistentKernelSession.start(
            PersistentKernel("nested", nested, REP, bodies={"metal": double}), backend
        )
    wide = np.dtype([("z", "<c16")])
    with pytest.raises(TypeError, match="field 'z' of the reply dtype"):
        await PersistentKernelSession.start(
            PersistentKernel("wide", REQ, wide, bodies={"metal": double}), backend
        )
    assert not kernel_threads()
