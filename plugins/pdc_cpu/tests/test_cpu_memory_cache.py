"""The CPU backend's host-memory cache: its bounds, LRU eviction and best-fit reuse."""

from __future__ import annotations

import gc
import random
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from pdc_cpu import DEFAULT_CACHE_LIMIT, CpuBackend
from pdc_cpu._memory import (
    DEFAULT_CACHE_CAP,
    DEFAULT_CACHE_RATIO,
    GRANULE,
    REUSE_SPAN,
    HostMemoryPool,
    available_memory,
    default_cache_limit,
)

KiB = 2**10
MiB = 2**20
U8 = np.dtype(np.uint8)


@pytest.fixture
def cpu() -> CpuBackend:
    return CpuBackend()  # a private instance: its own pool, statistics start at zero


def cached_bytes(backend: CpuBackend) -> int:
    stats = backend.memory_statistics()
    return stats.bytes_held - stats.bytes_in_use


def cached_sizes(backend: CpuBackend, sizes: list[int]) -> set[int]:
    """Which of ``sizes`` (bytes) the cache holds a block of: those whose allocation hits.

    The probes stay alive until every size is probed, so none returns to the cache, and
    go largest first: best fit then takes each cached size's own block (none of a
    larger size is left when a smaller size is probed), so every cached size probed
    hits and every other misses.
    """
    probes: list[npt.NDArray[Any]] = []
    found: set[int] = set()
    for size in sorted(sizes, reverse=True):
        hits = backend.memory_statistics().hits
        probes.append(backend.allocate((size,), U8))
        if backend.memory_statistics().hits > hits:
            found.add(size)
    return found


def lru_model(freed: list[int], limit: int | None) -> list[int]:
    """The sizes an LRU cache bounded to ``limit`` keeps after ``freed`` are freed in order."""
    kept: list[int] = []
    for size in freed:
        if limit is not None and size > limit:
            continue
        kept.append(size)
        while limit is not None and sum(kept) > limit:
            kept.pop(0)
    return kept


# -- the default ---------------------------------------------------------------------


def test_the_default_bound_is_a_fraction_of_memory_capped():
    assert default_cache_limit(None) == DEFAULT_CACHE_CAP == 256 * MiB
    assert default_cache_limit(64 * 2**30) == 256 * MiB
    assert default_cache_limit(2 * 2**30) == 128 * MiB
    assert default_cache_limit(512 * MiB) == 32 * MiB
    available = available_memory()
    assert available is None or available > 0
    assert default_cache_limit(available) == DEFAULT_CACHE_LIMIT
    assert CpuBackend().cache_limit == DEFAULT_CACHE_LIMIT
    assert HostMemoryPool().cache_limit == DEFAULT_CACHE_LIMIT


# -- the scenario --------------------------------------------------------------


def test_forty_dropped_buffers_stay_within_the_default_bound(cpu):
    # The report: 40 dropped buffers of 1 to 40 MiB held 820 MiB until
    # free_cached_memory(). np.empty does not touch the pages, so this costs little.
    sizes = [index * MiB for index in range(1, 41)]
    arrays = [cpu.allocate((size,), U8) for size in sizes]
    assert cpu.memory_statistics().bytes_held == 820 * MiB
    for _ in sizes:
        del arrays[0]  # dropped smallest first: the largest are the most recently freed
    assert cpu.memory_statistics().bytes_in_use == 0
    limit = cpu.cache_limit
    assert limit is not None
    assert cached_bytes(cpu) <= limit
    kept = lru_model(sizes, limit)
    assert cached_bytes(cpu) == sum(kept)
    assert cached_sizes(cpu, sizes) == set(kept)
    if limit == 256 * MiB:  # the default on any machine with 4 GiB or more
        assert kept == [index * MiB for index in range(35, 41)]


async def test_distinct_sizes_made_one_at_a_time_cache_at_most_twice_the_live_peak(cpu):
    # Issue 26: 40 buffers of 1, 2, ... 40 MiB, each dropped before the next is made
    # (live peak 40 MiB), left 225 MiB cached under the 256 MiB bound: none could
    # reuse a smaller block, and the bound did not look at use.
    cpu.set_cache_limit(256 * MiB)  # the default on machines with 4 GiB or more
    assert cpu.cache_ratio == DEFAULT_CACHE_RATIO == 2.0
    sizes = [index * MiB for index in range(1, 41)]
    for size in sizes:
        array = cpu.allocate((size,), U8)
        del array
    assert cpu.peak_bytes_in_use == 40 * MiB
    assert cached_bytes(cpu) == 79 * MiB  # 40 + 39: within 2 x 40, least recent gone
    assert cached_bytes(cpu) == sum(lru_model(sizes, 80 * MiB))
    assert cached_sizes(cpu, sizes) == {39 * MiB, 40 * MiB}


async def test_a_cached_block_serves_any_request_down_to_half_its_size(cpu):
    sizes = [index * MiB for index in range(40, 0, -1)]  # each smaller than the last
    addresses = []
    for size in sizes:
        array = cpu.allocate((size,), U8)
        addresses.append(array.ctypes.data)
        del array
    stats = cpu.memory_statistics()
    # New blocks only for 40, 19, 9, 4 and 1 MiB: each serves down to half its size.
    assert (stats.hits, stats.misses) == (35, 5)
    assert len(set(addresses)) == 5
    assert addresses[:21] == [addresses[0]] * 21  # 40 down to 20 MiB: one block
    assert stats.bytes_held == (40 + 19 + 9 + 4 + 1) * MiB
    assert REUSE_SPAN == 2
    small = cpu.allocate((4 * KiB,), U8)  # 1 MiB is more than twice 4 KiB: a miss
    assert cpu.memory_statistics().misses == 6
    del small


async def test_the_ratio_bound_can_be_changed_and_lifted(cpu):
    cpu.set_cache_limit(256 * MiB)
    assert cpu.set_cache_ratio(None) == DEFAULT_CACHE_RATIO
    assert cpu.cache_ratio is None
    for size in [index * MiB for index in range(1, 41)]:
        array = cpu.allocate((size,), U8)
        del array
    assert cached_bytes(cpu) == 225 * MiB  # only the byte bound: the old behaviour
    assert cpu.set_cache_ratio(1) is None  # lowered: evicted at once, least recent first
    assert cpu.cache_ratio == 1.0
    assert cached_bytes(cpu) == 40 * MiB
    assert cpu.set_cache_ratio(np.float64(0.5)) == 1.0
    assert cached_bytes(cpu) == 0  # 40 MiB is more than half the peak
    for value in (True, "2", [2]):
        with pytest.raises(TypeError, match="ratio must be a number"):
            cpu.set_cache_ratio(value)
    for value in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="ratio must be a positive finite number"):
            cpu.set_cache_ratio(value)
    with pytest.raises(ValueError, match="cache_ratio"):
        HostMemoryPool(cache_ratio=0)
    assert cpu.cache_ratio == 0.5


def test_forty_dropped_buffers_keep_the_most_recently_freed_within_a_set_bound(cpu):
    cpu.set_cache_limit(100 * MiB)
    sizes = [index * MiB for index in range(1, 41)]
    arrays = [cpu.allocate((size,), U8) for size in sizes]
    for _ in sizes:
        del arrays[0]
    assert cached_bytes(cpu) == 79 * MiB  # 39 and 40 MiB; 38 more would pass 100
    assert cpu.memory_statistics().bytes_held == 79 * MiB
    assert cached_sizes(cpu, sizes) == {39 * MiB, 40 * MiB}


def test_the_least_recently_freed_go_first_whatever_their_size(cpu):
    cpu.set_cache_limit(10 * KiB)
    arrays = {index: cpu.allocate((index * KiB,), U8) for index in range(1, 9)}
    order = [8, 1, 7, 2, 6, 3, 5, 4]
    for index in order:
        del arrays[index]
    assert lru_model([index * KiB for index in order], 10 * KiB) == [5 * KiB, 4 * KiB]
    assert cached_bytes(cpu) == 9 * KiB
    assert cached_sizes(cpu, [index * KiB for index in range(1, 9)]) == {4 * KiB, 5 * KiB}


def test_reusing_a_block_makes_it_the_most_recently_freed(cpu):
    cpu.set_cache_limit(4 * KiB)
    small = cpu.allocate((KiB,), U8)
    large = cpu.allocate((KiB,), np.dtype(np.int16))  # 2 KiB
    del small, large  # the cache, oldest first: 1 KiB, 2 KiB
    again = cpu.allocate((KiB,), U8)
    assert cpu.memory_statistics().hits == 1  # the 1 KiB block, reused
    del again  # the cache: 2 KiB, 1 KiB
    other = cpu.allocate((5 * GRANULE,), U8)  # a miss: no cached block is that large
    assert cpu.memory_statistics().misses == 3
    del other  # 5.5 KiB would pass the bound: the 2 KiB block, now the oldest, goes
    assert cached_bytes(cpu) == KiB + 5 * GRANULE
    assert cached_sizes(cpu, [KiB, 2 * KiB, 5 * GRANULE]) == {KiB, 5 * GRANULE}


# -- reuse -------------------------------------------------------------------------------


def test_a_freed_block_is_reused_by_the_next_allocation_of_its_size(cpu):
    first = cpu.allocate((1000,), np.dtype(np.float64))  # 8000 B: a 8192 B block
    address = first.ctypes.data
    del first
    second = cpu.allocate((2048,), np.dtype(np.float32))  # 8192 B: the same size class
    assert second.ctypes.data == address
    stats = cpu.memory_statistics()
    assert (stats.hits, stats.misses) == (1, 1)
    assert stats.bytes_in_use == stats.bytes_held == 8192


def test_a_block_larger_than_the_bound_is_not_cached(cpu):
    cpu.set_cache_limit(4 * KiB)
    fits = cpu.allocate((4 * KiB,), U8)
    too_large = cpu.allocate((4 * KiB + 1,), U8)  # rounded up to 4.5 KiB
    del too_large
    assert cpu.memory_statistics().bytes_held == 4 * KiB  # released, not cached
    del fits
    assert cached_bytes(cpu) == 4 * KiB  # exactly the bound: kept
    again = cpu.allocate((4 * KiB + 1,), U8)
    stats = cpu.memory_statistics()
    assert (stats.hits, stats.misses) == (0, 3)
    del again


def test_a_zero_bound_caches_nothing_and_none_everything(cpu):
    assert cpu.set_cache_limit(0) == DEFAULT_CACHE_LIMIT
    arrays = [cpu.allocate((index * KiB,), U8) for index in range(1, 11)]
    del arrays[:]
    assert cpu.memory_statistics().bytes_held == 0
    assert cpu.set_cache_limit(None) == 0
    assert cpu.cache_limit is None
    arrays = [cpu.allocate((index * KiB,), U8) for index in range(1, 11)]
    del arrays[:]
    assert cached_bytes(cpu) == 55 * KiB  # unbounded: everything stays
    cpu.free_cached_memory()
    assert cpu.memory_statistics().bytes_held == 0


def test_lowering_the_bound_evicts_at_once_least_recently_freed_first(cpu):
    arrays = {index: cpu.allocate((index * KiB,), U8) for index in (1, 2, 3)}
    for index in (2, 3, 1):
        del arrays[index]
    assert cached_bytes(cpu) == 6 * KiB
    assert cpu.set_cache_limit(4 * KiB) == DEFAULT_CACHE_LIMIT
    assert cached_bytes(cpu) == 4 * KiB
    assert cached_sizes(cpu, [KiB, 2 * KiB, 3 * KiB]) == {KiB, 3 * KiB}


# -- blocks in use -----------------------------------------------------------------------


def test_a_viewed_block_is_never_evicted_nor_reused(cpu):
    cpu.set_cache_limit(8 * KiB)
    array = cpu.allocate((4 * KiB,), U8)
    array[...] = 7
    view = array[100:200]
    del array  # the block is still viewed: in use, not cached
    assert cpu.memory_statistics().bytes_in_use == 4 * KiB
    cpu.set_cache_limit(0)
    cpu.free_cached_memory()
    others = [cpu.allocate((4 * KiB,), U8) for _ in range(4)]
    for other in others:
        assert not np.shares_memory(other, view)
        other[...] = 0
    del others, other
    assert (view == 7).all()
    assert cpu.memory_statistics().bytes_in_use == 4 * KiB
    cpu.set_cache_limit(8 * KiB)
    del view
    assert cpu.memory_statistics().bytes_in_use == 0
    assert cached_bytes(cpu) == 4 * KiB


# -- the hard limit on bytes held ---------------------------------------------------------


def test_the_held_limit_evicts_cached_blocks_least_recently_freed_first():
    pool = HostMemoryPool(limit=4 * KiB, cache_limit=None)
    arrays = {index: pool.allocate((index * KiB,), U8) for index in (1, 2)}
    for index in (2, 1):
        del arrays[index]
    assert pool.statistics().bytes_held == 3 * KiB
    fresh = pool.allocate((5 * GRANULE,), U8)  # no cached block serves it: the 2 KiB
    stats = pool.statistics()  # block, the older, is freed to make room
    assert (stats.bytes_held, stats.bytes_in_use, stats.limit) == (
        KiB + 5 * GRANULE,
        5 * GRANULE,
        4 * KiB,
    )
    with pytest.raises(MemoryError, match="4096-byte limit"):
        pool.allocate((3 * KiB,), U8)
    del fresh


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, False, 1.5, 4096.0, "4096", [4096]])
def test_a_bound_that_is_not_an_integer_is_refused(cpu, value):
    with pytest.raises(TypeError, match="nbytes must be a number of bytes"):
        cpu.set_cache_limit(value)
    assert cpu.cache_limit == DEFAULT_CACHE_LIMIT


def test_a_negative_bound_is_refused(cpu):
    with pytest.raises(
        ValueError, match=r"nbytes must be a non-negative number of bytes or None, not -1"
    ):
        cpu.set_cache_limit(-1)
    with pytest.raises(ValueError, match="cache_limit"):
        HostMemoryPool(cache_limit=-1)
    with pytest.raises(TypeError, match="cache_limit"):
        HostMemoryPool(cache_limit=True)
    assert cpu.cache_limit == DEFAULT_CACHE_LIMIT


def test_integer_like_bounds_are_accepted(cpu):
    cpu.set_cache_limit(np.int64(4096))
    assert cpu.cache_limit == 4096
    assert type(cpu.cache_limit) is int


# -- finalizers on any thread, at any time ------------------------------------------------


def test_a_block_freed_by_the_collector_inside_the_pool_does_not_deadlock(cpu):
    # A cycle holds the last view of a block; the collector runs while the pool holds
    # its lock (here: forced, in _make_room) and the lease's finalizer runs right there.
    class Holder:
        pass

    holder = Holder()
    holder.me = holder  # type: ignore[attr-defined]
    holder.array = cpu.allocate((KiB,), U8)  # type: ignore[attr-defined]
    del holder
    pool = cpu.pool
    make_room = pool._make_room

    def collecting_make_room(size: int) -> None:
        gc.collect()
        make_room(size)

    pool._make_room = collecting_make_room  # type: ignore[method-assign]
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result: list[npt.NDArray[Any]] = []
        worker = threading.Thread(
            target=lambda: result.append(cpu.allocate((2 * KiB,), U8)), daemon=True
        )
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "the pool deadlocked on its own finalizer"
    finally:
        if was_enabled:
            gc.enable()
        del pool._make_room
    stats = cpu.memory_statistics()
    assert stats.bytes_in_use == 2 * KiB  # the collected block came back...
    assert cached_bytes(cpu) == KiB  # ...into the cache


def test_many_threads_allocating_and_freeing_keep_the_books(cpu):
    cpu.set_cache_limit(64 * KiB)
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        live: list[npt.NDArray[Any]] = []
        try:
            for _ in range(2000):
                if live and rng.random() < 0.5:
                    live.pop(rng.randrange(len(live)))
                else:
                    live.append(cpu.allocate((rng.randrange(1, 24) * KiB,), U8))
                    live[-1][0] = 1
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = cpu.memory_statistics()
    assert stats.bytes_in_use == 0
    assert stats.bytes_held <= 64 * KiB
    assert stats.hits > 0
    cpu.free_cached_memory()
    assert cpu.memory_statistics().bytes_held == 0
