"""PyDotCompute's import path ``pydotcompute.core.memory_pool``: a view of pdc's pool.

A thin layer for code written for PyDotCompute. Its :class:`MemoryPool` is a view of
pdc's process-wide pool, :func:`pdc_core.get_memory_pool`: every call goes to that one
pool, so a buffer released through either path is reused through the other and both
paths' figures count the same buffers (``get_stats()`` is ``statistics()`` in
PyDotCompute's terms). A process has one pool, whichever path its code takes.

On top of pdc's pool (``acquire``/``release``/``lease``, ``statistics()``,
``enable()``/``disable()``, ``limit``, ``clear()``) the view keeps PyDotCompute's rules:
one view per process (``MemoryPool() is MemoryPool() is get_memory_pool()``, made on
first use; a class attribute ``_instance`` holds it), sizes in MiB
(``MemoryPool(max_size_mb=...)``, ``set_limit(size_mb)``), ``get_stats()`` as
PyDotCompute's :class:`PoolStatistics`, ``free_all_blocks()``/``free_all_free()`` as
:meth:`~pdc_core.MemoryPool.clear`. :func:`configure_memory_pool` sets the limit and
switches reuse on or off.

Unlike PyDotCompute's switch over CuPy's allocator, the pool reuses released buffers
from the start, as the seed documents' ``get_memory_pool().acquire/release`` expects;
device memory is pooled by each backend itself (the cuda backend through CuPy's
pool, ``backend.memory_statistics()``). New code uses ``pdc_core.get_memory_pool()``,
or makes a ``pdc_core.MemoryPool`` of its own.
"""

from .._publish import publish
from .._pydotcompute.core.memory_pool import (
    MemoryPool,
    PoolStatistics,
    configure_memory_pool,
    get_memory_pool,
)

__all__ = [
    "MemoryPool",
    "PoolStatistics",
    "configure_memory_pool",
    "get_memory_pool",
]

publish(__name__, globals(), __all__)
