"""The seed API (PyDotCompute's names): ``@ring_kernel``, ``RingKernelRuntime``, the
kernel context, messages and telemetry; a facade over actors and persistent kernels."""

from ._lifecycle import KernelState
from ._messages import Message, Request, Response, RingKernelMessage, message, new_message_id
from ._persistent_runtime import PersistentRingKernel
from ._ring_kernel import (
    RingKernel,
    RingKernelContext,
    RingKernelDefinition,
    get_ring_kernel,
    registered_ring_kernels,
    ring_kernel,
)
from ._runtime import RingKernelRuntime
from ._telemetry import RingKernelTelemetry, Telemetry

__all__ = [
    "KernelState",
    "Message",
    "PersistentRingKernel",
    "Request",
    "Response",
    "RingKernel",
    "RingKernelContext",
    "RingKernelDefinition",
    "RingKernelMessage",
    "RingKernelRuntime",
    "RingKernelTelemetry",
    "Telemetry",
    "get_ring_kernel",
    "message",
    "new_message_id",
    "registered_ring_kernels",
    "ring_kernel",
]
