"""The GPU tests of the resident ring kernel, run on the host build of the same source.

``pdc_cuda.testing.HostCudaBackend`` is the cuda backend whose device is the host: the
rendered ``ring_kernel.cu`` (NVRTC checks it first) built by ``g++ -std=c++20`` with the
CUDA vocabulary header, launched as one block of real OS threads over host memory.
The tests below are the GPU modules' own test functions, imported unchanged: only the
``cuda`` fixture differs. Marked ``cuda_host`` (``pytest -m cuda_host`` runs them all);
they skip with the reason where no C++20 compiler or no NVRTC is found. Every async test
runs under asyncio and trio. ``test_cuda_host_tsan.py`` runs the same kernels under
ThreadSanitizer.
"""

# ruff: noqa: F401 - imports after the skip guard; the imported tests are collected
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_host_plan import check_planned
from cuda_pipeline_support import ADD_ONE, MINUS_THREE, REC, TWICE, expected, records, stage
from cuda_test_support import (
    DOUBLE,
    PADDED,
    REPLY,
    REQUEST,
    padding_kernels,
    skip_if_a_kernel_is_resident,
)
from pdc_cuda import CudaCompileError
from pdc_cuda._ring_source import RingWiring, render_ring_kernel
from pdc_cuda.testing import (
    HEADER_DIR,
    HostCudaBackend,
    HostKernelFault,
    build_ring_kernel,
    compiler_missing,
)
from pdc_cuda.testing._build import compiler

# The GPU modules' tests of the resident kernel and of pipelines, unchanged.
from test_cuda_gpu import (
    test_body_that_does_not_compile_fails_the_launch,
    test_device_state_is_shared_and_read_back,
    test_drain_answers_every_published_request,
    test_error_word_surfaces_as_actor_crashed,
    test_resident_kernel_round_trips_and_stops,
    test_the_kernel_takes_a_request_by_its_sequence_word_alone,
)
from test_cuda_gpu_pipeline import (
    test_a_crash_in_the_middle_stage_names_it_and_fails_what_is_in_flight,
    test_a_stage_crash_crashes_the_nursery_naming_the_stage,
    test_a_stage_that_does_not_compile_is_named_and_nothing_runs,
    test_cancellation_leaves_no_stage_running,
    test_concurrent_callers_each_get_their_own_replies,
    test_drain_stop_answers_everything_in_flight_stage_by_stage,
    test_pause_and_resume_go_through_every_stage,
    test_stop_now_fails_every_request_in_flight,
    test_the_pipeline_as_an_actor,
    test_three_stages_in_order_with_backpressure_through_small_links,
)

from pdc_core import PersistentKernel, PersistentPipeline, open_persistent_pipeline
from pdc_core.backend import MemoryKind, Offset, RingMemory
from pdc_core.testing import BackendConformance
from pdc_core.testing.pytest_plugin import anyio_backend


def _host_build_missing() -> str | None:
    availability = HostCudaBackend.availability()
    return None if availability.available else availability.reason


_missing = _host_build_missing()

pytestmark = [
    pytest.mark.cuda_host,
    pytest.mark.skipif(
        _missing is not None, reason=f"no host build of the ring kernel: {_missing}"
    ),
    pytest.mark.anyio,
    pytest.mark.usefixtures("gpu_watchdog"),
]

#: Tests of the GPU modules that are not about the ring kernel, with the reason they do
#: not run here; every other test of those modules is imported above.
NOT_HERE = {
    "test_devices_and_properties": "device discovery of a real GPU",
    "test_device_index_out_of_range_lists_devices": "device discovery of a real GPU",
    "test_memory_kinds": "CuPy arrays and mapped memory read by a GPU",
    "test_pinned_unified_buffer_gives_cupy_arrays_and_interop": "CuPy interop",
    "test_kernels_compile_launch_and_report_errors": "plain CuPy kernels, not the ring kernel",
    "test_launch_kernel_without_a_stream_returns_completed": "plain CuPy kernels",
    "test_kernel_source_decorator_with_numpy_arguments": "plain CuPy kernels",
    "test_kernel_launch_async": "plain CuPy kernels",
    "test_python_kernel_through_numba": "numba-cuda kernels",
    "test_plain_launches_while_a_kernel_is_resident": "plain CuPy kernels beside a resident one",
}


@pytest.fixture
def cuda(host_builds: frozenset[str]) -> Iterator[HostCudaBackend]:
    """The cuda backend, its device the host build on CPU threads (every kernel the
    module launches built up front: a source the plan lacks fails the test)."""
    backend = HostCudaBackend()
    yield backend
    check_planned([backend], host_builds)


def test_every_gpu_ring_kernel_test_runs_here() -> None:
    here = {name for name in globals() if name.startswith("test_")}
    tests = Path(__file__).parent
    for module in ("test_cuda_gpu.py", "test_cuda_gpu_pipeline.py"):
        source = (tests / module).read_text(encoding="utf-8")
        names = {
            line.split("(")[0].split()[-1]
            for line in source.splitlines()
            if line.startswith(("def test_", "async def test_"))
        }
        missing = names - here - set(NOT_HERE)
        assert not missing, f"{module} has ring-kernel tests this module does not run: {missing}"


class TestHostConformance(BackendConformance):
    """The conformance kit's persistent-kernel checks (and the memory and stream checks
    the host device supports) against the host build."""

    backend_name = "cuda"
    timeout = 30.0

    @pytest.fixture
    def backend(self, host_builds: frozenset[str]) -> Iterator[HostCudaBackend]:
        backend = HostCudaBackend()
        yield backend
        check_planned([backend], host_builds)

    def persistent_kernel(self, backend: Any) -> PersistentKernel:
        kernel = PersistentKernel("conformance_affine", np.float32, np.float32, capacity=8)
        return kernel.add_body(
            "cuda",
            "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) {"
            " r.value = 2.0f * q.value + 1.0f; return 0; }",
        )

    def failing_persistent_kernel(self, backend: Any) -> PersistentKernel:
        kernel = PersistentKernel("conformance_failing", np.float32, np.float32, capacity=8)
        return kernel.add_body(
            "cuda", "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) { return 1; }"
        )


# -- what only the host build checks -----------------------------------------------------


def _double(capacity: int = 64) -> PersistentKernel:
    kernel = PersistentKernel("double", REQUEST, REPLY, capacity=capacity)
    return kernel.add_body("cuda", DOUBLE)


@pytest.mark.parametrize("threads", [1, 7, 64])
async def test_any_block_size_answers_every_request_in_order(cuda: Any, threads: int) -> None:
    from pdc_core import open_persistent_kernel

    batch = np.zeros(300, REQUEST)
    batch["id"] = np.arange(300)
    batch["x"] = np.arange(300)
    async with open_persistent_kernel(_double(16), cuda, threads=threads) as session:
        replies = await session.request_batch(batch)
        assert session.resident.stream.launch.instance.build.path.exists()
    assert replies["id"].tolist() == list(range(300))
    assert np.array_equal(replies["y"], np.arange(300, dtype=np.float32) * 2)


async def test_a_two_stage_pipeline(cuda: Any) -> None:
    pipeline = PersistentPipeline(stage("a", ADD_ONE, 3), stage("c", MINUS_THREE, 2))
    async with open_persistent_pipeline(pipeline, cuda) as pipe:
        replies = await pipe.request_batch(records(500))
        assert replies["id"].tolist() == list(range(500))
        assert np.array_equal(replies["x"], np.arange(500) - 2.0)
    assert cuda.resident_kernels() == []


async def test_a_scope_narrower_than_the_memory_needs_fails_the_launch(cuda: Any) -> None:
    """Device scope on the mapped host region: the host would not see those accesses
    ordered on a GPU; the host build refuses at the first such atomic, naming the line."""
    kernel = _double()
    memory = RingMemory.allocate(cuda, kernel.layout)
    wrong = RingWiring(input_scope="device", sequenced_input=True)
    source = render_ring_kernel(DOUBLE, REQUEST, REPLY, None, wrong)
    compiled = cuda.compile_kernel(source, "pdc_ring_kernel")
    stream = cuda.create_stream()
    address = np.uint64(memory.address)
    compiled.launch((1,), (4,), (address, address, np.uint64(0)), stream=stream)
    with anyio.fail_after(30):
        while True:
            try:
                if stream.done:
                    pytest.fail("the launch finished instead of failing")
            except HostKernelFault as fault:
                message = str(fault)
                break
            await anyio.sleep(0.001)
    stream.discard()
    assert "cuda::atomic_ref at thread_scope_device on mapped host memory" in message
    assert "needs thread_scope_system" in message
    assert "pdc_ring_kernel.cu:" in message
    assert memory.load32(Offset.STARTED) == 0  # it failed before it started


@pytest.mark.parametrize("which", [0, 1], ids=["in_place", "staged"])
async def test_every_reply_goes_out_with_zero_padding(cuda: Any, which: int) -> None:
    """The body fills its whole reply with 0xAB, then writes the fields: the kernel
    zeroes the 7 padding bytes of every reply, read in place or staged, so nothing the
    slot, the stage or the body left there leaves the device."""
    from pdc_core import open_persistent_kernel

    kernel = padding_kernels()[which]
    requests = np.zeros(40, kernel.request_dtype)
    if kernel.request_dtype.names is None:
        requests[:] = np.arange(40)
    else:
        requests["id"] = np.arange(40)
    async with open_persistent_kernel(kernel, cuda, threads=8) as session:
        replies = await session.request_batch(requests)
        one = await session.request(requests[3])
    assert replies["id"].tolist() == list(range(1, 41))
    assert replies["flag"].tolist() == [1] * 40
    padding = replies.view(np.uint8).reshape(40, PADDED.itemsize)[:, 9:]
    assert not padding.any(), padding
    assert one.tobytes() == np.array((4, 1), PADDED).tobytes()


def test_nvrtc_gates_every_host_build(tmp_path: Path) -> None:
    """The header includes <thread>, so g++ alone would accept a body using std::this_thread;
    NVRTC does not, and neither does the host build: it compiles nothing NVRTC rejects."""
    body = DOUBLE.replace(
        "reply.id = request.id;", "reply.id = request.id; std::this_thread::yield();"
    )
    source = render_ring_kernel(body, REQUEST, REPLY, None, RingWiring(sequenced_input=True))
    found = compiler()
    assert found is not None
    unit = tmp_path / "kernel.cu"
    unit.write_text(source, encoding="utf-8")
    accepted = subprocess.run(
        [found[0], "-std=c++20", "-fsyntax-only", "-x", "c++", "-I", str(HEADER_DIR),
         "-include", str(HEADER_DIR / "pdc_cuda_host.h"), str(unit)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr  # what the gate is there for
    with pytest.raises(CudaCompileError, match="this_thread"):
        build_ring_kernel(source)


async def test_a_gpu_test_starting_beside_a_resident_kernel_is_skipped(cuda):
    """The GPU tests' ``cuda`` fixture skips a test while an earlier test's kernel is still
    resident (a hang would hide every later test), and lets it run once none is."""
    from pdc_core import open_persistent_kernel

    kernel = PersistentKernel("left_resident", REQUEST, REPLY, capacity=64)
    kernel.add_body("cuda", DOUBLE)
    async with open_persistent_kernel(kernel, cuda):
        resident = r"still resident on cuda:0 .*left_resident"
        with pytest.raises(pytest.skip.Exception, match=resident):
            skip_if_a_kernel_is_resident(cuda)
    assert skip_if_a_kernel_is_resident(cuda) is cuda


async def test_the_shared_placement_refuses_a_new_module_beside_a_resident_kernel(host_builds):
    """With a kernel resident in the primary context (``context="shared"``), what would
    load a module or free memory there raises at once, naming the kernel and the
    placement that avoids it; the kernel answers throughout, and once it is stopped
    nothing is refused any more."""
    from pdc_cuda import ResidentKernelBlocks

    from pdc_core import open_persistent_kernel

    backend = HostCudaBackend(context="shared")
    kernel = PersistentKernel("double", REQUEST, REPLY, capacity=64).add_body("cuda", DOUBLE)
    other = PersistentKernel("other", REQUEST, REPLY, capacity=64)
    other.add_body("cuda", f"{DOUBLE}\n// a module not loaded yet\n")
    async with open_persistent_kernel(kernel, backend) as session:
        (resident,) = backend.resident_kernels()
        assert resident.shares_primary
        refused = r"primary CUDA context \('double'\).*context='own'"
        with pytest.raises(ResidentKernelBlocks, match=refused):
            async with open_persistent_kernel(other, backend):
                pass
        with pytest.raises(ResidentKernelBlocks, match=refused):
            backend.free_cached_memory()
        reply = await session.request((3, 1.5))
        assert float(reply["y"]) == 3.0
    assert backend.resident_kernels() == []
    backend.free_cached_memory()  # nothing resident: nothing to wait for
    check_planned([backend], host_builds)


async def test_pdc_check_s_probe_beside_a_resident_kernel(host_builds):
    """``pdc check``'s probe: in the shared placement the GPU's own (a new module
    refused at once); in pdc's own context the GPU's CuPy op and plain kernel, which
    the host build has neither of: a CapabilityError, which the check reports as a skip."""
    from pdc_core import CapabilityError, open_persistent_kernel

    kernel = PersistentKernel("double", REQUEST, REPLY, capacity=64).add_body("cuda", DOUBLE)
    shared, own = HostCudaBackend(context="shared"), HostCudaBackend()
    async with open_persistent_kernel(kernel, shared):
        detail = await anyio.to_thread.run_sync(shared.check_beside_resident)
    assert detail.startswith("shared placement: a new module is refused at once")
    async with open_persistent_kernel(kernel, own):
        with pytest.raises(CapabilityError, match="the host build runs no CuPy op"):
            await anyio.to_thread.run_sync(own.check_beside_resident)
    check_planned([shared, own], host_builds)
