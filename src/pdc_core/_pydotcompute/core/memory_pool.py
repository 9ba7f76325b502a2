"""Body of PyDotCompute\'s :mod:`pdc_core.core.memory_pool`; see its docstring."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

import pdc_core
from pdc_core.lowlevel import check_count, resolve_backend

__all__ = ["MemoryPool", "PoolStatistics", "configure_memory_pool", "get_memory_pool"]

_MIB = 1024 * 1024


@dataclass
class PoolStatistics:
    """PyDotCompute's pool figures: bytes in use, bytes held, free buffers."""

    used_bytes: int
    total_bytes: int
    n_free_blocks: int

    @property
    def free_bytes(self) -> int:
        """Bytes held and not in use."""
        return self.total_bytes - self.used_bytes

    @property
    def utilization(self) -> float:
        """``used_bytes / total_bytes``; 0.0 when nothing is held."""
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def used_mb(self) -> float:
        """``used_bytes`` in MiB."""
        return self.used_bytes / _MIB

    @property
    def total_mb(self) -> float:
        """``total_bytes`` in MiB."""
        return self.total_bytes / _MIB


def _bytes(size_mb: object, name: str) -> int | None:
    """A MiB setting as bytes (``None`` stays): an int >= 0 by the integer rule, the
    error naming ``name`` and the value as given (never the bytes it would make)."""
    return None if size_mb is None else check_count(size_mb, name, minimum=0) * _MIB


class MemoryPool:
    """PyDotCompute's ``MemoryPool``: a view of pdc's process-wide pool
    (:func:`pdc_core.get_memory_pool`), made by the first ``MemoryPool()``.

    Later calls return the same view and ignore their arguments (as in PyDotCompute).
    ``max_size_mb``, when given to the first call, sets the shared pool's byte limit in
    MiB (``None`` leaves the limit as it is); ``initial_size_mb`` is kept for reading
    only (pdc allocates on demand). Every MiB setting (these two, :meth:`set_limit`,
    :func:`configure_memory_pool`) is an int >= 0 (NumPy's integers too; never a bool, a
    float or a str) or ``None`` for no limit: ``TypeError``/``ValueError`` naming the
    argument and the value given.

    Every other method and property is the shared pool's own (see
    :class:`pdc_core.MemoryPool`); :attr:`pool` is that pool.
    """

    _instance: ClassVar[MemoryPool | None] = None
    _initialized: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> MemoryPool:
        if cls._instance is None:
            view = super().__new__(cls)
            view._initialized = False
            cls._instance = view
        return cls._instance

    def __init__(self, initial_size_mb: int = 0, max_size_mb: int | None = None) -> None:
        check_count(initial_size_mb, "initial_size_mb", minimum=0)
        limit = _bytes(max_size_mb, "max_size_mb")  # checked even when then ignored
        if self._initialized:
            return
        # Looked up when the view is made (not cached at import), so a test that swaps
        # pdc's process-wide pool gets a view of the new one with a new ``MemoryPool()``.
        self._pool = pdc_core.get_memory_pool()
        if limit is not None:
            self._pool.limit = limit
        self._initial_size_mb = initial_size_mb
        self._max_size_mb = max_size_mb
        self._cuda_available = resolve_backend(None).name == "cuda"
        self._initialized = True

    @property
    def pool(self) -> pdc_core.MemoryPool:
        """pdc's process-wide pool, the one this view shows."""
        return self._pool

    # -- pdc's pool, unchanged ------------------------------------------------------

    def acquire(
        self, shape: Any, dtype: npt.DTypeLike = np.float32, **kwargs: Any
    ) -> pdc_core.UnifiedBuffer:
        """:meth:`pdc_core.MemoryPool.acquire` on the shared pool."""
        return self._pool.acquire(shape, dtype, **kwargs)

    def release(self, buffer: pdc_core.UnifiedBuffer) -> None:
        """:meth:`pdc_core.MemoryPool.release` on the shared pool."""
        self._pool.release(buffer)

    @contextmanager
    def lease(
        self, shape: Any, dtype: npt.DTypeLike = np.float32, **kwargs: Any
    ) -> Iterator[pdc_core.UnifiedBuffer]:
        """:meth:`pdc_core.MemoryPool.lease` on the shared pool."""
        with self._pool.lease(shape, dtype, **kwargs) as buffer:
            yield buffer

    @property
    def limit(self) -> int | None:
        """The shared pool's byte limit (:attr:`pdc_core.MemoryPool.limit`)."""
        return self._pool.limit

    @limit.setter
    def limit(self, limit: int | None) -> None:
        self._pool.limit = limit

    @property
    def enabled(self) -> bool:
        """Whether the shared pool reuses released buffers."""
        return self._pool.enabled

    def enable(self) -> None:
        """:meth:`pdc_core.MemoryPool.enable` on the shared pool."""
        self._pool.enable()

    def disable(self) -> None:
        """:meth:`pdc_core.MemoryPool.disable` on the shared pool."""
        self._pool.disable()

    def clear(self) -> None:
        """:meth:`pdc_core.MemoryPool.clear` on the shared pool."""
        self._pool.clear()

    def statistics(self) -> pdc_core.PoolStatistics:
        """The shared pool's :meth:`~pdc_core.MemoryPool.statistics`."""
        return self._pool.statistics()

    # -- PyDotCompute's additions ---------------------------------------------------

    def set_limit(self, size_mb: int | None) -> None:
        """The limit in MiB (``None``: none); see :attr:`pdc_core.MemoryPool.limit`."""
        self._pool.limit = _bytes(size_mb, "size_mb")

    def get_stats(self) -> PoolStatistics:
        """The shared pool's figures as PyDotCompute's :class:`PoolStatistics`."""
        stats = self._pool.statistics()
        return PoolStatistics(stats.bytes_in_use, stats.bytes_held, stats.buffers_free)

    def get_pinned_stats(self) -> PoolStatistics:
        """:meth:`get_stats` for the buffers in pinned host memory only."""
        pool = self._pool
        with pool._lock:  # the pool's own lock: one consistent snapshot
            in_use = [buffer for buffer in pool._in_use.values() if buffer.pinned]
            free = [buffer for _, buffer in pool._free.values() if buffer.pinned]
        used = sum(buffer.nbytes for buffer in in_use)
        return PoolStatistics(used, used + sum(buffer.nbytes for buffer in free), len(free))

    def free_all_blocks(self) -> None:
        """Drop every free buffer (:meth:`~pdc_core.MemoryPool.clear`)."""
        self._pool.clear()

    def free_all_free(self) -> None:
        """Drop every free buffer (:meth:`~pdc_core.MemoryPool.clear`)."""
        self._pool.clear()

    def __repr__(self) -> str:
        # Says which API: pdc_core.MemoryPool is another class (a pool of its own).
        stats = self.get_stats()
        return (
            f"<PyDotCompute's MemoryPool, a view of pdc's process-wide pool: "
            f"enabled={self.enabled}, used={stats.used_mb:.2f}MB, "
            f"total={stats.total_mb:.2f}MB, cuda={self._cuda_available}>"
        )


def get_memory_pool() -> MemoryPool:
    """The process-wide :class:`MemoryPool` view (``MemoryPool()``)."""
    return MemoryPool()


def configure_memory_pool(
    _initial_size_mb: int = 0, max_size_mb: int | None = None, enable: bool = True
) -> MemoryPool:
    """The process-wide view, with the shared pool's limit set to ``max_size_mb`` MiB
    when given and reuse switched on (``enable``) or off."""
    pool = MemoryPool(_initial_size_mb)
    if max_size_mb is not None:
        pool.limit = _bytes(max_size_mb, "max_size_mb")
    if enable:
        pool.enable()
    else:
        pool.disable()
    return pool
