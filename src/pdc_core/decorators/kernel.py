"""PyDotCompute's import path ``pydotcompute.decorators.kernel``: pdc's ``@kernel``.

``gpu_kernel`` (use ``@kernel``: a kernel launches as ``k[grid, block](...)`` too),
``cuda_source`` (use ``kernel.source(src)``), ``KernelRegistry`` and
``get_kernel_registry`` are not provided.
"""

from .._kernel import kernel

__all__ = ["kernel"]
