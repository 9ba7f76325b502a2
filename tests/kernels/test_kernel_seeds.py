"""The seeds' kernel snippets, with ``pdc_core`` in place of ``pydotcompute``, on the cpu backend.

Seed 001 (performance guide): ``@kernel(block=(256,))`` over ``my_kernel(data, out)``
with ``cuda.grid(1)``, the shared-memory ``reduce_kernel`` and the divergence and
coalescing examples; seed 004 (numba/CuPy guide): the 2-D ``add_one_kernel`` launched
as ``kernel[blocks_per_grid, threads_per_block]``; seed 000: occupancy blocks and
``kernel(buf.device)`` on a UnifiedBuffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy import float32

from pdc_core import BufferState, UnifiedBuffer, cuda, kernel


def process(x: Any) -> Any:
    """The seed's unspecified ``process``: a device function of the kernel's module."""
    return x * x + 1


# -- seed 001: "Choose the right block size" -------------------------------------------


@kernel(block=(256,))
def my_kernel(data, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < len(data):
        out[i] = process(data[i])


@pytest.mark.parametrize("n", [1, 255, 256, 1000, 4097])
def test_my_kernel(n: int) -> None:
    data = np.arange(n, dtype=np.float32)
    out = np.zeros_like(data)
    my_kernel(data, out)
    np.testing.assert_array_equal(out, data * data + 1)


def test_my_kernel_runs_vectorised_and_agrees_with_per_thread_execution() -> None:
    data = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    lanes_out, threads_out = np.zeros_like(data), np.zeros_like(data)
    stats = cuda.simulate(my_kernel, 4, 256, (data, lanes_out), mode="lanes")
    # the guard `if i < len(data)` splits the threads once: 1000 in bounds, 24 out
    assert (stats.mode, stats.lane_runs, stats.thread_calls) == ("lanes", 3, 0)
    cuda.simulate(my_kernel, 4, 256, (data, threads_out), mode="threads")
    np.testing.assert_array_equal(lanes_out, threads_out)
    np.testing.assert_array_equal(lanes_out, data * data + 1)


# -- seed 001: "Shared Memory" ------------------------------------------------------------


@cuda.jit
def reduce_kernel(data, out):  # type: ignore[no-untyped-def]
    # Allocate shared memory
    shared = cuda.shared.array(256, dtype=float32)

    i = cuda.grid(1)
    tid = cuda.threadIdx.x

    # Load to shared memory (coalesced)
    if i < len(data):
        shared[tid] = data[i]
    else:
        shared[tid] = 0

    cuda.syncthreads()

    # Reduction in shared memory (fast)
    s = 128
    while s > 0:
        if tid < s:
            shared[tid] += shared[tid + s]
        cuda.syncthreads()
        s //= 2

    if tid == 0:
        out[cuda.blockIdx.x] = shared[0]


def test_reduce_kernel_sums_each_block() -> None:
    data = np.arange(1000, dtype=np.float32)  # integral sums below 2**24: exact in float32
    blocks = 4
    out = np.zeros(blocks, dtype=np.float32)
    reduce_kernel[blocks, 256](data, out)
    expected = [data[b * 256 : (b + 1) * 256].sum() for b in range(blocks)]
    np.testing.assert_array_equal(out, expected)
    assert out.sum() == data.sum()


def test_reduce_kernel_stays_vectorised_across_barriers() -> None:
    # divergence (`if tid < s`) between barriers: each group of lanes runs to the next
    # barrier and waits there for the others; no CUDA thread gets an OS thread
    data = np.arange(512, dtype=np.float32)
    out = np.zeros(2, dtype=np.float32)
    stats = cuda.simulate(reduce_kernel, 2, 256, (data, out))
    assert stats.mode == "lanes"
    assert stats.threaded_blocks == 0
    np.testing.assert_array_equal(out, [data[:256].sum(), data[256:].sum()])


def test_reduce_kernel_uses_real_barriers_per_thread() -> None:
    data = np.ones(512, dtype=np.float32)
    out = np.zeros(2, dtype=np.float32)
    stats = cuda.simulate(reduce_kernel, 2, 256, (data, out), mode="threads")
    assert stats.threaded_blocks == 2
    assert stats.mode == "threads"
    np.testing.assert_array_equal(out, [256, 256])


def test_reduce_kernel_with_an_automatic_grid() -> None:
    data = np.full(700, 2, dtype=np.float32)
    out = np.zeros(3, dtype=np.float32)  # ceil(700 / 256) blocks
    reduce_kernel(data, out, block=256)
    assert out.sum() == 1400
    assert out[-1] == 2 * (700 - 2 * 256)


# -- seed 004: "Simple Kernel Example (Add 1 to each matrix element)" ----------------------


@cuda.jit
def add_one_kernel(A):  # type: ignore[no-untyped-def]
    # Get thread position
    x, y = cuda.grid(2)

    # Check if within bounds
    if x < A.shape[0] and y < A.shape[1]:
        A[x, y] += 1


def test_add_one_kernel_with_the_seeds_launch_configuration() -> None:
    A = np.zeros((100, 37))
    # Set up grid dimensions
    threads_per_block = (16, 16)
    blocks_per_grid = (
        (A.shape[0] + threads_per_block[0] - 1) // threads_per_block[0],
        (A.shape[1] + threads_per_block[1] - 1) // threads_per_block[1],
    )
    # Execute kernel
    add_one_kernel[blocks_per_grid, threads_per_block](A)
    np.testing.assert_array_equal(A, np.ones((100, 37)))
    stats = cuda.simulate(add_one_kernel, blocks_per_grid, threads_per_block, (A,))
    assert stats.mode == "lanes"
    np.testing.assert_array_equal(A, np.full((100, 37), 2.0))


def test_add_one_kernel_with_an_automatic_configuration() -> None:
    A = np.arange(12.0).reshape(3, 4)
    add_one_kernel(A)
    np.testing.assert_array_equal(A, np.arange(12.0).reshape(3, 4) + 1)
    assert add_one_kernel.config_for(A).block == (4, 4)


# -- seed 001: "Memory Coalescing" and "Avoid Warp Divergence" ------------------------------


def process_a(x: Any) -> Any:
    return x + 1


def process_b(x: Any) -> Any:
    return x - 1


@cuda.jit
def bad_kernel(data, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i % 2 == 0:  # Half the warp goes one way
        out[i] = process_a(data[i])
    else:  # Other half goes another
        out[i] = process_b(data[i])


@cuda.jit
def good_kernel(data, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    # All threads do same work
    out[i] = process(data[i])


def test_divergent_and_uniform_kernels() -> None:
    data = np.arange(512, dtype=np.int64)
    out = np.zeros_like(data)
    bad_kernel[2, 256](data, out)
    np.testing.assert_array_equal(out, np.where(data % 2 == 0, data + 1, data - 1))
    good_kernel[2, 256](data, out)
    np.testing.assert_array_equal(out, data * data + 1)


def test_a_kernel_without_bounds_check_fails_loudly_on_the_host() -> None:
    # on a GPU the seeds' unguarded kernels write out of bounds silently; simulated,
    # the first thread past the end raises, naming itself
    data = np.arange(300, dtype=np.int64)
    out = np.zeros_like(data)
    with pytest.raises(IndexError) as caught:
        good_kernel[2, 256](data, out)
    assert "thread (44, 0, 0) of block (1, 0, 0)" in "\n".join(caught.value.__notes__)
    np.testing.assert_array_equal(out, data * data + 1)  # threads before it did their work


# -- seed 000: occupancy and UnifiedBuffer -------------------------------------------------


@kernel(block=(256,))  # 256 threads = 8 warps
def high_occupancy_kernel(data):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < data.size:
        data[i] *= 2


@kernel(block=(64,))  # 64 threads = 2 warps
def low_occupancy_kernel(data):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < data.size:
        data[i] += 1


def test_occupancy_blocks_and_unified_buffer() -> None:
    buf = UnifiedBuffer((10000,), dtype=np.float32)
    # Do ALL host work first
    buf.host[:5000] = 1
    buf.host[5000:] = 2
    # Then sync once
    buf.sync_to_device()
    # Do ALL GPU work
    high_occupancy_kernel(buf.device)
    low_occupancy_kernel(buf)  # the buffer itself works too
    # Sync back once
    buf.sync_to_host()
    assert buf.state is BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(buf.host[:5000], 3)
    np.testing.assert_array_equal(buf.host[5000:], 5)
    assert high_occupancy_kernel.config_for(buf).grid == (40,)
    assert low_occupancy_kernel.config_for(buf).grid == (157,)
