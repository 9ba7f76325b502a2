"""MemoryPool: reuse, statistics, limits, misuse, and concurrent use."""

from __future__ import annotations

import threading

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from pdc_core import MemoryPool, PoolError, PoolLimitError, get_memory_pool
from pdc_core import get_memory_pool as seed_get_memory_pool


def test_seed_import_path_gives_the_same_pool():
    assert seed_get_memory_pool() is get_memory_pool()


def test_seed_usage():
    pool = get_memory_pool()
    for _ in range(3):
        buf = pool.acquire((128,), dtype=np.float32)
        try:
            buf.host[:] = 1.0
        finally:
            pool.release(buf)


def test_released_buffers_are_reused_and_counted():
    pool = MemoryPool()
    first = pool.acquire((10,), dtype=np.float64)
    stats = pool.statistics()
    assert (stats.hits, stats.misses, stats.bytes_in_use, stats.bytes_held) == (0, 1, 80, 80)
    pool.release(first)
    assert pool.statistics().bytes_in_use == 0
    again = pool.acquire((10,), dtype=np.float64)
    assert again is first
    other = pool.acquire((10,), dtype=np.float32)  # different dtype: no reuse
    assert other is not first
    stats = pool.statistics()
    assert (stats.hits, stats.misses) == (1, 2)
    assert stats.bytes_in_use == stats.bytes_held == 120
    assert stats.hit_rate == pytest.approx(1 / 3)


def test_release_errors():
    pool = MemoryPool()
    buf = pool.acquire((4,))
    pool.release(buf)
    with pytest.raises(PoolError, match="released twice"):
        pool.release(buf)
    foreign = MemoryPool().acquire((4,))
    with pytest.raises(PoolError, match="not handed out by this pool"):
        pool.release(foreign)


async def test_a_second_release_is_named_so_however_the_buffer_left_the_pool():
    pool = MemoryPool()
    closed = pool.acquire((4,))
    closed.close()
    pool.release(closed)  # dropped: its memory went back with close()
    with pytest.raises(PoolError, match="released twice"):
        pool.release(closed)
    evicted = pool.acquire((8,))
    pool.release(evicted)
    pool.clear()
    with pytest.raises(PoolError, match="released twice"):
        pool.release(evicted)
    foreign = MemoryPool().acquire((4,))
    with pytest.raises(PoolError, match="not handed out by this pool"):
        pool.release(foreign)
    stats = pool.statistics()
    assert (stats.bytes_in_use, stats.bytes_held, stats.buffers_free) == (0, 0, 0)


async def test_a_buffer_closed_after_its_release_is_never_handed_out_again():
    pool = MemoryPool()
    buf = pool.acquire((4,))
    pool.release(buf)
    buf.close()  # a misuse: it was given back
    again = pool.acquire((4,))
    assert again is not buf
    assert not again.closed
    stats = pool.statistics()
    assert (stats.bytes_held, stats.buffers_free) == (again.nbytes, 0)


def test_limit_evicts_free_buffers_then_refuses():
    pool = MemoryPool(limit=1000)
    a = pool.acquire((100,), dtype=np.uint8)
    b = pool.acquire((800,), dtype=np.uint8)
    pool.release(a)
    c = pool.acquire((150,), dtype=np.uint8)  # evicts a to fit
    stats = pool.statistics()
    assert stats.bytes_held == 950
    assert stats.buffers_free == 0
    with pytest.raises(PoolLimitError, match="limit is 1000 bytes"):
        pool.acquire((100,), dtype=np.uint8)
    pool.release(b)
    pool.release(c)
    pool.clear()
    assert pool.statistics().bytes_held == 0


def test_bad_limit_and_bad_shape():
    with pytest.raises(ValueError, match="limit"):
        MemoryPool(limit=-1)
    with pytest.raises(ValueError, match="negative dimension"):
        MemoryPool().acquire((-3,))


def test_lease_releases_on_error():
    pool = MemoryPool()
    leased = []

    def use() -> None:
        with pool.lease((4,)) as buf:
            leased.append(buf)
            assert pool.statistics().buffers_in_use == 1
            raise RuntimeError

    with pytest.raises(RuntimeError):
        use()
    (buf,) = leased
    assert pool.statistics().buffers_free == 1
    assert pool.acquire((4,)) is buf


async def test_concurrent_tasks_never_share_a_buffer():
    pool = MemoryPool()
    holders: dict[int, int] = {}

    async def worker(index: int) -> None:
        for _ in range(50):
            buf = pool.acquire((64,), dtype=np.int32)
            assert id(buf) not in holders, "a buffer was handed to two tasks at once"
            holders[id(buf)] = index
            buf.host[:] = index
            await anyio.lowlevel.checkpoint()
            assert (buf.host == index).all()
            del holders[id(buf)]
            pool.release(buf)

    async with anyio.create_task_group() as tg:
        for index in range(20):
            tg.start_soon(worker, index)
    stats = pool.statistics()
    assert stats.bytes_in_use == 0
    assert stats.hits + stats.misses == 1000
    assert stats.misses <= 20


def test_concurrent_threads_keep_statistics_consistent():
    pool = MemoryPool()

    def worker() -> None:
        for _ in range(200):
            buf = pool.acquire((32,), dtype=np.float32)
            pool.release(buf)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = pool.statistics()
    assert stats.hits + stats.misses == 800
    assert stats.bytes_in_use == 0
    assert stats.bytes_held == stats.misses * 128


def test_a_disabled_pool_passes_through_and_gives_memory_back():
    pool = MemoryPool()
    kept = pool.acquire((4,))
    pool.release(kept)
    assert pool.enabled
    pool.disable()
    assert not pool.enabled
    assert pool.statistics().buffers_free == 0  # the free buffers went
    first = pool.acquire((4,))
    assert first is not kept
    pool.release(first)
    assert first.closed  # released: its memory goes back at once
    stats = pool.statistics()
    assert (stats.misses, stats.hits, stats.bytes_held, stats.bytes_in_use) == (2, 0, 0, 0)
    pool.enable()
    second = pool.acquire((4,))
    pool.release(second)
    assert pool.acquire((4,)) is second


def test_setting_the_limit_checks_it_and_evicts_free_buffers():
    pool = MemoryPool()
    buffers = [pool.acquire((100,), np.uint8) for _ in range(3)]
    for buffer in buffers:
        pool.release(buffer)
    pool.limit = 150  # one buffer fits: the oldest two go
    assert pool.statistics().bytes_held == 100
    assert pool.acquire((100,), np.uint8) is buffers[2]
    with pytest.raises(PoolLimitError):
        pool.acquire((100,), np.uint8)
    with pytest.raises(ValueError, match="limit"):
        pool.limit = -1
    assert pool.limit == 150
    pool.limit = None
    assert pool.acquire((100,), np.uint8).nbytes == 100


def test_lifting_the_limit_keeps_the_free_buffers():
    # None is no limit: every buffer held fits, so none is evicted (they were all
    # dropped, as if the limit were 0).
    pool = MemoryPool(limit=1000)
    buffer = pool.acquire((100,), np.uint8)
    pool.release(buffer)
    pool.limit = None
    assert pool.statistics().bytes_held == 100
    assert pool.acquire((100,), np.uint8) is buffer
