"""PyDotCompute's import path ``pydotcompute.backends.base``: the backend base class.

pdc's :class:`~pdc_core.Backend` is a different contract (docs/plugin-guide.md): a
PyDotCompute backend subclass has to be ported. :class:`BackendType` names pdc's
backends (its members' values are the backend names, ``"cpu"``, ``"cuda"``,
``"metal"``) and :class:`KernelExecutionResult` is what PyDotCompute-shaped backends
(:class:`pdc_core.backends.cpu.CPUBackend`) return from ``execute_kernel``.
``BackendArray`` is not provided (use ``UnifiedBuffer``).
"""

from .._publish import publish
from .._pydotcompute.backends.base import (
    Backend,
    BackendType,
    KernelExecutionResult,
)

__all__ = [
    "Backend",
    "BackendType",
    "KernelExecutionResult",
]

publish(__name__, globals(), __all__)
