"""PyDotCompute's import path ``pydotcompute.core.memory_pool``: pdc's memory pool.

``configure_memory_pool`` is not provided: make a ``MemoryPool(limit=...)``.
"""

from .._memory_pool import MemoryPool, PoolStatistics, get_memory_pool

__all__ = ["MemoryPool", "PoolStatistics", "get_memory_pool"]
