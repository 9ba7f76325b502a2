"""The CUDA backend: CuPy on an NVIDIA GPU.

CuPy is imported lazily, inside methods only, so this module imports (and the backend
registers and reports why it is unavailable) on a machine without CuPy or a driver.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from pdc_core import (
    Backend,
    BackendError,
    BackendUnavailable,
    Capability,
    DeviceInfo,
)
from pdc_core.backend import (
    Availability,
    MemoryKind,
    MemoryStatistics,
    Stream,
    strict_int,
)

from ._availability import PRIORITY, prefer_eager_module_loading
from ._availability import availability as cuda_availability
from ._context import DEFAULT_GREEN_SMS, DEFAULT_MAX_CONTEXTS
from ._kernels import CudaKernel, KernelCache, compile_raw_module, launch_and_wait
from ._launch import Dims, LaunchConfig
from ._memory import CudaMemory, DevicePool, require_mapped_memory
from ._places import (
    ContextKind,
    LaunchSite,
    ResidentPlace,
    check_beside_resident,
    context_kind,
    place_for,
)
from ._properties import ATTRIBUTE_FALLBACKS, CudaDeviceProperties
from ._residency import Residency
from ._streams import CudaEvent, CudaStream, own_stream, synchronize_stream

if TYPE_CHECKING:
    from pdc_core import PersistentPipeline
    from pdc_core.backend import PersistentKernelSpec, RingMemory

    from ._persistent import CudaResidentKernel
    from ._pipeline import CudaPipelineResident

__all__ = ["CudaBackend"]


def _read_properties(index: int) -> CudaDeviceProperties:
    import cupy

    runtime = cupy.cuda.runtime

    def attribute(key: str) -> int | None:
        constant = getattr(runtime, ATTRIBUTE_FALLBACKS[key], None)
        if constant is None:
            return None
        try:
            return int(runtime.deviceGetAttribute(constant, index))
        except runtime.CUDARuntimeError:
            return None

    return CudaDeviceProperties.from_dict(index, runtime.getDeviceProperties(index), attribute)


class CudaBackend(Backend):
    """NVIDIA GPUs through CuPy; ``cuda:N`` selects device N.

    Memory kinds: ``DEVICE`` and ``MANAGED`` give CuPy arrays (``DEVICE`` from CuPy's
    pool on this device, ``MANAGED`` from ``cudaMallocManaged``); ``HOST`` gives pageable
    NumPy memory, ``PINNED`` page-locked NumPy memory (CuPy's pinned pool) and
    ``MAPPED`` pinned memory the device addresses directly (dedicated
    ``cudaHostAlloc(mapped | portable)``, for rings). Copies with a stream are truly
    asynchronous: pageable host memory is staged through pinned memory first.

    Kernels: CUDA C source (:meth:`compile_kernel`, :meth:`launch_kernel`) through
    ``cupy.RawModule``, and Python bodies in numba.cuda style (:meth:`run_python_kernel`)
    through numba-cuda, an optional extra (``pip install 'pdc-cuda[numba]'``).

    Resident kernels run, by default, in a CUDA context pdc owns (``context="own"``; or
    ``"green"``, a green context over ``green_sms`` SMs), so that everything else here
    -- and CuPy, numba-cuda and other libraries -- keeps the primary context and loads
    modules, allocates and frees freely beside them. With
    ``context="shared"`` (or ``PDC_CUDA_CONTEXT=shared``) they run in the primary
    context; then what would wait for them (a new module: :meth:`compile_kernel` of a
    new source, a first :meth:`run_python_kernel` of a body; :meth:`free_cached_memory`)
    raises :class:`~pdc_cuda.ResidentKernelBlocks` at once, and :meth:`synchronize`
    synchronizes streams instead of the device. The launch option ``context=`` places
    one kernel. At most ``max_contexts`` contexts of pdc's own are made per placement
    (4 by default: contexts with work time-slice the GPU, so with n of them each
    resident kernel runs about 1/n of the time); a launch that would need one more
    raises :class:`~pdc_cuda.CudaContextError` saying what to do.
    Every driver call pdc makes beside a resident kernel goes to another
    context, is deferred until no kernel is resident (frees), or is refused at once in
    the shared placement; none can wait for a resident kernel. A resident
    kernel is held (with its ring memory) until its stream is seen done, so a dropped
    session cannot free memory the kernel still reads.
    """

    name: ClassVar[str] = "cuda"
    distribution: ClassVar[str] = "pdc-cuda"
    priority: ClassVar[int] = PRIORITY
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.DEVICE_MEMORY,
            Capability.PINNED_MEMORY,
            Capability.MAPPED_MEMORY,
            Capability.MANAGED_MEMORY,
            Capability.ASYNC_COPIES,
            Capability.KERNELS,
            Capability.PYTHON_KERNELS,
            Capability.PERSISTENT_KERNELS,
            Capability.PIPELINES,
            Capability.CUDA_ARRAY_INTERFACE,
        }
    )

    #: Ring regions get sequenced input slots (``docs/ring-protocol.md`` section 12): the
    #: kernel reads a request, and sees that it is there, with one read of its line
    #: across PCIe (``RingMemory.allocate`` lays the input ring out so).
    ring_sequenced_input: ClassVar[bool] = True

    _devices_cache: ClassVar[list[DeviceInfo] | None] = None
    _properties_cache: ClassVar[dict[int, CudaDeviceProperties]] = {}
    _class_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        device: int = 0,
        *,
        context: str | None = None,
        green_sms: int = DEFAULT_GREEN_SMS,
        max_contexts: int = DEFAULT_MAX_CONTEXTS,
    ) -> None:
        device = strict_int(device, "device", "a device index (an int)")
        super().__init__(device)
        self._setup_residency(context, green_sms, max_contexts)
        # The verdict get_backend("cuda") gives, before CuPy's first call (which would
        # raise its own error, e.g. "CUDA driver version is insufficient", without a
        # driver): the same BackendUnavailable and reason, however the backend is made.
        availability = self.availability()
        if not availability.available:
            raise BackendUnavailable(
                f"the {self.name} backend (from {self.distribution}) is not available "
                f"here: {availability.reason}"
            )
        prefer_eager_module_loading()
        import cupy

        count = int(cupy.cuda.runtime.getDeviceCount())
        if not 0 <= device < count:
            raise BackendError(f"cuda:{device} does not exist: this machine has {count} device(s)")
        with self.device_context():
            self._memory = CudaMemory(self, DevicePool(device, cupy.get_default_memory_pool()))

    def _setup_residency(
        self, context: str | None, green_sms: int, max_contexts: int = DEFAULT_MAX_CONTEXTS
    ) -> None:
        """The placement setting, the residency bookkeeping, the streams and the kernel
        cache (subclasses that stand for a device without CuPy call it from their own
        ``__init__``)."""
        self._lock = threading.Lock()
        self._streams: weakref.WeakSet[CudaStream] = weakref.WeakSet()
        self._kernels = KernelCache()
        #: Where resident kernels go unless a launch says otherwise.
        self.context: ContextKind = context_kind(context)
        self.green_sms = strict_int(green_sms, "green_sms", "a number of SMs (an int)")
        if self.green_sms < 1:
            raise ValueError(f"green_sms must be at least 1, not {green_sms!r}")
        #: Contexts of pdc's own per placement on this device (see DEFAULT_MAX_CONTEXTS).
        self.max_contexts = strict_int(max_contexts, "max_contexts", "an int")
        if self.max_contexts < 1:
            raise ValueError(f"max_contexts must be at least 1, not {max_contexts!r}")
        #: The resident kernels of this device and the memory waiting for them to go.
        self.residency = Residency(self.qualified_name)
        self._places: dict[ContextKind, ResidentPlace] = {}
        self._numba_compiled: set[int] = set()

    # -- discovery ------------------------------------------------------------------

    @classmethod
    def availability(cls) -> Availability:
        return cuda_availability()  # the function the plugin registers it with

    @classmethod
    def device_properties(cls, index: int) -> CudaDeviceProperties:
        """The parsed properties of device ``index`` (cached for the process)."""
        with cls._class_lock:
            cached = cls._properties_cache.get(index)
            if cached is None:
                cached = _read_properties(index)
                cls._properties_cache[index] = cached
            return cached

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        if cls._devices_cache is None:
            import cupy

            count = int(cupy.cuda.runtime.getDeviceCount())
            cls._devices_cache = [
                cls.device_properties(index).to_device_info(cls.name) for index in range(count)
            ]
        return list(cls._devices_cache)

    @property
    def properties(self) -> CudaDeviceProperties:
        """This device's parsed properties."""
        return self.device_properties(self.device)

    # -- contexts -----------------------------------------------------------------------

    @contextlib.contextmanager
    def device_context(self) -> Iterator[None]:
        """Make this backend's device current for CuPy inside the block."""
        import cupy

        with cupy.cuda.Device(self.device):
            yield

    @contextlib.contextmanager
    def stream_context(self, stream: Stream | None) -> Iterator[Any]:
        """Make ``stream`` CuPy's current stream inside the block (no-op for ``None``)."""
        if stream is None:
            yield None
            return
        cuda_stream = self._check_stream(stream)
        with cuda_stream.cupy as raw:
            yield raw

    def _check_stream(self, stream: Stream) -> CudaStream:
        return own_stream(self, stream)

    # -- memory (the device's CudaMemory service) -----------------------------------

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        return self._memory.allocate(shape, dtype, kind)

    def require_mapped_memory(self, action: str) -> None:
        """Raise :class:`CapabilityError` unless this device can map host memory."""
        require_mapped_memory(self, action)

    def device_pointer(self, host: npt.NDArray[Any]) -> int:
        """The device address of a ``MAPPED`` host array (what a kernel dereferences)."""
        return self._memory.device_pointer(host)

    def mapped_device_array(self, host: npt.NDArray[Any]) -> Any:
        """A CuPy array over the same memory as a ``MAPPED`` host array (no copy)."""
        return self._memory.mapped_device_array(host)

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> Any:
        return self._memory.to_device(host, out, stream)

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        return self._memory.to_host(device, out, stream)

    def memory_statistics(self) -> MemoryStatistics:
        return self._memory.statistics()

    def free_cached_memory(self) -> None:
        """Return cached blocks (device and pinned) to CUDA.

        Refused (:class:`~pdc_cuda.ResidentKernelBlocks`) while a persistent kernel is
        resident in the primary context (``context="shared"``): ``cudaFree`` waits for
        it there, and a resident kernel never finishes.
        """
        self.residency.refuse_beside_shared("free cached memory (cudaFree, cudaFreeHost)")
        self._memory.free_cached()

    def use_async_memory_pool(self) -> None:
        """Switch CuPy's allocator (process-wide) to ``cupy.cuda.MemoryAsyncPool``.

        The stream-ordered pool never calls ``cudaFree`` on the allocation path, so
        array work can run beside a resident kernel without the default pool's
        ``free_all_blocks`` on out-of-memory hanging on it. Statistics then come from
        the async pool.
        """
        self._memory.use_async_pool()

    # -- streams and events -----------------------------------------------------------

    def create_stream(self) -> CudaStream:
        import cupy

        with self.device_context():
            stream = CudaStream(self, cupy.cuda.Stream(non_blocking=True), self._streams.discard)
        self._streams.add(stream)
        return stream

    def create_event(self) -> CudaEvent:
        import cupy

        with self.device_context():
            return CudaEvent(cupy.cuda.Event(block=False, disable_timing=True))

    def synchronize(self) -> None:
        """Wait for all work on this device's primary context.

        A kernel resident in a context of pdc's own is not waited for (another
        context). While one is resident in the primary context (``context="shared"``;
        it never finishes by design) this synchronizes every stream the backend created
        and CuPy's current stream instead of the device, so it cannot hang on it.
        """
        import cupy

        with self.device_context():
            shared = [kernel for kernel in self.resident_kernels() if kernel.shares_primary]
            if not shared:
                cupy.cuda.runtime.deviceSynchronize()
                return
            resident_streams = {id(kernel.stream) for kernel in shared}
            for stream in list(self._streams):
                if id(stream) not in resident_streams:
                    stream.synchronize()
            synchronize_stream(cupy.cuda.get_current_stream())

    def resident_kernels(self) -> list[CudaResidentKernel]:
        """The persistent kernels still running on this device: a pure query (each
        kernel's stream is asked, never waited for). Memory deferred by
        :meth:`defer_free` is let go when a kernel is released and none is left."""
        return self.residency.running()

    def defer_free(self, memory: Any) -> None:
        """Keep ``memory`` alive until no persistent kernel is resident on this device.

        Freeing pinned memory (``cudaFreeHost``) or device memory (``cudaFree``) may
        wait for a running kernel.
        """
        self.residency.defer_free(memory)

    def check_beside_resident(self) -> str:
        """What ``pdc check`` runs beside its resident kernel (in a worker thread, under
        a deadline): one CuPy op never used before, and one new kernel compiled and
        launched, both in the primary context. With a kernel resident in the primary
        context (placement ``"shared"``) the new kernel must be refused at once instead
        (CuPy's op is not tried there: its module load would wait for the kernel)."""
        return check_beside_resident(self)

    def resident_place(self, context: str | None = None) -> ResidentPlace:
        """Where a resident kernel placed by ``context`` (this backend's :attr:`context`
        when ``None``) runs: a context pdc owns, or the primary one (``"shared"``)."""
        kind = self.context if context is None else context_kind(context)
        with self._lock:
            place = self._places.get(kind)
            if place is None:
                place = self._make_place(kind)
                self._places[kind] = place
        return place

    def _make_place(self, kind: ContextKind) -> ResidentPlace:
        return place_for(kind, self)

    def launch_site(self, context: str | None = None) -> LaunchSite:
        """What a resident launch on this device needs (its place from ``context``)."""
        return LaunchSite(
            backend=self,
            properties=self.properties,
            require_mapped_memory=self.require_mapped_memory,
            residency=self.residency,
            place=self.resident_place(context),
        )

    # -- kernels ------------------------------------------------------------------------

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> CudaKernel:
        """Compile CUDA C ``source`` with NVRTC and return its kernel ``name``.

        ``-std=c++17`` is added unless another ``-std`` is given; CuPy's bundled CCCL
        is on the include path (``#include <cuda/atomic>`` works). Compiled kernels
        are cached per source and options. Raises
        :class:`~pdc_cuda.CudaCompileError` carrying NVRTC's log.
        """
        return self._kernels.compile(
            source,
            name,
            options,
            self.residency.refuse_module_load,
            self._load_kernel(source, name),
        )

    def _load_kernel(self, source: str, name: str) -> Callable[[tuple[str, ...]], CudaKernel]:
        def load(options: tuple[str, ...]) -> CudaKernel:
            with self.device_context():
                return CudaKernel(
                    self, compile_raw_module(source, options, name), name, source, options
                )

        return load

    def launch_config(self, size: Any, block: Dims | None = None) -> LaunchConfig:
        """The grid and block covering ``size`` elements on this device (no kernel needed):
        :func:`pdc_core.launch_config` with the device's ``maxThreadsPerBlock``."""
        from ._launch import launch_config

        limit = self.properties.max_threads_per_block
        if limit:
            return launch_config(size, block, max_threads_per_block=limit)
        return launch_config(size, block)

    def launch_kernel(
        self,
        kernel: CudaKernel,
        grid: Dims,
        block: Dims,
        args: tuple[Any, ...],
        *,
        stream: Stream | None = None,
        shared_mem: int = 0,
    ) -> None:
        """Launch ``kernel`` with an explicit grid and block (see :meth:`CudaKernel.launch`).

        With a ``stream`` the launch is queued on it and this returns at once. Without
        one it runs on CuPy's current stream and this returns once that stream has
        finished it (a launch error or a fault of the kernel is raised here). Only
        that stream is waited for, never the device, so a resident kernel on its own
        stream does not block it.
        """
        launch_and_wait(self, kernel, grid, block, args, stream=stream, shared_mem=shared_mem)

    def run_python_kernel(
        self,
        body: Callable[..., Any],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Run a numba.cuda-style Python body with numba-cuda (``pdc-cuda[numba]``).

        The body is compiled by ``numba.cuda.jit`` (:func:`pdc_core.cuda.to_numba`:
        pdc's ``cuda`` names become numba's; cached per body and options) and launched
        on ``stream``, or on CuPy's current stream and waited for (that stream only)
        when ``stream`` is ``None``. ``options`` keys that are ``numba.cuda.jit``
        keywords (``fastmath``, ``lineinfo``, ``max_registers``, ...) are passed on, the
        others ignored. Arguments as for :meth:`launch_kernel`: CuPy arrays,
        ``UnifiedBuffer`` (its device array) and scalars. Raises ``ImportError`` naming
        ``pip install 'pdc-cuda[numba]'`` when numba-cuda is not installed.
        """
        from ._numba import run_numba_kernel

        if id(body) not in self._numba_compiled:
            # numba-cuda compiles and loads at a body's first launch.
            self.residency.refuse_beside_shared("compile and load a Python kernel body")
        run_numba_kernel(
            self, body, grid, block, args, shared_mem=shared_mem, stream=stream, options=options
        )
        self._numba_compiled.add(id(body))

    def launch_persistent_kernel(
        self, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
    ) -> CudaResidentKernel:
        """Launch ``kernel``'s resident ring loop once, on its own non-blocking stream.

        Options: ``threads`` (block size), ``backoff_min_ns``/``backoff_max_ns`` (idle
        polling back-off), ``allow_watchdog`` (launch even on a device with a display
        watchdog), ``compile_options``, ``context`` (``"own"``, ``"green"`` or
        ``"shared"``: where it runs; this backend's :attr:`context` by default).
        Raises :class:`~pdc_core.CapabilityError` before launching on a device that
        cannot map host memory, is older than compute capability 7.0 (7.5 with CUDA
        13's NVRTC) or has a display watchdog; :class:`~pdc_cuda.CudaCompileError` with
        NVRTC's log when the body does not compile.
        """
        from ._persistent import LaunchOptions, launch_persistent_kernel

        launch = LaunchOptions.parse(options)
        return launch_persistent_kernel(self.launch_site(launch.context), kernel, rings, launch)

    def check_launch_options(self, options: Mapping[str, Any]) -> None:
        """Raise what :meth:`launch_persistent_kernel` raises for ``options`` (a misspelt
        option: ``TypeError`` naming it); the core asks before allocating the rings."""
        from ._persistent import LaunchOptions

        LaunchOptions.parse(options)

    def preload_persistent_kernels(
        self, kernels: Sequence[PersistentKernelSpec], **options: Any
    ) -> None:
        """Compile and load ``kernels`` (with the launch ``options`` they will be launched
        with, ``context`` included) into one context before any is launched.

        Launched one after another, such kernels then share that context and run
        concurrently; without it, a kernel whose module is not loaded yet goes to a
        context where nothing runs (a module load into a context with a running kernel
        would wait for it), and ordinary contexts time-slice against each other. In the
        ``"shared"`` placement it is how a program loads its resident kernels before
        the first one makes new modules impossible.
        """
        from ._persistent import LaunchOptions, preload_persistent_kernels

        launch = LaunchOptions.parse(options)
        preload_persistent_kernels(self.launch_site(launch.context), kernels, launch)

    def launch_pipeline(
        self, pipeline: PersistentPipeline, memory: RingMemory, **options: Any
    ) -> CudaPipelineResident:
        """Launch every stage of ``pipeline`` as a resident block on its own non-blocking
        stream, joined by links in this device's memory (``docs/ring-protocol.md``
        section 11); :func:`pdc_core.backend.launch_pipeline` calls it.

        ``memory`` is the host region (mapped), initialised by the core. Options are
        those of :meth:`launch_persistent_kernel`, for every stage. Everything is
        compiled and allocated before the first stage is launched. Raises
        :class:`~pdc_core.CapabilityError` when the stages cannot all be resident at
        once (every stage's blocks must fit the device's SMs together), and
        :class:`~pdc_cuda.CudaCompileError` naming the stage whose body does not compile.
        """
        from ._persistent import LaunchOptions
        from ._pipeline import launch_pipeline

        launch = LaunchOptions.parse(options)
        return launch_pipeline(self.launch_site(launch.context), pipeline, memory, launch)
