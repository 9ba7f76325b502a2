"""``benchmarks/cuda_contexts.py`` without a GPU: its report and its beside-a-kernel probe.

The GPU half runs in one call on a GPU machine (see docs/cuda-backend.md); here the
parts that decide what a cell says are checked, so that call cannot fail on them.
"""

from __future__ import annotations

import sys
import threading
import types

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import load_benchmark
from pdc_cuda import ResidentKernelBlocks

benchmark = load_benchmark("cuda_contexts")


def test_an_operation_is_timed_refused_or_reported_blocked():
    assert benchmark.try_beside(lambda: None, 5.0).endswith(" ms")

    def refused() -> None:
        raise ResidentKernelBlocks("would wait")

    assert benchmark.try_beside(refused, 5.0) == "refused"
    release = threading.Event()
    assert benchmark.try_beside(release.wait, 0.05) == "blocked"
    release.set()  # the abandoned worker returns

    def broken() -> None:
        raise RuntimeError("cudaErrorLaunchFailure")

    assert benchmark.try_beside(broken, 5.0) == "failed: RuntimeError: cudaErrorLaunchFailure"


def test_the_table_has_a_row_per_placement_and_the_ratios_hold_them_side_by_side():
    beside = dict.fromkeys(benchmark.OPERATIONS, "1.0 ms")
    rows = [
        {
            "placement": "own",
            "launch_ms": 170.0,
            "idle_us": (15.0, 30.0),
            "beside_user_us": (900.0, 2100.0),
            "user_rate_ratio": 0.5,
            "beside": beside,
        },
        {
            "placement": "shared",
            "launch_ms": 20.0,
            "idle_us": (14.0, 29.0),
            "beside_user_us": (20.0, 40.0),
            "user_rate_ratio": 0.99,
            "beside": {**beside, "compile + launch": "refused"},
        },
        {"placement": "green", "error": "CudaContextError: cuGreenCtxCreate failed"},
    ]
    lines = benchmark.table(rows)
    assert lines[0].startswith("| placement | launch | idle p50/p99 us")
    assert "| own | 170.0 ms | 15.0 / 30.0 | 900.0 / 2100.0 | 0.50x alone |" in lines[2]
    assert "refused" in lines[3]
    assert lines[4] == "| green | failed: CudaContextError: cuGreenCtxCreate failed |"
    assert benchmark.ratios(rows) == ["own / shared idle p50: 1.07x (target <= 1.10x)"]
    assert benchmark.percentiles([1e-6] * 99 + [1e-3]) == (1.0, 1000.0)


def test_the_gpu_rig_does_not_run_in_shared_what_would_block_there(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace())  # never called here
    rig = benchmark.Rig(backend=types.SimpleNamespace(synchronize=lambda: None))
    for placement in ("own", "green"):
        operations = rig.operations(placement)
        assert list(operations) == list(benchmark.OPERATIONS)
        assert all(callable(operation) for operation in operations.values())
    shared = rig.operations("shared")
    assert list(shared) == list(benchmark.OPERATIONS)
    assert {name: shared[name] for name in benchmark.UNREFUSABLE} == dict.fromkeys(
        benchmark.UNREFUSABLE, "not run (blocks)"
    )
    assert callable(shared["compile + launch"])  # pdc refuses it: tried, expected "refused"


def test_host_mode_without_a_host_build_exits_2_saying_why(monkeypatch, capsys):
    from pdc_cuda.testing import HostCudaBackend

    from pdc_core.backend import Availability

    monkeypatch.setattr(
        HostCudaBackend, "availability", classmethod(lambda cls: Availability.no("no g++"))
    )
    with pytest.raises(SystemExit) as exited:
        benchmark.main(["--host", "--timeout", "0"])
    assert exited.value.code == 2
    assert "cuda_contexts.py --host: no host build: no g++" in capsys.readouterr().err
