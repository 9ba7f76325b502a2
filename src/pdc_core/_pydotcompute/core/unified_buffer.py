"""Body of PyDotCompute\'s :mod:`pdc_core.core.unified_buffer`; see its docstring."""

from pdc_core import BufferState, UnifiedBuffer

__all__ = ["BufferState", "UnifiedBuffer"]
