"""The layers on PyDotCompute's compilation, orchestrator and telemetry paths.

``pdc_core.compilation`` (the compiler gives pdc kernels, or numba's host functions for
``device="cpu"``; the cache keeps compiled code on disk), ``pdc_core.core.orchestrator``
(launches pdc kernels, records every launch) and ``pdc_core.ring_kernels.telemetry``
(PyDotCompute's recorder, of which the runtime's snapshots are instances; the collector;
the NVML monitor). Async tests run under asyncio and trio (the root conftest).
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

import pdc_core
from pdc_core import RingKernelRuntime, cuda
from pdc_core.compilation.cache import KernelCache, warmup_kernels
from pdc_core.compilation.compiler import CompilationOptions, KernelCompiler, compile_kernel
from pdc_core.core.orchestrator import ComputeOrchestrator, KernelLaunchConfig
from pdc_core.decorators.kernel import cuda_source
from pdc_core.exceptions import KernelCompilationError
from pdc_core.ring_kernels.telemetry import (
    GPUMonitor,
    RingKernelTelemetry,
    TelemetryCollector,
)

LIMIT = 10.0


def double(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < data.shape[0]:
        out[i] = data[i] * 2


# -- compilation.compiler ---------------------------------------------------------------


def test_device_cpu_compiles_with_numba_and_keeps_the_result() -> None:
    pytest.importorskip("numba")

    def add(a: float, b: float) -> float:
        return a + b

    compiler = KernelCompiler(CompilationOptions(device="cpu"))
    compiled = compiler.compile(add, signature="float64(float64, float64)")
    assert compiled.kernel(1.5, 2.0) == 3.5
    assert compiled.kernel is not add  # numba's dispatcher, compiled eagerly
    assert compiler.compile(add, signature="float64(float64, float64)") is compiled
    assert compiler.compile(add) is not compiled  # another signature, another hash
    assert compiler.get_cache_stats() == {"cached_kernels": 2}


def test_a_function_numba_cannot_compile_is_a_kernel_compilation_error() -> None:
    pytest.importorskip("numba")

    def opens(path: str) -> Any:
        return open(path)  # numba compiles no file I/O

    with pytest.raises(KernelCompilationError, match="'opens'") as caught:
        compile_kernel(opens, signature="int64(int64)", device="cpu")
    assert caught.value.kernel_name == "opens"


def test_device_cpu_without_numba_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError

    def f() -> None: ...

    with pytest.raises(KernelCompilationError, match="pip install numba"):
        KernelCompiler().compile(f, options=CompilationOptions(device="cpu"))


def test_device_cuda_gives_a_pdc_kernel_that_runs_where_pdc_can() -> None:
    compiled = KernelCompiler().compile(double)
    assert isinstance(compiled.kernel, pdc_core.Kernel)
    data = np.arange(10, dtype=np.float32)
    out = np.zeros_like(data)
    compiled.kernel[1, 16](data, out)  # numba.cuda.jit's launch form
    np.testing.assert_array_equal(out, data * 2)


def test_a_cuda_source_function_gives_a_source_kernel() -> None:
    source = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2; }'

    @cuda_source(source)
    def twice() -> None: ...

    compiled = KernelCompiler().compile(twice)
    assert isinstance(compiled.kernel, pdc_core.Kernel)
    assert compiled.kernel.source == source
    assert compiled.kernel.name == "twice"


def test_an_unknown_device_names_the_choices() -> None:
    with pytest.raises(KernelCompilationError, match=r"unknown device 'tpu': one of .*cpu"):
        KernelCompiler().compile(double, options=CompilationOptions(device="tpu"))


# -- compilation.cache ------------------------------------------------------------------


def test_the_cache_keeps_code_across_instances(tmp_path: Path) -> None:
    KernelCache(tmp_path).store("k", "h", "ptx text", signature="void()", metadata={"o": 3})
    again = KernelCache(tmp_path)
    assert again.load("k", "h") == b"ptx text"
    assert again.get_stats()["total_hits"] == 1
    assert again.remove("k", "h")
    assert list(tmp_path.glob("*.ptx")) == []


def test_the_least_recently_used_entry_goes_first_whatever_the_clock(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path, max_entries=2)
    cache.store("a", "1", b"a")
    cache.store("b", "1", b"b")
    cache.load("a", "1")  # b is now the least recently used, even within a clock tick
    cache.store("c", "1", b"c")
    assert [cache.contains(k, "1") for k in "abc"] == [True, False, True]


def test_the_size_bound_holds_after_every_store(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path, max_size_mb=1)
    for name in "abcd":
        cache.store(name, "1", b"x" * 400_000)
        assert cache.get_stats()["total_size_bytes"] <= 1024 * 1024
    assert [cache.contains(k, "1") for k in "abcd"] == [False, False, True, True]


def test_an_unreadable_index_warns_and_starts_empty(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text("{not json")
    with pytest.warns(RuntimeWarning, match="unreadable"):
        cache = KernelCache(tmp_path)
    assert cache.get_stats()["entries"] == 0


def test_warmup_compiles_now_and_raises_what_does_not_compile() -> None:
    compiler = pdc_core.compilation.compiler.get_compiler()
    compiler.clear_cache()
    warmup_kernels([double])
    assert compiler.get_cache_stats() == {"cached_kernels": 1}
    with pytest.raises(KernelCompilationError):
        warmup_kernels([42])  # type: ignore[list-item]
    compiler.clear_cache()


# -- core.orchestrator ------------------------------------------------------------------


def test_a_launch_config_is_checked_by_pdc_s_rules() -> None:
    config = KernelLaunchConfig(grid_size=4, block_size=(8, 2))
    assert (config.grid_size, config.block_size) == ((4,), (8, 2))
    assert config.launch_config == pdc_core.LaunchConfig((4,), (8, 2))
    with pytest.raises(ValueError, match="block_size must have 1 to 3 dimensions"):
        KernelLaunchConfig(block_size=(1, 1, 1, 1))
    with pytest.raises(TypeError, match="grid_size"):
        KernelLaunchConfig(grid_size="big")  # type: ignore[arg-type]


async def test_the_orchestrator_launches_a_pdc_kernel_over_the_config() -> None:
    with anyio.fail_after(LIMIT):
        async with ComputeOrchestrator() as orchestrator:
            orchestrator.register_kernel("double", pdc_core.kernel(double, backend="cpu"))
            data = np.arange(6, dtype=np.float32)
            out = np.zeros_like(data)
            config = KernelLaunchConfig(grid_size=1, block_size=4)  # covers 4 of the 6
            execution = await orchestrator.launch_kernel("double", config, data, out)
            assert execution.success
            assert execution.kernel_name == "double"
            np.testing.assert_array_equal(out, [0, 2, 4, 6, 0, 0])
            with pytest.raises(TypeError, match="positional arguments only"):
                await orchestrator.launch_kernel("double", config, data, out=out)
            with pytest.raises(ValueError, match=r"'missing' not registered .*double"):
                await orchestrator.launch_kernel("missing", config)
            assert len(orchestrator.get_execution_history(kernel_name="double")) == 2


async def test_a_failed_launch_is_recorded_then_raised() -> None:
    def fails() -> None:
        raise ZeroDivisionError

    async def awaited(value: int) -> int:
        await anyio.lowlevel.checkpoint()
        return value

    with anyio.fail_after(LIMIT):
        async with ComputeOrchestrator() as orchestrator:
            with pytest.raises(ZeroDivisionError):
                await orchestrator.launch_kernel(fails, KernelLaunchConfig())
            assert (await orchestrator.launch_kernel(awaited, KernelLaunchConfig(), 1)).success
            failed, succeeded = orchestrator.get_execution_history()
            assert not failed.success
            assert isinstance(failed.error, ZeroDivisionError)
            assert failed.end_time >= failed.start_time
            assert succeeded.success


async def test_shutdown_closes_the_streams_it_made_even_when_cancelled() -> None:
    closed: list[bool] = []
    with anyio.fail_after(LIMIT):
        orchestrator = ComputeOrchestrator()
        await orchestrator.initialize()
        stream = orchestrator.create_stream()
        assert stream is not None
        original = stream.close
        stream.close = lambda: (closed.append(True), original())[1]  # type: ignore[method-assign]
        with anyio.CancelScope() as scope:
            scope.cancel()
            await orchestrator.shutdown()
        assert scope.cancelled_caught
        assert closed == [True]
        assert not orchestrator.is_active


@pytest.mark.parametrize("call", ["initialize", "shutdown", "launch_kernel"])
async def test_the_orchestrator_s_async_calls_are_checkpoints(call: str) -> None:
    orchestrator = ComputeOrchestrator()
    await orchestrator.initialize()
    arguments: tuple[Any, ...] = (
        (lambda: None, KernelLaunchConfig()) if call == "launch_kernel" else ()
    )
    with anyio.CancelScope() as scope:
        scope.cancel()
        await getattr(orchestrator, call)(*arguments)
    assert scope.cancelled_caught, f"{call} completed in a cancelled scope"
    await orchestrator.shutdown()


async def test_stream_context_is_a_checkpoint_that_makes_no_stream_when_cancelled() -> None:
    orchestrator = ComputeOrchestrator()
    await orchestrator.initialize()
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with orchestrator.stream_context():
            pytest.fail("the block ran in a cancelled scope")
    assert scope.cancelled_caught
    assert orchestrator._streams == []  # no stream made, none left to close
    async with orchestrator.stream_context() as stream:
        assert stream is not None
    await orchestrator.shutdown()


# -- ring_kernels.telemetry -------------------------------------------------------------


def test_the_recorder_keeps_true_minimum_maximum_and_mean() -> None:
    telemetry = RingKernelTelemetry("k")
    for latency in (0, 1_000, 500):
        telemetry.record_message(latency)
    assert (telemetry.min_latency_ns, telemetry.max_latency_ns) == (0, 1_000)
    assert telemetry.avg_latency_ns == 500
    telemetry.record_error("boom")
    telemetry.reset()
    assert telemetry == RingKernelTelemetry("k")


async def test_the_runtime_s_snapshots_are_pydotcompute_s_telemetry() -> None:
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime(enable_telemetry=True) as runtime:

            async def idle(ctx: Any) -> None:
                await ctx.wait_active()

            await runtime.launch("idle", idle)
            snapshot = runtime.get_telemetry("idle")
            assert isinstance(snapshot, RingKernelTelemetry)
            assert snapshot.to_dict()["kernel_id"] == "idle"


def test_the_collector_sums_its_recorders() -> None:
    collector = TelemetryCollector()
    collector.register_kernel("a").record_message(10)
    collector.register_kernel("b").record_drop()
    collector.register_kernel("a").record_error("x")
    summary = collector.get_summary()
    assert summary["kernel_count"] == 2
    assert (summary["total_messages_processed"], summary["total_messages_dropped"]) == (1, 1)
    assert summary["total_errors"] == 1


class _FakeNVML(types.ModuleType):
    """NVML with one GPU whose power reading is not supported."""

    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.shutdowns = 0

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"Fake GPU"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return "GPU-1"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=100, used=25, free=75)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return types.SimpleNamespace(gpu=40, memory=10)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 55

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        raise self.NVMLError("not supported")

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        return 300_000  # milliwatts


def test_the_monitor_translates_nvml_s_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = _FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monitor = GPUMonitor()
    assert monitor.is_available
    info = monitor.get_gpu_info(0)
    assert (info.name, info.uuid, info.memory_utilization) == ("Fake GPU", "GPU-1", 0.25)
    assert (info.utilization_gpu, info.temperature, info.power_limit) == (0.4, 55.0, 300.0)
    assert math.isnan(info.power_usage)  # not supported: not a made-up 0
    with pytest.raises(ValueError, match="no GPU 1: NVML sees 1"):
        monitor.get_gpu_info(1)
    monitor.shutdown()
    monitor.shutdown()
    assert nvml.shutdowns == 1
    assert monitor.get_gpu_info(0).name == "N/A"


def test_without_nvml_the_monitor_sees_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monitor = GPUMonitor()
    assert (monitor.is_available, monitor.device_count) == (False, 0)
    assert monitor.get_all_gpu_info() == []
    assert TelemetryCollector(_gpu_monitor=monitor).get_summary()["gpu_utilization"] is None
