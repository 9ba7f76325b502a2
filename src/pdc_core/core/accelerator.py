"""PyDotCompute's import path ``pydotcompute.core.accelerator``: devices, through pdc's backends.

A thin layer for code written for PyDotCompute: :class:`Accelerator` lists the devices
of pdc's available backends (:func:`pdc_core.available_backends`, each backend's
``devices()``) as PyDotCompute's :class:`DeviceProperties`. As in PyDotCompute, the
list holds the GPU devices (CUDA, then Metal) when there are any, else the CPU, and
``Accelerator()`` is one object per process. New code asks pdc directly:
``pdc_core.get_backend()``, ``pdc_core.available_backends()`` or ``pdc info``.
"""

from .._publish import publish
from .._pydotcompute.core.accelerator import (
    Accelerator,
    DeviceProperties,
    DeviceType,
    cuda_available,
    get_accelerator,
    metal_available,
)

__all__ = [
    "Accelerator",
    "DeviceProperties",
    "DeviceType",
    "cuda_available",
    "get_accelerator",
    "metal_available",
]

publish(__name__, globals(), __all__)
