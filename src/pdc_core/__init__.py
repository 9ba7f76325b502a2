"""pdc: structured concurrency for GPU actors.

Actors are async functions fed through mailboxes, or persistent kernels resident on
a device, run inside actor nurseries under asyncio or trio. Backends (``cpu``,
``cuda``, ``metal`` and third-party ones) are pluggy plugins found through the
``pdc`` entry-point group.
"""

from __future__ import annotations

from ._exceptions import (
    BackendError,
    BackendUnavailable,
    CapabilityError,
    PdcError,
    PluginError,
    PoolError,
    PoolLimitError,
)
from ._version import __version__

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "CapabilityError",
    "PdcError",
    "PluginError",
    "PoolError",
    "PoolLimitError",
    "__version__",
]
