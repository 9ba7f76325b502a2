"""``benchmarks/cuda_contexts.py --host``: its measuring code on pdc-cuda's host build.

The dry run of the GPU figures (``test_cuda_benchmark_figures_dry_run.py``) runs the
whole script; here one placement is measured in-process with an operation planted that
outlives the deadline, so that a cell reports ``blocked`` while the measurement goes
on and the resident kernel still answers, under asyncio and trio. Only what the cells
say is checked, never a time.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import host_build_marks, load_benchmark
from pdc_cuda.testing import HostCudaBackend

pytestmark = host_build_marks()

benchmark = load_benchmark("cuda_contexts")


class PlantedRig(benchmark.HostRig):  # type: ignore[misc, name-defined]
    """The host rig whose ``synchronize`` waits until :attr:`release` is set."""

    rate_seconds = 0.05

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.release = threading.Event()

    def operations(self, placement: str) -> dict[str, Any]:
        operations: dict[str, Any] = super().operations(placement)
        operations["synchronize"] = self.release.wait
        return operations


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_an_operation_past_its_deadline_is_blocked_and_the_kernel_still_answers(
    library: str,
) -> None:
    rig = PlantedRig(HostCudaBackend(max_threads_per_block=2))
    try:
        # A deadline far beyond what a refusal takes even on a loaded machine: only the
        # planted operation, which never returns by itself, can outlive it.
        row = benchmark.measure_placement(
            rig, "shared", 5, 2.0, benchmark.HostWork(nbytes=4096), 1.0, library
        )
    finally:
        rig.release.set()  # the abandoned worker returns
    assert row["beside"] == {
        "cupy first op": "not run (no CuPy on the host build)",
        "compile + launch": "refused",  # a module new to the shared placement
        "cudaFreeHost": "refused",  # backend.free_cached_memory()
        "synchronize": "blocked",
    }
    assert row["answers_after"] is True
    # How much user work ran is up to the scheduler; that it was counted is not.
    assert row["user_kernels_launched"] >= 0
    assert row["user_rate_ratio"] >= 0
    assert set(row) >= {"launch_ms", "idle_us", "beside_user_us"}
    assert rig.backend.resident_kernels() == []  # the session ended: nothing left resident
