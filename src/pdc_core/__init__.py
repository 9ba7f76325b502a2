"""pdc: structured concurrency for GPU actors.

Actors are async functions fed through mailboxes, or persistent kernels resident on
a device, run inside actor nurseries under asyncio or trio. Backends (``cpu``,
``cuda``, ``metal`` and third-party ones) are pluggy plugins found through the
``pdc`` entry-point group.
"""

from __future__ import annotations

from ._backend import (
    Availability,
    Backend,
    Capability,
    DeviceInfo,
    Event,
    MemoryKind,
    MemoryStatistics,
    Stream,
)
from ._buffer import BufferState, UnifiedBuffer, normalize_shape_dtype
from ._exceptions import (
    BackendError,
    BackendUnavailable,
    CapabilityError,
    PdcError,
    PluginError,
    PoolError,
    PoolLimitError,
)
from ._memory_pool import MemoryPool, PoolStatistics, get_memory_pool
from ._plugins import PluginInfo, hookimpl, list_plugins, reload_plugins
from ._registry import BackendInfo, available_backends, get_backend
from ._version import __version__

__all__ = [
    "Availability",
    "Backend",
    "BackendInfo",
    "BufferState",
    "Capability",
    "DeviceInfo",
    "Event",
    "MemoryKind",
    "MemoryPool",
    "MemoryStatistics",
    "PluginInfo",
    "PoolStatistics",
    "Stream",
    "UnifiedBuffer",
    "available_backends",
    "get_backend",
    "get_memory_pool",
    "hookimpl",
    "list_plugins",
    "normalize_shape_dtype",
    "reload_plugins",
    "BackendError",
    "BackendUnavailable",
    "CapabilityError",
    "PdcError",
    "PluginError",
    "PoolError",
    "PoolLimitError",
    "__version__",
]
