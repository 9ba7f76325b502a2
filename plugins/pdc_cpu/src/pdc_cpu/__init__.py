"""pdc-cpu: the CPU backend of pdc, registered through the ``pdc`` entry-point group."""

from __future__ import annotations

from collections.abc import Callable

from pdc_core import Backend
from pdc_core.backend import hookimpl

from ._backend import CpuBackend
from ._memory import DEFAULT_CACHE_LIMIT, DEFAULT_CACHE_RATIO
from ._version import __version__

__all__ = [
    "DEFAULT_CACHE_LIMIT",
    "DEFAULT_CACHE_RATIO",
    "CpuBackend",
    "__version__",
    "pdc_register_backends",
]


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend]], None]) -> None:
    """The plugin's hook: registers :class:`CpuBackend` (backend name ``cpu``).

    pdc calls it once, when backends are first needed; it imports no vendor library,
    so it never raises on a machine without the hardware.
    """
    register(CpuBackend)
