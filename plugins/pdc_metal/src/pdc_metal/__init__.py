"""pdc-metal: the Metal backend of pdc on MLX, registered through the ``pdc`` entry points.

Importing this module never imports MLX: the backend registers everywhere and, on a
machine without MLX, reports itself unavailable with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

from pdc_core import Backend
from pdc_core.backend import hookimpl

from ._backend import MetalBackend
from ._kernels import MetalKernel
from ._streams import MetalEvent, MetalStream
from ._version import __version__

__all__ = [
    "MetalBackend",
    "MetalEvent",
    "MetalKernel",
    "MetalStream",
    "__version__",
    "pdc_register_backends",
]


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend]], None]) -> None:
    """The plugin's hook: registers :class:`MetalBackend` (backend name ``metal``).

    pdc calls it once, when backends are first needed; it imports no vendor library,
    so it never raises on a machine without the hardware.
    """
    register(MetalBackend)
