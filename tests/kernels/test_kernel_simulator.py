"""The host simulator of Python kernel bodies (``pdc_core.cuda.simulate``).

The vectorised strategy must give exactly what running each thread on its own gives:
most tests run a body both ways and compare, and check which strategy ran.
"""

from __future__ import annotations

import math
import sys
import time
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pdc_core import cuda
from pdc_core.cuda import _simulator as sim
from pdc_core.cuda._simulator import _memory


def both_ways(body: Any, grid: Any, block: Any, *arrays: np.ndarray[Any, Any], **kw: Any) -> Any:
    """Run ``body`` vectorised and per thread on copies of ``arrays``; return both results."""
    lanes = [a.copy() for a in arrays]
    threads = [a.copy() for a in arrays]
    lane_stats = cuda.simulate(body, grid, block, lanes, **kw)
    thread_stats = cuda.simulate(body, grid, block, threads, mode="threads", **kw)
    assert thread_stats.mode == "threads"
    for vectorised, one_by_one in zip(lanes, threads, strict=True):
        np.testing.assert_array_equal(vectorised, one_by_one)
    return lane_stats, lanes


# -- divergence and the undo log -------------------------------------------------------------


def write_then_diverge(out: Any) -> None:
    i = cuda.grid(1)
    out[i] += 1  # a read-modify-write before the threads disagree
    if i % 2 == 0:
        out[i] += 10


def test_stores_before_a_divergence_are_undone_before_the_replay() -> None:
    stats, (out,) = both_ways(write_then_diverge, 4, 64, np.zeros(256, np.int64))
    assert stats.mode == "lanes"
    assert stats.lane_runs == 3  # one run, then one per side of the `if`
    np.testing.assert_array_equal(out, np.where(np.arange(256) % 2 == 0, 11, 1))


def branches_and_loops(data: Any, out: Any, hist: Any) -> None:
    i = cuda.grid(1)
    if i >= len(data):
        return
    x = data[i]
    acc = 0
    for k in range(x % 5):  # trip counts differ per thread
        acc += k * x
    if x % 3 == 0:
        acc = -acc
    elif x % 3 == 1:
        acc += 7
    while acc > 100:
        acc //= 3
    out[i] = acc + min(x, 50) - max(x, 10) + abs(x - 20)
    cuda.atomic.add(hist, x % 8, 1)


@settings(max_examples=25, deadline=None)
@example(data=[(7 * k) % 201 for k in range(700)], block=64)
@example(data=[(7 * k) % 201 for k in range(700)], block=3)
@given(
    data=st.lists(st.integers(0, 200), min_size=1, max_size=700),
    block=st.sampled_from([1, 3, 32, 64, 100, 256]),
)
def test_vectorised_equals_per_thread(data: list[int], block: int) -> None:
    values = np.array(data, np.int64)
    grid = -(-len(values) // block)
    out = np.zeros_like(values)
    hist = np.zeros(8, np.int64)
    stats, (_, out, hist) = both_ways(branches_and_loops, grid, block, values, out, hist)
    assert hist.sum() == len(values)
    assert stats.threads == grid * block


def grid_stride_saxpy(a: Any, x: Any, y: Any, out: Any) -> None:
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(start, len(x), stride):
        out[k] = a * x[k] + y[k]


def test_grid_stride_loop_vectorises() -> None:
    x = np.arange(1000, dtype=np.float32)
    y = np.ones(1000, dtype=np.float32)
    out = np.zeros_like(x)
    stats = cuda.simulate(grid_stride_saxpy, 3, 128, (np.float32(2), x, y, out), mode="lanes")
    assert stats.mode == "lanes"
    assert stats.lane_runs == 3  # trip counts 2 and 3: one split
    np.testing.assert_array_equal(out, 2 * x + 1)


def many_paths(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    total = 0
    for k in range(data[i]):  # 100 distinct trip counts
        total += k
    out[i] = total


def test_too_many_paths_run_per_thread() -> None:
    data = np.arange(100, dtype=np.int64)
    stats, (_, out) = both_ways(many_paths, 1, 100, data, np.zeros(100, np.int64))
    assert stats.mode == "threads"
    assert "more than 32 paths" in stats.fallbacks[0]
    np.testing.assert_array_equal(out, data * (data - 1) // 2)
    with pytest.raises(RuntimeError, match="cannot run vectorised"):
        cuda.simulate(many_paths, 1, 1000, (np.arange(1000), np.zeros(1000)), mode="lanes")


def test_giving_up_for_divergence_is_remembered_per_body() -> None:
    body = types.FunctionType(many_paths.__code__, many_paths.__globals__)
    data = np.arange(100, dtype=np.int64)
    first = cuda.simulate(body, 1, 100, (data, np.zeros(100, np.int64)))
    assert first.lane_runs > 0
    out = np.zeros(100, np.int64)
    again = cuda.simulate(body, 1, 100, (data, out))
    assert again.lane_runs == 0
    assert again.mode == "threads"
    assert "more than 32 paths" in again.fallbacks[0]
    np.testing.assert_array_equal(out, data * (data - 1) // 2)


def test_the_undo_budget_splits_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory, "UNDO_BUDGET", 256)  # read where the undo log is
    stats, (out,) = both_ways(write_then_diverge, 2, 128, np.zeros(256, np.int64))
    assert stats.lane_runs > 3
    np.testing.assert_array_equal(out, np.where(np.arange(256) % 2 == 0, 11, 1))


# -- shared memory, barriers, local memory ---------------------------------------------------


def block_reverse(data: Any, out: Any) -> None:
    tile = cuda.shared.array(64, dtype=np.int64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t] = data[i]
    cuda.syncthreads()
    out[i] = tile[cuda.blockDim.x - 1 - t]


def test_barrier_without_divergence_vectorises() -> None:
    data = np.arange(256, dtype=np.int64)
    stats, (_, out) = both_ways(block_reverse, 4, 64, data, np.zeros_like(data))
    assert stats.mode == "lanes"
    np.testing.assert_array_equal(out, data.reshape(4, 64)[:, ::-1].reshape(-1))


def count_positive(data: Any, counts: Any) -> None:
    i = cuda.grid(1)
    positive = cuda.syncthreads_count(data[i] > 0)
    every = cuda.syncthreads_and(data[i] > -100)
    some = cuda.syncthreads_or(data[i] > 90)
    if cuda.threadIdx.x == 0:
        counts[cuda.blockIdx.x, 0] = positive
        counts[cuda.blockIdx.x, 1] = every
        counts[cuda.blockIdx.x, 2] = some


def test_syncthreads_count_and_or() -> None:
    data = np.random.default_rng(2).integers(-50, 100, 128)
    _stats, (_, counts) = both_ways(count_positive, 4, 32, data, np.zeros((4, 3), np.int64))
    blocks = data.reshape(4, 32)
    np.testing.assert_array_equal(counts[:, 0], (blocks > 0).sum(axis=1))
    np.testing.assert_array_equal(counts[:, 1], 1)
    np.testing.assert_array_equal(counts[:, 2], (blocks > 90).any(axis=1))


def stash_in_dynamic_shared(data: Any, out: Any) -> None:
    buf = cuda.shared.array(0, dtype=np.float32)
    t = cuda.threadIdx.x
    buf[t] = data[cuda.grid(1)] * 2
    cuda.syncthreads()
    out[cuda.grid(1)] = buf[(t + 1) % cuda.blockDim.x]


def test_dynamic_shared_memory() -> None:
    data = np.arange(128, dtype=np.float32)
    _stats, (_, out) = both_ways(
        stash_in_dynamic_shared, 2, 64, data, np.zeros_like(data), shared_mem=64 * 4
    )
    expected = np.roll(data.reshape(2, 64), -1, axis=1).reshape(-1) * 2
    np.testing.assert_array_equal(out, expected)


def private_scratch(out: Any) -> None:
    i = cuda.grid(1)
    scratch = cuda.local.array(4, dtype=np.int64)
    for k in range(4):
        scratch[k] = i * k
    total = 0
    for k in range(len(scratch)):
        total += scratch[k]
    out[i] = total


def test_local_arrays_are_per_thread() -> None:
    stats, (out,) = both_ways(private_scratch, 2, 32, np.zeros(64, np.int64))
    assert stats.mode == "lanes"
    np.testing.assert_array_equal(out, 6 * np.arange(64))


def guarded_tile(data: Any, out: Any) -> None:
    tile = cuda.shared.array(32, dtype=np.float64)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    tile[t] = data[i] if i < len(data) else 0.0
    cuda.syncthreads()
    if i < len(data):
        out[i] = tile[t] + tile[(t + 1) % 32]


def test_divergence_before_a_barrier_stays_vectorised() -> None:
    data = np.arange(40, dtype=np.float64)
    stats, (_, _out) = both_ways(guarded_tile, 2, 32, data, np.zeros_like(data))
    assert stats.mode == "lanes"
    assert stats.threaded_blocks == 0
    assert stats.lane_runs == 3  # all lanes, then the two groups of `i < len(data)`


def scan_block(data: Any, out: Any, counts: Any) -> None:
    # Hillis-Steele inclusive scan in shared memory: a new divergence every round
    temp = cuda.shared.array(64, dtype=np.int64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    temp[t] = data[i] if i < len(data) else 0
    cuda.syncthreads()
    offset = 1
    while offset < cuda.blockDim.x:
        value = temp[t - offset] if t >= offset else 0
        cuda.syncthreads()
        temp[t] += value
        cuda.syncthreads()
        offset *= 2
    if i < len(data):
        out[i] = temp[t]
    counts[i] = cuda.syncthreads_count(temp[t] % 2 == 1)


def test_a_shared_memory_scan_stays_vectorised() -> None:
    data = np.arange(200, dtype=np.int64) % 7
    stats, (_, out, counts) = both_ways(
        scan_block, 4, 64, data, np.zeros(200, np.int64), np.zeros(256, np.int64)
    )
    assert stats.mode == "lanes"
    padded = np.zeros(256, np.int64)
    padded[:200] = data
    scans = np.cumsum(padded.reshape(4, 64), axis=1)
    np.testing.assert_array_equal(out, scans.reshape(-1)[:200])
    np.testing.assert_array_equal(counts, np.repeat((scans % 2 == 1).sum(axis=1), 64))


def per_thread_paths_then_barrier(out: Any) -> None:
    t = cuda.threadIdx.x
    total = 0
    for k in range(t):  # a different trip count for every thread: 64 paths
        total += k
    cuda.syncthreads()
    out[cuda.grid(1)] = total


def test_too_many_paths_in_a_barrier_kernel_run_per_thread_and_are_remembered() -> None:
    body = types.FunctionType(
        per_thread_paths_then_barrier.__code__, per_thread_paths_then_barrier.__globals__
    )
    out = np.zeros(128, np.int64)
    first = cuda.simulate(body, 2, 64, (out,))
    assert first.mode == "threads"
    assert first.lane_runs > 0
    assert f"more than {sim.MAX_GROUPS} paths" in first.fallbacks[0]
    expected = np.tile([t * (t - 1) // 2 for t in range(64)], 2)
    np.testing.assert_array_equal(out, expected)
    again = cuda.simulate(body, 2, 64, (out,))  # vectorising is not tried again
    assert again.lane_runs == 0
    assert again.fallbacks == first.fallbacks
    np.testing.assert_array_equal(out, expected)


# -- atomics ---------------------------------------------------------------------------


def bin_and_rank(data: Any, hist: Any, ranks: Any) -> None:
    i = cuda.grid(1)
    if i < len(data):
        ranks[i] = cuda.atomic.add(hist, data[i] % 4, 1)


def test_atomic_add_returns_the_sequential_old_values() -> None:
    data = np.random.default_rng(3).integers(0, 100, 300)
    stats, (_, hist, ranks) = both_ways(
        bin_and_rank, 2, 256, data, np.zeros(4, np.int64), np.zeros(300, np.int64)
    )
    assert stats.mode == "lanes"
    np.testing.assert_array_equal(hist, np.bincount(data % 4, minlength=4))
    for b in range(4):
        np.testing.assert_array_equal(ranks[data % 4 == b], np.arange(hist[b]))


def float_total(values: Any, total: Any, partial: Any) -> None:
    i = cuda.grid(1)
    partial[i] = cuda.atomic.add(total, 0, values[i])


def test_float_atomic_add_is_a_sequential_sum() -> None:
    values = np.random.default_rng(4).standard_normal(256).astype(np.float32)
    _stats, (_, total, partial) = both_ways(
        float_total, 1, 256, values, np.zeros(1, np.float32), np.zeros(256, np.float32)
    )
    running = np.add.accumulate(np.concatenate(([np.float32(0)], values)), dtype=np.float32)
    np.testing.assert_array_equal(partial, running[:-1])
    assert total[0] == running[-1]


def other_atomics(data: Any, cells: Any, olds: Any) -> None:
    i = cuda.grid(1)
    olds[i, 0] = cuda.atomic.max(cells, 0, data[i])
    olds[i, 1] = cuda.atomic.min(cells, 1, data[i])
    olds[i, 2] = cuda.atomic.sub(cells, 2, 1)
    olds[i, 3] = cuda.atomic.exch(cells, 3, i)
    olds[i, 4] = cuda.atomic.cas(cells, 4, 0, i + 1)
    olds[i, 5] = cuda.atomic.or_(cells, 5, 1 << (i % 8))
    olds[i, 6] = cuda.atomic.xor(cells, 6, i)
    olds[i, 7] = cuda.atomic.and_(cells, 7, ~(1 << (i % 8)))


def test_other_atomics() -> None:
    data = np.random.default_rng(5).integers(-1000, 1000, 64)
    cells = np.array([-(10**6), 10**6, 0, -1, 0, 0, 0, 255], np.int64)
    stats, (_, cells, olds) = both_ways(
        other_atomics, 1, 64, data, cells, np.zeros((64, 8), np.int64)
    )
    assert stats.mode == "lanes"
    assert cells[0] == data.max()
    assert cells[1] == data.min()
    assert cells[2] == -64
    assert cells[3] == 63  # the last thread's exchange, in lane order
    assert cells[4] == 1  # only thread 0 swapped
    assert (olds[1:, 4] == 1).all()
    assert cells[5] == 255
    assert cells[7] == 0
    assert cells[6] == np.bitwise_xor.reduce(np.arange(64))


def wrapping_counters(cells: Any, olds: Any) -> None:
    i = cuda.grid(1)
    olds[i, 0] = cuda.atomic.inc(cells, 0, 3)
    olds[i, 1] = cuda.atomic.dec(cells, 1, 3)


def test_atomic_inc_and_dec_wrap() -> None:
    _stats, (_cells, olds) = both_ways(
        wrapping_counters, 1, 8, np.zeros(2, np.uint32), np.zeros((8, 2), np.uint32)
    )
    np.testing.assert_array_equal(olds[:, 0], [0, 1, 2, 3, 0, 1, 2, 3])
    np.testing.assert_array_equal(olds[:, 1], [0, 3, 2, 1, 0, 3, 2, 1])


# -- what a body may use -----------------------------------------------------------------


def with_math(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < len(data):
        out[i] = math.sqrt(data[i]) + math.floor(data[i] / 3) + float(i) + int(data[i] / 7)


def test_math_functions_vectorise() -> None:
    data = np.linspace(0, 50, 100).astype(np.float32)
    stats, (_, _out) = both_ways(with_math, 1, 128, data, np.zeros_like(data))
    assert stats.mode == "lanes"


def with_casts(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    out[i] = np.float32(data[i]) * np.int32(3) + cuda.blockDim.x


def test_numpy_scalar_types_convert_per_thread_values() -> None:
    data = np.linspace(-4, 4, 64)
    stats, (_, _out) = both_ways(with_casts, 2, 32, data, np.zeros(64, np.float32))
    assert stats.mode == "lanes"


def narrate(out: Any) -> None:
    i = cuda.grid(1)
    out[i] = i
    if i < 3:
        print("thread", i)


def test_print_is_not_repeated_by_replays(capsys: pytest.CaptureFixture[str]) -> None:
    stats = cuda.simulate(narrate, 1, 8, (np.zeros(8, np.int64),), mode="lanes")
    assert stats.lane_runs == 3
    assert capsys.readouterr().out.splitlines() == ["thread 0", "thread 1", "thread 2"]


def guarded_by_try(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    try:  # noqa: SIM105 - the point: a body that handles exceptions
        out[i] = data[i]
    except IndexError:
        pass


def test_exception_handling_in_a_body_runs_per_thread() -> None:
    data = np.arange(50.0)
    stats, (_, _out) = both_ways(guarded_by_try, 1, 64, data, np.zeros(64))
    assert stats.mode == "threads"
    assert "handles exceptions" in stats.fallbacks[0]
    with pytest.raises(RuntimeError, match="handles exceptions"):
        cuda.simulate(guarded_by_try, 1, 64, (data, np.zeros(64)), mode="lanes")


def fails_in_thread_5(out: Any) -> None:
    i = cuda.grid(1)
    if i == 5:
        raise ValueError("bad input")
    out[i] = 1


def test_errors_name_the_thread_and_block() -> None:
    out = np.zeros(64)
    with pytest.raises(ValueError, match="bad input") as caught:
        cuda.simulate(fails_in_thread_5, 2, 32, (out,))
    assert "thread (5, 0, 0) of block (0, 0, 0)" in caught.value.__notes__[0]
    with pytest.raises(ValueError, match="bad input"):
        cuda.simulate(fails_in_thread_5, 2, 32, (np.zeros(64),), mode="threads")


def test_errors_in_threaded_blocks_do_not_hang() -> None:
    def barrier_then_fail(out: Any) -> None:
        cuda.syncthreads()
        if cuda.threadIdx.x == 3:
            raise KeyError("thread three")
        cuda.syncthreads()
        out[cuda.grid(1)] = 1

    with pytest.raises(KeyError, match="thread three"):
        cuda.simulate(barrier_then_fail, 2, 16, (np.zeros(32),), mode="threads")


def test_namespace_outside_a_kernel() -> None:
    with pytest.raises(RuntimeError, match="inside a kernel"):
        cuda.grid(1)
    with pytest.raises(RuntimeError, match="inside a kernel"):
        _ = cuda.threadIdx.x
    with pytest.raises(AttributeError, match="syncwarp"):
        _ = cuda.syncwarp  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="1, 2 or 3"):
        cuda.grid(4)


def warp_lanes(out: Any) -> None:
    out[cuda.grid(1)] = cuda.laneid + 100 * cuda.warpsize


def test_laneid_and_warpsize() -> None:
    _stats, (out,) = both_ways(warp_lanes, 1, 64, np.zeros(64, np.int64))
    np.testing.assert_array_equal(out, np.arange(64) % 32 + 3200)


def three_d(out: Any) -> None:
    x, y, z = cuda.grid(3)
    if x < out.shape[0] and y < out.shape[1] and z < out.shape[2]:
        out[x, y, z] = x * 10000 + y * 100 + z + cuda.gridDim.z * 0


def test_three_dimensional_grids() -> None:
    shape = (5, 6, 7)
    _stats, (out,) = both_ways(three_d, (2, 2, 2), (4, 4, 4), np.zeros(shape, np.int64))
    x, y, z = np.indices(shape)
    np.testing.assert_array_equal(out, x * 10000 + y * 100 + z)


def test_simulate_validates_its_arguments() -> None:
    with pytest.raises(TypeError, match="Python function"):
        cuda.simulate(len, 1, 1)
    with pytest.raises(ValueError, match="mode"):
        cuda.simulate(narrate, 1, 1, (np.zeros(1),), mode="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"2048.*at most 1024"):
        cuda.simulate(narrate, 1, 2048, (np.zeros(1),))
    with pytest.raises(ValueError, match="negative"):
        cuda.simulate(narrate, 1, 1, (np.zeros(1),), shared_mem=-1)


# -- numba names -------------------------------------------------------------------------


class _NumbaFloat32:
    """Stands for ``numba.float32``: a numba type whose str() is the NumPy name."""

    __module__ = "numba.core.types"

    def __str__(self) -> str:
        return "float32"


class _FakeDispatcher:
    __module__ = "numba.cuda.dispatcher"

    def __init__(self, function: Any, options: dict[str, Any]) -> None:
        self.py_func = function
        self.options = options


def _fake_numba(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A stand-in for numba and numba.cuda (numba is not installed in CI)."""
    numba = types.ModuleType("numba")
    numba_cuda = types.ModuleType("numba.cuda")

    def outside(*args: Any) -> Any:
        raise RuntimeError("numba.cuda intrinsics only work inside a compiled kernel")

    numba_cuda.grid = outside  # type: ignore[attr-defined]
    numba_cuda.calls = []  # type: ignore[attr-defined]

    def jit(function: Any = None, **options: Any) -> Any:
        def decorate(f: Any) -> Any:
            numba_cuda.calls.append((f, options))  # type: ignore[attr-defined]
            return _FakeDispatcher(f, options)

        return decorate(function) if function is not None else decorate

    numba_cuda.jit = jit  # type: ignore[attr-defined]
    numba.cuda = numba_cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "numba", numba)
    monkeypatch.setitem(sys.modules, "numba.cuda", numba_cuda)
    return numba_cuda


NUMBA_STYLE = """
def helper(x):
    return x * 3

helper = cuda.jit(device=True)(helper)

def numba_kernel(data, out):
    tmp = cuda.local.array(2, dtype=float32)
    i = cuda.grid(1)
    if i < data.size:
        tmp[0] = helper(data[i])
        out[i] = tmp[0] + 1
"""


def test_bodies_written_against_numba_cuda_run_on_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    numba_cuda = _fake_numba(monkeypatch)
    namespace: dict[str, Any] = {
        "__name__": "user_kernels",
        "cuda": numba_cuda,
        "float32": _NumbaFloat32(),
    }
    exec(NUMBA_STYLE, namespace)
    body = namespace["numba_kernel"]
    data = np.arange(100, dtype=np.float32)
    stats, (_, out) = both_ways(body, 1, 128, data, np.zeros_like(data))
    assert stats.mode == "lanes"
    np.testing.assert_array_equal(out, data * 3 + 1)
    assert body.__globals__["cuda"] is numba_cuda  # the user's module is left alone


def test_to_numba_swaps_pdc_names_for_numbas(monkeypatch: pytest.MonkeyPatch) -> None:
    numba_cuda = _fake_numba(monkeypatch)
    dispatcher = cuda.to_numba(branches_and_loops, fastmath=True)
    assert cuda.to_numba(branches_and_loops, fastmath=True) is dispatcher  # cached
    assert dispatcher.options == {"fastmath": True}
    compiled = dispatcher.py_func
    assert compiled.__code__ is branches_and_loops.__code__
    assert compiled.__globals__["cuda"] is numba_cuda
    assert branches_and_loops.__globals__["cuda"] is cuda


def test_to_numba_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)
    with pytest.raises(ImportError, match=r"pdc-cuda\[numba\]"):
        cuda.to_numba(branches_and_loops)


# -- speed ---------------------------------------------------------------------------------


def test_vectorised_execution_is_fast() -> None:
    n = 1 << 20
    data = np.arange(n, dtype=np.float32)
    out = np.zeros_like(data)
    from test_kernel_seeds import my_kernel

    start = time.perf_counter()
    stats = cuda.simulate(my_kernel, n // 256, 256, (data, out))
    elapsed = time.perf_counter() - start
    assert stats.mode == "lanes"
    np.testing.assert_array_equal(out, data * data + 1)
    assert elapsed < 2.0, f"a million simple threads took {elapsed:.2f} s"


# -- per-thread values that must not leak into single-value semantics -------------------------


def everyone_writes_everything(out: Any) -> None:
    i = cuda.grid(1)
    out[:] = i * 10  # a race: run one by one, the last thread wins


def everyone_agrees(out: Any) -> None:
    i = cuda.grid(1)
    out[0] = i - i + 7  # per-thread values that agree: no race


def test_per_thread_values_stored_at_one_place() -> None:
    stats, (out,) = both_ways(everyone_writes_everything, 1, 8, np.zeros(8, np.int64))
    np.testing.assert_array_equal(out, 70)
    assert "same place" in stats.fallbacks[0]
    stats, (out,) = both_ways(everyone_agrees, 1, 8, np.zeros(8, np.int64))
    assert stats.mode == "lanes"
    assert out[0] == 7


def introspects(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    if isinstance(data[i], float):  # float64 scalars are floats; per-thread values are not
        out[i] = 1
    print(f"t{i}:{data[i]:.1f}")


def test_type_introspection_and_formatting_see_one_thread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, (_, out) = both_ways(introspects, 1, 4, np.arange(4.0), np.zeros(4))
    np.testing.assert_array_equal(out, 1)
    printed = capsys.readouterr().out.split()
    assert printed == ["t0:0.0", "t1:1.0", "t2:2.0", "t3:3.0"] * 2  # vectorised, per thread


# -- if-conversion: per-thread branches that only assign locals --------------------------


DRAWS = 40


def count_inside(seeds: Any, hits: Any) -> None:
    i = cuda.grid(1)
    if i < len(seeds):
        state = seeds[i]
        inside = 0
        outside = 0
        for _ in range(DRAWS):
            state = (state * 1103515245 + 12345) % 2147483648
            x = state / 2147483648.0
            if x < 0.3:
                inside += 1
            else:
                outside = outside + 2
                inside = inside - 1
        hits[i] = inside * 1000 + outside


def test_branches_that_only_assign_locals_stay_vectorised() -> None:
    seeds = np.arange(1, 301, dtype=np.int64)
    stats, (_, hits) = both_ways(count_inside, 3, 128, seeds, np.zeros(300, np.int64))
    assert stats.mode == "lanes"
    assert stats.lane_runs <= 3  # the `i < len(seeds)` guard only, not one per draw
    assert hits.any()


def scale_closure(factor: float) -> Any:
    def body(data: Any, out: Any) -> None:
        i = cuda.grid(1)
        value = data[i]
        if value > 2:
            value = value * factor
        out[i] = value

    return body


def test_if_conversion_keeps_closures() -> None:
    data = np.arange(8.0)
    stats, (_, out) = both_ways(scale_closure(10.0), 1, 8, data, np.zeros(8))
    assert stats.lane_runs == 1
    np.testing.assert_array_equal(out, np.where(data > 2, data * 10.0, data))


def branch_with_a_store(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    if data[i] > 7:
        out[i] = 1.0  # a store: not converted, the threads split as before


def test_branches_with_side_effects_are_not_converted() -> None:
    data = np.arange(16.0)
    stats, (_, out) = both_ways(branch_with_a_store, 1, 16, data, np.zeros(16))
    assert stats.lane_runs == 3
    np.testing.assert_array_equal(out, (data > 7).astype(float))


def test_a_converted_branch_that_fails_for_an_untaken_lane_runs_per_thread() -> None:
    def body(data: Any, out: Any) -> None:
        i = cuda.grid(1)
        value = 0.0
        if data[i] > 0:
            value = 1.0 / data[i]  # evaluated for every lane: 1/0 where data is 0
        out[i] = value

    data = np.array([0.0, 1.0, 2.0, 4.0])
    stats, (_, out) = both_ways(body, 1, 4, data, np.zeros(4))
    assert stats.thread_calls > 0
    np.testing.assert_array_equal(out, [0.0, 1.0, 0.5, 0.25])


def test_if_conversion_leaves_a_body_whose_source_changed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import linecache

    from pdc_core.cuda import _ifconvert

    source = "def {name}(x):\n    y = 0\n    if x > 1:\n        y = 2\n    return y\n"
    (tmp_path / "kept_kernel.py").write_text(source.format(name="body"))
    (tmp_path / "edited_kernel.py").write_text(source.format(name="body"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import edited_kernel
    import kept_kernel

    edited = tmp_path / "edited_kernel.py"
    edited.write_text(source.format(name="body").replace("y", "w").replace("x", "z"))
    linecache.checkcache(str(edited))
    assert _ifconvert.if_converted(kept_kernel.body) is not None
    assert _ifconvert.if_converted(edited_kernel.body) is None  # the file says other names
