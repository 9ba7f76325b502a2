"""PyDotCompute's import path ``pydotcompute.core``: buffers and the memory pool.

New code imports from ``pdc_core`` directly. ``pdc_core.core``, ``pdc_core.decorators``,
``pdc_core.ring_kernels``, ``pdc_core.backends`` and ``pdc_core.exceptions`` exist so
that code written for PyDotCompute works with ``pdc_core`` in place of ``pydotcompute``:
they re-export pdc's own objects (``pdc_core.core.UnifiedBuffer is
pdc_core.UnifiedBuffer``), or thin layers over them under PyDotCompute's names
(``Accelerator``, over pdc's backends; ``ComputeOrchestrator``, over pdc's kernels
and memory pool). docs/migrating-from-pydotcompute.md lists every path, and what to
use instead.
"""

from .._publish import publish
from .accelerator import Accelerator
from .memory_pool import MemoryPool
from .orchestrator import ComputeOrchestrator
from .unified_buffer import BufferState, UnifiedBuffer

__all__ = ["Accelerator", "BufferState", "ComputeOrchestrator", "MemoryPool", "UnifiedBuffer"]

publish(__name__, globals(), __all__)
