"""``benchmarks/cuda_contexts.py --host``: its measuring code on pdc-cuda's host build.

The dry run of the GPU figures (``test_cuda_benchmark_figures_dry_run.py``) runs the
whole script; here one placement is measured in-process with an operation planted that
outlives the deadline, so that a cell reports ``blocked`` while the measurement goes
on and the resident kernel still answers, under asyncio and trio. Only what the cells
say is checked, never a time.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import host_build_marks, load_benchmark
from pdc_cuda.testing import HostCudaBackend

pytestmark = host_build_marks()

benchmark = load_benchmark("cuda_contexts")


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_an_operation_past_its_deadline_is_blocked_and_the_kernel_still_answers(
    library: str,
) -> None:
    rig = benchmark.HostRig(HostCudaBackend(max_threads_per_block=2))
    rig.rate_seconds = 0.05
    # The host rig's operations, with synchronize replaced by one that waits for release.
    release = threading.Event()
    host_operations = rig.operations
    rig.operations = lambda placement: {**host_operations(placement), "synchronize": release.wait}
    try:
        # A deadline far beyond what a refusal takes even on a loaded machine: only the
        # planted operation, which never returns by itself, can outlive it.
        row = benchmark.measure_placement(
            rig, "shared", 5, 2.0, benchmark.HostWork(nbytes=4096), 1.0, library
        )
    finally:
        release.set()  # the abandoned worker returns
    assert row["beside"] == {
        "cupy first op": "not run (no CuPy on the host build)",
        "compile + launch": "refused",  # a module new to the shared placement
        "cudaFreeHost": "refused",  # backend.free_cached_memory()
        "synchronize": "blocked",
    }
    assert row["answers_after"] is True
    # Every figure is there (how much user work ran is up to the scheduler).
    assert set(row) >= {"launch_ms", "idle_us", "beside_user_us", "user_kernels_launched"}
    assert row["user_rate_ratio"] is not None
    assert rig.backend.resident_kernels() == []  # the session ended: nothing left resident
