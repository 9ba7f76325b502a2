"""PyDotCompute's import path ``pydotcompute.backends.base``: the backend base class.

pdc's :class:`~pdc_core.Backend` is a different contract (docs/plugin-guide.md): a
PyDotCompute backend subclass has to be ported. :class:`BackendType` names pdc's
backends (its members' values are the backend names, ``"cpu"``, ``"cuda"``,
``"metal"``) and :class:`KernelExecutionResult` is what PyDotCompute-shaped backends
(:class:`pdc_core.backends.cpu.CPUBackend`) return from ``execute_kernel``.
``BackendArray`` is not provided (use ``UnifiedBuffer``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .._backend._contract import Backend

__all__ = ["Backend", "BackendType", "KernelExecutionResult"]


class BackendType(enum.Enum):
    """A kind of backend, valued by pdc's backend name (``pdc_core.get_backend(t.value)``)."""

    CPU = "cpu"
    CUDA = "cuda"
    METAL = "metal"


@dataclass
class KernelExecutionResult:
    """How one ``execute_kernel`` went: ``success``, the time, the error if it failed."""

    success: bool
    execution_time_ms: float
    error: Exception | None = None
