"""pdc: structured concurrency for GPU actors.

Actors are async functions fed through mailboxes, or persistent kernels resident on
a device, run inside actor nurseries under asyncio or trio. Backends (``cpu``,
``cuda``, ``metal`` and third-party ones) are pluggy plugins found through the
``pdc`` entry-point group.
"""

from __future__ import annotations

from . import cuda
from ._actors import (
    Actor,
    ActorNursery,
    ActorRef,
    ActorState,
    ActorStatistics,
    RestartPolicy,
    open_nursery,
)
from ._backend import (
    Availability,
    Backend,
    Capability,
    DeviceInfo,
    Event,
    MemoryKind,
    MemoryStatistics,
    Stream,
)
from ._buffer import BufferState, UnifiedBuffer, normalize_shape_dtype
from ._exceptions import (
    ActorCrashed,
    ActorError,
    ActorStopped,
    BackendError,
    BackendUnavailable,
    CapabilityError,
    DuplicateActorError,
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
    MessageDropped,
    MessageTimeout,
    PdcError,
    PersistentKernelError,
    PluginError,
    PoolError,
    PoolLimitError,
    RecordError,
    RingProtocolError,
)
from ._host_kernel import HostWorkerKernel
from ._kernel import Kernel, LaunchConfig, auto_block_size, kernel, launch_config
from ._kernel_actor import KernelActorRef, PersistentKernelActor
from ._mailbox import (
    Backpressure,
    Control,
    Mailbox,
    MailboxStatistics,
)
from ._memory_pool import MemoryPool, PoolStatistics, get_memory_pool
from ._messages import (
    Message,
    Request,
    Response,
    RingKernelMessage,
    message,
)
from ._persistent import (
    DeviceSource,
    HostWaiter,
    KernelStatus,
    PersistentKernel,
    PersistentKernelSession,
    PollingWaiter,
    ResidentKernel,
    SessionState,
    SessionStatistics,
    open_persistent_kernel,
    persistent_kernel,
)
from ._persistent_ring_kernel import PersistentRingKernel
from ._plugins import PluginInfo, hookimpl, list_plugins, reload_plugins
from ._registry import BackendInfo, available_backends, get_backend
from ._ring import ErrorCode, RingDevice, RingHost, RingLayout, RingMemory, StopMode
from ._ring_kernel import (
    KernelState,
    RingKernel,
    RingKernelContext,
    RingKernelDefinition,
    RingKernelRuntime,
    ring_kernel,
)
from ._telemetry import RingKernelTelemetry, Telemetry
from ._version import __version__
from ._worker_stream import WorkerEvent, WorkerStream

__all__ = [
    "Availability",
    "Backend",
    "BackendInfo",
    "BufferState",
    "Capability",
    "DeviceInfo",
    "Event",
    "MemoryKind",
    "MemoryPool",
    "MemoryStatistics",
    "PluginInfo",
    "PoolStatistics",
    "Stream",
    "UnifiedBuffer",
    "WorkerEvent",
    "WorkerStream",
    "available_backends",
    "get_backend",
    "get_memory_pool",
    # kernels
    "Kernel",
    "LaunchConfig",
    "auto_block_size",
    "cuda",
    "kernel",
    "launch_config",
    "hookimpl",
    "list_plugins",
    "normalize_shape_dtype",
    "reload_plugins",
    "BackendError",
    "BackendUnavailable",
    "CapabilityError",
    "PdcError",
    "PluginError",
    "PoolError",
    "PoolLimitError",
    # persistent kernels
    "DeviceSource",
    "ErrorCode",
    "HostWaiter",
    "HostWorkerKernel",
    "KernelActorRef",
    "KernelBodyMissing",
    "KernelStatus",
    "KernelStopTimeout",
    "PersistentKernel",
    "PersistentKernelActor",
    "PersistentKernelError",
    "PersistentKernelSession",
    "PersistentRingKernel",
    "PollingWaiter",
    "RecordError",
    "ResidentKernel",
    "RingDevice",
    "RingHost",
    "RingLayout",
    "RingMemory",
    "RingProtocolError",
    "SessionState",
    "SessionStatistics",
    "StopMode",
    "open_persistent_kernel",
    "persistent_kernel",
    # actors, mailboxes and the ring-kernel API
    "Actor",
    "ActorCrashed",
    "ActorError",
    "ActorNursery",
    "ActorRef",
    "ActorState",
    "ActorStatistics",
    "ActorStopped",
    "Backpressure",
    "Control",
    "DuplicateActorError",
    "KernelAlreadyExistsError",
    "KernelNotFoundError",
    "KernelState",
    "KernelStateError",
    "KernelTerminated",
    "LifecycleError",
    "Mailbox",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "MailboxStatistics",
    "Message",
    "MessageDropped",
    "MessageTimeout",
    "Request",
    "Response",
    "RestartPolicy",
    "RingKernel",
    "RingKernelContext",
    "RingKernelDefinition",
    "RingKernelMessage",
    "RingKernelRuntime",
    "RingKernelTelemetry",
    "Telemetry",
    "message",
    "open_nursery",
    "ring_kernel",
    "__version__",
]
