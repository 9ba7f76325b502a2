"""Edges of the layers on PyDotCompute's paths (issue 40): each keeps its promise.

Async tests run under asyncio and trio (the root conftest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from pdc_core import Message, Request, Response, RingKernelMessage, RingKernelRuntime
from pdc_core.decorators.ring_kernel import RingKernelBuilder
from pdc_core.exceptions import QueueFullError, QueueTimeoutError
from pdc_core.ring_kernels import lifecycle
from pdc_core.ring_kernels.lifecycle import KernelContext, RingKernelConfig
from pdc_core.ring_kernels.queue import BackpressureStrategy, MessageQueue

LIMIT = 10.0


async def doubler(ctx: KernelContext) -> None:
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            request = await ctx.receive(timeout=0.05)
        except TimeoutError:
            continue
        await ctx.send(request.respond(request.data * 2))


# -- MessageQueue.put's timeout ---------------------------------------------------------


@pytest.mark.parametrize("seconds", [0, 0.0, -1, 1e-9])
async def test_a_put_with_a_zero_or_negative_timeout_enqueues_when_there_is_room(
    seconds: float,
) -> None:
    queue: MessageQueue[RingKernelMessage] = MessageQueue(maxsize=1)
    first = Request(data=1)
    assert await queue.put(first, timeout=seconds) is True
    assert queue.qsize == 1
    with pytest.raises(QueueTimeoutError, match="had no room"):
        await queue.put(Request(data=2), timeout=seconds)
    assert queue.qsize == 1
    assert await queue.get() is first


async def test_a_put_now_follows_the_other_policies_when_full() -> None:
    reject: MessageQueue[RingKernelMessage] = MessageQueue(
        maxsize=1, backpressure=BackpressureStrategy.REJECT
    )
    await reject.put(Request(data=1), timeout=0)
    with pytest.raises(QueueFullError):
        await reject.put(Request(data=2), timeout=0)
    drop: MessageQueue[RingKernelMessage] = MessageQueue(
        maxsize=1, backpressure=BackpressureStrategy.DROP_OLDEST
    )
    await drop.put(Request(data=1), timeout=0)
    newest = Request(data=2)
    assert await drop.put(newest, timeout=0) is True
    assert await drop.get() is newest


# -- runtime.launch(config=), queue_size and the integer rule of grid and block ----------


@dataclass(slots=True)
class Sum(Message):
    a: float = 0.0
    b: float = 0.0


async def adder(ctx: KernelContext) -> None:
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            request = await ctx.receive(timeout=0.05)
        except TimeoutError:
            continue
        await ctx.send(Response(result=request.a + request.b, correlation_id=request.message_id))


async def test_launch_takes_pydotcompute_s_config() -> None:
    config = RingKernelConfig(
        kernel_id="ignored_id", input_queue_size=3, output_queue_size=5, grid_size=2
    )
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch(
            "config_add", adder, config=config, input_type=Sum, output_type=Response
        )
        definition = kernel.definition  # type: ignore[union-attr]
        assert (definition.kernel_id, definition.input_type, definition.output_type) == (
            "config_add",
            Sum,
            Response,
        )
        assert (definition.input_queue_size, definition.output_queue_size) == (3, 5)
        assert definition.grid_size == 2
        await runtime.activate("config_add")
        await runtime.send("config_add", Sum(a=42.0, b=58.0))
        reply = await runtime.receive("config_add", timeout=LIMIT)
        assert reply.result == 100.0
        with pytest.raises(TypeError, match="accepts Sum messages, got Request"):
            await runtime.send("config_add", Request(data=1))  # the type given still holds


async def test_queue_size_and_backpressure_given_beside_config_override_it() -> None:
    config = RingKernelConfig(kernel_id="k", input_queue_size=3, backpressure_strategy="block")
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch(
            "config_override", adder, config=config, queue_size=7, backpressure="drop_oldest"
        )
        definition = kernel.definition  # type: ignore[union-attr]
        assert (definition.input_queue_size, definition.backpressure.value) == (7, "drop_oldest")
        with pytest.raises(TypeError, match=r"config must be a .*RingKernelConfig, got 3"):
            await runtime.launch("config_bad", adder, config=3)
        assert "config_bad" not in runtime.kernel_ids


@pytest.mark.parametrize("size", [0, -1])
async def test_queue_size_zero_is_refused_naming_queue_size(size: int) -> None:
    async with RingKernelRuntime() as runtime:
        with pytest.raises(ValueError, match=f"queue_size must be at least 1, got {size}"):
            await runtime.launch("sized", doubler, queue_size=size)
        assert runtime.kernel_ids == []
    kernel = lifecycle.RingKernel("free_sized", doubler, queue_size=size)
    with pytest.raises(ValueError, match=f"queue_size must be at least 1, got {size}") as caught:
        await kernel.launch()
    assert "input_queue_size" not in str(caught.value)


@pytest.mark.parametrize("argument", ["grid_size", "block_size"])
@pytest.mark.parametrize("value", [1.5, 2.0, True, "2", None])
def test_grid_and_block_follow_the_integer_rule(argument: str, value: Any) -> None:
    expected = re.escape(f"{argument} must be an int, got {type(value).__name__} {value!r}")
    with pytest.raises(TypeError, match=expected):
        RingKernelConfig(kernel_id="k", **{argument: value})
    builder = RingKernelBuilder("k").with_handler(doubler)
    with pytest.raises(TypeError, match=f"{argument} must be an int"):
        getattr(builder, f"with_{argument}")(value)


@pytest.mark.parametrize("argument", ["grid_size", "block_size"])
def test_grid_and_block_below_one_are_refused_naming_them(argument: str) -> None:
    with pytest.raises(ValueError, match=f"{argument} must be at least 1, got 0"):
        RingKernelConfig(kernel_id="k", **{argument: 0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"{argument} must be at least 1, got -2"):
        getattr(RingKernelBuilder("k"), f"with_{argument}")(-2)
    definition = getattr(RingKernelBuilder("k_ok").with_handler(doubler), f"with_{argument}")(
        np_int(4)
    ).build()
    assert getattr(definition, argument) == 4


def np_int(value: int) -> Any:
    import numpy as np

    return np.int32(value)


def test_the_builder_s_queue_sizes_are_checked_when_set() -> None:
    with pytest.raises(ValueError, match="queue_size must be at least 1, got 0"):
        RingKernelBuilder("k").with_queue_size(0)
    with pytest.raises(ValueError, match=r"input_queue_size must be an int, got float 1\.5"):
        RingKernelBuilder("k").with_input_queue_size(1.5)  # type: ignore[arg-type]


# -- the process-wide pool's MiB settings; a limit lowered below what is held -------------


@pytest.mark.parametrize("value", [True, 1.5, "1", b"1"])
def test_the_pool_s_mib_settings_follow_the_integer_rule(fresh_pool: Any, value: Any) -> None:
    pool = fresh_pool.MemoryPool()
    expected = re.escape(f"must be an int, got {type(value).__name__} {value!r}")
    with pytest.raises(TypeError, match=f"^size_mb {expected}$"):
        pool.set_limit(value)
    with pytest.raises(TypeError, match=f"^max_size_mb {expected}$"):
        fresh_pool.MemoryPool(max_size_mb=value)  # checked even though the pool exists
    with pytest.raises(TypeError, match=f"^max_size_mb {expected}$"):
        fresh_pool.configure_memory_pool(max_size_mb=value)
    with pytest.raises(TypeError, match=f"^initial_size_mb {expected}$"):
        fresh_pool.MemoryPool(value)
    assert pool.limit is None  # nothing was set


def test_a_negative_mib_setting_names_the_value_given(fresh_pool: Any) -> None:
    pool = fresh_pool.MemoryPool()
    with pytest.raises(ValueError, match=r"^size_mb must be at least 0, got -1$"):
        pool.set_limit(-1)
    pool.set_limit(np_int(3))
    assert pool.limit == 3 * 2**20


def test_a_release_that_does_not_fit_a_lowered_limit_closes_the_buffer() -> None:
    import numpy as np

    import pdc_core

    pool = pdc_core.MemoryPool(backend="cpu")
    first = pool.acquire((256,), np.float32)  # 1 KiB each
    second = pool.acquire((256,), np.float32)
    pool.limit = 1024  # below the 2 KiB held (both in use)
    pool.release(first)
    assert first.closed
    assert pool.statistics().bytes_held <= 2048 - 1024
    pool.release(second)  # fits now: kept for reuse
    assert not second.closed
    stats = pool.statistics()
    assert (stats.bytes_held, stats.buffers_free) == (1024, 1)
    assert pool.acquire((256,), np.float32) is second


# -- buffers of raw bytes, records of them, and subarray dtypes --------------------------


@pytest.mark.parametrize("dtype", ["V5", [("a", "V3")], [("a", "V3"), ("b", "<i4", (2,))]])
def test_a_buffer_of_raw_bytes_or_records_of_them_is_usable(dtype: Any) -> None:
    import numpy as np

    import pdc_core

    buffer = pdc_core.UnifiedBuffer(3, dtype)
    assert buffer.host.tobytes() == b"\0" * buffer.nbytes  # zeroed on first use
    buffer.host.view(np.uint8)[:] = 7
    buffer.sync_to_device()
    assert buffer.zeros().host.tobytes() == b"\0" * buffer.nbytes
    pool = pdc_core.MemoryPool(backend="cpu")
    with pool.lease(3, dtype) as leased:
        assert leased.host.tobytes() == b"\0" * leased.nbytes
    assert pool.statistics().buffers_free == 1


def test_a_subarray_dtype_is_its_shape_appended() -> None:
    import numpy as np

    import pdc_core
    from pdc_core.backend import normalize_shape_dtype
    from pdc_core.backends.cpu import CPUBackend

    triple = np.dtype((np.int16, (3,)))
    buffer = pdc_core.UnifiedBuffer(3, triple)
    assert (buffer.shape, buffer.dtype) == ((3, 3), np.dtype(np.int16))
    buffer.host[:] = np.arange(9, dtype=np.int16).reshape(3, 3)
    buffer.sync_to_device()
    assert buffer.host[2, 2] == 8
    like = pdc_core.UnifiedBuffer.from_array(np.zeros(3, triple))
    assert (like.shape, like.dtype) == (buffer.shape, buffer.dtype)
    assert normalize_shape_dtype((2,), triple) == ((2, 3), np.dtype(np.int16))
    with pdc_core.MemoryPool(backend="cpu").lease(4, triple) as leased:
        assert leased.shape == (4, 3)
    assert CPUBackend().allocate_zeros((2,), triple).shape == (2, 3)


# -- the free-standing RingKernel's state after a cancelled launch -----------------------


async def test_a_cancelled_launch_leaves_a_state_that_says_what_launch_will_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import anyio

    from pdc_core.exceptions import KernelStateError

    gate = anyio.Event()
    starting = anyio.Event()

    class HeldRuntime(RingKernelRuntime[Any]):
        async def launch(self, *args: Any, **kwargs: Any) -> Any:
            starting.set()
            await gate.wait()  # the kernel is still starting when the caller gives up
            return await super().launch(*args, **kwargs)

    # the body of PyDotCompute's path, whose global the free-standing RingKernel reads
    from pdc_core._pydotcompute.ring_kernels import lifecycle as body

    monkeypatch.setattr(body, "RingKernelRuntime", HeldRuntime)
    kernel = lifecycle.RingKernel("held", doubler)
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as group:
            group.start_soon(kernel.launch)
            await starting.wait()
            assert kernel.state == lifecycle.KernelState.LAUNCHED  # launch() would refuse
            with pytest.raises(KernelStateError, match="still starting"):
                await kernel.activate()
            group.cancel_scope.cancel()
        assert kernel.state == lifecycle.KernelState.TERMINATED  # at once, not later
        with pytest.raises(KernelStateError, match="launch kernel 'held' in state TERMINATED"):
            await kernel.launch()
        gate.set()
        await kernel.terminate()  # waits for the stop the cancel began
        assert kernel.state == lifecycle.KernelState.TERMINATED
        with pytest.raises(KernelStateError, match="in state TERMINATED"):
            await kernel.send(Request(data=1))


async def test_a_failed_launch_reads_failed() -> None:
    from pdc_core.exceptions import KernelStateError

    kernel = lifecycle.RingKernel("bad_policy", doubler, backpressure="sideways")
    with pytest.raises(ValueError, match="sideways"):
        await kernel.launch()
    assert kernel.state == lifecycle.KernelState.FAILED
    with pytest.raises(KernelStateError, match="launch kernel 'bad_policy' in state FAILED"):
        await kernel.launch()


# -- KernelCompiler: each function compiles as itself ------------------------------------


def _adder(step: int) -> Any:
    from pdc_core import cuda

    def add(data: Any, out: Any) -> None:
        i = cuda.grid(1)
        if i < data.shape[0]:
            out[i] = data[i] + step

    return add


def test_closures_of_one_function_compile_as_themselves() -> None:
    import numpy as np

    from pdc_core.compilation.compiler import KernelCompiler

    compiler = KernelCompiler()
    one, two = _adder(1), _adder(2)
    data = np.zeros(4, dtype=np.float32)
    results = []
    for function in (one, two, one):
        compiled = compiler.compile(function)
        out = np.zeros_like(data)
        kernel: Any = compiled.kernel  # a pdc Kernel: k[grid, block](...)
        kernel[1, 4](data, out)
        results.append(out[0])
    assert results == [1.0, 2.0, 1.0]
    assert compiler.compile(two) is compiler.compile(two)  # the same function: kept


def test_lambdas_on_one_line_and_exec_d_functions_compile_as_themselves() -> None:
    pytest.importorskip("numba")
    from pdc_core.compilation.compiler import CompilationOptions, KernelCompiler

    compiler = KernelCompiler(CompilationOptions(device="cpu"))
    first, second = (lambda x: x + 1), (lambda x: x + 2)
    assert compiler.compile(first).kernel(1) == 2
    assert compiler.compile(second).kernel(1) == 3
    made = []
    for offset in (10, 20):
        namespace: dict[str, Any] = {"OFFSET": offset}
        exec("def shifted(x):\n    return x + OFFSET\n", namespace)
        made.append(namespace["shifted"])
    assert [compiler.compile(function).kernel(1) for function in made] == [11, 21]


# -- KernelRegistry.register ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["", None, 3, b"k", ("k",)])
def test_the_registry_refuses_a_name_that_is_not_a_non_empty_str(name: Any) -> None:
    from pdc_core.decorators.kernel import KernelRegistry

    registry = KernelRegistry()
    before = registry.list()
    with pytest.raises(TypeError, match=re.escape(f"must be a non-empty str, got {name!r}")):
        registry.register(name, doubler)
    assert registry.list() == before


@pytest.mark.parametrize("kernel", [None, 42, "doubler"])
def test_the_registry_refuses_a_kernel_that_is_not_callable(kernel: Any) -> None:
    from pdc_core.decorators.kernel import KernelRegistry

    registry = KernelRegistry()
    with pytest.raises(TypeError, match=re.escape(f"kernel 'k' must be callable, got {kernel!r}")):
        registry.register("k", kernel)
    assert registry.get("k") is None


# -- a runtime started by start(): shutdown from another task; never shut down --------------


async def test_shutdown_from_another_task_than_start_s_names_both() -> None:
    import anyio

    from pdc_core import LifecycleError

    runtime: RingKernelRuntime[Any] = RingKernelRuntime()
    started, tried = anyio.Event(), anyio.Event()
    refused: list[BaseException] = []

    async def starter() -> None:
        await runtime.start()
        await runtime.launch("still_running", doubler)
        started.set()
        await tried.wait()
        await runtime.shutdown()  # the task that started it stops it

    async def stranger() -> None:
        try:
            await runtime.shutdown()
        except LifecycleError as error:
            refused.append(error)
            assert runtime.is_active  # refused: nothing stopped
            assert runtime.kernel_ids == ["still_running"]
        finally:
            tried.set()

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as group:
            group.start_soon(starter, name="the-starter")
            await started.wait()
            group.start_soon(stranger, name="a-stranger")
    assert len(refused) == 1
    message = str(refused[0])
    assert "'a-stranger'" in message
    assert "'the-starter'" in message
    assert not runtime.is_active


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_runtime_started_and_never_shut_down_ends_with_the_run(loop: str) -> None:
    import anyio

    kernels: list[Any] = []

    async def main() -> None:
        runtime: RingKernelRuntime[Any] = RingKernelRuntime()
        await runtime.start()
        kernels.append(await runtime.launch("forgotten", doubler))
        await runtime.activate("forgotten")
        reply = await runtime.send_and_receive("forgotten", Request(data=21), timeout=LIMIT)
        assert reply.result == 42
        # returns without shutdown()

    anyio.run(main, backend=loop)  # no TrioInternalError, no error at the run's end
    assert kernels[0].kernel_state in (
        lifecycle.KernelState.TERMINATED,
        lifecycle.KernelState.FAILED,
    )


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_runtime_started_in_a_child_task_that_ended_still_serves(loop: str) -> None:
    import anyio

    async def main() -> None:
        runtime: RingKernelRuntime[Any] = RingKernelRuntime()
        async with anyio.create_task_group() as group:
            group.start_soon(runtime.start)  # that task ends; the runtime stays up
        await runtime.launch("served", doubler)
        await runtime.activate("served")
        reply = await runtime.send_and_receive("served", Request(data=2), timeout=LIMIT)
        assert reply.result == 4

    anyio.run(main, backend=loop)


async def test_a_bad_shutdown_timeout_stops_nothing() -> None:
    runtime: RingKernelRuntime[Any] = RingKernelRuntime()
    await runtime.start()
    with pytest.raises(TypeError, match="timeout"):
        await runtime.shutdown(timeout="soon")  # type: ignore[arg-type]
    assert runtime.is_active
    await runtime.shutdown()
    assert not runtime.is_active
