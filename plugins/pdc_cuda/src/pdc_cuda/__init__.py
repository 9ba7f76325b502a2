"""pdc-cuda: the CUDA backend of pdc (CuPy), registered through the ``pdc`` entry points.

Importing this package never imports CuPy: the backend registers on any machine and
reports why it is unavailable ("CuPy is not installed", "no CUDA driver", ...) where
it cannot run. Nor does it import the backend's own modules: the plugin registers a
:class:`~pdc_core.backend.LazyBackend`, and the public names below load on first use.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pdc_core import Backend
from pdc_core.backend import BenchmarkPath, BenchmarkPaths, LazyBackend, hookimpl, lazy_exports

from ._availability import PRIORITY, availability
from ._availability import CudaProbe as CudaProbe
from ._availability import diagnose as diagnose
from ._availability import probe as probe
from ._version import __version__ as __version__

if TYPE_CHECKING:  # the names of _LAZY, for type checkers (a test holds them alike)
    from ._backend import CudaBackend as CudaBackend
    from ._exceptions import CudaCompileError as CudaCompileError
    from ._exceptions import CudaContextError as CudaContextError
    from ._exceptions import NvrtcUnavailable as NvrtcUnavailable
    from ._exceptions import ResidentKernelBlocks as ResidentKernelBlocks
    from ._kernels import CudaKernel as CudaKernel
    from ._launch import LaunchConfig as LaunchConfig
    from ._launch import auto_block_size as auto_block_size
    from ._launch import launch_config as launch_config
    from ._nvrtc import compile_to_ptx as compile_to_ptx
    from ._persistent import CudaResidentKernel as CudaResidentKernel
    from ._places import CONTEXT_KINDS as CONTEXT_KINDS
    from ._properties import CudaDeviceProperties as CudaDeviceProperties
    from ._ring_source import CudaRingBody as CudaRingBody
    from ._ring_source import compile_ring_kernel_ptx as compile_ring_kernel_ptx
    from ._ring_source import render_ring_kernel as render_ring_kernel
    from ._streams import CudaEvent as CudaEvent
    from ._streams import CudaStream as CudaStream

#: The names loaded on first use, by the module they live in: every ``pdc`` command and
#: the first ``get_backend()`` import this package to register the backend, on machines
#: where it cannot run too, so only the availability probe is imported eagerly (the
#: backend is registered lazily).
_LAZY = {
    "._backend": ("CudaBackend",),
    "._exceptions": (
        "CudaCompileError",
        "CudaContextError",
        "NvrtcUnavailable",
        "ResidentKernelBlocks",
    ),
    "._kernels": ("CudaKernel",),
    "._launch": ("LaunchConfig", "auto_block_size", "launch_config"),
    "._nvrtc": ("compile_to_ptx",),
    "._persistent": ("CudaResidentKernel",),
    "._places": ("CONTEXT_KINDS",),
    "._properties": ("CudaDeviceProperties",),
    "._ring_source": ("CudaRingBody", "compile_ring_kernel_ptx", "render_ring_kernel"),
    "._streams": ("CudaEvent", "CudaStream"),
}

__all__ = sorted(
    [
        "CudaProbe",
        "__version__",
        "diagnose",
        "probe",
        "pdc_register_backends",
        "pdc_register_benchmarks",
        *itertools.chain(*_LAZY.values()),
    ]
)

__getattr__ = lazy_exports(
    __name__, {name: home for home, names in _LAZY.items() for name in names}
)


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
