"""PyDotCompute's import path ``pydotcompute.backends.cpu``: a CPU backend over pdc's.

A thin layer for code written for PyDotCompute: :class:`CPUBackend` keeps
PyDotCompute's method names over pdc's ``cpu`` backend (``pdc_core.get_backend("cpu")``),
which allocates, copies and synchronizes. Its ``execute_kernel`` calls the function once
on the host and reports the outcome as a :class:`~pdc_core.backends.base.KernelExecutionResult`,
as PyDotCompute's CPU backend did; pdc kernels launch as ``k[grid, block](...)`` on any
backend and raise when they fail. New code uses ``pdc_core.get_backend("cpu")``.
"""

from .._publish import publish
from .._pydotcompute.backends.cpu import (
    CPUBackend,
    matrix_multiply_cpu,
    vector_add_cpu,
)

__all__ = [
    "CPUBackend",
    "matrix_multiply_cpu",
    "vector_add_cpu",
]

publish(__name__, globals(), __all__)
