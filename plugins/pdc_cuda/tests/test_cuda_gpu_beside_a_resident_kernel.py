"""What a program can do beside a resident kernel, on a real GPU (``-m cuda``).

Each test keeps one pdc kernel resident and does one thing a GPU user does next --
CuPy's first use of an op, a new ``compile_kernel`` and its launch, a numba-cuda
kernel, freeing pinned memory, a second resident kernel, a pipeline, ``read_state``,
a device-wide synchronize -- in a worker thread with a deadline of a few seconds
(``PDC_BESIDE_DEADLINE``, 5 by default; ``PDC_BESIDE_COMPILE_DEADLINE``, 20, for
those that compile first: NVRTC or numba-cuda work, not a wait). In the default
placement (a context of pdc's own) every one must complete; in the ``"shared"``
placement pdc's own operations that would wait for the kernel must raise
:class:`~pdc_cuda.ResidentKernelBlocks` at once, and what pdc cannot refuse (CuPy's and
numba's module loads, a free outside pdc) is the reason the default exists, so it is
not run there (it would hang the worker).

An operation that blocks fails its test with the time it was given; stopping the
resident kernel then lets the blocked thread finish, so one hang does not take the
run with it. The last test measures the reverse: the resident round trip while the
primary context runs a loop of kernels (p50/p99 printed and, with
``PDC_BESIDE_RESULTS=path.json``, written for docs/cuda-backend.md).

Every source here is new to the process (a fresh token in it), so each test really
loads a module while the kernel is resident.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_pipeline_support import abc, expected
from cuda_test_support import COUNTING, DOUBLE, REPLY, REQUEST, STATE, requires_gpu
from pdc_cuda import ResidentKernelBlocks

from pdc_core import PersistentKernel, open_persistent_kernel, open_persistent_pipeline
from pdc_core.testing.pytest_plugin import anyio_backend  # noqa: F401 - asyncio and trio

pytestmark = [
    pytest.mark.cuda,
    requires_gpu(),
    pytest.mark.anyio,
    pytest.mark.usefixtures("gpu_watchdog"),
]

T = TypeVar("T")
DEADLINE = float(os.environ.get("PDC_BESIDE_DEADLINE", "5"))
#: For an operation that compiles first (NVRTC, numba-cuda: seconds of CPU work, not a
#: wait): still far below "for ever", which is what a blocked module load takes.
COMPILE_DEADLINE = float(os.environ.get("PDC_BESIDE_COMPILE_DEADLINE", "20"))
PLACEMENTS = ("own", "shared")


def _fresh() -> str:
    """A token no source in this process has used: its module is loaded for the first time."""
    return uuid.uuid4().hex[:12]


def _double_kernel(name: str = "beside") -> PersistentKernel:
    kernel = PersistentKernel(name, REQUEST, REPLY, capacity=64)
    kernel.add_body("cuda", DOUBLE)
    return kernel


async def _within_deadline(what: str, operation: Callable[[], T], deadline: float = DEADLINE) -> T:
    """Run ``operation`` in a worker thread; fail the test if it has not returned in
    ``deadline`` seconds (the thread is abandoned: it returns once the kernel stops)."""
    started = time.perf_counter()
    try:
        with anyio.fail_after(deadline):
            return await anyio.to_thread.run_sync(operation, abandon_on_cancel=True)
    except TimeoutError:
        pytest.fail(
            f"{what} did not return within {deadline:g} s beside a resident kernel "
            f"(blocked for {time.perf_counter() - started:.1f} s)"
        )


async def _still_answers(session: Any) -> None:
    with anyio.fail_after(DEADLINE):
        reply = await session.request((41, 1.5))
    assert (int(reply["id"]), float(reply["y"])) == (41, 3.0)


def _refused_in_shared(placement: str) -> Any:
    """``pytest.raises(ResidentKernelBlocks)`` in the shared placement, else nothing."""
    if placement == "shared":
        return pytest.raises(ResidentKernelBlocks, match="context='own'")
    import contextlib

    return contextlib.nullcontext()


def _only_own(placement: str, why: str) -> None:
    if placement != "own":
        pytest.skip(f"not run in the {placement!r} placement: {why}")


@pytest.fixture(params=PLACEMENTS)
def placement(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_cupy_first_use_of_an_op(cuda, placement):
    _only_own(placement, "CuPy's module load would wait for the kernel (pdc cannot refuse it)")
    import cupy

    token = _fresh()
    op = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x + 1.0f", f"pdc_beside_{token}")
    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:

        def run() -> Any:
            out = op(cupy.arange(16, dtype=cupy.float32))
            return cupy.asnumpy(out)

        out = await _within_deadline("CuPy's first use of an elementwise op", run, COMPILE_DEADLINE)
        np.testing.assert_array_equal(out, np.arange(16, dtype=np.float32) + 1)
        await _still_answers(session)


async def test_compile_kernel_and_launch_of_a_new_source(cuda, placement):
    import cupy

    token = _fresh()
    source = (
        f'extern "C" __global__ void add_{token}(float* x, unsigned long long n) {{'
        "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;"
        "  if (i < n) x[i] += 1.0f; }"
    )
    data = cupy.zeros(256, dtype=cupy.float32)
    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:

        def run() -> Any:
            kernel = cuda.compile_kernel(source, f"add_{token}")
            cuda.launch_kernel(kernel, (1, 1, 1), (256, 1, 1), (data, np.uint64(256)))
            return cuda.to_host(data)

        with _refused_in_shared(placement):
            out = await _within_deadline(
                "compile_kernel + launch of a new source", run, COMPILE_DEADLINE
            )
            np.testing.assert_array_equal(out, np.ones(256, np.float32))
        await _still_answers(session)


async def test_a_numba_cuda_kernel(cuda, placement):
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pdc-cuda[numba])")
    import cupy

    from pdc_core import cuda as pdc_cuda_api

    def bump(data):  # type: ignore[no-untyped-def]  # a new body: a first compile
        i = pdc_cuda_api.grid(1)
        if i < data.shape[0]:
            data[i] += 2

    data = cupy.zeros(128, dtype=cupy.float32)
    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:

        def run() -> Any:
            cuda.run_python_kernel(bump, (1, 1, 1), (128, 1, 1), (data,))
            return cuda.to_host(data)

        with _refused_in_shared(placement):
            out = await _within_deadline(
                "a numba-cuda kernel's first launch", run, COMPILE_DEADLINE
            )
            np.testing.assert_array_equal(out, np.full(128, 2, np.float32))
        await _still_answers(session)


async def test_freeing_pinned_and_device_memory(cuda, placement):
    _only_own(placement, "cudaFreeHost outside pdc would wait for the kernel")
    import cupy

    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:

        def run() -> None:
            pinned = cupy.cuda.PinnedMemory(1 << 20)  # not pooled: del is cudaFreeHost
            del pinned
            gc.collect()
            cuda.free_cached_memory()  # cudaFree / cudaFreeHost of CuPy's pools

        await _within_deadline("cudaFreeHost and free_cached_memory", run)
        await _still_answers(session)


async def test_a_device_wide_synchronize(cuda, placement):
    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:
        await _within_deadline("backend.synchronize()", cuda.synchronize)
        await _still_answers(session)


async def test_a_second_resident_kernel(cuda, placement):
    token = _fresh()
    second = PersistentKernel("second", REQUEST, REPLY, capacity=64)
    second.add_body("cuda", f"{DOUBLE}\n// a source new to the process: {token}\n")
    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:
        with _refused_in_shared(placement):
            with anyio.fail_after(COMPILE_DEADLINE):
                async with open_persistent_kernel(second, cuda, context=placement) as other:
                    reply = await other.request((5, 2.0))
                    assert float(reply["y"]) == 4.0
        await _still_answers(session)


async def test_a_pipeline_launch(cuda, placement):
    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:
        with _refused_in_shared(placement):
            with anyio.fail_after(COMPILE_DEADLINE):
                async with open_persistent_pipeline(abc(), cuda, context=placement) as pipe:
                    reply = await pipe.request((7, 1.5))
                    assert reply["x"] == expected(np.float64(1.5))
        await _still_answers(session)


async def test_read_state(cuda, placement):
    kernel = PersistentKernel("counting", REQUEST, REPLY, capacity=64, state=np.zeros(1, STATE))
    kernel.add_body("cuda", COUNTING)
    async with open_persistent_kernel(kernel, cuda, context=placement) as session:
        await session.request((0, 1.0))
        await session.request((0, 1.0))
        state = await _within_deadline("read_state", session.resident.read_state)
        assert int(state["count"][0]) == 2


async def test_the_resident_kernel_answers_while_the_primary_context_runs_kernels(cuda, placement):
    """The reverse: round trips while a thread keeps the primary context busy with a
    loop of kernels (contexts time-slice when both have work): p50/p99 recorded."""
    import cupy

    busy = cupy.ones(1 << 22, dtype=cupy.float32)
    stop = threading.Event()
    launched = [0]

    def user_loop() -> None:
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            while not stop.is_set():
                busy.__imul__(1.0000001)  # one elementwise kernel per iteration
                launched[0] += 1
                stream.synchronize()

    busy *= 1.0  # loads the op before the kernel is resident (the shared placement)
    cupy.cuda.get_current_stream().synchronize()
    rounds = int(os.environ.get("PDC_BESIDE_ROUNDS", "500"))
    async with open_persistent_kernel(_double_kernel(), cuda, context=placement) as session:
        await _still_answers(session)
        idle = await _round_trips(session, rounds)
        worker = threading.Thread(target=user_loop, daemon=True)
        worker.start()
        try:
            loaded = await _round_trips(session, rounds)
        finally:
            stop.set()
            await anyio.to_thread.run_sync(worker.join)
    assert launched[0] > 0
    result = {
        "placement": placement,
        "idle_us": _percentiles(idle),
        "beside_user_kernels_us": _percentiles(loaded),
        "user_kernels_launched": launched[0],
        "rounds": rounds,
    }
    print(json.dumps(result))
    path = os.environ.get("PDC_BESIDE_RESULTS")
    if path:
        async with await anyio.open_file(path, "a", encoding="utf-8") as out:
            await out.write(json.dumps(result) + "\n")


async def _round_trips(session: Any, rounds: int) -> list[float]:
    times = []
    for index in range(rounds):
        started = time.perf_counter()
        with anyio.fail_after(DEADLINE):
            reply = await session.request((index, 1.0))
        times.append(time.perf_counter() - started)
        assert int(reply["id"]) == index
    return times


def _percentiles(times: list[float]) -> dict[str, float]:
    values = np.asarray(times) * 1e6
    return {
        "p50": round(float(np.percentile(values, 50)), 1),
        "p99": round(float(np.percentile(values, 99)), 1),
    }
