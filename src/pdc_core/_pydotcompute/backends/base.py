"""Body of PyDotCompute\'s :mod:`pdc_core.backends.base`; see its docstring."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pdc_core.backend import Backend

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
