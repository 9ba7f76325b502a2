"""PyDotCompute's import path ``pydotcompute.core.memory_pool``: the process-wide pool.

A thin layer for code written for PyDotCompute. Its :class:`MemoryPool` is pdc's
:class:`~pdc_core.MemoryPool` (``acquire``/``release``/``lease``, ``statistics()``,
``enable()``/``disable()``) under PyDotCompute's rules: one object per process
(``MemoryPool() is MemoryPool() is get_memory_pool()``, made on first use; a class
attribute ``_instance`` holds it), sizes in MiB (``MemoryPool(max_size_mb=...)``,
``set_limit(size_mb)``), ``get_stats()`` as PyDotCompute's :class:`PoolStatistics`,
``free_all_blocks()``/``free_all_free()`` as :meth:`~pdc_core.MemoryPool.clear`.
:func:`configure_memory_pool` sets the limit and switches reuse on or off.

Unlike PyDotCompute's switch over CuPy's allocator, the pool reuses released buffers
from the start, as the seed documents' ``get_memory_pool().acquire/release`` expects;
device memory is pooled by each backend itself (the cuda backend through CuPy's
pool, ``backend.memory_statistics()``). New code makes a ``pdc_core.MemoryPool`` of
its own, or uses ``pdc_core.get_memory_pool()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .._loop import check_count
from .._memory_pool import MemoryPool as _PdcMemoryPool
from .._plugins import resolve_backend

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


class MemoryPool(_PdcMemoryPool):
    """The process-wide :class:`pdc_core.MemoryPool`, made by the first ``MemoryPool()``.

    Later calls return the same pool and ignore their arguments (as in PyDotCompute);
    ``max_size_mb`` is the byte limit in MiB, ``initial_size_mb`` is kept for reading
    only (pdc allocates on demand). Every MiB setting (these two, :meth:`set_limit`,
    :func:`configure_memory_pool`) is an int >= 0 (NumPy's integers too; never a bool, a
    float or a str) or ``None`` for no limit: ``TypeError``/``ValueError`` naming the
    argument and the value given.
    """

    _instance: ClassVar[MemoryPool | None] = None
    _initialized: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> MemoryPool:
        if cls._instance is None:
            pool = super().__new__(cls)
            pool._initialized = False
            cls._instance = pool
        return cls._instance

    def __init__(self, initial_size_mb: int = 0, max_size_mb: int | None = None) -> None:
        check_count(initial_size_mb, "initial_size_mb", minimum=0)
        limit = _bytes(max_size_mb, "max_size_mb")  # checked even when then ignored
        if self._initialized:
            return
        super().__init__(limit=limit)
        self._initial_size_mb = initial_size_mb
        self._max_size_mb = max_size_mb
        self._cuda_available = resolve_backend(None).name == "cuda"
        self._initialized = True

    def set_limit(self, size_mb: int | None) -> None:
        """The limit in MiB (``None``: none); see :attr:`pdc_core.MemoryPool.limit`."""
        self.limit = _bytes(size_mb, "size_mb")

    def get_stats(self) -> PoolStatistics:
        """The pool's figures as PyDotCompute's :class:`PoolStatistics`."""
        stats = self.statistics()
        return PoolStatistics(stats.bytes_in_use, stats.bytes_held, stats.buffers_free)

    def get_pinned_stats(self) -> PoolStatistics:
        """:meth:`get_stats` for the buffers in pinned host memory only."""
        with self._lock:
            in_use = [buffer for buffer in self._in_use.values() if buffer.pinned]
            free = [buffer for _, buffer in self._free.values() if buffer.pinned]
        used = sum(buffer.nbytes for buffer in in_use)
        return PoolStatistics(used, used + sum(buffer.nbytes for buffer in free), len(free))

    def free_all_blocks(self) -> None:
        """Drop every free buffer (:meth:`~pdc_core.MemoryPool.clear`)."""
        self.clear()

    def free_all_free(self) -> None:
        """Drop every free buffer (:meth:`~pdc_core.MemoryPool.clear`)."""
        self.clear()

    def __repr__(self) -> str:
        stats = self.get_stats()
        return (
            f"MemoryPool(enabled={self.enabled}, used={stats.used_mb:.2f}MB, "
            f"total={stats.total_mb:.2f}MB, cuda={self._cuda_available})"
        )


def get_memory_pool() -> MemoryPool:
    """The process-wide :class:`MemoryPool` (``MemoryPool()``)."""
    return MemoryPool()


def configure_memory_pool(
    _initial_size_mb: int = 0, max_size_mb: int | None = None, enable: bool = True
) -> MemoryPool:
    """The process-wide pool, with its limit set to ``max_size_mb`` MiB when given and
    reuse switched on (``enable``) or off."""
    pool = MemoryPool(_initial_size_mb)
    if max_size_mb is not None:
        pool.limit = _bytes(max_size_mb, "max_size_mb")
    if enable:
        pool.enable()
    else:
        pool.disable()
    return pool
