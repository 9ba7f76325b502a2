"""PyDotCompute's import path ``pydotcompute.ring_kernels``: the ring-kernel API.

Only the names pdc has an equivalent for are here: ``MessageQueue`` is a thin layer
over pdc's :class:`~pdc_core.Mailbox`, ``RingKernelTelemetry`` and ``GPUMonitor`` are
PyDotCompute's recorder and NVML monitor (see :mod:`pdc_core.ring_kernels.telemetry`);
the other queues, the threaded and Cython kernels, the buffer registry,
``ArrayMessage`` and the event-loop helpers are not provided
(docs/migrating-from-pydotcompute.md says what to use instead). Unlike PyDotCompute's,
importing it does not install uvloop.
"""

# From the submodules, so that ``message`` here is the decorator rather than the
# submodule of the same name (as in PyDotCompute).
from .._publish import publish
from .lifecycle import KernelState, RingKernel
from .message import RingKernelMessage, message
from .queue import MessageQueue
from .runtime import RingKernelRuntime
from .telemetry import GPUMonitor, RingKernelTelemetry

__all__ = [
    "GPUMonitor",
    "KernelState",
    "MessageQueue",
    "RingKernel",
    "RingKernelMessage",
    "RingKernelRuntime",
    "RingKernelTelemetry",
    "message",
]

publish(__name__, globals(), __all__)
