"""A caching allocator of host memory blocks, the CPU backend's memory pool."""

from __future__ import annotations

import bisect
import math
import operator
import os
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from pdc_core.backend import MemoryStatistics

#: Blocks are rounded up to a multiple of this many bytes (and aligned to it by NumPy's
#: allocator for large blocks), so nearby sizes share cached blocks.
GRANULE = 512

#: The default cache bound is this fraction (1/16) of the memory available to the
#: process, and at most :data:`DEFAULT_CACHE_CAP`.
DEFAULT_CACHE_DIVISOR = 16
#: The largest default cache bound, also used when the memory available is unknown.
DEFAULT_CACHE_CAP = 256 * 2**20

#: By default the cache holds at most this many times the peak of bytes in use (the
#: most that live arrays ever held at once): a working set that is dropped and made
#: again is served from the cache, and a stream of ever new sizes cannot fill it.
DEFAULT_CACHE_RATIO = 2.0

#: A cached block serves a request of at least ``1 / REUSE_SPAN`` of its size: a freed
#: 8 MiB block serves any request from 4 MiB up to 8 MiB (blocks are not split).
REUSE_SPAN = 2

_Block = npt.NDArray[np.uint8]


def available_memory() -> int | None:
    """Bytes of memory this process may use, or ``None`` when unknown.

    Physical memory, or the memory limit of the process's cgroup (a container's limit)
    when that is visible and lower.
    """
    known: list[int] = []
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    else:
        if physical > 0:
            known.append(physical)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as limit_file:
                text = limit_file.read().strip()
        except (OSError, ValueError):
            continue
        if text.isdigit() and int(text) > 0:  # cgroup v2 writes "max" when unlimited
            known.append(int(text))
    return min(known) if known else None


def default_cache_limit(available: int | None) -> int:
    """The default cache bound for a process with ``available`` bytes of memory.

    ``available // 16``, at most 256 MiB, and 256 MiB when ``available`` is unknown.
    The cache only saves the cost of fresh allocations (``mmap`` plus a page fault on
    the first touch of every page) for buffers that are dropped and made again, which
    in a pipeline is a steady working set of a few buffers; 256 MiB covers that for
    buffers of tens of MiB, and for larger ones the allocation cost is small next to
    the work done on them. A sixteenth of the memory keeps the cache modest on small
    machines and containers, where cached memory nobody uses could cost an
    out-of-memory kill.
    """
    if available is None:
        return DEFAULT_CACHE_CAP
    return min(available // DEFAULT_CACHE_DIVISOR, DEFAULT_CACHE_CAP)


#: The cache bound a new pool gets, computed once, at import.
DEFAULT_CACHE_LIMIT = default_cache_limit(available_memory())


def check_ratio(value: object, name: str) -> float | None:
    """``value`` as a positive finite ratio, or ``None``; else an error naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a number (a ratio to the peak of bytes in use) or None")
    ratio = float(value)
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"{name} must be a positive finite number or None, not {value!r}")
    return ratio


def check_byte_limit(value: object, name: str) -> int | None:
    """``value`` as a non-negative number of bytes, or ``None``; else an error naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number of bytes (an int) or None, not a bool: {value!r}")
    try:
        nbytes = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{name} must be a number of bytes (an int) or None, not {type(value).__name__} "
            f"{value!r}"
        ) from None
    if nbytes < 0:
        raise ValueError(f"{name} must be a non-negative number of bytes or None, not {nbytes}")
    return nbytes


class _BlockLease:
    """The base object of every array carved from a block.

    NumPy keeps an array's base alive for as long as any view derived from it lives,
    and (unlike an ndarray base) a non-array base is never skipped when NumPy
    collapses base chains. So the block is back in the cache exactly when the last
    view of it is gone.
    """

    def __init__(self, block: _Block, nbytes: int) -> None:
        self.__array_interface__ = {
            "data": (block.ctypes.data, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }
        self.block = block


class HostMemoryPool:
    """Hands out host arrays carved from cached blocks.

    A block returns to the cache when the last array viewing it is garbage-collected,
    so callers never free anything by hand; only such blocks are ever cached, reused
    or evicted. Thread-safe.

    Reuse: a request (rounded up to :data:`GRANULE` bytes) takes the cached block of
    its size if there is one, else the smallest cached block larger than it and at most
    :data:`REUSE_SPAN` times its size (best fit; the whole block counts as in use
    until it comes back), else a new block.

    The cache (blocks kept for reuse, not blocks in use) is bounded twice: by
    ``cache_limit`` bytes and by ``cache_ratio`` times the peak of bytes in use (the
    most that live arrays have held at once, :attr:`peak_bytes_in_use`). When a
    returning block would take it past the lower of the two, the least recently
    returned blocks are freed to make room, and a block larger than the bound is freed
    at once. ``None`` lifts a bound; a ``cache_limit`` of ``0`` caches nothing. The
    defaults are :data:`DEFAULT_CACHE_LIMIT` (see :func:`default_cache_limit`) and
    :data:`DEFAULT_CACHE_RATIO` (2: at most twice the peak of live bytes).

    ``limit`` bounds all the bytes held (in use plus cached): cached blocks are freed,
    least recently returned first, to make room, and an allocation that still does not
    fit raises :class:`MemoryError`.
    """

    def __init__(
        self,
        limit: int | None = None,
        cache_limit: int | None = DEFAULT_CACHE_LIMIT,
        cache_ratio: float | None = DEFAULT_CACHE_RATIO,
    ) -> None:
        self._lock = threading.Lock()
        self._cache_limit = check_byte_limit(cache_limit, "cache_limit")
        self._cache_ratio = check_ratio(cache_ratio, "cache_ratio")
        # The cache: blocks by size, least recently returned first, the sizes that have
        # cached blocks in ascending order (for best fit), and every cached block's id
        # with its size, least recently returned first across sizes.
        self._by_size: dict[int, deque[_Block]] = {}
        self._sizes: list[int] = []
        self._peak = 0  # the most bytes in use at once
        self._lru: OrderedDict[int, int] = OrderedDict()
        # Blocks whose last view has gone and that the cache has not taken yet.
        self._returned: deque[tuple[_Block, int]] = deque()
        self._hits = 0
        self._misses = 0
        self._in_use = 0  # includes the blocks in _returned
        self._cached = 0
        self._held = 0
        self.limit = limit

    @property
    def cache_limit(self) -> int | None:
        """The most bytes of freed blocks kept for reuse; ``None`` when unbounded."""
        return self._cache_limit

    def set_cache_limit(self, nbytes: int | None) -> int | None:
        """Bound the cache to ``nbytes`` (``None``: no bound) and return the old bound.

        Cached blocks beyond the new bound are freed at once, least recently returned
        first.
        """
        nbytes = check_byte_limit(nbytes, "nbytes")
        with self._locked():
            previous, self._cache_limit = self._cache_limit, nbytes
            self._evict_until(self._bound())
        return previous

    @property
    def cache_ratio(self) -> float | None:
        """The cache's bound relative to :attr:`peak_bytes_in_use`; ``None``: none."""
        return self._cache_ratio

    def set_cache_ratio(self, ratio: float | None) -> float | None:
        """Bound the cache to ``ratio`` times the peak of bytes in use (``None``: no such
        bound) and return the old ratio; cached blocks beyond it are freed at once."""
        ratio = check_ratio(ratio, "ratio")
        with self._locked():
            previous, self._cache_ratio = self._cache_ratio, ratio
            self._evict_until(self._bound())
        return previous

    @property
    def peak_bytes_in_use(self) -> int:
        """The most bytes that arrays of this pool have held at once."""
        return self._peak

    def _bound(self) -> int | None:
        """The cache's bound now: the lower of the byte limit and the ratio's."""
        bound = self._cache_limit
        if self._cache_ratio is not None:
            relative = int(self._cache_ratio * self._peak)
            bound = relative if bound is None else min(bound, relative)
        return bound

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(GRANULE, -(-nbytes // GRANULE) * GRANULE)
        try:  # as _locked() does, without the cost of a context manager on this path
            with self._lock:
                if self._returned:
                    self._settle_locked()
                cached = self._by_size.get(size)
                if cached is None and self._sizes:  # best fit: the smallest that serves
                    sizes = self._sizes
                    index = bisect.bisect_left(sizes, size)
                    if index < len(sizes) and sizes[index] <= size * REUSE_SPAN:
                        size = sizes[index]
                        cached = self._by_size[size]
                if cached:
                    block = cached.pop()  # the most recently returned: likeliest still warm
                    if not cached:
                        del self._by_size[size]
                        del self._sizes[bisect.bisect_left(self._sizes, size)]
                    del self._lru[id(block)]
                    self._cached -= size
                    self._hits += 1
                else:
                    self._make_room(size)
                    block = np.empty(size, dtype=np.uint8)
                    self._misses += 1
                    self._held += size
                in_use = self._in_use = self._in_use + size
                if in_use > self._peak:
                    self._peak = in_use
        finally:
            if self._returned:
                self._settle()
        lease = _BlockLease(block, nbytes)
        finalizer = weakref.finalize(lease, self._give_back, block, size)
        finalizer.atexit = False  # nothing to give back to at interpreter exit
        return np.asarray(lease).view(dtype).reshape(shape)

    def free_cached(self) -> None:
        with self._locked():
            self._evict_until(0)

    def statistics(self) -> MemoryStatistics:
        with self._locked():
            return MemoryStatistics(
                hits=self._hits,
                misses=self._misses,
                bytes_in_use=self._in_use,
                bytes_held=self._held,
                limit=self.limit,
            )

    # -- returning blocks -------------------------------------------------------------
    #
    # A lease's finalizer can run on any thread, and also on a thread that holds the
    # lock already: the garbage collector may run inside a locked section and collect
    # a cycle holding the last view of a block. So the finalizer only queues the block,
    # then takes it into the cache if the lock is free; whoever holds the lock takes
    # the queued blocks in when it releases it (see _locked). The cache's structures
    # are only ever changed by the holder of the lock, never by a reentrant finalizer.

    def _give_back(self, block: _Block, size: int) -> None:
        self._returned.append((block, size))
        self._settle()

    def _settle(self) -> None:
        while self._returned:
            if not self._lock.acquire(blocking=False):
                return  # the holder settles after releasing the lock
            try:
                self._settle_locked()
            finally:
                self._lock.release()

    def _settle_locked(self) -> None:
        while self._returned:
            block, size = self._returned.popleft()
            self._in_use -= size
            self._cache(block, size)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            with self._lock:
                self._settle_locked()
                yield
        finally:
            self._settle()

    # -- the cache (called with the lock held) ------------------------------------------

    def _cache(self, block: _Block, size: int) -> None:
        bound = self._bound()
        if bound is not None:
            if size > bound:
                self._held -= size  # bigger than the whole cache: free it
                return
            self._evict_until(bound - size)
        blocks = self._by_size.get(size)
        if blocks is None:
            blocks = self._by_size[size] = deque()
            bisect.insort(self._sizes, size)
        blocks.append(block)
        self._lru[id(block)] = size
        self._cached += size

    def _evict_until(self, cached: int | None) -> None:
        """Free least recently returned blocks until the cache holds ``cached`` bytes or
        fewer (``None``: no bound, nothing to free)."""
        if cached is None:
            return
        while self._cached > cached:
            _, size = self._lru.popitem(last=False)
            blocks = self._by_size[size]
            blocks.popleft()  # the least recently returned block of its size
            if not blocks:
                del self._by_size[size]
                del self._sizes[bisect.bisect_left(self._sizes, size)]
            self._cached -= size
            self._held -= size

    def _make_room(self, size: int) -> None:
        if self.limit is None or self._held + size <= self.limit:
            return
        self._evict_until(max(0, self._cached - (self._held + size - self.limit)))
        if self._held + size > self.limit:
            raise MemoryError(
                f"the cpu memory pool cannot allocate {size} bytes: {self._held} of its "
                f"{self.limit}-byte limit are held by live arrays"
            )
