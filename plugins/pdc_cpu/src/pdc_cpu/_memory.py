"""A caching allocator of host memory blocks, the CPU backend's memory pool."""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from typing import Any

import numpy as np
import numpy.typing as npt

from pdc_core.backend import MemoryStatistics

#: Blocks are rounded up to a multiple of this many bytes (and aligned to it by NumPy's
#: allocator for large blocks), so nearby sizes share cached blocks.
GRANULE = 512


class _BlockLease:
    """The base object of every array carved from a block.

    NumPy keeps an array's base alive for as long as any view derived from it lives,
    and (unlike an ndarray base) a non-array base is never skipped when NumPy
    collapses base chains. So the block is back in the cache exactly when the last
    view of it is gone.
    """

    def __init__(self, block: npt.NDArray[np.uint8], nbytes: int) -> None:
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
    so callers never free anything by hand. Thread-safe. ``limit`` bounds the bytes
    held: cached blocks are dropped to make room, and an allocation that still does
    not fit raises :class:`MemoryError`.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._lock = threading.Lock()
        self._free: defaultdict[int, list[npt.NDArray[np.uint8]]] = defaultdict(list)
        self._hits = 0
        self._misses = 0
        self._in_use = 0
        self._held = 0
        self.limit = limit

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(GRANULE, -(-nbytes // GRANULE) * GRANULE)
        with self._lock:
            cached = self._free.get(size)
            if cached:
                block = cached.pop()
                self._hits += 1
            else:
                self._make_room(size)
                block = np.empty(size, dtype=np.uint8)
                self._misses += 1
                self._held += size
            self._in_use += size
        lease = _BlockLease(block, nbytes)
        weakref.finalize(lease, self._give_back, block, size)
        return np.asarray(lease).view(dtype).reshape(shape)

    def _make_room(self, size: int) -> None:
        if self.limit is None or self._held + size <= self.limit:
            return
        for cached in self._free.values():
            while cached and self._held + size > self.limit:
                self._held -= len(cached.pop())
        if self._held + size > self.limit:
            raise MemoryError(
                f"the cpu memory pool cannot allocate {size} bytes: {self._held} of its "
                f"{self.limit}-byte limit are held by live arrays"
            )

    def _give_back(self, block: npt.NDArray[np.uint8], size: int) -> None:
        with self._lock:
            self._in_use -= size
            self._free[size].append(block)

    def free_cached(self) -> None:
        with self._lock:
            for cached in self._free.values():
                self._held -= sum(len(block) for block in cached)
                cached.clear()

    def statistics(self) -> MemoryStatistics:
        with self._lock:
            return MemoryStatistics(
                hits=self._hits,
                misses=self._misses,
                bytes_in_use=self._in_use,
                bytes_held=self._held,
                limit=self.limit,
            )
