"""pdc-cuda: the CUDA backend of pdc (CuPy), registered through the ``pdc`` entry points.

Importing this package never imports CuPy: the backend registers on any machine and
reports why it is unavailable ("CuPy is not installed", "no CUDA driver", ...) where
it cannot run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pdc_core import Backend
from pdc_core.backend import hookimpl

from ._availability import CudaProbe, diagnose, probe
from ._backend import CudaBackend
from ._context import CONTEXT_KINDS
from ._exceptions import (
    CudaCompileError,
    CudaContextError,
    NvrtcUnavailable,
    ResidentKernelBlocks,
)
from ._kernels import CudaKernel
from ._launch import LaunchConfig, auto_block_size, launch_config
from ._properties import CudaDeviceProperties
from ._streams import CudaEvent, CudaStream
from ._version import __version__

if TYPE_CHECKING:
    from ._nvrtc import compile_to_ptx
    from ._persistent import CudaResidentKernel
    from ._ring_source import CudaRingBody, compile_ring_kernel_ptx, render_ring_kernel

__all__ = [
    "CONTEXT_KINDS",
    "CudaBackend",
    "CudaCompileError",
    "CudaContextError",
    "CudaDeviceProperties",
    "CudaEvent",
    "CudaKernel",
    "CudaProbe",
    "CudaResidentKernel",
    "CudaRingBody",
    "CudaStream",
    "LaunchConfig",
    "NvrtcUnavailable",
    "ResidentKernelBlocks",
    "__version__",
    "auto_block_size",
    "compile_ring_kernel_ptx",
    "compile_to_ptx",
    "diagnose",
    "launch_config",
    "pdc_register_backends",
    "probe",
    "render_ring_kernel",
]


#: Names loaded on first use: every ``pdc`` command and the first ``get_backend()`` import
#: the plugin to register its backend, and these cost that first use most (the ring
#: kernel's source renderer, the NVRTC bindings, pdc_core's persistent-kernel machinery).
_LAZY = {
    "CudaResidentKernel": "._persistent",
    "CudaRingBody": "._ring_source",
    "compile_ring_kernel_ptx": "._ring_source",
    "render_ring_kernel": "._ring_source",
    "compile_to_ptx": "._nvrtc",
}


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'pdc_cuda' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend]], None]) -> None:
    """The plugin's hook: registers :class:`CudaBackend` (backend name ``cuda``).

    pdc calls it once, when backends are first needed; it imports no vendor library,
    so it never raises on a machine without the hardware.
    """
    register(CudaBackend)
