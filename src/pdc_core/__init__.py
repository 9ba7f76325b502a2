"""pdc: structured concurrency for GPU actors.

Actors are async functions fed through mailboxes, or persistent kernels resident on
a device, run inside actor nurseries under asyncio or trio. Backends (``cpu``,
``cuda``, ``metal`` and third-party ones) are pluggy plugins found through the
``pdc`` entry-point group.

This module is the user's API. Backend authors use :mod:`pdc_core.backend`; authors
of new kinds of actor use :mod:`pdc_core.lowlevel`; kernel bodies use
:mod:`pdc_core.cuda`; :mod:`pdc_core.testing` has the conformance kit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._actors import (
    Actor,
    ActorMesh,
    ActorNursery,
    ActorRef,
    ActorState,
    ActorStatistics,
    Backpressure,
    BroadcastReceiveStream,
    BroadcastSendStream,
    BroadcastStreamStatistics,
    Control,
    Mailbox,
    MailboxStatistics,
    MeshError,
    RestartPolicy,
    create_broadcast_stream,
    open_nursery,
)
from ._buffer import BufferState, UnifiedBuffer
from ._exceptions import (
    ActorCrashed,
    ActorError,
    ActorStopped,
    BackendError,
    BackendUnavailable,
    BufferNotAllocatedError,
    CapabilityError,
    DuplicateActorError,
    EnvironmentSettingError,
    KernelAlreadyExistsError,
    KernelBodyMissing,
    KernelNotFoundError,
    KernelStateError,
    KernelStopTimeout,
    KernelTerminated,
    LifecycleError,
    MailboxClosed,
    MailboxError,
    MailboxFull,
    MessageDeserializationError,
    MessageDropped,
    MessageSerializationError,
    MessageTimeout,
    PdcError,
    PersistentKernelError,
    PluginError,
    PoolError,
    PoolLimitError,
    RecordError,
    RingProtocolError,
    ShutdownTimeout,
)
from ._kernel import Kernel, kernel
from ._launch import LaunchConfig, auto_block_size, launch_config
from ._memory_pool import MemoryPool, PoolStatistics, get_memory_pool
from ._persistent import (
    KernelActorRef,
    PersistentKernelActor,
    PersistentKernelSession,
    PersistentPipelineActor,
    PipelineSession,
    SessionState,
    SessionStatistics,
    open_persistent_kernel,
    open_persistent_pipeline,
)
from ._plugins import (
    BackendInfo,
    PluginInfo,
    available_backends,
    get_backend,
    list_plugins,
    reload_plugins,
)
from ._publish import publish
from ._pydotcompute._seed import (
    KernelState,
    Message,
    PersistentRingKernel,
    Request,
    Response,
    RingKernel,
    RingKernelContext,
    RingKernelDefinition,
    RingKernelMessage,
    RingKernelRuntime,
    RingKernelTelemetry,
    Telemetry,
    message,
    ring_kernel,
)
from ._version import __version__
from .backend import (
    Backend,
    Capability,
    DeviceInfo,
    DeviceSource,
    KernelStatus,
    PersistentKernel,
    PersistentPipeline,
    persistent_kernel,
)

if TYPE_CHECKING:
    from . import cuda

__all__ = [
    "__version__",
    # actors and mailboxes
    "Actor",
    "ActorNursery",
    "ActorRef",
    "ActorState",
    "ActorStatistics",
    "Backpressure",
    "Control",
    "Mailbox",
    "MailboxStatistics",
    "RestartPolicy",
    "open_nursery",
    # meshes and broadcast streams
    "ActorMesh",
    "MeshError",
    "BroadcastReceiveStream",
    "BroadcastSendStream",
    "BroadcastStreamStatistics",
    "BufferNotAllocatedError",
    "create_broadcast_stream",
    # persistent kernels
    "DeviceSource",
    "KernelActorRef",
    "KernelStatus",
    "PersistentKernel",
    "PersistentKernelActor",
    "PersistentKernelSession",
    "PersistentPipeline",
    "PersistentPipelineActor",
    "PipelineSession",
    "SessionState",
    "SessionStatistics",
    "open_persistent_kernel",
    "open_persistent_pipeline",
    "persistent_kernel",
    # the seeds' ring-kernel API
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
    "message",
    "ring_kernel",
    # buffers, kernels and backends
    "Backend",
    "BackendInfo",
    "BufferState",
    "Capability",
    "DeviceInfo",
    "Kernel",
    "LaunchConfig",
    "MemoryPool",
    "PluginInfo",
    "PoolStatistics",
    "UnifiedBuffer",
    "auto_block_size",
    "available_backends",
    "cuda",
    "get_backend",
    "get_memory_pool",
    "kernel",
    "launch_config",
    "list_plugins",
    "reload_plugins",
    # exceptions
    "ActorCrashed",
    "ActorError",
    "ActorStopped",
    "BackendError",
    "BackendUnavailable",
    "CapabilityError",
    "DuplicateActorError",
    "EnvironmentSettingError",
    "KernelAlreadyExistsError",
    "KernelBodyMissing",
    "KernelNotFoundError",
    "KernelStateError",
    "KernelStopTimeout",
    "KernelTerminated",
    "LifecycleError",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "MessageDeserializationError",
    "MessageDropped",
    "MessageSerializationError",
    "MessageTimeout",
    "PdcError",
    "PersistentKernelError",
    "PluginError",
    "PoolError",
    "PoolLimitError",
    "RecordError",
    "RingProtocolError",
    "ShutdownTimeout",
]


def __getattr__(name: str) -> Any:
    # pdc_core.cuda (the kernel-body vocabulary and its CPU simulator) loads on first use.
    if name == "cuda":
        import importlib

        return importlib.import_module(".cuda", __name__)
    raise AttributeError(f"module 'pdc_core' has no attribute {name!r}")


def _publish_faces() -> None:
    from . import backend, lowlevel

    publish(__name__, globals(), (name for name in __all__ if name != "cuda"))
    publish(backend.__name__, vars(backend), backend.__all__)
    publish(lowlevel.__name__, vars(lowlevel), lowlevel.__all__)


_publish_faces()
