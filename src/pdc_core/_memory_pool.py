"""``MemoryPool``: reuse of :class:`UnifiedBuffer` objects, with statistics and a byte limit."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._backend._contract import Backend
from ._buffer import ShapeLike, UnifiedBuffer, normalize_shape_dtype
from ._exceptions import PoolError, PoolLimitError
from ._plugins import resolve_backend

__all__ = ["MemoryPool", "PoolStatistics", "get_memory_pool"]

_Key = tuple[str, tuple[int, ...], str, bool]


@dataclass(frozen=True)
class PoolStatistics:
    """A snapshot of a :class:`MemoryPool`.

    ``hits``: acquisitions served by a released buffer. ``misses``: acquisitions that
    allocated. ``bytes_in_use``: bytes of buffers handed out and not yet released.
    ``bytes_held``: bytes of every buffer the pool owns, in use or free.
    """

    hits: int
    misses: int
    bytes_in_use: int
    bytes_held: int
    buffers_in_use: int
    buffers_free: int
    limit: int | None

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class MemoryPool:
    """Hands out :class:`UnifiedBuffer` objects and takes them back for reuse.

    A released buffer is handed out again to the next :meth:`acquire` with the same
    backend, shape, dtype and pinning; its contents are whatever the previous user
    left (fill it if you need zeros). With ``limit`` (bytes), free buffers are evicted,
    oldest first, to make room, and an acquisition that still does not fit raises
    :class:`~pdc_core.PoolLimitError`. Safe to use from many tasks and threads at
    once: every method holds the pool's lock and none of them awaits.
    """

    def __init__(self, limit: int | None = None, backend: Backend | str | None = None) -> None:
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be a non-negative number of bytes or None, not {limit!r}")
        self.limit = limit
        self._backend = backend
        self._lock = threading.Lock()
        self._free: OrderedDict[int, tuple[_Key, UnifiedBuffer]] = OrderedDict()
        self._free_by_key: dict[_Key, list[UnifiedBuffer]] = {}
        self._in_use: dict[int, UnifiedBuffer] = {}
        self._hits = 0
        self._misses = 0
        self._bytes_in_use = 0
        self._bytes_held = 0

    def acquire(
        self,
        shape: ShapeLike,
        dtype: npt.DTypeLike = np.float32,
        *,
        pinned: bool = False,
        backend: Backend | str | None = None,
    ) -> UnifiedBuffer:
        """A buffer of ``shape`` and ``dtype``, reused when one was released."""
        shape, canonical = normalize_shape_dtype(shape, dtype)
        resolved = resolve_backend(backend if backend is not None else self._backend)
        key: _Key = (resolved.qualified_name, shape, canonical.str, bool(pinned))
        with self._lock:
            candidates = self._free_by_key.get(key)
            if candidates:
                buffer = candidates.pop()
                del self._free[id(buffer)]
                self._hits += 1
            else:
                nbytes = int(np.prod(shape, dtype=np.int64)) * canonical.itemsize
                self._make_room(nbytes)
                buffer = UnifiedBuffer(shape, canonical, pinned=pinned, backend=resolved)
                self._misses += 1
                self._bytes_held += buffer.nbytes
            self._in_use[id(buffer)] = buffer
            self._bytes_in_use += buffer.nbytes
            return buffer

    def release(self, buffer: UnifiedBuffer) -> None:
        """Give ``buffer`` back for reuse; it must not be used afterwards.

        Raises :class:`~pdc_core.PoolError` if this pool did not hand it out or it
        was already released.
        """
        with self._lock:
            if self._in_use.pop(id(buffer), None) is None:
                if id(buffer) in self._free:
                    raise PoolError(f"{buffer!r} was released twice")
                raise PoolError(f"{buffer!r} was not handed out by this pool")
            self._bytes_in_use -= buffer.nbytes
            key: _Key = (
                buffer.backend.qualified_name,
                buffer.shape,
                buffer.dtype.str,
                buffer.pinned,
            )
            self._free[id(buffer)] = (key, buffer)
            self._free_by_key.setdefault(key, []).append(buffer)

    @contextmanager
    def lease(
        self, shape: ShapeLike, dtype: npt.DTypeLike = np.float32, **kwargs: Any
    ) -> Iterator[UnifiedBuffer]:
        """``with pool.lease(shape, dtype) as buf:`` acquires, and releases on exit."""
        buffer = self.acquire(shape, dtype, **kwargs)
        try:
            yield buffer
        finally:
            self.release(buffer)

    def _make_room(self, nbytes: int) -> None:
        if self.limit is None:
            return
        while self._bytes_held + nbytes > self.limit and self._free:
            _, (key, oldest) = self._free.popitem(last=False)
            self._free_by_key[key].remove(oldest)
            self._bytes_held -= oldest.nbytes
        if self._bytes_held + nbytes > self.limit:
            raise PoolLimitError(
                f"cannot allocate {nbytes} bytes: the pool's limit is {self.limit} bytes and "
                f"{self._bytes_in_use} bytes are in use"
            )

    def clear(self) -> None:
        """Drop every free buffer (buffers in use are unaffected)."""
        with self._lock:
            for _, buffer in self._free.values():
                self._bytes_held -= buffer.nbytes
            self._free.clear()
            self._free_by_key.clear()

    def statistics(self) -> PoolStatistics:
        with self._lock:
            return PoolStatistics(
                hits=self._hits,
                misses=self._misses,
                bytes_in_use=self._bytes_in_use,
                bytes_held=self._bytes_held,
                buffers_in_use=len(self._in_use),
                buffers_free=len(self._free),
                limit=self.limit,
            )


_default_pool: MemoryPool | None = None
_default_lock = threading.Lock()


def get_memory_pool() -> MemoryPool:
    """The process-wide pool (unbounded, on the default backend at each acquisition)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = MemoryPool()
        return _default_pool
