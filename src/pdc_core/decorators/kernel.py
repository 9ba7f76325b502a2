"""PyDotCompute's import path ``pydotcompute.decorators.kernel``: pdc's ``@kernel``.

``kernel`` and ``gpu_kernel`` are pdc's :func:`~pdc_core.kernel` (a kernel launches as
``k[grid, block](...)`` too). Two thin helpers keep PyDotCompute's names:
``cuda_source(src)`` marks a function with its CUDA C source (``__cuda_source__``, as
in PyDotCompute; pdc compiles CUDA C with ``kernel.source(src)``), and
:class:`KernelRegistry` (``get_kernel_registry()``) is PyDotCompute's process-wide
table of kernels by name. PyDotCompute's ``@kernel`` ran the Python function on the
CPU when called; pdc's returns a :class:`~pdc_core.Kernel`, launched on a backend.
"""

from .._publish import publish
from .._pydotcompute.decorators.kernel import (
    KernelRegistry,
    cuda_source,
    get_kernel_registry,
    gpu_kernel,
    kernel,
)

__all__ = [
    "KernelRegistry",
    "cuda_source",
    "get_kernel_registry",
    "gpu_kernel",
    "kernel",
]

publish(__name__, globals(), __all__)
