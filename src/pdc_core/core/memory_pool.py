"""``from pdc_core.core.memory_pool import get_memory_pool`` (the PyDotCompute path)."""

from .._memory_pool import MemoryPool, PoolStatistics, get_memory_pool

__all__ = ["MemoryPool", "PoolStatistics", "get_memory_pool"]
