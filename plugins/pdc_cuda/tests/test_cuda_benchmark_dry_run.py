"""``benchmarks/cuda_ring.py`` run without a GPU: its host logic on the cpu backend.

The resident measurements use pdc's persistent-kernel API exactly as on CUDA; here the
echo kernel gets a cpu body too and runs on the cpu backend, under asyncio and trio, so
a GPU session cannot fail on the benchmark's own Python. The per-message CuPy launches
(which need a GPU) are replaced by fixed samples to check the report: the table, the
ratios, the targets and a failed measurement.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import load_benchmark

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


@pytest.mark.parametrize("library", ["asyncio", "trio"])
@pytest.mark.parametrize("size", [8, 4096])
def test_resident_round_trips_on_the_cpu_backend(on_cpu, library, size):
    samples = benchmark.resident_round_trips(on_cpu, size, 30, library)
    assert len(samples) == 30
    p50, p99 = benchmark.percentiles(samples)
    assert 0 < p50 <= p99


def test_batched_throughput_on_the_cpu_backend(on_cpu):
    rate = benchmark.resident_throughput(on_cpu, "asyncio", 2, capacity=1024)
    assert rate > 0


def test_the_report(on_cpu, monkeypatch, capsys):
    monkeypatch.setattr(benchmark, "PAYLOADS", {"8 B": 8, "64 B": 64})
    monkeypatch.setattr(benchmark, "BACKOFFS", (0, 256))
    monkeypatch.setattr(benchmark, "BATCH_CAPACITY", 512)
    monkeypatch.setattr(
        benchmark, "resident_throughput", lambda *args: 12e6 if args[1] == "trio" else 11e6
    )
    monkeypatch.setattr(benchmark, "resident_round_trips", lambda *args, **kw: [5e-6] * 10)

    def launched(backend: Any, size: int, count: int, graph: bool) -> list[float]:
        if graph and size == 64:
            raise RuntimeError("capture failed")
        return [(20e-6 if not graph else 10e-6)] * count

    monkeypatch.setattr(benchmark, "launched_round_trips", launched)
    monkeypatch.setattr(benchmark, "environment", lambda backend: {
        "date": "2026-11-21", "device": "NVIDIA H100 (compute capability 9.0, 132 SMs)",
        "driver": "12.8", "cuda_runtime": "12.9", "cupy": "14.2.0", "numpy": np.__version__,
        "python": "3.11", "host": "x86_64",
    })  # fmt: skip
    args = argparse.Namespace(quick=True, markdown=True, json=None)
    assert benchmark.run(on_cpu, args) == 1  # one measurement failed
    out = capsys.readouterr()
    assert "| 8 B | 5.0 / 5.0 | 5.0 / 5.0 | 20.0 / 20.0 | 10.0 / 10.0 | 4.0x | 2.0x | 1.0x |" in (
        out.out
    )
    assert "| 64 B | 5.0 / 5.0 | 5.0 / 5.0 | 20.0 / 20.0 | failed | 4.0x | n/a | 1.0x |" in out.out
    assert "round trip p50 <= 10 us (8 B, asyncio): 5.0 us, met" in out.out
    assert ">= 5x faster than launch + copies (8 B): 4.0x, missed" in out.out
    assert "batched >= 10 M msgs/s: 12.00 M msgs/s, met" in out.out
    assert "graph replay 64 B: RuntimeError: capture failed" in out.out
    assert "capture failed" in out.err
