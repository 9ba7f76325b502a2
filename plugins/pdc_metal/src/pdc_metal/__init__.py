"""pdc-metal: the Metal backend of pdc on MLX, registered through the ``pdc`` entry points.

Importing this module never imports MLX, nor the backend's own modules (the plugin
registers a :class:`~pdc_core.backend.LazyBackend`, and the names below load on first
use): the backend registers everywhere and, on a machine without MLX, reports itself
unavailable with the reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from pdc_core import Backend
from pdc_core.backend import LazyBackend, hookimpl, lazy_exports

from . import _mlx
from ._version import __version__ as __version__

if TYPE_CHECKING:  # the names of _LAZY, for type checkers (a test holds them alike)
    from ._backend import MetalBackend as MetalBackend
    from ._kernels import MetalKernel as MetalKernel
    from ._streams import MetalEvent as MetalEvent
    from ._streams import MetalStream as MetalStream

#: The names loaded on first use, by the module they live in: the plugin registers its
#: backend lazily, so that choosing the default backend imports only the MLX probe
#: (:mod:`pdc_metal._mlx`).
_LAZY = {
    "._backend": ("MetalBackend",),
    "._kernels": ("MetalKernel",),
    "._streams": ("MetalEvent", "MetalStream"),
}

__all__ = sorted(["__version__", "pdc_register_backends", *itertools.chain(*_LAZY.values())])

__getattr__ = lazy_exports(
    __name__, {name: home for home, names in _LAZY.items() for name in names}
)


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend] | LazyBackend], None]) -> None:
    """The plugin's hook: registers :class:`MetalBackend` (backend name ``metal``) lazily.

    pdc calls it once, when backends are first needed. It imports neither MLX nor the
    backend's module: pdc ranks and probes the backend with the MLX probe's functions
    and imports the class only when the metal backend is used or listed in detail.
    """
    register(
        LazyBackend(
            "metal",
            "pdc-metal",
            "pdc_metal._backend:MetalBackend",
            priority=_mlx.priority,
            availability=_mlx.availability,
        )
    )
