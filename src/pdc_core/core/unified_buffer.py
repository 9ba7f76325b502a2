"""PyDotCompute's import path ``pydotcompute.core.unified_buffer``: pdc's buffers."""

from .._publish import publish
from .._pydotcompute.core.unified_buffer import (
    BufferState,
    UnifiedBuffer,
)

__all__ = [
    "BufferState",
    "UnifiedBuffer",
]

publish(__name__, globals(), __all__)
