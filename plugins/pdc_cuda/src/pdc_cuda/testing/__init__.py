"""Test support of pdc-cuda: the resident ring kernel built for the host and run on CPU
threads, so its protocol runs (and ThreadSanitizer watches it) without a GPU.

- :func:`build_ring_kernel`: the rendered kernel (exactly what the cuda backend hands
  NVRTC) compiled by NVRTC first, then by ``g++ -std=c++20`` with a header that gives the
  CUDA vocabulary its C++20 meaning (``host/pdc_cuda_host.h``); cached by source hash.
- :class:`HostCudaBackend`: the cuda backend with that build as its device: the GPU
  tests run against it unchanged (``pytest -m cuda_host``).
- :func:`prebuild` with :func:`kernel_builds` / :func:`pipeline_builds`: the sources a
  test session will launch, rendered by the cuda backend's launch path and built up
  front on every core (a cold cache then costs a fraction of building them one by one).
- ``host/tsan_driver.cpp``: a C++ host side of the ring protocol that drives
  ThreadSanitizer builds of the same kernels (``tests/test_cuda_host_tsan.py``).

See ``docs/cuda-backend.md``, "The host build". Needs g++ 10 or newer and NVRTC.
"""

from ._backend import DeviceArray, HostCudaBackend, HostKernel, HostKernelFault, HostStream
from ._build import (
    HEADER_DIR,
    HostBuild,
    HostBuildError,
    build_ring_kernel,
    build_ring_kernels,
    cache_dir,
    cache_size,
    clear_cache,
    compiler_missing,
)
from ._plan import PlannedBuild, kernel_builds, pipeline_builds, prebuild

__all__ = [
    "HEADER_DIR",
    "DeviceArray",
    "HostBuild",
    "HostBuildError",
    "HostCudaBackend",
    "HostKernel",
    "HostKernelFault",
    "HostStream",
    "PlannedBuild",
    "build_ring_kernel",
    "build_ring_kernels",
    "cache_dir",
    "cache_size",
    "clear_cache",
    "compiler_missing",
    "kernel_builds",
    "pipeline_builds",
    "prebuild",
]

# Errors a test author sees in tracebacks name this module, not its private parts.
for _error in (HostBuildError, HostKernelFault):
    _error.__module__ = __name__
