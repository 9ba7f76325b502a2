"""PyDotCompute's import path ``pydotcompute.core.unified_buffer``: pdc's buffers."""

from .._buffer import BufferState, UnifiedBuffer

__all__ = ["BufferState", "UnifiedBuffer"]
