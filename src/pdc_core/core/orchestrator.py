"""PyDotCompute's import path ``pydotcompute.core.orchestrator``: launching kernels, recorded.

A thin layer for code written for PyDotCompute. :class:`ComputeOrchestrator` holds
the accelerator (:class:`~pdc_core.core.accelerator.Accelerator`, over pdc's backends)
and pdc's memory pool (:func:`pdc_core.get_memory_pool`), a table of kernels by name,
and a record (:class:`KernelExecution`) of every launch, failed ones included.
:meth:`~ComputeOrchestrator.launch_kernel` launches a :class:`pdc_core.Kernel` (or any
kernel launched numba's way, ``k[grid, block](...)``) over the
:class:`KernelLaunchConfig`'s grid and block, without blocking the event loop; it calls
any other function with the arguments, awaiting what it returns when that is awaitable.
Streams come from the current device's backend (:meth:`pdc_core.Backend.create_stream`);
the orchestrator synchronizes and closes those it made when it shuts down.

Its async methods are checkpoints, under asyncio and trio. New code runs kernels with
``k(...)`` / ``await k.launch_async(...)`` and orchestrates with actors in an
``open_nursery()``.
"""

from .._publish import publish
from .._pydotcompute.core.orchestrator import (
    ComputeOrchestrator,
    KernelExecution,
    KernelLaunchConfig,
)

__all__ = [
    "ComputeOrchestrator",
    "KernelExecution",
    "KernelLaunchConfig",
]

publish(__name__, globals(), __all__)
