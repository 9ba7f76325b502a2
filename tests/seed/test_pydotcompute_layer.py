"""The thin layers on PyDotCompute's paths, and the seed facade's PyDotCompute semantics.

What code written for PyDotCompute meets with ``pdc_core`` in place of ``pydotcompute``:
``KernelState`` compares equal to the actor state a kernel reports, a terminated kernel
leaves ``kernel_ids``, ``runtime.start()``/``kernel_scope()``, ``send_and_receive`` with
a kernel that echoes the request, and the layers (``MessageQueue`` over a mailbox,
``Accelerator`` over the backends, the validators over pdc's checks, ...). Async tests
run under asyncio and trio (the root conftest).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import anyio
import numpy as np
import pytest

import pdc_core
from pdc_core import ActorCrashed, ActorState, KernelState, LifecycleError, RingKernelRuntime
from pdc_core.backends import BackendType, CPUBackend
from pdc_core.core.accelerator import Accelerator, DeviceType, cuda_available, get_accelerator
from pdc_core.decorators.kernel import KernelRegistry, cuda_source, get_kernel_registry
from pdc_core.decorators.ring_kernel import (
    RingKernelBuilder,
    get_ring_kernel_meta,
    is_ring_kernel,
    ring_kernel,
)
from pdc_core.decorators.validators import (
    RuntimeValidator,
    validate_backpressure_strategy,
    validate_block_size,
    validate_grid_size,
    validate_message,
    validate_priority,
    validate_queue_size,
)
from pdc_core.exceptions import (
    InvalidConfigurationError,
    KernelCompilationError,
    QueueFullError,
    QueueTimeoutError,
    TypeValidationError,
)
from pdc_core.ring_kernels.lifecycle import RingKernelConfig, managed_kernel
from pdc_core.ring_kernels.message import RingKernelMessage
from pdc_core.ring_kernels.queue import BackpressureStrategy, MessageQueue

LIMIT = 10.0


async def echo(ctx: Any) -> None:
    """PyDotCompute's test kernel: sends each request back as it is."""
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.05)
        except TimeoutError:
            continue
        await ctx.send(msg)


# -- the seed facade's semantics -------------------------------------------------------


def test_a_kernel_state_equals_its_actor_state_and_only_its_own_kernel_state() -> None:
    assert KernelState.LAUNCHED == ActorState.PAUSED
    assert ActorState.RUNNING == KernelState.ACTIVE
    assert KernelState.TERMINATED == ActorState.STOPPED
    assert KernelState.ACTIVE != ActorState.PAUSED
    assert KernelState.LAUNCHED != KernelState.DEACTIVATED  # same actor state, other states
    assert KernelState.FAILED.actor_state is ActorState.CRASHED
    for state in KernelState:  # equal objects hash alike
        assert hash(state) == hash(state.actor_state)
    assert len({KernelState.LAUNCHED: 1, KernelState.DEACTIVATED: 2}) == 2


async def test_kernel_state_comparisons_work_on_the_state_a_kernel_reports() -> None:
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("layer_echo", echo)
        assert kernel.state == KernelState.LAUNCHED
        assert kernel.state is ActorState.PAUSED  # pdc's own API is unchanged
        await runtime.activate("layer_echo")
        assert kernel.state == KernelState.ACTIVE
        assert kernel.state != KernelState.LAUNCHED
        await runtime.deactivate("layer_echo")
        assert kernel.kernel_state is KernelState.DEACTIVATED  # exact where state is not
        await runtime.terminate("layer_echo")
        assert kernel.state == KernelState.TERMINATED


async def test_a_terminated_kernel_leaves_kernel_ids_but_stays_readable() -> None:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("layer_a", echo)
        await runtime.launch("layer_b", echo)
        await runtime.terminate("layer_a")
        assert runtime.kernel_ids == ["layer_b"]
        assert runtime.get_kernel_state("layer_a") is KernelState.TERMINATED
        await runtime.launch("layer_a", echo)  # the id can be launched again
        assert sorted(runtime.kernel_ids) == ["layer_a", "layer_b"]
        await runtime.shutdown()
        assert runtime.kernel_ids == []


async def test_send_and_receive_returns_the_echoed_request() -> None:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("layer_echo", echo)
        await runtime.activate("layer_echo")
        request = RingKernelMessage(priority=50)
        reply = await runtime.send_and_receive("layer_echo", request, timeout=LIMIT)
        assert reply.message_id == request.message_id
        # The echo answered the ask: nothing is left for a plain receive.
        with pytest.raises(QueueTimeoutError):
            await runtime.receive("layer_echo", timeout=0.05)
        other = RingKernelMessage()  # a plain send's echo still goes to the output queue
        await runtime.send("layer_echo", other)
        assert (await runtime.receive("layer_echo", timeout=LIMIT)).message_id == other.message_id


async def test_start_and_shutdown_run_a_runtime_without_async_with() -> None:
    runtime = RingKernelRuntime()
    await runtime.start()
    assert runtime.is_active
    kernel = await runtime.launch("layer_echo", echo)
    await runtime.activate("layer_echo")
    await runtime.shutdown()
    assert not runtime.is_active
    assert runtime.kernel_ids == []
    assert kernel.kernel_state is KernelState.TERMINATED
    with pytest.raises(LifecycleError):
        await runtime.start()


async def crash(ctx: Any) -> None:
    raise ValueError("boom")


async def test_a_crash_after_start_is_raised_by_shutdown_and_the_runtime_stops() -> None:
    runtime = RingKernelRuntime()

    async def pydotcompute_style() -> None:
        await runtime.start()
        try:
            await runtime.launch("layer_crash", crash)
            await runtime.activate("layer_crash")
            await runtime.get_kernel("layer_crash").wait()  # it crashed
        finally:
            await runtime.shutdown()

    with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed, match="boom"):
        await pydotcompute_style()
    assert not runtime.is_active


async def test_kernel_scope_activates_and_terminates_even_when_the_block_raises() -> None:
    async with RingKernelRuntime() as runtime:
        async with runtime.kernel_scope("layer_scoped", echo) as kernel:
            assert kernel.state == KernelState.ACTIVE
            request = RingKernelMessage()
            reply = await runtime.send_and_receive("layer_scoped", request, timeout=LIMIT)
            assert reply.message_id == request.message_id
        assert "layer_scoped" not in runtime.kernel_ids
        with pytest.raises(ValueError, match="boom"):
            async with runtime.kernel_scope("layer_scoped", echo) as kernel:
                raise ValueError("boom")
        assert kernel.kernel_state is KernelState.TERMINATED


async def test_managed_kernel_runs_one_kernel_in_a_runtime_of_its_own() -> None:
    async with managed_kernel("layer_managed", echo) as kernel:
        assert kernel.state == KernelState.ACTIVE
        request = RingKernelMessage()
        await kernel.tell(request)
        assert (await kernel.receive(timeout=LIMIT)).message_id == request.message_id
    assert kernel.state == KernelState.TERMINATED


# -- MessageQueue over a mailbox -------------------------------------------------------


async def test_message_queue_orders_by_priority_or_fifo() -> None:
    queue: MessageQueue[RingKernelMessage] = MessageQueue(maxsize=10)
    for priority in (50, 200, 100):
        await queue.put(RingKernelMessage(priority=priority))
    assert [(await queue.get()).priority for _ in range(3)] == [200, 100, 50]
    fifo: MessageQueue[RingKernelMessage] = MessageQueue(maxsize=10, use_priority=False)
    sent = [RingKernelMessage(priority=p) for p in (50, 200, 100)]
    for message in sent:
        await fifo.put(message)
    assert [await fifo.get() for _ in range(3)] == sent


async def test_message_queue_backpressure_and_timeouts_are_the_mailbox_s() -> None:
    reject: MessageQueue[RingKernelMessage] = MessageQueue(
        maxsize=1, backpressure=BackpressureStrategy.REJECT
    )
    await reject.put(RingKernelMessage())
    with pytest.raises(QueueFullError):
        await reject.put(RingKernelMessage())
    assert not reject.put_nowait(RingKernelMessage())
    block: MessageQueue[RingKernelMessage] = MessageQueue(maxsize=1)
    await block.put(RingKernelMessage())
    with pytest.raises(QueueTimeoutError):
        await block.put(RingKernelMessage(), timeout=0.05)
    assert block.qsize == 1  # the timed-out put left nothing behind
    with pytest.raises(QueueTimeoutError):
        await MessageQueue[RingKernelMessage]().get(timeout=0.05)


async def test_message_queue_checks_its_arguments_by_the_names_given() -> None:
    queue: MessageQueue[RingKernelMessage] = MessageQueue(maxsize=1)
    await queue.put(RingKernelMessage())
    with pytest.raises(ValueError, match="timeout is NaN"):
        await queue.put(RingKernelMessage(), timeout=math.nan)  # as get's timeout
    with pytest.raises(TypeError, match="timeout"):
        await queue.put(RingKernelMessage(), timeout=True)
    assert queue.qsize == 1
    with pytest.raises(TypeError, match="maxsize must be an int"):
        MessageQueue(maxsize=1.5)  # type: ignore[arg-type]
    sized: MessageQueue[RingKernelMessage] = MessageQueue(maxsize=np.int64(2))  # type: ignore[arg-type]
    assert sized.maxsize == 2
    assert type(sized.maxsize) is int


async def test_message_queue_get_waits_for_a_put() -> None:
    queue: MessageQueue[RingKernelMessage] = MessageQueue()
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.put, RingKernelMessage(priority=42))
        assert (await queue.get(timeout=LIMIT)).priority == 42


def test_message_queue_counts_everything() -> None:
    queue: MessageQueue[RingKernelMessage] = MessageQueue(
        maxsize=2, backpressure=BackpressureStrategy.DROP_OLDEST
    )
    for priority in (10, 20, 30):
        assert queue.put_nowait(RingKernelMessage(priority=priority))
    assert queue.full
    assert queue.get_nowait().priority == 30  # type: ignore[union-attr]
    assert queue.get_stats() == {
        "current_size": 1,
        "max_size": 2,
        "total_enqueued": 3,
        "total_dequeued": 1,
        "total_dropped": 1,  # the oldest of the lowest priority: 10
    }
    assert queue.clear() == 1
    assert queue.get_nowait() is None
    unbounded: MessageQueue[RingKernelMessage] = MessageQueue(maxsize=0)
    for _ in range(100):
        assert unbounded.put_nowait(RingKernelMessage())
    assert len(unbounded) == 100
    assert not unbounded.full
    assert BackpressureStrategy.REJECT.value is pdc_core.Backpressure.RAISE


# -- Accelerator over the backends -----------------------------------------------------


@pytest.fixture
def fresh_accelerator() -> Iterator[None]:
    Accelerator._instance = None
    Accelerator._initialized = False
    yield
    Accelerator._instance = None
    Accelerator._initialized = False


@pytest.mark.usefixtures("fresh_accelerator")
def test_the_accelerator_lists_pdc_s_devices() -> None:
    accelerator = get_accelerator()
    assert accelerator is Accelerator()
    gpus = [
        device
        for info in pdc_core.available_backends()
        if info.availability.available and info.name in ("cuda", "metal")
        for device in type(pdc_core.get_backend(info.name)).devices()
        if device.kind == "gpu"
    ]
    expected = gpus or pdc_core.get_backend("cpu").devices()
    assert [d.name for d in accelerator.devices] == [d.name for d in expected]
    assert cuda_available() == any(d.backend == "cuda" for d in expected)
    if not gpus:
        assert accelerator.current_device.device_type is DeviceType.CPU
    with pytest.raises(ValueError, match="Valid range"):
        accelerator.set_device(len(expected))
    assert set(accelerator.get_memory_info()) == {"free", "total", "used"}


# -- validators, configuration, registries, errors -------------------------------------


def test_validators_apply_pdc_s_rules_and_name_the_parameter() -> None:
    assert validate_priority(255) == 255
    with pytest.raises(InvalidConfigurationError, match="priority=256"):
        validate_priority(256)
    with pytest.raises(ValueError, match="my_queue"):  # also a ValueError
        validate_queue_size(0, name="my_queue")
    assert validate_grid_size(64) == (64,)
    with pytest.raises(InvalidConfigurationError):
        validate_grid_size((1, 2, 3, 4))
    assert validate_block_size((32, 64), max_threads=2048) == (32, 64)
    with pytest.raises(InvalidConfigurationError, match="2048 threads"):
        validate_block_size((32, 64))
    assert validate_backpressure_strategy("reject") == "reject"
    with pytest.raises(InvalidConfigurationError):
        validate_backpressure_strategy("sometimes")
    with pytest.raises(TypeValidationError):
        validate_message(object)
    validator = RuntimeValidator(strict=False)
    assert not validator.validate_message_type(object)
    assert len(validator.warnings) == 1
    assert validator.validate_kernel_config({"grid_size": 4, "other": 1}) == {
        "grid_size": (4,),
        "other": 1,
    }


def test_ring_kernel_config_is_checked_by_pdc_and_makes_its_definition() -> None:
    with pytest.raises(ValueError, match="input_queue_size"):
        RingKernelConfig(kernel_id="layer_config", input_queue_size=0)
    with pytest.raises(ValueError, match="unknown backpressure policy 'sometimes'"):
        RingKernelConfig(kernel_id="layer_config", backpressure_strategy="sometimes")
    definition = RingKernelConfig(
        kernel_id="layer_config", output_queue_size=8, backpressure_strategy="reject"
    ).definition(echo)
    assert isinstance(definition, pdc_core.RingKernelDefinition)
    assert (definition.kernel_id, definition.output_queue_size) == ("layer_config", 8)
    assert definition.backpressure is pdc_core.Backpressure.RAISE


def test_ring_kernel_metadata_and_builder_read_and_make_definitions() -> None:
    built = RingKernelBuilder("layer_built").with_queue_size(64).with_handler(echo).build()
    assert is_ring_kernel(built)
    assert not is_ring_kernel(echo)
    assert get_ring_kernel_meta(echo) is None
    meta = get_ring_kernel_meta(built)
    assert meta is not None
    assert meta["kernel_id"] == "layer_built"
    assert meta["config"]["input_queue_size"] == 64
    assert ring_kernel is pdc_core.ring_kernel
    with pytest.raises(ValueError, match="needs a handler"):
        RingKernelBuilder("layer_unbuilt").build()


def test_the_kernel_registry_and_cuda_source() -> None:
    registry = get_kernel_registry()
    assert registry is KernelRegistry()
    registry.clear()
    registry.register("layer_kernel", echo)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("layer_kernel", echo)
    assert registry.get("layer_kernel") is echo
    assert registry.list() == ["layer_kernel"]
    registry.clear()

    @cuda_source("extern C __global__ void k() {}")
    def k() -> None: ...

    assert k.__cuda_source__ == "extern C __global__ void k() {}"  # type: ignore[attr-defined]


def test_pydotcompute_s_errors_are_pdc_errors() -> None:
    error = InvalidConfigurationError("grid_size", 0, "must be positive")
    assert isinstance(error, pdc_core.PdcError)
    assert isinstance(error, ValueError)
    assert (error.parameter, error.value) == ("grid_size", 0)
    assert issubclass(TypeValidationError, TypeError)
    assert issubclass(KernelCompilationError, pdc_core.BackendError)


def test_the_cpu_backend_layer_uses_pdc_s_cpu_backend() -> None:
    backend = CPUBackend()
    assert backend.backend_type is BackendType.CPU
    assert BackendType(pdc_core.get_backend("cpu").name) is BackendType.CPU
    assert backend.device_count == len(pdc_core.get_backend("cpu").devices())
    zeros = backend.allocate_zeros((2, 3), np.float32)
    assert zeros.shape == (2, 3)
    assert zeros.dtype == np.float32
    assert not zeros.any()
    source = np.arange(3.0)
    copied = backend.copy_to_device(source)
    assert not np.shares_memory(copied, source)
    np.testing.assert_array_equal(backend.copy_to_host(copied), source)
    failed = backend.execute_kernel(lambda: 1 / 0, (1,), (1,))
    assert not failed.success
    assert isinstance(failed.error, ZeroDivisionError)
    assert backend.execute_kernel(np.add, (1,), (1,), source, source).success


def test_the_process_wide_pool_on_pydotcompute_s_path(fresh_pool: Any) -> None:
    path = fresh_pool
    pool = path.MemoryPool(max_size_mb=1)
    assert pool is path.MemoryPool() is path.get_memory_pool()
    assert pool.pool is pdc_core.get_memory_pool()  # a view of pdc's process-wide pool
    assert pool.limit == pdc_core.get_memory_pool().limit == 2**20
    assert pool.enabled  # reuses from the start, as the seed documents expect
    buffer = pool.acquire((1024,), np.float32, pinned=True)
    assert pool.get_stats() == path.PoolStatistics(4096, 4096, 0)
    assert pool.get_pinned_stats() == path.PoolStatistics(4096, 4096, 0)
    pool.release(buffer)
    assert pool.get_stats().n_free_blocks == 1
    assert pool.get_stats().utilization == 0.0
    assert "enabled=True" in repr(pool)
    pool.free_all_blocks()
    assert pool.get_stats() == path.PoolStatistics(0, 0, 0)
    assert path.configure_memory_pool(max_size_mb=2, enable=False) is pool
    assert (pool.limit, pool.enabled) == (2 * 2**20, False)
    assert pdc_core.get_memory_pool().enabled is False
    pool.set_limit(None)
    assert pool.limit is None


def test_one_pool_per_process_whichever_path(fresh_pool: Any) -> None:
    view, pdc_pool = fresh_pool.get_memory_pool(), pdc_core.get_memory_pool()
    # What PyDotCompute's path releases, pdc's path reuses, and the other way round.
    first = view.acquire((256,), np.float32)
    view.release(first)
    assert pdc_pool.acquire((256,), np.float32) is first
    pdc_pool.release(first)
    assert view.acquire((256,), np.float32) is first
    stats = pdc_pool.statistics()
    assert view.statistics() == stats
    assert (stats.hits, stats.misses) == (2, 1)
    assert view.get_stats() == fresh_pool.PoolStatistics(1024, 1024, 0)
    view.release(first)
    assert view.get_stats() == fresh_pool.PoolStatistics(0, 1024, 1)
    # Settings made through either path are the one pool's.
    view.set_limit(1)
    assert pdc_pool.limit == 2**20
    pdc_pool.limit = 2**21
    assert view.limit == 2**21
    pdc_pool.clear()
    assert view.get_stats().n_free_blocks == 0


def test_the_first_view_leaves_a_limit_set_on_pdc_s_path(fresh_pool: Any) -> None:
    pdc_core.get_memory_pool().limit = 4096
    assert fresh_pool.MemoryPool().limit == 4096  # no max_size_mb: the limit stays


# -- the free-standing RingKernel on PyDotCompute's path -------------------------------


async def test_a_free_standing_kernel_runs_outside_the_caller_s_nurseries() -> None:
    from pdc_core.exceptions import KernelStateError
    from pdc_core.ring_kernels import lifecycle

    kernel = lifecycle.RingKernel("layer_free", echo)
    assert kernel.state == KernelState.CREATED
    assert "CREATED" in repr(kernel)
    for operation in (kernel.activate, kernel.receive, kernel.terminate):
        with pytest.raises(KernelStateError, match="in state CREATED"):
            await operation()
    with pytest.raises(KernelStateError, match="in state CREATED"):
        await kernel.send(RingKernelMessage())
    with anyio.CancelScope() as scope:
        scope.cancel()
        await kernel.launch()  # cancelled at its checkpoint: nothing starts
    assert kernel.state == KernelState.CREATED
    with anyio.fail_after(LIMIT):
        await kernel.launch()  # returns with the kernel running in a task of its own
        assert kernel.state == KernelState.LAUNCHED
        with pytest.raises(KernelStateError, match="launch kernel 'layer_free'"):
            await kernel.launch()
        await kernel.activate()
        request = RingKernelMessage()
        await kernel.send(request)
        assert (await kernel.receive(timeout=LIMIT)).message_id == request.message_id
        await kernel.deactivate()
        assert kernel.state == KernelState.DEACTIVATED
        await kernel.reactivate()
        await kernel.terminate()
    assert kernel.state == KernelState.TERMINATED


async def test_a_kernel_a_runtime_launches_is_a_pydotcompute_ring_kernel() -> None:
    from pdc_core.ring_kernels import lifecycle

    async with RingKernelRuntime() as runtime:
        assert isinstance(await runtime.launch("layer_instance", echo), lifecycle.RingKernel)


async def test_a_free_standing_kernel_s_launch_and_crash_errors_reach_the_caller() -> None:
    from pdc_core.ring_kernels import lifecycle

    with pytest.raises(ValueError, match="sideways"):
        await lifecycle.RingKernel("layer_bad", echo, backpressure="sideways").launch()
    config = RingKernelConfig(kernel_id="layer_crashing", input_queue_size=8)
    kernel = lifecycle.RingKernel("layer_crashing", crash, config)
    with anyio.fail_after(LIMIT):
        await kernel.launch()
        with pytest.raises(ActorCrashed, match="boom"):
            await kernel.terminate()  # whether the kernel has crashed yet or not
    assert kernel.state == KernelState.FAILED
