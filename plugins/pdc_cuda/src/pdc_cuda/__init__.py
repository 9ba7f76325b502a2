"""pdc-cuda: the CUDA backend of pdc (CuPy), registered through the ``pdc`` entry points.

Importing this package never imports CuPy: the backend registers on any machine and
reports why it is unavailable ("CuPy is not installed", "no CUDA driver", ...) where
it cannot run. Nor does it import the backend's own modules: the plugin registers a
:class:`~pdc_core.backend.LazyBackend`, and the public names below load on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pdc_core import Backend
from pdc_core.backend import BenchmarkPath, BenchmarkPaths, LazyBackend, hookimpl, lazy_exports

from ._availability import PRIORITY, CudaProbe, availability, diagnose, probe
from ._version import __version__

if TYPE_CHECKING:
    from ._backend import CudaBackend
    from ._exceptions import (
        CudaCompileError,
        CudaContextError,
        NvrtcUnavailable,
        ResidentKernelBlocks,
    )
    from ._kernels import CudaKernel
    from ._launch import LaunchConfig, auto_block_size, launch_config
    from ._nvrtc import compile_to_ptx
    from ._persistent import CudaResidentKernel
    from ._places import CONTEXT_KINDS
    from ._properties import CudaDeviceProperties
    from ._ring_source import CudaRingBody, compile_ring_kernel_ptx, render_ring_kernel
    from ._streams import CudaEvent, CudaStream

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
    "pdc_register_benchmarks",
    "probe",
    "render_ring_kernel",
]


#: Names loaded on first use: every ``pdc`` command and the first ``get_backend()`` import
#: this package to register the backend, on machines where it cannot run too, so only
#: the availability probe is imported eagerly (the backend is registered lazily).
_LAZY = {
    "CONTEXT_KINDS": "._places",
    "CudaBackend": "._backend",
    "CudaCompileError": "._exceptions",
    "CudaContextError": "._exceptions",
    "CudaDeviceProperties": "._properties",
    "CudaEvent": "._streams",
    "CudaKernel": "._kernels",
    "CudaResidentKernel": "._persistent",
    "CudaRingBody": "._ring_source",
    "CudaStream": "._streams",
    "LaunchConfig": "._launch",
    "NvrtcUnavailable": "._exceptions",
    "ResidentKernelBlocks": "._exceptions",
    "auto_block_size": "._launch",
    "compile_ring_kernel_ptx": "._ring_source",
    "compile_to_ptx": "._nvrtc",
    "launch_config": "._launch",
    "render_ring_kernel": "._ring_source",
}


__getattr__ = lazy_exports(__name__, _LAZY)


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend] | LazyBackend], None]) -> None:
    """The plugin's hook: registers :class:`CudaBackend` (backend name ``cuda``) lazily.

    pdc calls it once, when backends are first needed. It imports neither CuPy nor the
    backend's module: pdc ranks the backend and probes the driver with the functions of
    the availability module, and imports the class only when the cuda backend is used
    or listed in detail.
    """
    register(
        LazyBackend(
            "cuda",
            "pdc-cuda",
            "pdc_cuda._backend:CudaBackend",
            priority=PRIORITY,
            availability=availability,
        )
    )


def _benchmark_paths(backend: Backend) -> Iterable[BenchmarkPath]:
    from ._bench import benchmark_paths

    return benchmark_paths(backend)


@hookimpl
def pdc_register_benchmarks(register: Callable[[str, BenchmarkPaths, str], None]) -> None:
    """The plugin's hook: ``pdc bench --backend cuda`` also measures the hand-written
    mapped-memory floor (8 B, and 4 KiB / 64 KiB read by one thread and by the block),
    pdc's resident ring on those payloads and, on a GPU, the ``cuda.bindings``
    pre-packed launch and a CUDA-graph replay per message; each pdc path is shown as a
    ratio to them. Imports nothing until ``pdc bench`` asks."""
    register("cuda", _benchmark_paths, "the mapped-memory floor and the launch paths")
