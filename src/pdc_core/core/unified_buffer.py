"""``from pdc_core.core.unified_buffer import UnifiedBuffer`` (the PyDotCompute path)."""

from .._buffer import BufferState, UnifiedBuffer

__all__ = ["BufferState", "UnifiedBuffer"]
