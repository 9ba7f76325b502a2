"""Persistent kernels on the host: the kernel users build (the device layer's spec plus
the type of its actor handle), the session that drives a resident kernel's rings, and
the kernel as an actor (registered with :func:`pdc_core.lowlevel.runner_for`, so
``start_actor(kernel)`` works while the nursery imports none of this)."""

from . import _mesh  # noqa: F401 - registers one kernel per device for start_mesh
from ._actor import KernelActorRef, PersistentKernelActor
from ._kernel import PersistentKernel, persistent_kernel
from ._pipeline import PersistentPipelineActor, PipelineSession, open_persistent_pipeline
from ._session import (
    PersistentKernelSession,
    SessionState,
    SessionStatistics,
    backend_for,
    open_persistent_kernel,
)

__all__ = [
    "KernelActorRef",
    "PersistentKernel",
    "PersistentKernelActor",
    "PersistentKernelSession",
    "PersistentPipelineActor",
    "PipelineSession",
    "SessionState",
    "SessionStatistics",
    "backend_for",
    "open_persistent_kernel",
    "open_persistent_pipeline",
    "persistent_kernel",
]
