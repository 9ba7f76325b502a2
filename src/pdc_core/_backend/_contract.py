"""The backend contract: what a plugin supplies so pdc can run on a kind of hardware.

A backend is a subclass of :class:`Backend` registered by a plugin through the
``pdc_register_backends`` hook. pdc instantiates it once per device
(``Backend(device=N)``) and only after :meth:`Backend.availability` said it can run,
so a backend module must import its vendor library (CuPy, MLX, ...) lazily: the
class itself has to import on a machine without the hardware.

What a backend can do is *declared* in :attr:`Backend.capabilities`; the core checks
capabilities before it asks, so users get "the cpu backend has no mapped memory"
instead of an error from deep inside a vendor library.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._exceptions import CapabilityError
from ._device import MemoryKind

if TYPE_CHECKING:
    from types import TracebackType

    from ._persistent_kernel import PersistentKernelSpec
    from ._resident import ResidentKernel
    from ._ring import RingMemory

__all__ = [
    "Availability",
    "Backend",
    "Capability",
    "DeviceInfo",
    "Event",
    "MemoryKind",
    "MemoryStatistics",
    "Stream",
    "wait_shielded_on_cancel",
]


class Capability(enum.StrEnum):
    """Things a backend may be able to do; each backend declares the ones it can."""

    #: Memory the device owns, distinct from host memory (discrete GPUs).
    DEVICE_MEMORY = "device_memory"
    #: Page-locked host memory, so copies can run asynchronously by DMA.
    PINNED_MEMORY = "pinned_memory"
    #: Pinned host memory the device can address directly (rings of persistent kernels).
    MAPPED_MEMORY = "mapped_memory"
    #: Memory migrated on demand between host and device by the driver.
    MANAGED_MEMORY = "managed_memory"
    #: The device computes on host memory itself: a device array can be a view of a
    #: host array, and no copy is ever needed (CPU, Apple silicon).
    UNIFIED_MEMORY = "unified_memory"
    #: Copies that run on a stream and return before they finish.
    ASYNC_COPIES = "async_copies"
    #: Compiling and launching kernels from source (``compile_kernel``, ``launch_kernel``).
    KERNELS = "kernels"
    #: Running kernel bodies written in Python (``run_python_kernel``): numba.cuda-style
    #: bodies on cpu (simulated) and cuda (numba-cuda), MLX-operation bodies on metal.
    PYTHON_KERNELS = "python_kernels"
    #: Running a persistent kernel fed through ring buffers.
    PERSISTENT_KERNELS = "persistent_kernels"
    #: Linking persistent kernels into a pipeline (``launch_pipeline``): every stage's
    #: ``launch_persistent_kernel`` takes the ``link=`` option (``HostWorkerKernel``
    #: does), or the backend defines ``launch_pipeline`` itself.
    PIPELINES = "pipelines"
    #: Device arrays implement ``__cuda_array_interface__``.
    CUDA_ARRAY_INTERFACE = "cuda_array_interface"


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run on this machine, and if not, why not."""

    available: bool
    reason: str = ""

    @classmethod
    def yes(cls, reason: str = "") -> Availability:
        """The backend can run here (``reason``: an optional note, shown by ``pdc info``)."""
        return cls(True, reason)

    @classmethod
    def no(cls, reason: str) -> Availability:
        """The backend cannot run here, because of ``reason`` (say what to install or
        which hardware is missing)."""
        return cls(False, reason)


@dataclass(frozen=True)
class DeviceInfo:
    """One device of a backend, with the properties its vendor reports."""

    backend: str
    index: int
    name: str
    #: ``"cpu"`` or ``"gpu"``: what executes the work.
    kind: str
    #: Bytes of memory the device can use, when known.
    total_memory: int | None = None
    #: Vendor properties (compute capability, SM count, ``canMapHostMemory``, ...).
    properties: Mapping[str, Any] = field(default_factory=dict)

    @property
    def qualified_name(self) -> str:
        """The name that selects this device, such as ``"cuda:1"``."""
        return f"{self.backend}:{self.index}"


@dataclass(frozen=True)
class MemoryStatistics:
    """A snapshot of a memory pool.

    ``hits`` and ``misses`` count requests served from cached blocks and requests
    that needed a fresh allocation; ``bytes_in_use`` is memory handed out and not yet
    given back; ``bytes_held`` is everything the pool owns (in use plus cached).
    """

    hits: int = 0
    misses: int = 0
    bytes_in_use: int = 0
    bytes_held: int = 0
    limit: int | None = None


class Event(abc.ABC):
    """A marker in a stream: it completes when all work queued before it is done."""

    @abc.abstractmethod
    def record(self, stream: Stream) -> None:
        """Place the marker at the current end of ``stream``'s queue."""

    @property
    @abc.abstractmethod
    def done(self) -> bool:
        """True once all work before the recorded point has completed."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block the calling thread until the event is done."""

    async def wait(self) -> None:
        """Wait for the event without blocking the event loop.

        The default polls :attr:`done` inside the event loop with a back-off of at
        most one millisecond; backends with a better mechanism override it.
        Cancelling it ends the wait only: the work the event follows goes on.
        """
        await _poll_until(lambda: self.done)


class Stream(abc.ABC):
    """An in-order queue of device work.

    Work submitted to one stream runs in submission order; work on different streams
    may overlap unless ordered with :meth:`wait_event`. Usable as a context manager,
    which closes it.
    """

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block the calling thread until all queued work is done."""

    @property
    @abc.abstractmethod
    def done(self) -> bool:
        """True when no queued work is outstanding."""

    @abc.abstractmethod
    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait until ``event`` is done."""

    def record_event(self) -> Event:
        """Record and return a new event at the current end of this stream."""
        event = self.backend.create_event()
        event.record(self)
        return event

    async def wait(self) -> None:
        """Wait for all queued work without blocking the event loop.

        The default polls :attr:`done` as :meth:`Event.wait` does. Cancelling it ends
        the wait only: the queued work goes on.
        """
        await _poll_until(lambda: self.done)

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the stream's resources once its work is done."""

    @property
    @abc.abstractmethod
    def backend(self) -> Backend:
        """The backend (and so the device) this stream belongs to."""

    def __enter__(self) -> Stream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Backend(abc.ABC):
    """A kind of hardware pdc can run on, bound to one of its devices.

    Subclasses set the class attributes and implement the abstract methods. The
    optional ones raise :class:`~pdc_core.CapabilityError` unless the matching
    :class:`Capability` is declared and the method overridden. A backend that runs
    kernel-to-kernel pipelines its own way (links in device memory, every stage
    launched at once) may also define ``launch_pipeline(pipeline, memory, **options)``
    returning a :class:`~pdc_core.backend.PipelineResident`;
    :func:`~pdc_core.backend.launch_pipeline` calls it instead of launching the stages
    one by one with the ``link=`` option.
    """

    #: The name users select it by (``"cuda"``, ``"cuda:1"`` picks device 1).
    name: ClassVar[str]
    #: The distribution to ``pip install`` for it (``"pdc-cuda"``).
    distribution: ClassVar[str]
    #: Higher wins when pdc picks the best available backend (cuda 100, metal 50, cpu 0).
    priority: ClassVar[int] = 0
    #: What it can do.
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    #: Whether its persistent kernels' rings carry a sequence word in each input slot
    #: (ring protocol section 12): for a device that reads a request and its sequence
    #: number with one read across a bus. Host-memory backends leave it off.
    ring_sequenced_input: ClassVar[bool] = False

    def __init__(self, device: int = 0) -> None:
        self.device = device

    # -- discovery ------------------------------------------------------------------

    @classmethod
    @abc.abstractmethod
    def availability(cls) -> Availability:
        """Whether this backend can run here; must never raise, and should be cheap."""

    @classmethod
    @abc.abstractmethod
    def devices(cls) -> list[DeviceInfo]:
        """The devices of this backend on this machine (called only when available)."""

    @property
    def device_info(self) -> DeviceInfo:
        """The device this instance is bound to."""
        return self.devices()[self.device]

    @property
    def qualified_name(self) -> str:
        """``"<name>:<device>"``, the name that selects exactly this instance."""
        return f"{self.name}:{self.device}"

    def has(self, capability: Capability) -> bool:
        """Whether the backend declares ``capability``."""
        return capability in self.capabilities

    def require(self, capability: Capability, action: str) -> None:
        """Raise :class:`CapabilityError` unless ``capability`` is declared."""
        if capability not in self.capabilities:
            declared = ", ".join(sorted(self.capabilities)) or "none"
            raise CapabilityError(
                f"the {self.name} backend cannot {action}: it has no {capability.value} "
                f"capability (it declares: {declared})"
            )

    # -- memory ---------------------------------------------------------------------

    @abc.abstractmethod
    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        """Allocate an uninitialised array of ``kind`` memory.

        ``HOST``, ``PINNED`` and ``MAPPED`` return NumPy arrays (host views);
        ``DEVICE`` and ``MANAGED`` return the backend's device array type. A backend
        with :attr:`Capability.UNIFIED_MEMORY` returns host memory for every kind and
        says so in its documentation.
        """

    @abc.abstractmethod
    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> Any:
        """Copy a host array to the device; into ``out`` when given.

        With a ``stream`` the copy is queued on it and may still be running on
        return (the host array must stay alive and unchanged until it is done).
        """

    @abc.abstractmethod
    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        """Copy a device array to host memory; into ``out`` when given.

        With a ``stream`` the copy is queued on it; read the result only after the
        stream (or an event recorded after the copy) is done.
        """

    def device_view(self, host: npt.NDArray[Any]) -> Any:
        """A device array sharing memory with ``host`` (unified-memory backends only)."""
        self.require(Capability.UNIFIED_MEMORY, "view host memory as device memory")
        raise NotImplementedError(f"{type(self).__name__}.device_view")

    def can_view(self, host: npt.NDArray[Any]) -> bool:
        """Whether :meth:`device_view` can view ``host`` without a copy.

        True for any host array on a unified-memory backend by default. A backend
        that can only view memory it allocated itself (MLX cannot wrap foreign
        memory) overrides it, and ``UnifiedBuffer.from_array`` then copies.
        """
        return self.has(Capability.UNIFIED_MEMORY)

    @abc.abstractmethod
    def memory_statistics(self) -> MemoryStatistics:
        """Statistics of this device's memory pool."""

    def free_cached_memory(self) -> None:  # noqa: B027 - optional hook
        """Return cached, unused blocks of the pool to the system."""

    # -- streams and events -----------------------------------------------------------

    @abc.abstractmethod
    def create_stream(self) -> Stream:
        """A new stream on this device."""

    @abc.abstractmethod
    def create_event(self) -> Event:
        """A new, unrecorded event on this device."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block until all work on this device has finished."""

    # -- kernels ------------------------------------------------------------------------

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> Any:
        """Compile ``source`` and return the kernel ``name`` in a launchable form."""
        self.require(Capability.KERNELS, "compile kernels")
        raise NotImplementedError(f"{type(self).__name__}.compile_kernel")

    def launch_kernel(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
    ) -> None:
        """Launch ``kernel`` (from :meth:`compile_kernel`) over ``grid`` x ``block`` threads.

        ``grid`` and ``block`` are validated (x, y, z) triples; ``args`` are this
        backend's device arrays and NumPy scalars, in the kernel's parameter order;
        ``shared_mem`` is the byte size of dynamic shared memory. Without a ``stream``
        the call returns once the kernel has completed (errors raised here); with one
        the launch is queued on it and may still be running on return.
        """
        self.require(Capability.KERNELS, "launch kernels")
        raise NotImplementedError(f"{type(self).__name__}.launch_kernel")

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
        """Run the Python kernel ``body`` over ``grid`` x ``block`` threads.

        How the body runs is the backend's: ``cpu`` simulates numba.cuda-style bodies
        (:func:`pdc_core.cuda.simulate`), ``cuda`` compiles them with numba-cuda
        (:func:`pdc_core.cuda.to_numba`), ``metal`` runs bodies written with MLX
        operations on the MLX device. ``args``, ``shared_mem`` and ``stream`` are as for
        :meth:`launch_kernel`, completion likewise. ``options`` come from
        ``@kernel(options={...})``; a backend uses the keys it knows (``cpu_mode`` on
        cpu, ``numba.cuda.jit`` keywords such as ``fastmath`` on cuda) and ignores the
        others, so one kernel runs on every backend.
        """
        self.require(Capability.PYTHON_KERNELS, "run Python kernel bodies")
        raise NotImplementedError(f"{type(self).__name__}.run_python_kernel")

    def check_launch_options(self, options: Mapping[str, Any]) -> None:
        """Raise what :meth:`launch_persistent_kernel` would raise for ``options`` alone
        (an unknown option: ``TypeError`` naming it; a bad value), without launching or
        allocating anything. The core calls it before it allocates the rings, so a
        misspelt option costs nothing. The default accepts everything (the launch
        itself still checks)."""
        return None

    def launch_persistent_kernel(
        self, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
    ) -> ResidentKernel:
        """Launch ``kernel`` resident on ``rings`` and return its :class:`ResidentKernel`.

        ``rings`` is a :class:`~pdc_core.backend.RingMemory` the core allocated from this backend
        (``MemoryKind.MAPPED``) and initialised (header written, indices and flags 0);
        the device side runs the protocol of ``docs/ring-protocol.md`` on it. The body
        to run is ``kernel.body_for(self.name)``. ``options`` are backend-specific
        launch knobs, passed through from ``open_persistent_kernel(..., **options)``;
        reject unknown ones with a ``TypeError`` naming them.

        Return as soon as the launch is queued, with a subclass of
        :class:`~pdc_core.backend.ResidentKernel` implementing ``wake`` and ``exited``; the
        core waits for the ``STARTED`` word itself. Raise (without leaving anything
        running) if the launch fails.
        """
        self.require(Capability.PERSISTENT_KERNELS, "run persistent kernels")
        raise NotImplementedError(f"{type(self).__name__}.launch_persistent_kernel")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.qualified_name}>"


async def wait_shielded_on_cancel(stream: Stream) -> None:
    """Wait for ``stream``; if the waiting task is cancelled, still wait (shielded) for
    the work already queued, which cannot be interrupted, before the cancellation goes
    on: nothing queued outlives the call that queued it."""
    import anyio

    try:
        await stream.wait()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stream.wait()
        raise


async def _poll_until(predicate: Any) -> None:
    """Poll ``predicate`` inside the event loop, backing off up to 1 ms between tries."""
    import anyio

    delay = 0.0
    while not predicate():
        await anyio.sleep(delay)
        delay = min(0.001, delay * 2 or 0.00005)
