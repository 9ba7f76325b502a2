"""``benchmarks/cuda_ring.py`` run without a GPU: its host logic on the cpu backend and fakes.

The resident measurements use pdc's persistent-kernel API exactly as on CUDA; here the
echo kernel gets a cpu body too and runs on the cpu backend, under asyncio and trio,
with the default wait and with ``wait="spin"``, so a GPU session cannot fail on the
benchmark's own Python. The per-message launcher measurement runs its loop on a
``MessageLauncher`` over the fake CUDA calls of ``graph_fakes`` (graph and plain). The
report (table, ratios, targets, a failed measurement, the time budget) is checked with
fixed samples. The batched throughput's host phases are checked on the cpu backend, and
``--host`` runs the batched mode on the host build (``cuda_host``).
"""

from __future__ import annotations

import argparse
import ctypes
import enum
import json
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import fake_backend, host_build_marks, load_benchmark
from graph_fakes import FakeGraphOps, FakeRaw
from pdc_cuda import CudaKernel
from pdc_cuda._bench import PrePackedLaunch
from pdc_cuda.graphs import MessageLauncher
from pdc_cuda.testing import HostCudaBackend

import pdc_core

benchmark = load_benchmark()


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    original = benchmark.echo_kernel

    def echo_kernel(name: str, dtype: np.dtype[Any], capacity: int) -> Any:
        kernel = original(name, dtype, capacity)
        kernel.add_body("cpu", lambda requests: requests.copy())
        return kernel

    monkeypatch.setattr(benchmark, "echo_kernel", echo_kernel)
    monkeypatch.setattr(benchmark, "launch_options", lambda threads, backoff=None: {})
    return pdc_core.get_backend("cpu")


@pytest.mark.parametrize("wait", ["sleep", "spin"])
@pytest.mark.parametrize("library", ["asyncio", "trio"])
@pytest.mark.parametrize("size", [8, 4096])
def test_resident_round_trips_on_the_cpu_backend(on_cpu, library, size, wait):
    samples = benchmark.resident_round_trips(on_cpu, size, 30, library, wait=wait)
    assert len(samples) == 30
    p50, p99 = benchmark.percentiles(samples)
    assert 0 < p50 <= p99


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_batched_throughput_on_the_cpu_backend(on_cpu, library):
    figures = benchmark.resident_throughput(on_cpu, library, 2, capacity=1024)
    assert figures["records_per_s"] > 0
    assert figures["batch_ns"] == pytest.approx(1e9 / figures["records_per_s"])
    # The host's phases, timed in a pass of their own on the session's ring: the cpu
    # backend's plain slots have no sequence words (no stamp), and their copy is the
    # write's (publish). Every batch's replies were collected.
    assert figures["write"] > 0
    assert figures["collect"] > 0
    assert figures["stamp"] == 0
    assert figures["host"] == pytest.approx(figures["write"] + figures["collect"])
    assert 0 < figures["host_share"] == pytest.approx(figures["host"] / figures["pass_ns"])
    assert figures["collections_per_batch"] >= 1


def test_the_batched_mode_on_the_host_build(tmp_path, capsys):
    """``--host``: the real cuda backend's host path, its ring kernel on CPU threads: the
    rate and the host's phases of whole rings of 8-byte records, sequence words and all."""
    path = tmp_path / "batched.json"
    assert benchmark.main(["--host", "--quick", "--timeout", "0", "--json", str(path)]) == 0
    saved = json.loads(path.read_text())
    assert saved["failures"] == []
    assert "host build" in saved["environment"]["device"]
    out = capsys.readouterr().out
    for library in ("asyncio", "trio"):
        figures = saved["batched_host_ns_per_record"][library]
        assert saved["batched_records_per_s"][library] == figures["records_per_s"] > 0
        assert figures["pack"] > 0
        assert figures["stamp"] > 0  # the cuda backend's slots carry sequence words
        assert figures["collect"] > 0
        assert 0 < figures["host_share"] < 1
        assert f"batched ({library}): {benchmark.describe_batched(figures)}" in out
        plain = saved["batched_plain_slots"][library]
        assert plain["stamp"] == 0  # no sequence words: the kernel polls IN_HEAD
        ratio = saved["batched_sequenced_over_plain"][library]
        assert ratio == pytest.approx(figures["records_per_s"] / plain["records_per_s"])
        assert f"sequenced / plain: {ratio:.2f}x" in out


def test_plain_slots_last_as_long_as_the_block_even_one_that_raises():
    backend = HostCudaBackend()
    assert backend.ring_sequenced_input
    seen = []

    def measure() -> None:
        with benchmark.plain_slots(backend):
            seen.append(backend.ring_sequenced_input)
            raise RuntimeError("the measurement failed")

    with pytest.raises(RuntimeError, match="measurement failed"):
        measure()
    assert seen == [False]
    assert backend.ring_sequenced_input  # the class's again


for _mark in host_build_marks():
    test_the_batched_mode_on_the_host_build = _mark(test_the_batched_mode_on_the_host_build)


def _batched_figures(rate: float) -> dict[str, float]:
    """What resident_throughput returns, for a fixed rate and fixed phases."""
    return {
        "records_per_s": rate, "batch_ns": 1e9 / rate, "pack": 0.5, "stamp": 0.25,
        "publish": 0.25, "write": 1.0, "collect": 0.5, "host": 1.5, "pass_ns": 6.0,
        "host_share": 0.25, "collections_per_batch": 2.0,
    }  # fmt: skip


def test_the_batched_line_says_what_the_host_spends():
    assert benchmark.describe_batched(_batched_figures(125e6)) == (
        "125.00 M records/s (8.00 ns a record); the host's work in a pass of its own: "
        "1.50 of 6.00 ns a record (25%: pack 0.50, stamp 0.25, publish 0.25, collect 0.50 "
        "in 2.0 collections a batch); the rest is the device and the wait for it"
    )
    assert benchmark.describe_batched("failed") == "failed"


@pytest.mark.parametrize("graph", [True, False])
@pytest.mark.parametrize("size", [8, 4096])
def test_launcher_round_trips_on_fake_cuda_calls(graph, size):
    def echo(src: Any, dst: Any, words: Any) -> None:
        dst[: int(words)] = src[: int(words)]

    ops = FakeGraphOps()
    kernel = CudaKernel(fake_backend(), FakeRaw(echo), "echo", benchmark.ECHO_KERNEL, ())
    launcher = MessageLauncher(
        kernel, grid=1, block=benchmark.echo_threads(size // 8), graph=graph, ops=ops
    )
    samples = benchmark.launcher_round_trips(launcher, size, 30)
    assert len(samples) == 30
    assert launcher.closed
    assert ops.executables == {}
    assert launcher.statistics.captures == (1 if graph else 0)


class FakeDriver:
    """The four driver calls of ``PrePackedLaunch`` on host memory: device addresses are
    host addresses here, and ``echo`` runs in Python on the packed ``void*[3]``."""

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_LAUNCH_FAILED = 719

    CUdeviceptr = int
    CUfunction = int
    CUstream = int

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail
        self.kernel_params: set[int] = set()

    def _result(self, call: str) -> tuple[CUresult]:
        self.calls.append(call)
        ok = self.fail != call
        return (self.CUresult.CUDA_SUCCESS if ok else self.CUresult.CUDA_ERROR_LAUNCH_FAILED,)

    def cuMemcpyHtoDAsync(self, dst: int, src: int, nbytes: int, stream: int) -> Any:
        ctypes.memmove(dst, src, nbytes)
        return self._result("cuMemcpyHtoDAsync")

    def cuMemcpyDtoHAsync(self, dst: int, src: int, nbytes: int, stream: int) -> Any:
        ctypes.memmove(dst, src, nbytes)
        return self._result("cuMemcpyDtoHAsync")

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert isinstance(params, int)  # packed once: an address, not a tuple per launch
        self.kernel_params.add(params)
        pointers = (ctypes.c_uint64 * 3).from_address(params)
        src, dst, words = (ctypes.c_uint64.from_address(p).value for p in pointers)
        ctypes.memmove(dst, src, words * 8)
        return self._result("cuLaunchKernel")

    def cuStreamSynchronize(self, stream: int) -> Any:
        return self._result("cuStreamSynchronize")


def pre_packed(driver: FakeDriver, words: int) -> Any:
    src, dst, host_in, host_out = (np.zeros(words, np.uint64) for _ in range(4))
    launch = PrePackedLaunch(driver, 1, 2, src.ctypes.data, dst.ctypes.data, host_in, host_out, 32)
    launch.keep = (src, dst)  # the fake's "device memory" lives as long as the launch
    return launch


@pytest.mark.parametrize("size", [8, 4096])
def test_the_cuda_bindings_launch_echoes_through_its_packed_parameters(size):
    driver = FakeDriver()
    launch = pre_packed(driver, size // 8)
    message = np.arange(size // 8, dtype=np.uint64) + 7
    samples = benchmark.timed(lambda: launch(message), message, 30)
    assert len(samples) == 30
    assert driver.calls[:4] == [
        "cuMemcpyHtoDAsync",
        "cuLaunchKernel",
        "cuMemcpyDtoHAsync",
        "cuStreamSynchronize",
    ]
    assert driver.kernel_params == {launch.params}  # one packing for every launch


def test_a_failing_driver_call_fails_the_measurement():
    launch = pre_packed(FakeDriver(fail="cuLaunchKernel"), 1)
    with pytest.raises(RuntimeError, match=r"cuLaunchKernel failed: <CUresult\.CUDA_ERROR_LAUNCH"):
        launch(np.ones(1, np.uint64))


def test_the_time_budget_skips_what_would_start_after_it(capsys):
    measurements = benchmark.Measurements(60)
    assert measurements.point("first", lambda: [1e-6, 2e-6]) == (2.0, 2.0)
    measurements.deadline = 0.0  # the budget is spent
    assert measurements.point("second", lambda: [1e-6]) == "skipped"
    assert measurements.run("third", lambda: 1.0) == "skipped"
    assert measurements.skipped == ["second", "third"]
    assert measurements.errors == []
    assert "skipped second: over the time budget" in capsys.readouterr().err


def test_the_report(on_cpu, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(benchmark, "PAYLOADS", {"8 B": 8, "64 B": 64})
    monkeypatch.setattr(benchmark, "BACKOFFS", (0, 256))
    monkeypatch.setattr(benchmark, "BATCH_CAPACITY", 512)
    monkeypatch.setattr(
        benchmark,
        "resident_throughput",
        lambda *args, **kw: _batched_figures(120e6 if args[1] == "trio" else 90e6),
    )
    monkeypatch.setattr(
        benchmark,
        "resident_round_trips",
        lambda *args, wait="sleep", **kw: [(4e-6 if wait == "spin" else 5e-6)] * 10,
    )

    def per_message(backend: Any, size: int, count: int, column: str) -> list[float]:
        if column == benchmark.GRAPH and size == 64:
            raise RuntimeError("capture failed")
        return [
            {
                benchmark.CUPY: 30e-6,
                benchmark.PLAIN: 20e-6,
                benchmark.GRAPH: 10e-6,
                benchmark.BINDINGS: 12e-6,
            }[column]
        ] * count

    monkeypatch.setattr(benchmark, "per_message_round_trips", per_message)
    monkeypatch.setattr(benchmark, "environment", lambda backend: {
        "date": "2026-11-23", "device": "NVIDIA H100 (compute capability 9.0, 132 SMs)",
        "driver": "13.0", "cuda_runtime": "13.0", "cupy": "14.2.0", "numpy": np.__version__,
        "python": "3.12", "host": "x86_64",
    })  # fmt: skip
    path = tmp_path / "bench.json"
    args = argparse.Namespace(quick=True, markdown=True, json=str(path), budget=0.0)
    assert benchmark.run(on_cpu, args) == 1  # one measurement failed
    out = capsys.readouterr()
    assert (
        "| 8 B | 5.0 / 5.0 | 4.0 / 4.0 | 5.0 / 5.0 | 30.0 / 30.0 | 20.0 / 20.0 | 10.0 / 10.0 "
        "| 12.0 / 12.0 | 6.0x | 7.5x | 0.5x | 2.0x | 2.4x | 3.0x | 1.0x |" in out.out
    )
    assert (
        "| 64 B | 5.0 / 5.0 | 4.0 / 4.0 | 5.0 / 5.0 | 30.0 / 30.0 | 20.0 / 20.0 | failed "
        "| 12.0 / 12.0 | 6.0x | 7.5x | n/a | n/a | 2.4x | 3.0x | 1.0x |" in out.out
    )
    for line in (
        'resident round trip p50 <= 5 us with wait="spin" (8 B, asyncio): 4.0 us, met',
        "resident round trip p50 <= 10 us with the default wait (8 B, asyncio): 5.0 us, met",
        ">= 5x faster than CuPy launch + copies (8 B, resident with the default wait): 6.0x, met",
        '>= 5x faster than CuPy launch + copies (8 B, resident with wait="spin"): 7.5x, met',
        ">= 2x faster than the cuda.bindings launch (8 B, resident with the default wait): "
        "2.4x, met",
        '>= 2x faster than the cuda.bindings launch (8 B, resident with wait="spin"): 3.0x, met',
        "batched >= 100 M records/s (8-byte records): 120.00 M records/s, met",
        "(no target) graph replay / plain launch p50 (8 B): 0.50x",
        "graph replay 64 B: RuntimeError: capture failed",
    ):
        assert line in out.out
    assert "capture failed" in out.err
    saved = json.loads(path.read_text())
    assert saved["round_trip_us"]["64 B"]["graph replay"] == "failed"
    assert saved["batched_records_per_s"] == {"asyncio": 90e6, "trio": 120e6}
    assert saved["batched_host_ns_per_record"]["trio"] == _batched_figures(120e6)
    assert "- trio: " + benchmark.describe_batched(_batched_figures(120e6)) in out.out
    # The same fake figures with plain slots: the ratio of the rates is 1.
    assert saved["batched_sequenced_over_plain"] == {"asyncio": 1.0, "trio": 1.0}
    assert "batched (trio), plain input slots: " in out.out
    assert "sequenced / plain: 1.00x" in out.out
