"""The public face for backend authors: everything a pdc backend plugin implements or uses.

A backend is a :class:`Backend` subclass registered from a plugin's
``pdc_register_backends`` hook (marked with :data:`hookimpl`)::

    from pdc_core.backend import Backend, hookimpl

    @hookimpl
    def pdc_register_backends(register):
        register(MyBackend)

A plugin whose backend module is costly to import registers a :class:`LazyBackend`
instead (name, distribution, ``"module:Class"``, a priority and a cheap availability
probe): pdc then imports the class only when that backend is used or listed in detail;
:func:`lazy_exports` keeps the plugin package's own ``__init__`` as cheap.

What is here, by the part of the contract it serves:

* the contract: :class:`Backend`, :class:`Stream`, :class:`Event`,
  :class:`Capability`, :class:`MemoryKind`, :class:`Availability`,
  :class:`DeviceInfo`, :class:`MemoryStatistics`, :func:`normalize_shape_dtype`,
  :func:`strict_int` (pdc's one integer rule, for a backend's own arguments);
* host-thread streams for backends whose work runs on the host: :class:`WorkerStream`
  (extension hook :meth:`WorkerStream.thread_context`, which returns a
  ``ThreadContext``) and :class:`WorkerEvent`;
* launch geometry: :class:`LaunchConfig`, :func:`launch_config`,
  :func:`auto_block_size`, :func:`dims` (a ``Dims``: an int or 1 to 3 ints),
  :func:`dim3`, :func:`check_block`, :func:`check_grid`, :func:`problem_size` and
  CUDA's limits ``MAX_BLOCK_DIMS``, ``MAX_GRID_DIMS`` and
  ``DEFAULT_MAX_THREADS_PER_BLOCK``;
* persistent kernels: the spec a backend launches (:class:`PersistentKernelSpec`,
  :class:`DeviceSource`; users build the subclass :class:`PersistentKernel`, also
  made by :func:`persistent_kernel`),
  the ring protocol (:class:`RingLayout`, :class:`RingMemory`, :class:`Offset`,
  :class:`StopMode`, :class:`ErrorCode`, the record helpers, and the constants
  ``LINE_SIZE``, ``CONTROL_BLOCK_SIZE``, ``RING_ALIGNMENT``, ``RING_MAGIC``,
  ``RING_VERSION``, ``ERROR_MESSAGE_SIZE``; ``docs/ring-protocol.md``),
  the handle a launch returns (:class:`ResidentKernel`, :class:`KernelStatus`), how the
  host waits (:class:`HostWaiter`, :class:`PollingWaiter`), and
  :class:`HostWorkerKernel`, a complete resident kernel for host backends;
* kernel-to-kernel pipelines (``docs/ring-protocol.md``, *Links*): the spec
  :class:`PersistentPipeline`, :func:`launch_pipeline`, the launch option a stage
  receives (:class:`StageLink`), the reference device side of a stage
  (:class:`LinkedDevice`) and the handle of a launched pipeline (:class:`PipelineResident`);
* ``pdc bench --backend NAME``: a backend's own measurements (a hand-written floor,
  the vendor's launch paths), each a :class:`BenchmarkPath`, registered from the
  ``pdc_register_benchmarks`` hook as a :data:`BenchmarkPaths` function.

``pdc_core.testing.BackendConformance`` checks a backend against this contract.
Import these names from here, never from ``pdc_core``'s private modules: this face
keeps its names within a minor version (plugins pin ``pdc-core>=0.2,<0.3``).
"""

from ._backend._contract import (
    Availability,
    Backend,
    Capability,
    DeviceInfo,
    Event,
    MemoryKind,
    MemoryStatistics,
    Stream,
)
from ._backend._host_kernel import HostWorkerKernel
from ._backend._links import (
    LinkedDevice,
    PersistentPipeline,
    PipelineResident,
    StageLink,
    launch_pipeline,
)
from ._backend._persistent_kernel import DeviceSource, PersistentKernelSpec
from ._backend._resident import HostWaiter, KernelStatus, PollingWaiter, ResidentKernel
from ._backend._ring import (
    CONTROL_BLOCK_SIZE,
    ERROR_MESSAGE_SIZE,
    LINE_SIZE,
    RING_ALIGNMENT,
    RING_MAGIC,
    RING_VERSION,
    ErrorCode,
    Offset,
    RingDevice,
    RingFeature,
    RingHost,
    RingLayout,
    RingMemory,
    StopMode,
    coerce_batch,
    coerce_record,
    copy_records,
    record_dtype,
    record_from_mapping,
    records_copy,
    sequenced_slot_size,
)
from ._backend._worker_stream import ThreadContext, WorkerEvent, WorkerStream
from ._buffer import normalize_shape_dtype
from ._launch import (
    DEFAULT_MAX_THREADS_PER_BLOCK,
    MAX_BLOCK_DIMS,
    MAX_GRID_DIMS,
    Dims,
    LaunchConfig,
    auto_block_size,
    check_block,
    check_grid,
    dim3,
    dims,
    launch_config,
    problem_size,
)
from ._loop import strict_int
from ._persistent._kernel import PersistentKernel, persistent_kernel
from ._plugins import BenchmarkPath, BenchmarkPaths, LazyBackend, hookimpl, lazy_exports

__all__ = [
    # the contract
    "Availability",
    "Backend",
    "Capability",
    "DeviceInfo",
    "Event",
    "LazyBackend",
    "MemoryKind",
    "MemoryStatistics",
    "Stream",
    "hookimpl",
    "lazy_exports",
    "normalize_shape_dtype",
    "strict_int",
    # host-thread streams
    "ThreadContext",
    "WorkerEvent",
    "WorkerStream",
    # launch geometry
    "DEFAULT_MAX_THREADS_PER_BLOCK",
    "MAX_BLOCK_DIMS",
    "MAX_GRID_DIMS",
    "Dims",
    "LaunchConfig",
    "auto_block_size",
    "check_block",
    "check_grid",
    "dim3",
    "dims",
    "launch_config",
    "problem_size",
    # persistent kernels
    "CONTROL_BLOCK_SIZE",
    "ERROR_MESSAGE_SIZE",
    "LINE_SIZE",
    "RING_ALIGNMENT",
    "RING_MAGIC",
    "RING_VERSION",
    "DeviceSource",
    "ErrorCode",
    "HostWaiter",
    "HostWorkerKernel",
    "KernelStatus",
    "Offset",
    "PersistentKernel",
    "PersistentKernelSpec",
    "PollingWaiter",
    "ResidentKernel",
    "RingDevice",
    "RingFeature",
    "RingHost",
    "RingLayout",
    "RingMemory",
    "StopMode",
    "coerce_batch",
    "coerce_record",
    "copy_records",
    "persistent_kernel",
    # kernel-to-kernel pipelines
    "LinkedDevice",
    "PersistentPipeline",
    "PipelineResident",
    "StageLink",
    "launch_pipeline",
    "record_dtype",
    "record_from_mapping",
    "records_copy",
    "sequenced_slot_size",
    # pdc bench
    "BenchmarkPath",
    "BenchmarkPaths",
]
