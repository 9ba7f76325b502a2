"""pdc-cuda: the CUDA backend of pdc (CuPy), registered through the ``pdc`` entry points.

Importing this package never imports CuPy: the backend registers on any machine and
reports why it is unavailable ("CuPy is not installed", "no CUDA driver", ...) where
it cannot run.
"""

from __future__ import annotations

from collections.abc import Callable

from pdc_core import Backend, hookimpl

from ._availability import CudaProbe, diagnose, probe
from ._backend import CudaBackend
from ._exceptions import CudaCompileError, NvrtcUnavailable
from ._kernels import CudaKernel
from ._launch import LaunchConfig, auto_block_size, launch_config
from ._nvrtc import compile_to_ptx
from ._properties import CudaDeviceProperties
from ._streams import CudaEvent, CudaStream
from ._version import __version__

__all__ = [
    "CudaBackend",
    "CudaCompileError",
    "CudaDeviceProperties",
    "CudaEvent",
    "CudaKernel",
    "CudaProbe",
    "CudaStream",
    "LaunchConfig",
    "NvrtcUnavailable",
    "__version__",
    "auto_block_size",
    "compile_to_ptx",
    "diagnose",
    "launch_config",
    "pdc_register_backends",
    "probe",
]


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend]], None]) -> None:
    register(CudaBackend)
