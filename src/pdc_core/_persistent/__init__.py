"""Persistent kernels on the host: the session that drives a resident kernel's rings,
and the kernel as an actor (registered with :func:`pdc_core.lowlevel.runner_for`, so
``start_actor(kernel)`` works while the nursery imports none of this)."""

from ._actor import KernelActorRef, PersistentKernelActor
from ._session import (
    PersistentKernelSession,
    SessionState,
    SessionStatistics,
    backend_for,
    open_persistent_kernel,
)

__all__ = [
    "KernelActorRef",
    "PersistentKernelActor",
    "PersistentKernelSession",
    "SessionState",
    "SessionStatistics",
    "backend_for",
    "open_persistent_kernel",
]
