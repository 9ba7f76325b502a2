"""The GPU kernel-mesh tests (``test_cuda_gpu_mesh.py``) on the host build of the ring
kernel: four devices, each a :class:`pdc_cuda.testing.HostCudaBackend` standing for
``cuda:0`` .. ``cuda:3`` (``device=i``), given to ``start_mesh`` as ``devices=[...]``.

Like separate GPUs, the instances share nothing but the host: each has its own
allocations, resident-kernel bookkeeping and kernels, and each member kernel is one
block of real OS threads running the rendered ``ring_kernel.cu``. The test functions are
the GPU module's, imported unchanged: only the ``cuda_mesh`` fixture differs. Marked
``cuda_host``; every async test runs under asyncio and trio.
"""

# ruff: noqa: F401 - the imported tests are collected
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_host_plan import check_planned
from pdc_cuda.testing import HostCudaBackend
from test_cuda_gpu_mesh import (
    CudaMesh,
    test_a_cancelled_call_leaves_no_waiter_in_any_member,
    test_a_member_error_word_fails_that_member_and_it_restarts_in_place,
    test_a_member_error_word_without_a_policy_fails_the_whole_mesh,
    test_call_scatter_stream_call_one_and_broadcast_over_every_device,
)

from pdc_core.testing.pytest_plugin import anyio_backend

_availability = HostCudaBackend.availability()

pytestmark = [
    pytest.mark.cuda_host,
    pytest.mark.skipif(
        not _availability.available,
        reason=f"no host build of the ring kernel: {_availability.reason}",
    ),
    pytest.mark.anyio,
    pytest.mark.usefixtures("gpu_watchdog"),
]

#: Simulated devices.
DEVICES = 4


@pytest.fixture
def cuda_mesh(host_builds: frozenset[str]) -> Iterator[CudaMesh]:
    """Four host-build devices, named to ``start_mesh`` by their backends."""
    backends = [HostCudaBackend(device=index) for index in range(DEVICES)]
    yield CudaMesh(list(backends), backends)
    check_planned(backends, host_builds)


def test_every_gpu_mesh_test_runs_here() -> None:
    source = (Path(__file__).parent / "test_cuda_gpu_mesh.py").read_text(encoding="utf-8")
    names = {
        line.split("(")[0].split()[-1]
        for line in source.splitlines()
        if line.startswith(("def test_", "async def test_"))
    }
    missing = names - set(globals())
    assert not missing, f"test_cuda_gpu_mesh.py has tests this module does not run: {missing}"


def test_the_simulated_devices_are_distinct_cuda_devices() -> None:
    backends = [HostCudaBackend(device=index) for index in range(DEVICES)]
    assert [b.qualified_name for b in backends] == [f"cuda:{i}" for i in range(DEVICES)]
    assert [b.properties.index for b in backends] == list(range(DEVICES))
    with pytest.raises(ValueError, match="non-negative"):
        HostCudaBackend(device=-1)
