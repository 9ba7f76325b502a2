"""``MessageLauncher`` without a GPU: capture, replay, keying, eviction, failures, lifetime.

The launcher's CUDA calls go through a fake (``graph_fakes.FakeGraphOps``) that queues
work on streams, records it while a stream captures and replays the recorded calls with
the addresses they were recorded with, moving real bytes. What runs here is the
launcher's own logic; the same tests' GPU halves are in ``test_cuda_graphs_gpu.py``.
"""

from __future__ import annotations

import gc
from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import fake_backend
from graph_fakes import FakeCudaError, FakeGraphOps, FakeRaw
from pdc_cuda import CudaKernel
from pdc_cuda.graphs import In, InOut, MessageLauncher, Out

import pdc_core
from pdc_core import BackendError


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def scale_into(x: Any, y: Any, a: Any, n: Any) -> None:
    """What the kernel of these tests does: ``y[i] = a * x[i]`` for ``i < n``."""
    y.reshape(-1)[: int(n)] = x.reshape(-1)[: int(n)] * a


def make(graph: bool = True, **options: Any) -> tuple[MessageLauncher, FakeGraphOps, FakeRaw]:
    ops = FakeGraphOps()
    raw = FakeRaw(scale_into)
    kernel = CudaKernel(fake_backend(), raw, "scale_into", "src", ())
    return MessageLauncher(kernel, graph=graph, ops=ops, **options), ops, raw


def message(x: np.ndarray, a: float = 2.0) -> tuple[Any, ...]:
    return (In(x), Out(x.shape, x.dtype), np.float32(a), np.uint64(x.size))


@pytest.mark.parametrize("graph", [True, False])
def test_each_message_gets_its_own_results(graph):
    launcher, ops, _ = make(graph)
    for i in range(5):
        x = np.arange(100, dtype=np.float32) + i
        (y,) = launcher(*message(x))
        np.testing.assert_array_equal(y, 2 * x)
    stats = launcher.statistics
    assert stats.messages == 5
    assert stats.cached == 1
    if graph:
        assert (stats.captures, stats.replays, stats.plain_launches) == (1, 5, 0)
        assert ops.log.count("begin_capture") == 1
        assert ops.log.count("replay") == 5
        # Captured once: the copies and the launch were recorded, never called again.
        assert ops.log.count("launch") == 1
    else:
        assert (stats.captures, stats.replays, stats.plain_launches) == (0, 0, 5)
        assert "begin_capture" not in ops.log
        assert ops.log.count("launch") == 5
    launcher.close()


def test_results_are_copies_not_the_staging_buffers():
    launcher, _, _ = make()
    (first,) = launcher(*message(np.ones(8, np.float32)))
    (second,) = launcher(*message(np.full(8, 3, np.float32)))
    np.testing.assert_array_equal(first, 2)  # not overwritten by the second message
    np.testing.assert_array_equal(second, 6)
    launcher.close()


def test_in_out_is_copied_both_ways_and_the_argument_left_alone():
    ops = FakeGraphOps()

    def increment(x: Any, n: Any) -> None:
        x[: int(n)] += 1

    kernel = CudaKernel(fake_backend(), FakeRaw(increment), "increment", "src", ())
    with MessageLauncher(kernel, ops=ops) as launcher:
        x = np.arange(4, dtype=np.int32)
        (result,) = launcher(InOut(x), np.uint64(4))
        np.testing.assert_array_equal(result, [1, 2, 3, 4])
        np.testing.assert_array_equal(x, [0, 1, 2, 3])
        (result,) = launcher(InOut(result), np.uint64(4))
        np.testing.assert_array_equal(result, [2, 3, 4, 5])
        assert launcher.statistics.captures == 1


def test_the_key_is_what_the_graph_bakes_in():
    launcher, _, _ = make()
    x = np.arange(16, dtype=np.float32)
    launcher(*message(x))
    launcher(*message(x.copy()))  # another array of the same shape and dtype: a replay
    assert launcher.statistics.captures == 1
    launcher(*message(np.arange(32, dtype=np.float32)))  # shape
    assert launcher.statistics.captures == 2
    launcher(*message(np.arange(16, dtype=np.float64)))  # dtype (In and Out)
    assert launcher.statistics.captures == 3
    (y,) = launcher(*message(x, a=5.0))  # a scalar is a kernel parameter: baked in
    np.testing.assert_array_equal(y, 5 * x)
    assert launcher.statistics.captures == 4
    launcher(*message(x, a=5.0))
    assert launcher.statistics.captures == 4
    launcher(In(x), Out(x.shape, x.dtype), 5.0, np.uint64(x.size))  # a Python float: float64
    assert launcher.statistics.captures == 5
    assert launcher.statistics.replays == 7
    launcher.close()


def test_nan_scalars_hit_the_cache():
    launcher, _, _ = make()
    x = np.ones(4, np.float32)
    launcher(*message(x, a=float("nan")))
    launcher(*message(x, a=float("nan")))
    assert launcher.statistics.captures == 1
    launcher.close()


def test_device_arrays_are_keyed_by_address_and_kept_alive():
    ops = FakeGraphOps()

    def add(x: Any, bias: Any, y: Any) -> None:
        y[:] = x + bias.array

    kernel = CudaKernel(fake_backend(), FakeRaw(add), "add", "src", ())
    launcher = MessageLauncher(kernel, ops=ops)
    bias = _DeviceArray(np.full(4, 10, np.float32))
    x = np.arange(4, dtype=np.float32)
    (y,) = launcher(In(x), bias, Out(4, np.float32))
    np.testing.assert_array_equal(y, x + 10)
    bias.array[:] = 20  # the graph reads the array at its address when replayed
    (y,) = launcher(In(x), bias, Out(4, np.float32))
    np.testing.assert_array_equal(y, x + 20)
    assert launcher.statistics.captures == 1
    other = _DeviceArray(np.full(4, 1, np.float32))
    (y,) = launcher(In(x), other, Out(4, np.float32))
    np.testing.assert_array_equal(y, x + 1)
    assert launcher.statistics.captures == 2
    alive = _DeviceArray.alive
    del bias, other
    gc.collect()
    assert _DeviceArray.alive == alive  # the cached graphs hold them
    launcher.close()
    kernel.raw.calls.clear()  # the fake kernel's own record of its arguments
    gc.collect()
    assert _DeviceArray.alive == alive - 2


class _DeviceArray:
    """Stands for a CuPy array: ``__cuda_array_interface__`` over NumPy memory."""

    alive = 0

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        type(self).alive += 1

    def __del__(self) -> None:
        type(self).alive -= 1

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "data": (self.array.ctypes.data, False),
            "shape": self.array.shape,
            "typestr": self.array.dtype.str,
            "strides": None,
            "version": 3,
        }


def test_the_fake_kernel_receives_device_arrays_not_the_callers():
    launcher, _, raw = make()
    x = np.arange(4, dtype=np.float32)
    launcher(*message(x))
    (x_id, x_type), _, (_, a_type), (_, n_type) = raw.calls[0][2]
    assert x_id != id(x)
    assert x_type is np.ndarray  # the fake's device buffer
    assert (a_type, n_type) == (np.float32, np.uint64)
    launcher.close()


def test_least_recently_used_signatures_are_evicted_with_their_graphs():
    launcher, ops, _ = make(max_graphs=2)
    a, b, c = (np.ones(n, np.float32) for n in (1, 2, 3))
    launcher(*message(a))
    launcher(*message(b))
    launcher(*message(a))  # a is now the most recently used
    assert len(ops.executables) == 2
    launcher(*message(c))  # evicts b
    stats = launcher.statistics
    assert (stats.evictions, stats.cached, len(ops.executables)) == (1, 2, 2)
    launcher(*message(a))
    assert launcher.statistics.captures == 3
    launcher(*message(b))  # b again: captured again
    assert launcher.statistics.captures == 4
    launcher.close()


def test_one_graph_means_a_shape_change_replaces_it():
    launcher, ops, _ = make(max_graphs=1)
    for n in (4, 8, 4):
        (y,) = launcher(*message(np.full(n, 1, np.float32)))
        np.testing.assert_array_equal(y, np.full(n, 2))
        assert len(ops.executables) == 1
    assert launcher.statistics.evictions == 2
    launcher.close()


def test_geometry_is_automatic_or_the_launchers():
    launcher, _, raw = make()
    launcher(*message(np.ones(1000, np.float32)))
    assert raw.calls[-1][:2] == ((4, 1, 1), (256, 1, 1))
    launcher(*message(np.ones(10, np.float32)), size=300)
    assert raw.calls[-1][:2] == ((3, 1, 1), (128, 1, 1))
    launcher.close()
    fixed, _, raw = make(grid=2, block=32)
    fixed(*message(np.ones(1000, np.float32)))
    assert raw.calls[-1][:2] == ((2, 1, 1), (32, 1, 1))
    fixed.close()
    with pytest.raises(ValueError, match="give block= with grid="):
        make(grid=2)


def test_a_failed_capture_ends_the_capture_and_keeps_nothing():
    launcher, ops, _ = make()
    ops.fail_launch_with = TypeError("unsupported argument")
    with pytest.raises(BackendError, match="capturing 'scale_into' into a CUDA graph failed"):
        launcher(*message(np.ones(4, np.float32)))
    stream = ops.streams[0]
    assert stream.capture is None  # the capture ended
    assert ops.graphs == {}
    assert ops.executables == {}
    assert launcher.statistics.cached == 0
    ops.fail_launch_with = None
    (y,) = launcher(*message(np.ones(4, np.float32)))  # the launcher still works
    np.testing.assert_array_equal(y, 2)
    launcher.close()
    gc.collect()
    assert ops.live_buffers == 0


def test_an_invalidated_capture_is_reported_and_leaves_no_graph():
    launcher, ops, _ = make()
    ops.streams[0].invalidate_capture = True
    with pytest.raises(BackendError, match="capture of 'scale_into' was invalidated") as caught:
        launcher(*message(np.ones(4, np.float32)))
    assert isinstance(caught.value.__cause__, FakeCudaError)
    assert ops.streams[0].capture is None
    assert (ops.graphs, ops.executables, launcher.statistics.cached) == ({}, {}, 0)
    launcher.close()


def test_a_failed_instantiation_destroys_the_graph():
    launcher, ops, _ = make()
    ops.fail_instantiate = True
    with pytest.raises(BackendError, match="instantiating the CUDA graph"):
        launcher(*message(np.ones(4, np.float32)))
    assert (ops.graphs, ops.executables, launcher.statistics.cached) == ({}, {}, 0)
    assert ops.log[-1] == "destroy_graph"
    launcher.close()


def test_an_interrupt_during_capture_still_ends_it():
    launcher, ops, _ = make()
    ops.fail_launch_with = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        launcher(*message(np.ones(4, np.float32)))
    assert ops.streams[0].capture is None
    assert ops.graphs == {}
    launcher.close()


def test_the_graph_is_destroyed_once_instantiated():
    launcher, ops, _ = make()
    launcher(*message(np.ones(4, np.float32)))
    assert ops.graphs == {}  # only the executable is kept
    assert len(ops.executables) == 1
    launcher.close()


def test_close_frees_graphs_buffers_and_the_stream():
    launcher, ops, _ = make()
    for n in (4, 8):
        launcher(*message(np.ones(n, np.float32)))
    assert ops.live_buffers == 8  # per signature: In and Out, a host and a device buffer each
    launcher.close()
    gc.collect()
    assert (ops.executables, ops.live_buffers, ops.streams[0].closed) == ({}, 0, True)
    launcher.close()  # idempotent
    with pytest.raises(RuntimeError, match="is closed"):
        launcher(*message(np.ones(4, np.float32)))


def test_a_dropped_launcher_destroys_its_graphs():
    launcher, ops, _ = make()
    launcher(*message(np.ones(4, np.float32)))
    assert len(ops.executables) == 1
    del launcher
    gc.collect()
    assert ops.executables == {}


def test_bad_arguments_name_the_problem():
    launcher, _, _ = make()
    with pytest.raises(TypeError, match=r"argument 0 is a NumPy array of shape \(4,\).*In\(...\)"):
        launcher(np.ones(4, np.float32), Out(4, np.float32), np.float32(1), np.uint64(4))
    with pytest.raises(TypeError, match=r"In\(...\) takes a host \(NumPy\) array"):
        In(_DeviceArray(np.ones(2)))
    with pytest.raises(TypeError, match="Python objects"):
        In(np.array([object()]))
    with pytest.raises(ValueError, match="negative"):
        Out((-1,), np.float32)
    with pytest.raises(TypeError, match="argument 3 is a str"):
        launcher(In(np.ones(4, np.float32)), Out(4, np.float32), np.float32(1), "4")
    with pytest.raises(ValueError, match="no In/InOut/Out argument to size"):
        launcher(np.float32(1))
    with pytest.raises(ValueError, match="max_graphs must be a positive int"):
        make(max_graphs=0)
    assert launcher.statistics.messages == 0
    launcher.close()


def test_python_kernel_bodies_are_refused():
    @pdc_core.kernel
    def body(x):  # type: ignore[no-untyped-def]
        pass

    with pytest.raises(TypeError, match="has a Python body"):
        MessageLauncher(body)
    with pytest.raises(TypeError, match="expected a CudaKernel"):
        MessageLauncher("scale")  # type: ignore[arg-type]


def test_a_synchronous_call_during_a_message_in_flight_is_refused():
    launcher, _, _ = make()
    launcher._begin_message()  # what a launch_async waiting in another task holds
    with pytest.raises(RuntimeError, match="running another message"):
        launcher(*message(np.ones(4, np.float32)))
    launcher._end_message()
    launcher.close()


@pytest.mark.anyio
@pytest.mark.parametrize("graph", [True, False])
async def test_launch_async(graph):
    launcher, ops, _ = make(graph)
    async with launcher:
        for i in range(3):
            x = np.arange(10, dtype=np.float32) * i
            (y,) = await launcher.launch_async(*message(x, a=3.0))
            np.testing.assert_array_equal(y, 3 * x)
    gc.collect()
    assert (ops.executables, ops.live_buffers) == ({}, 0)


@pytest.mark.anyio
async def test_concurrent_messages_take_turns():
    launcher, ops, _ = make()
    stream = ops.streams[0]
    stream.hold = True
    results: dict[int, np.ndarray] = {}

    async def send(i: int) -> None:
        (results[i],) = await launcher.launch_async(*message(np.full(4, i, np.float32)))

    in_flight = []
    async with anyio.create_task_group() as group:
        for i in range(4):
            group.start_soon(send, i)
        await anyio.wait_all_tasks_blocked()
        in_flight.append(launcher.statistics.messages)
        stream.hold = False
    assert in_flight == [1]  # one message in flight, the others waited their turn
    assert {i: list(y) for i, y in results.items()} == {i: [2.0 * i] * 4 for i in range(4)}
    assert launcher.statistics.captures == 1
    launcher.close()


@pytest.mark.anyio
async def test_a_cancelled_message_waits_for_its_work_and_close_frees_everything():
    launcher, ops, _ = make()
    stream = ops.streams[0]
    launcher(*message(np.ones(4, np.float32)))  # captured and cached
    stream.hold = True
    finished: list[str] = []
    scope = anyio.CancelScope()

    async def send() -> None:
        with scope:
            try:
                await launcher.launch_async(*message(np.ones(4, np.float32)))
            finally:
                finished.append("queue empty" if not stream.queue else "work still queued")

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        await anyio.wait_all_tasks_blocked()
        assert stream.queue  # the replay is queued and "running"
        scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert finished == []  # cancelled, but still waiting (shielded) for the replay
        launcher.close()  # while the message is in flight: freed when it ends
        assert len(ops.executables) == 1
        stream.hold = False
    assert finished == ["queue empty"]
    gc.collect()
    assert (ops.executables, ops.live_buffers, stream.closed) == ({}, 0, True)


@pytest.mark.anyio
async def test_cancelled_while_waiting_for_its_turn_queues_nothing():
    launcher, ops, _ = make()
    stream = ops.streams[0]
    stream.hold = True

    async def send() -> None:
        await launcher.launch_async(*message(np.ones(4, np.float32)))

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await launcher.launch_async(*message(np.ones(8, np.float32)))
        assert launcher.statistics.messages == 1
        stream.hold = False
    launcher.close()


@pytest.mark.anyio
async def test_a_failed_stream_raises_from_launch_async():
    launcher, ops, _ = make()

    def broken(*args: Any) -> None:
        raise FakeCudaError("cudaErrorIllegalAddress")

    launcher.kernel.raw.body = broken
    with pytest.raises(FakeCudaError, match="IllegalAddress"):
        await launcher.launch_async(*message(np.ones(4, np.float32)))
    launcher.close()
    assert ops.executables == {}
